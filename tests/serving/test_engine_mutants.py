"""The event engine's parts against hand-worked values and laws that the mutation campaign (benchmarks/mutation.md,
campaign 2) showed untested: SGLang's memory accounting and retraction, the decode jumps, the busiest block of a
swap-in, the front end's message queue, the miss curves' edges and the run's bookkeeping."""
import math

import numpy as np
import pytest

from sacmodel.hardware.sizing import new_token_ratio_default
from sacmodel.serving.config import resolve
from sacmodel.serving.engine import Model, Requests
from sacmodel.serving.engine.cost import IterationCost
from sacmodel.serving.engine.distinct import DistinctTokens
from sacmodel.serving.engine.frontend import FrontEnd
from sacmodel.serving.engine.loop import Engine, run_engine
from sacmodel.serving.engine.memory import DeviceMemory, SGLangMemory
from sacmodel.serving.engine.misses import EXACT_AGES, MissCurves, cumulative_misses, cumulative_misses_at
from sacmodel.serving.engine.scheduler import Ranks
from sacmodel.serving.engine.staging import Staging
from sacmodel.serving.engine.stats import Stats
from sacmodel.serving.engine.workload import RequestTable


@pytest.fixture(scope="module")
def cxl():
    return resolve("sac-testbed", "cxl")


@pytest.fixture(scope="module")
def gpu():
    return resolve("sac-testbed", "gpu")


def table(cfg, context, output, cached=None, arrival=None, prompt=None):
    n = len(context)
    reqs = Requests(np.zeros(n) if arrival is None else arrival, context, output,
                    np.zeros(n) if cached is None else cached, prompt=prompt)
    return reqs, RequestTable(cfg, reqs)


def make_ranks(cfg, tb, reqs, memory=None):
    model = Model(cfg)
    memory = memory or DeviceMemory(cfg.dp, cfg.max_total_tokens, tb, reqs.prefix_pages)
    staging = Staging(cfg, tb, model, False)
    ranks = Ranks(cfg.dp, cfg, tb, memory, staging, DistinctTokens(cfg.dp, tb.pid), MissCurves(model, tb.max_out))
    return ranks, memory, model


RATIO = (0.21, 0.0294, (0.21 - 0.0294) / 600)        # SGLang's new_token_ratio under DP attention


def sglang_memory(cfg, tb, max_total, dp=1):
    mem = SGLangMemory(dp, max_total, tb, 0, cfg.page, RATIO)
    mem.bind([0] * dp, [0] * dp, [0] * dp)
    return mem


# ---- SGLang's memory accounting ----------------------------------------------------------------------------
def test_ratio_of_the_testbed_is_sglangs_default_under_dp_attention():
    init, lo, decay = new_token_ratio_default(True)
    assert (init, lo, decay) == pytest.approx(RATIO, rel=1e-12)


def test_sglang_memory_slots_are_whole_pages_and_clip_at_4096(gpu):
    _, tb = table(gpu, [100, 1000, 64], [10, 5000, 1])
    mem = sglang_memory(gpu, tb, 10_000)
    assert mem.slots == [128.0, 1024.0, 64.0]                     # ceil(100 / 64) = 2 pages
    assert mem.clip == [9.0, 4096.0, 0.0]                         # output tokens still to come, at most 4096


def test_sglang_admission_boundary_by_hand(gpu):
    """An empty rank admits a request iff its slots plus its clipped output are below what is free."""
    _, tb = table(gpu, [100], [10])
    assert sglang_memory(gpu, tb, 138).take(0, 0, 0.0)            # 128 + 9 = 137 < 138
    refused = sglang_memory(gpu, tb, 137)
    assert not refused.take(0, 0, 0.0) and refused.used == [0.0] and refused.crash is None


