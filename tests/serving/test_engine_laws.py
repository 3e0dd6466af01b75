"""The event engine against hand-worked values and laws (campaign 2 of issue 23, second sample: each test kills
mutants the engine tests before it let through)."""
import math

import numpy as np
import pytest

from sacmodel.serving.config import resolve
from sacmodel.serving.engine import Model, Requests
from sacmodel.serving.engine.distinct import DistinctTokens
from sacmodel.serving.engine.loop import open_engine
from sacmodel.serving.engine.memory import DeviceMemory
from sacmodel.serving.engine.misses import MissCurves
from sacmodel.serving.engine.scheduler import Ranks
from sacmodel.serving.engine.staging import Staging
from sacmodel.serving.engine.workload import RequestTable


@pytest.fixture(scope="module")
def cxl():
    return resolve("sac-testbed", "cxl")


def table(cfg, context, output, cached=None, arrival=None):
    n = len(context)
    reqs = Requests(np.zeros(n) if arrival is None else arrival, np.array(context), np.array(output),
                    np.zeros(n) if cached is None else cached)
    return reqs, RequestTable(cfg, reqs)


def make_ranks(cfg, tb, reqs):
    model = Model(cfg)
    memory = DeviceMemory(cfg.dp, cfg.max_total_tokens, tb, reqs.prefix_pages)
    staging = Staging(cfg, tb, model, False)
    return Ranks(cfg.dp, cfg, tb, memory, staging, DistinctTokens(cfg.dp, tb.pid), MissCurves(model, tb.max_out))