def test_sglang_admission_reserves_the_running_requests_remaining_output_at_the_ratio(gpu):
    """Request 0 (128 slots, 9 to come) decodes 4 steps: it added 4 slots and may still need 9 - 4 = 5, reserved
    at the ratio 0.21. Request 1 needs 1024 + 4096. Free: max_total - 128 - 4 - 0.21 x 5."""
    _, tb = table(gpu, [100, 1000], [10, 5000])
    need = 1024 + 4096 + 128 + 4 + 0.21 * 5
    for extra, fits in ((0.5, True), (-0.5, False)):
        mem = sglang_memory(gpu, tb, need + extra)
        assert mem.take(0, 0, 0.0) and mem.used == [128.0] and mem.pending == [9.0]
        mem.joined(0, [0])
        assert mem.pending == [0.0] and mem.running_clip == [9.0]
        mem.running[0], mem.clock[0], mem.sum_join[0] = 1, 4, 0
        assert mem.decoded(0) == 4.0 and mem.free_slots(0) == pytest.approx(need + extra - 132)
        assert mem.take(0, 1, 0.0) is fits
        assert mem.used == ([128.0 + 1024.0] if fits else [128.0])


def test_sglang_ratio_decays_per_step_to_its_floor_and_resets(gpu):
    _, tb = table(gpu, [100], [10])
    mem = sglang_memory(gpu, tb, 10_000)
    mem.advance([0], 10)
    assert mem.ratio[0] == pytest.approx(0.21 - 10 * RATIO[2], rel=1e-12)
    mem.advance([0], 10_000)
    assert mem.ratio[0] == RATIO[1]
    mem.idle(0)
    assert mem.ratio[0] == 0.21
    mem.reset_ratio(0, decoded=20.0, max_new=99.0, batch=2)       # (20 + 20 x 2) / (99 + 1)
    assert mem.ratio[0] == pytest.approx(0.6)
    mem.reset_ratio(0, decoded=500.0, max_new=9.0, batch=1)
    assert mem.ratio[0] == 1.0


def test_sglang_memory_frees_what_it_took(gpu):
    _, tb = table(gpu, [100, 1000], [10, 20])
    mem = sglang_memory(gpu, tb, 100_000)
    assert mem.take(0, 0, 0.0) and mem.take(0, 1, 0.0)
    mem.joined(0, [0])
    mem.free(0, [0])                                     # it decoded and ended
    mem.free(0, [1], running=False)                      # it ended at its prefill
    assert mem.used == [0.0] and mem.pending == [0.0] and mem.running_clip == [0.0]
    mem.running[0], mem.clock[0] = 3, 7
    assert mem.steps_fit(0) == (100_000 - 3 * 7) // 3         # 3 requests have added 7 slots each


def test_retraction_by_hand_keeps_the_output_a_request_owes(gpu):
    """Request 0 (life 100) joined at clock 0, request 1 (life 3) at clock 5; at clock 7 the pool is full. The one
    with the fewest generated tokens (request 1: its prefill's token and 2 steps) is retracted: it is prefilled
    again over 1000 + 3 tokens and still owes exactly one token, its last."""
    _, tb = table(gpu, [1000, 1000], [101, 4])
    mem = SGLangMemory(gpu.dp, 1_000_000, tb, 0, gpu.page, RATIO)
    ranks, _, _ = make_ranks(gpu, tb, Requests(np.zeros(2), [1000] * 2, [101, 4], [0, 0]), memory=mem)
    for i in (0, 1):
        assert mem.take(0, i, 0.0)
    ranks.join([(0, [0])])
    ranks.advance([0], 5, [])
    ranks.join([(0, [1])])
    ranks.advance([0], 2, [])
    assert ranks.clock[0] == 7 and ranks.running[0] == 2
    mem.max_total = mem.used[0] + mem.decoded(0) + 1              # the next step (2 slots) does not fit
    assert mem.steps_fit(0) == 0
    ranks._retract(0)
    assert list(ranks.waiting[0]) == [1] and ranks.running[0] == 1
    assert tb.L[1] == 1003 and tb.todo[1] == 1003 and tb.life[1] == 0 and tb.out[1] == 1
    assert 3 + tb.out[1] == 4                                     # generated + still owed = its output
    assert ranks.sum_l[0] == 1000 and ranks.sum_join[0] == 0 and [i for _, i in ranks.ends[0]] == [0]
    assert mem.used[0] == 1024.0 and mem.running_clip[0] == 100.0    # request 1's slots and clip are given back
    assert mem.slots[1] == 1024.0 and mem.clip[1] == 0.0             # ceil(1003 / 64) pages; nothing more to come
    # the ratio the survivor's progress suggests: (7 generated + 20 x 1) / (101 + 1)
    assert mem.ratio[0] == pytest.approx((7 + 20) / 102)


def test_retraction_takes_the_youngest_and_then_the_longest_prompt(gpu):
    _, tb = table(gpu, [1000, 3000, 2000], [500, 500, 500])
    mem = SGLangMemory(gpu.dp, 1_000_000, tb, 0, gpu.page, RATIO)
    ranks, _, _ = make_ranks(gpu, tb, Requests(np.zeros(3), [1000, 3000, 2000], [500] * 3, [0] * 3), memory=mem)
    for i in range(3):
        assert mem.take(0, i, 0.0)
    ranks.join([(0, [0])])
    ranks.advance([0], 4, [])
    ranks.join([(0, [1, 2])])                 # 1 and 2 have generated the same; 1 has the longer prompt
    mem.max_total = mem.used[0] + mem.decoded(0) + 3 - 1         # three more slots are needed: one must go
    ranks._retract(0)
    assert list(ranks.waiting[0]) == [1] and ranks.running[0] == 2


def test_an_idle_rank_resets_its_ratio_and_a_waiting_one_keeps_it(gpu):
    reqs, tb = table(gpu, [100] * 2, [10] * 2)
    mem = SGLangMemory(gpu.dp, 1_000_000, tb, 0, gpu.page, RATIO)
    ranks, _, _ = make_ranks(gpu, tb, reqs, memory=mem)
    mem.ratio[0] = mem.ratio[1] = 0.05
    mem.max_total = 0                                           # nothing can be admitted
    ranks.waiting[1].append(0)
    admits, decoding, _, _ = ranks.schedule(0.0)
    assert admits == [] and decoding == []
    assert mem.ratio[0] == 0.21 and mem.ratio[1] == 0.05


def test_a_rank_that_found_its_memory_short_admits_nothing_until_a_request_leaves(gpu):
    """SGLang's running_batch.batch_is_full (v0.5.5 scheduler.py get_new_batch_prefill / update_running_batch): a
    request refused for memory (NO_TOKEN) marks the rank full, and a full rank decodes without trying its queue
    again until a request leaves the batch, however far the new-token ratio decays meanwhile.

    Request 0 (64 slots, 4096 tokens to come) decodes alone in a pool of 8192; request 1 needs 7296 + 1. At clock
    0 the free slots are 8192 - 64 - 0.21 x 4096 = 7267.84 (refused); at clock 300 the ratio is 0.21 - 300 x
    0.1806 / 600 = 0.1197 and they are 8192 - 64 - 300 - 0.1197 x 3796 = 7373.6, which would fit. The rank still
    waits, until request 0 ends."""
    _, tb = table(gpu, [64, 7296], [4097, 2])
    mem = SGLangMemory(gpu.dp, 10**6, tb, 0, gpu.page, RATIO)
    ranks, _, _ = make_ranks(gpu, tb, Requests(np.zeros(2), [64, 7296], [4097, 2], [0, 0]), memory=mem)
    assert mem.take(0, 0, 0.0)
    ranks.join([(0, [0])])
    mem.max_total = 8192
    ranks.waiting[0].append(1)
    admits, decoding, _, _ = ranks.schedule(0.0)
    assert admits == [] and decoding == [0]
    ranks.advance([0], 300, [])
    assert mem.ratio[0] == pytest.approx(0.21 - 300 * (0.21 - 0.0294) / 600)
    assert tb.out[1] - 1 + mem.slots[1] < 8192 - 64 - 300 - mem.ratio[0] * 3796      # it would fit now
    admits, decoding, _, _ = ranks.schedule(0.0)
    assert admits == [] and decoding == [0] and list(ranks.waiting[0]) == [1]
    ended = []
    ranks.advance([0], 4096 - 300, ended)                       # request 0's last step: the batch shrinks
    assert ended == [(0, True)]
    admits, decoding, _, _ = ranks.schedule(0.0)
    assert admits == [(0, [(1, gpu.prefill_chunk)])] and decoding == []     # its first chunk