# ---- memory: SGLang's new-token ratio, a crashed server ------------------------------------------------------
@pytest.mark.parametrize("dp,init", [(1, 0.7), (2, 0.7 * 0.3)])
def test_the_new_token_ratio_is_sglangs_dp_attention_default_from_two_ranks_on(dp, init):
    from sacmodel import scenario
    cfg = resolve(scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", dp=dp), "gpu")
    assert cfg.dp == dp
    mem = open_engine(cfg).memory
    assert mem.init == pytest.approx(init) and mem.ratio == [pytest.approx(init)] * dp
    assert mem.floor == pytest.approx(0.14 * init) and mem.decay == pytest.approx(0.86 * init / 600)


def test_a_crashed_server_takes_no_more_requests():
    # HiSparse: 6144 + 64 = 6208 slots per request and rank; 20,000 slots hold 3. Nine requests to rank 0
    # (a router's choice): the fourth allocation fails; a request submitted after that is never sent. The
    # host pool (2 x 20,000 slots) holds the three 8K prompts (three 16K prompts would fill it first)
    cfg = resolve("sac-testbed", "dram", device_buffer=6144, max_total_tokens=20000)
    eng = open_engine(cfg, max_output=8)
    for _ in range(9):
        eng.submit(0.0, 8192, 8, 0.0, rank=0)
    while eng.memory.crash is None and eng.step():
        pass
    crash = eng.memory.crash
    assert crash is not None and crash.rank == 0 and "6208 slots failed on rank 0 (18624 of 20000" in crash.reason
    i = eng.submit(eng.t + 1.0, 1000, 8, 0.0)
    eng.step()
    res = eng.result()
    assert math.isnan(res.release[i]) and not res.completed.any()


# ---- decode jumps -----------------------------------------------------------------------------------------------
def test_a_jump_is_bounded_by_the_age_of_the_youngest_request_since_its_own_join(cxl):
    # request 0 joins at clock 0, request 1 at clock 100; at clock 103 the youngest is 3 steps old: at most
    # 2 x 3 + 1 = 7 steps; at clock 700 it is 600 old (>= 512): 256
    reqs, tb = table(cxl, [20000, 20000], [2001, 2001])
    ranks = make_ranks(cxl, tb, reqs)
    ranks.join([(0, [0])])
    ranks.clock[0] = 100
    ranks.join([(0, [1])])
    for clock, want in ((103, 7), (100, 1), (700, 256), (1990, 10)):
        ranks.clock[0] = clock
        assert ranks.max_jump([0]) == want, clock


def test_a_retracted_request_owes_its_output_minus_what_it_generated():
    # request 0 (life 100) joins at clock 0, request 1 (output 11: its prefill's token and a life of 10 steps) at
    # clock 5; at clock 7 the pool is full and request 1 (fewest generated: 1 + 2 = 3 tokens) is retracted. It is
    # prefilled again over 1000 + 3 tokens and still owes 11 - 3 = 8: a life of 7 steps after its next first token
    from sacmodel.serving.engine.memory import SGLangMemory
    gpu = resolve("sac-testbed", "gpu")
    reqs, tb = table(gpu, [1000, 1000], [101, 11])
    mem = SGLangMemory(gpu.dp, 1_000_000, tb, 0, gpu.page, (0.21, 0.0294, (0.21 - 0.0294) / 600))
    model = Model(gpu)
    ranks = Ranks(gpu.dp, gpu, tb, mem, Staging(gpu, tb, model, False), DistinctTokens(gpu.dp, tb.pid),
                  MissCurves(model, tb.max_out))
    for i in (0, 1):
        assert mem.take(0, i, 0.0)
    ranks.join([(0, [0])])
    ranks.advance([0], 5, [])
    ranks.join([(0, [1])])
    ranks.advance([0], 2, [])
    mem.max_total = mem.used[0] + mem.decoded(0) + 1              # the next step (2 slots) does not fit
    ranks._retract(0)
    assert list(ranks.waiting[0]) == [1]
    assert tb.L[1] == 1003 and tb.out[1] == 8 and tb.life[1] == 7 and mem.clip[1] == 7.0


# ---- iteration cost ---------------------------------------------------------------------------------------------
def test_a_context_below_the_top_k_reads_only_its_entries():
    # the sparse model reads min(k, L) entries: a 1000-token request (in HBM, nothing swapped) at clock 5 has a
    # mean context of 1000 + 5 + 1 and its rank part is a + c L - d (k - L), d the attention per entry
    from sacmodel.serving.engine.cost import IterationCost
    gpu = resolve("sac-testbed", "gpu")
    reqs, tb = table(gpu, [1000, 1000], [200, 200])
    ranks = make_ranks(gpu, tb, reqs)
    ranks.join([(0, [0]), (1, [1])])
    ranks.clock[0] = ranks.clock[1] = 5
    model = ranks.staging.model
    T, jump, shared, slowest = IterationCost(model, tb).iteration_time(ranks, [], [0, 1], 1, 2, 2, 0.0, math.inf)
    a, c, g, k, d, h = model.rank_coeffs(1, 2, False)
    L = 1000 + 5 + 1.0
    assert k == 2048 and d > 0 and jump == 1 and slowest[1] == pytest.approx(L)
    assert T == pytest.approx(shared + a + c * L - d * (k - L), rel=1e-12)
    assert T == pytest.approx(shared + model.rank_time(1, 2, L, 0.0, swap=False), rel=1e-12)


# ---- miss curves --------------------------------------------------------------------------------------------------
def test_the_buffer_fill_loads_the_entries_beyond_the_top_k_in_the_fill_time(cxl):
    # a 20000-token prompt into a 4096-slot buffer: the top-k (2048) at admission, then B - k = 2048 more spread
    # evenly over the t_fill - 1 steps before the buffer is full (t_fill: the access model's fill time)
    from sacmodel.serving.access import steady_state
    from sacmodel.serving.config import score_correlation
    from sacmodel.serving.engine.misses import cumulative_misses
    B, k = cxl.device_buffer, 2048
    t_fill = steady_state(context=20000, topk=k, buffer_slots=B, correlation=score_correlation(cxl, np.zeros(1)),
                          max_steps=300)[1][0]
    per = np.diff(cumulative_misses(cxl, 20000, 200))
    assert per[0] == k
    assert per[1] * (t_fill - 1) == pytest.approx(B - k, rel=1e-12)
    assert np.all(per[1:int(np.ceil(t_fill))] == per[1])


def test_a_request_that_never_outgrows_its_buffer_loads_nothing(cxl):
    # 4000 + 96 = 4096 entries at its last step: it fits the 4096-slot buffer throughout; one step more and it
    # outgrows it, so its prompt is loaded whole at admission
    from sacmodel.serving.engine.misses import cumulative_misses, cumulative_misses_at
    assert not cumulative_misses(cxl, 4000, 96).any()
    assert np.diff(cumulative_misses(cxl, 4000, 97))[0] == 4000
    # the any-age form agrees with the exact sums, down to a horizon of one step
    assert np.array_equal(cumulative_misses_at(cxl, 4095, [0, 1]), cumulative_misses(cxl, 4095, 1)[:2])
    assert not cumulative_misses_at(cxl, 4095, [0, 1]).any()


# ---- the step model bound to a configuration -------------------------------------------------------------------
def test_a_rank_without_misses_costs_its_line_and_nothing_for_a_busiest_block(cxl):
    model = Model(cxl)
    a, c, g, k, d, h = model.rank_coeffs(4, 8, True)
    assert h > 0
    for L in (4 * 2048 + 1.0, 50000.0):
        assert model.rank_time(4, 8, L, 0.0) == pytest.approx(a + c * L, rel=1e-12)
        assert model.rank_time(4, 8, L, 0.0) == pytest.approx(sum(model.rank_terms(4, 8, L, 0.0).values()), rel=1e-12)
        assert model.rank_time(4, 8, L, 0.0, M_max=10.0) == pytest.approx(a + c * L + h * 10.0, rel=1e-12)


def test_the_shared_part_grows_with_the_distinct_tokens_the_experts_see(cxl):
    # one decoding token reads its own experts; two distinct tokens read more of them (the MoE's expected
    # experts touched), so the same batch size costs more when its tokens differ
    model = Model(cxl)
    assert model.shared(1, False, 1) == model.shared(1, False, None)
    assert model.shared(1, False, 1) < model.shared(1, False, 2)
    # the named terms (predict's breakdown) add up to the part, for one token as for a batch
    for n, d in ((1, 1), (1, 2), (64, 17)):
        assert sum(model.shared_terms(n, False, d).values()) == pytest.approx(model.shared(n, False, d), rel=1e-12)


def test_a_request_submitted_to_a_running_engine_holds_whole_pages_as_one_given_at_once():
    gpu = resolve("sac-testbed", "gpu")
    eng = open_engine(gpu, max_output=8)
    i = eng.submit(0.0, 1000, 8, 0.0)
    assert eng.memory.slots[i] == 1024.0 and eng.memory.clip[i] == 7.0        # 16 pages of 64; 7 tokens to come
    reqs = Requests(np.zeros(1), np.array([1000]), np.array([8]), np.zeros(1))
    from sacmodel.serving.engine.loop import Engine
    whole = Engine(gpu, reqs, 1, Model(gpu), False, 0)
    assert whole.memory.slots == [1024.0] and whole.memory.clip == [7.0]


def _twelve_long_decodes_per_rank(cfg, prompt: int):
    """96 requests of ``prompt`` tokens and 800 more, one in flight per rank: each rank decodes 12 x 800 steps,
    more than the 4,096 entries its miss accumulator starts with; the engine after its run."""
    from sacmodel.serving.engine.loop import Engine
    n = 96
    reqs = Requests(np.zeros(n), np.full(n, prompt), np.full(n, 801), np.zeros(n))
    eng = Engine(cfg, reqs, 8, Model(cfg), False, 0)
    assert eng.run().completed.all()
    assert max(eng.ranks.clock) > 9000
    return eng


def test_a_ranks_miss_accumulator_keeps_only_what_is_ahead_of_its_clock(cxl):
    # (found by the long fuzz run: the accumulator grew with the whole run, 8,758 requests of 7,070 tokens went
    # past 1 GB.) 8K prompts: it keeps at most twice what lies ahead of its clock
    ranks = _twelve_long_decodes_per_rank(cxl, 8192).ranks
    assert max(ranks.base) > 0
    assert all(len(a) <= 2 * 4096 for a in ranks.acc)
    assert all(b <= c for b, c in zip(ranks.base, ranks.clock))


def test_a_rank_whose_requests_load_nothing_still_reads_its_accumulator_over_their_lives(cxl):
    # (found by the validation's cluster replays after the engine's second speed pass: a joining request that
    # loads nothing no longer grew its rank's accumulator, and a later step read past its end.) 1K prompts are
    # under the top-k, so no request loads an entry; every step still reads zero misses
    ranks = _twelve_long_decodes_per_rank(cxl, 1024).ranks
    assert all(not a.any() for a in ranks.acc)


def test_curve_cache_counts_unpickled_curves():
    """A read-only miss curve that came through a worker process (pickled) has a bytes buffer as its base; the LRU's
    byte count takes its own size (a sweep with workers raised AttributeError)."""
    import pickle

    import numpy as np

    from sacmodel.serving.engine.misses import CurveCache
    ro = np.arange(1000.0)
    ro.flags.writeable = False                   # kept curves are read-only: pickled as a buffer of bytes
    a = pickle.loads(pickle.dumps(ro, protocol=5)).base
    assert isinstance(a.base, bytes)
    c = CurveCache()
    c.put("k", a)
    c.put("view", np.arange(2000.0)[:10])
    assert c.nbytes == 8000 + 16000