def test_a_burst_prefills_its_whole_queue_before_any_decode():
    """SGLang v0.5.5 (scheduler.py get_next_batch_to_run): a prefill batch runs whenever the waiting queue yields
    one, before the running decodes, and a chunked prompt's chunks run back to back (mixed chunks are off by
    default). A burst of prompts released at once on one H100 (chunks of 8192): no request sees its second token
    before the last prompt of the burst has its first, and first tokens come in the queue's order."""
    from sacmodel.hardware.build import scenario
    cfg = resolve(scenario("h100", gpus=1, model="qwen3-14b", weights="fp8"), "gpu")
    assert cfg.dp == 1 and cfg.prefill_chunk == 8192
    n = 8
    context = np.array([3000, 3000, 3000, 10000, 3000, 20000, 3000, 3000])      # two prompts span chunks
    res = run_engine(cfg, Requests(np.zeros(n), context, np.full(n, 2), np.zeros(n), lead=0), n)
    assert res.completed.all()
    assert np.all(np.diff(res.first) >= 0)                   # first tokens in the queue's order
    assert res.done.min() > res.first.max()                  # every decode step after the last prefill


def test_memory_pressure_retracts_and_every_slot_comes_back(gpu):
    """A pool too small for the batch's outputs: SGLang retracts and re-prefills, every request still completes,
    and at the end every rank holds nothing (all slots taken were given back)."""
    n = 64
    reqs = Requests(np.zeros(n), np.full(n, 3000), np.full(n, 1500), np.zeros(n))
    cfg = resolve("sac-testbed", "gpu", max_total_tokens=20_000)
    eng = Engine(cfg, reqs, n, Model(cfg), False, 0)
    calls = []
    retract = eng.ranks._retract
    eng.ranks._retract = lambda r: (calls.append(r), retract(r))
    res = eng.run()
    assert calls and res.crash is None and res.completed.all()
    assert any(L > 3000 for L in eng.table.L)                    # retracted requests were prefilled again, longer
    assert eng.memory.used == [0.0] * cfg.dp and eng.ranks.running == [0] * cfg.dp
    assert eng.memory.pending == pytest.approx([0.0] * cfg.dp, abs=1e-9)
    assert eng.memory.running_clip == pytest.approx([0.0] * cfg.dp, abs=1e-9)
    assert np.all(res.done > res.first) and np.all(res.first > res.release)


# ---- decode jumps ----------------------------------------------------------------------------------------
def _per_step(monkeypatch):
    monkeypatch.setattr(Ranks, "max_jump", lambda self, decoding: 1)


@pytest.mark.parametrize("system,arrival,context,output,cached", [
    ("gpu", [0.0, 0.3, 0.6, 0.9, 1.2], 3000, 300, 0),        # overlapping: the oldest request is the slowest rank
    ("cxl", [0.0, 5.0, 10.0], 20000, 100, 20000),            # one request at a time: its misses averaged exactly
])
def test_a_jump_prices_exactly_what_its_single_steps_would(monkeypatch, system, arrival, context, output, cached):
    """Runs of identical decode iterations are priced in one jump at their mean context and mean misses. The rank
    part is linear in both, so where the slowest rank cannot change inside a jump the jumps change nothing."""
    cfg = resolve("sac-testbed", system)
    n = len(arrival)
    reqs = Requests(np.array(arrival), np.full(n, context), np.full(n, output), np.full(n, cached))
    jumps = []
    max_jump = Ranks.max_jump
    with monkeypatch.context() as m:
        m.setattr(Ranks, "max_jump", lambda self, decoding: jumps.append(max_jump(self, decoding)) or jumps[-1])
        jumped = run_engine(cfg, reqs, 100)
    assert max(jumps) > 8                                       # it did jump
    with monkeypatch.context() as m:
        _per_step(m)
        single = run_engine(cfg, reqs, 100)
    if system == "cxl":
        assert np.all(single.first[1:] > single.done[:-1])           # one at a time indeed
    assert single.stats["decode_steps"] == jumped.stats["decode_steps"]
    for a, b in ((jumped.first, single.first), (jumped.done, single.done)):
        assert a == pytest.approx(b, rel=1e-9)
    assert jumped.stats["decode_s"] == pytest.approx(single.stats["decode_s"], rel=1e-9)


def test_a_prefill_beside_a_decoding_rank_runs_one_iteration_at_a_time(monkeypatch, gpu):
    """Request 1 (20000 new tokens: 20 chunks) arrives while request 0 decodes on another rank, with nothing else
    due: every chunk's iteration also decodes rank 0, and none may be repeated as a jump of decode steps."""
    reqs = Requests(np.array([0.0, 5.0]), np.array([3000, 20000]), np.array([2000, 10]), np.zeros(2))
    jumped = run_engine(gpu, reqs, 100)
    with monkeypatch.context() as m:
        _per_step(m)
        single = run_engine(gpu, reqs, 100)
    assert jumped.first == pytest.approx(single.first, rel=1e-9) and jumped.done == pytest.approx(single.done, rel=1e-9)
    assert jumped.first[1] - 5.0 < 60.0 and jumped.stats["prefill_iterations"] >= 20


def test_max_jump_rule_by_hand(cxl):
    """To the next finish (inclusive), and at most 2 x age + 1 steps while the youngest request is younger than
    512 steps, then at most 256."""
    reqs, tb = table(cxl, [20000], [2001])
    ranks, _, _ = make_ranks(cxl, tb, reqs)
    ranks.join([(0, [0])])                                       # joins at clock 0; its last step is at 1999
    for clock, want in ((0, 1), (5, 11), (511, 1023), (512, 256), (1900, 100), (1999, 1)):
        ranks.clock[0] = clock
        assert ranks.max_jump([0]) == want, clock


def test_jump_is_the_longest_that_ends_by_the_horizon(gpu):
    reqs, tb = table(gpu, [40000] * 2, [2000] * 2)
    ranks, _, model = make_ranks(gpu, tb, reqs)
    ranks.join([(0, [0]), (1, [1])])
    cost = IterationCost(model, tb)
    T = {j: cost.iteration_time(ranks, [], [0, 1], j, 2, 2, 0.0, math.inf)[0] for j in range(1, 11)}
    horizon = 3.5 * T[1]
    T10, j10, _, _ = cost.iteration_time(ranks, [], [0, 1], 10, 2, 2, 0.0, horizon)
    assert j10 == 3 and T10 == T[3]
    assert 3 * T[3] <= horizon < 4 * T[4]


# ---- iteration cost -----------------------------------------------------------------------------------------
def test_swap_in_of_a_rank_lasts_at_least_its_busiest_request_by_hand(cxl):
    """Request 0 decodes from clock 0; request 1 (3 decode steps) joins at clock 100 with an empty buffer. Over its
    3 steps the rank part is a + c L + max(g M, h M_busiest): M is the rank's misses per step, M_busiest those of
    the newest request, all of its 3 steps counted; L the mean context over the jump."""
    reqs, tb = table(cxl, [20000, 20000], [1000, 4])
    ranks, _, model = make_ranks(cxl, tb, reqs)
    ranks.join([(0, [0])])
    ranks.advance([0], 100, [])
    ranks.join([(0, [1])])
    cost = IterationCost(model, tb)
    T, jump, shared, slowest = cost.iteration_time(ranks, [], [0], 3, 2, 2, 0.0, math.inf)
    a, c, g, k, d, h = model.rank_coeffs(2, 1, True)
    c0 = c1 = cumulative_misses(cxl, 20000, 1000)              # the run's curves: up to its longest output
    M = (c0[103] - c0[100] + c1[3] - c1[0]) / 3
    busiest = (c1[3] - c1[0]) / 3
    L = ((20000 + 101) + (20000 + 1)) / 2 + 1                  # contexts of the jump's middle step, + its token
    assert h * busiest > g * M                                  # the newest request's loads pace the swap-in
    assert jump == 3 and shared == model.shared(2, False, 2)
    assert slowest == (2, pytest.approx(L), pytest.approx(M), True)
    assert T == pytest.approx(shared + a + c * L + h * busiest, rel=1e-12)


def test_mean_context_counts_each_requests_own_join_clock(cxl):
    """1000-token prompts join rank 0 at clocks 0, 4, 4 and 10: at clock 10 their contexts are 1010, 1006, 1006 and
    1000; the next step's mean context is their mean plus the token it computes."""
    reqs, tb = table(cxl, [1000] * 4, [100] * 4)
    ranks, _, model = make_ranks(cxl, tb, reqs)
    ranks.join([(0, [0])])
    ranks.advance([0], 4, [])
    ranks.join([(0, [1, 2])])
    ranks.advance([0], 6, [])
    ranks.join([(0, [3])])
    assert ranks.sum_join[0] == 0 + 4 + 4 + 10
    cost = IterationCost(model, tb)
    _, _, _, slowest = cost.iteration_time(ranks, [], [0], 1, 4, 4, 0.0, math.inf)
    assert slowest[0] == 4 and slowest[1] == pytest.approx((1010 + 1006 + 1006 + 1000) / 4 + 1)


def test_a_rank_swaps_while_a_long_request_runs(cxl):
    """Of a short request (fits the 4096-slot buffer) and a long one on a rank, the one of 10 tokens ends first:
    if the long one is left the rank keeps the swap-in coefficients, if the short one is left it runs without."""
    for contexts, long_left in (([1000, 20000], True), ([20000, 1000], False)):
        reqs, tb = table(cxl, contexts, [10, 500])
        ranks, _, model = make_ranks(cxl, tb, reqs)
        ranks.join([(0, [0, 1])])
        assert ranks.n_long[0] == 1
        ended = []
        ranks.advance([0], 12, ended)
        assert ended == [(0, True)] and ranks.running[0] == 1
        assert ranks.n_long[0] == (1 if long_left else 0)
        _, _, _, slowest = IterationCost(model, tb).iteration_time(ranks, [], [0], 1, 1, 1, 0.0, math.inf)
        assert slowest[3] is long_left


# ---- workload and stats -----------------------------------------------------------------------------------------
def test_reserve_clips_the_output_at_4096(cxl):
    _, tb = table(cxl, [100, 100, 100], [4095, 4096, 10_000])
    assert tb.reserve == [64 + 4095, 64 + 4096, 64 + 4096]


def test_stats_add_every_decode_jump(cxl):
    s = Stats()
    s.add_iteration(3, 0.02, 0.005, 0.0, False, 1, (1, 100.0, 2.0, False))
    s.add_iteration(1, 0.5, 0.1, 0.25, True, 0, None)
    s.add_iteration(5, 0.04, 0.01, 0.0, False, 1, (1, 200.0, 4.0, False))
    d = s.as_dict(0.0)
    assert d["decode_s"] == pytest.approx(3 * 0.02 + 5 * 0.04) and d["shared_s"] == pytest.approx(0.015 + 0.05)
    assert d["decode_steps"] == 8 and d["iterations"] == 9 and d["fetch_s"] == 0.25
    assert d["swap_states"] == {(1, 1, False): [8.0, 3 * 100.0 + 5 * 200.0, 3 * 2.0 + 5 * 4.0]}


def test_run_time_shares_add_up_to_at_most_the_run(cxl):
    """Prefill, decode, prefix copies and backups are parts of the run's GPU time, never more than its duration."""
    from sacmodel.serving.predict import predict
    p = predict("sac-testbed", "rdma", context=20000, output=200, concurrency=16, requests=32)
    b = p.breakdown
    total = b["share_time_prefill"] + b["share_time_decode"] + b["share_time_prefix_fetch"]
    assert 0.5 < total <= 1.0 + 1e-9


# ---- front end --------------------------------------------------------------------------------------------------
def test_front_end_merges_consecutive_plain_messages_and_counts_payloads():
    fe = FrontEnd()
    fe.produce(1.0, 3)
    fe.produce(2.0, 4)                                  # plain after plain: one block of 7
    assert [list(b) for b in fe.msgs] == [[1.0, 7, None]]
    assert not fe.busy() and fe.next_busy_turn() == math.inf and fe.next_turn() == 1.0
    fe.produce(2.5, 2, [(0, False)])
    assert fe.payloads == 1 and fe.busy() and fe.next_busy_turn() == 1.0
    fe.produce(3.0, 1)                                  # after a payload: a new block
    assert [b[1] for b in fe.msgs] == [7, 2, 1]
    fe.produce(3.0, 0, [(1, True)])                     # no message: nothing
    assert fe.payloads == 1 and len(fe.msgs) == 3
    got = []
    fe.run(10.0, lambda i, t: None, lambda p, t: got.append((p, t)))
    assert got == [([(0, False)], 2.5)] and fe.payloads == 0 and not fe.busy()


def test_front_end_intake_turns_hand_on_one_message_each():
    """Three requests arrive one after another, each needing 1 s; five plain messages and a payload wait. Each
    intake turn hands on one message, so the payload (the sixth) goes once the intake is over, at once."""
    fe = FrontEnd()
    for i, t in enumerate((0.0, 1.0, 2.0)):
        fe.arrive(t, i, 1.0)
    fe.produce(0.0, 5)
    fe.produce(0.0, 1, [(9, True)])
    taken, got = [], []
    fe.run(100.0, lambda i, t: taken.append((i, t)), lambda p, t: got.append((p, t)))
    assert taken == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert got == [([(9, True)], 3.0)] and fe.free == 3.0


# ---- miss curves ----------------------------------------------------------------------------------------------
def test_a_prompt_exactly_the_buffers_size_is_loaded_once(cxl):
    assert cxl.device_buffer == 4096
    per = np.diff(cumulative_misses(cxl, 4096, 20))
    assert per[0] == 4096 and np.all(per[1:] > 0)              # whole at admission, then it grows past the buffer
    per = np.diff(cumulative_misses(cxl, 4095, 20))
    assert per[0] == 4095 and per[1] == 0 and per[2] > 0       # 4096 tokens at age 1: still fits


def test_misses_far_beyond_an_engine_run_match_the_exact_sums(cxl):
    ages = np.array([0, 5, EXACT_AGES, EXACT_AGES + 1, 12000, 20000])
    far = cumulative_misses_at(cxl, 32768, ages)
    exact = cumulative_misses(cxl, 32768, 20000)[ages]
    assert np.all(np.isfinite(far))
    assert far[:3] == pytest.approx(exact[:3], rel=1e-12)
    assert far == pytest.approx(exact, rel=1e-4)
