"""Each part of the event engine on its own, against hand-worked cases (the whole engine: test_serving.py)."""
import math

import numpy as np
import pytest

from sacmodel.serving.config import resolve
from sacmodel.serving.engine import Model, Requests
from sacmodel.serving.engine.client import Client
from sacmodel.serving.engine.cost import IterationCost
from sacmodel.serving.engine.distinct import DistinctTokens
from sacmodel.serving.engine.emit import Emission
from sacmodel.serving.engine.frontend import FrontEnd
from sacmodel.serving.engine.memory import DeviceMemory
from sacmodel.serving.engine.misses import MissCurves
from sacmodel.serving.engine.scheduler import Dispatch, Ranks
from sacmodel.serving.engine.staging import Staging
from sacmodel.serving.engine.stats import Stats, Timeline
from sacmodel.serving.engine.workload import RequestTable


@pytest.fixture(scope="module")
def cfg():
    return resolve("sac-testbed", "cxl")


def table(cfg, context, output, cached=None, prompt=None, arrival=None):
    n = len(context)
    reqs = Requests(np.zeros(n) if arrival is None else arrival, context, output,
                    np.zeros(n) if cached is None else cached, prompt=prompt)
    return reqs, RequestTable(cfg, reqs)


# ---- workload ----------------------------------------------------------------------------------------
def test_request_table_by_hand(cfg):
    """A prefix hit leaves the page-aligned remainder to prefill (32768 cached of 32768: the last page,
    64 tokens); a cold prompt prefills all of it. Long HiSparse requests hold the buffer allocation, short ones
    their pages (ceil((todo + output) / 64) pages)."""
    _, tb = table(cfg, [32768, 100], [10, 30], cached=[32768, 0])
    assert cfg.page == 64 and tb.todo == [64, 100]
    assert tb.hit == [True, False] and tb.long == [True, False]
    assert tb.hold == [float(cfg.buffer_alloc), 3 * 64.0]          # 100 + 30 = 130 tokens -> 3 pages
    assert tb.reserve == [64 + 10, 64 + 30] and tb.life == [9, 29] and tb.max_out == 30


def test_request_table_short_request_pages(cfg):
    _, tb = table(cfg, [100], [29])            # 100 + 29 = 129 tokens -> 3 pages of 64
    assert tb.hold == [192.0]


# ---- client ------------------------------------------------------------------------------------------
def test_closed_loop_client_sends_at_most_concurrency_and_refills_on_a_last_token(cfg):
    _, tb = table(cfg, [1000] * 4, [5] * 4)
    fe = FrontEnd()
    c = Client(tb, 2, fe, t_token=1e-6)
    c.send(0.0)
    assert c.next_req == 2 and c.in_flight == 2 and [x[1] for x in fe.intake] == [0, 1]
    assert fe.intake[0][2] == pytest.approx(1e-3)                  # 1000 tokens x 1 us of front-end work
    c.deliver([(0, False)], 1.0)                                   # a first token frees nothing
    assert c.next_req == 2 and c.first[0] == 1.0
    c.deliver([(0, True)], 2.0)                                    # a last token lets the next one go
    assert c.next_req == 3 and c.done[0] == 2.0 and c.sent[2] == 2.0
    c.stopped = True
    c.deliver([(1, True)], 3.0)
    assert c.next_req == 3                                         # a crashed server takes nothing more


def test_open_loop_client_waits_for_arrivals(cfg):
    _, tb = table(cfg, [10, 10], [2, 2], arrival=np.array([0.0, 5.0]))
    c = Client(tb, 100, FrontEnd(), 1e-6)
    c.send(1.0)
    assert c.next_req == 1 and c.next_send() == 5.0
    c.send(5.0)
    assert c.next_req == 2 and c.next_send() == math.inf


# ---- dispatch and scheduling -------------------------------------------------------------------------
def make_ranks(cfg, tb, reqs):
    memory = DeviceMemory(cfg.dp, cfg.max_total_tokens, tb, reqs.prefix_pages)
    model = Model(cfg)
    staging = Staging(cfg, tb, model, False)
    distinct = DistinctTokens(cfg.dp, tb.pid)
    return Ranks(cfg.dp, cfg, tb, memory, staging, distinct, MissCurves(model, tb.max_out)), memory, staging


def test_dispatch_is_round_robin_in_hand_on_order_and_each_rank_takes_in_what_reached_it(cfg):
    reqs, tb = table(cfg, [100] * 10, [5] * 10)
    ranks, _, _ = make_ranks(cfg, tb, reqs)
    d = Dispatch(cfg.dp, 9, ranks.rank_of)                         # 9 requests before: the next goes to rank 1
    for i, t in [(0, 0.0), (1, 0.1), (2, 0.2)]:
        d.push(i, t)
    assert [ranks.rank_of[i] for i in (0, 1, 2)] == [1, 2, 3] and d.count == 3     # sent on at once, in turn
    cut = [0.15] * cfg.dp
    cut[2] = 0.05                                  # rank 2's loop took requests in before request 1 reached it
    d.receive(cut, ranks, 0.3)
    assert list(ranks.waiting[1]) == [0] and not ranks.waiting[2] and not ranks.waiting[3]
    assert d.taken_in == {0: 0.3} and d.next_time() == 0.1 and d.count == 2
    d.receive([1.0] * cfg.dp, ranks, 1.0)
    assert list(ranks.waiting[2]) == [1] and list(ranks.waiting[3]) == [2]
    assert d.next_time() == math.inf and d.count == 0


def test_prefill_batch_chunks_a_long_prompt_and_counts_pages(cfg):
    """Budget = prefill_chunk tokens; each request uses whole pages of it; a prompt longer than what is left
    is chunked and fills the batch."""
    chunk = cfg.prefill_chunk
    reqs, tb = table(cfg, [100, chunk + 500, 100], [5, 5, 5])
    ranks, memory, _ = make_ranks(cfg, tb, reqs)
    for i in range(3):
        ranks.waiting[0].append(i)
    batch, n_tok, n_new = ranks.prefill_batch(0, 0.0, set())
    assert batch == [(0, 100), (1, chunk - 128)] and n_tok == chunk - 28 and n_new == 0
    assert list(ranks.waiting[0]) == [1, 2]                        # the chunked prompt stays at the head
    assert memory.used[0] == tb.hold[0] + tb.hold[1]               # memory is taken when a request starts


def test_prefill_batch_stops_at_max_prefill_tokens_whatever_the_chunk(cfg):
    """SGLang's PrefillAdder (add_one_req): a batch takes no further request whose page-rounded prompt is at
    least the input budget left (``max_prefill_tokens``, 16384 by default, less the pages taken), even when the
    chunk (32768 on InferenceX's servers) has room: 8192-token prompts go one to a batch (8192 >= 16384 - 8192),
    1024-token ones fifteen (the sixteenth meets 1024 left)."""
    def first_batch(lengths):
        reqs, tb = table(cfg, lengths, [5] * len(lengths))
        ranks, _, _ = make_ranks(cfg, tb, reqs)
        ranks.chunk, ranks.max_input = 32768, 16384
        ranks.waiting[0].extend(range(len(lengths)))
        return ranks.prefill_batch(0, 0.0, set())[0]
    assert first_batch([8192] * 4) == [(0, 8192)]
    assert len(first_batch([1024] * 20)) == 15
    assert [i for i, _ in first_batch([6000, 10000, 100])] == [0, 1, 2]    # 6016 + 10048 + 128 pages < 16384
    assert [i for i, _ in first_batch([6000, 10400])] == [0]                # 10432 >= 16384 - 6016


def test_prefill_batch_respects_max_running_requests(cfg):
    reqs, tb = table(cfg, [100] * 3, [5] * 3)
    ranks, _, _ = make_ranks(cfg, tb, reqs)
    ranks.max_run = 2
    ranks.running[0] = 1
    ranks.waiting[0].extend([0, 1, 2])
    batch, _, _ = ranks.prefill_batch(0, 0.0, set())
    assert [i for i, _ in batch] == [0]


def test_distinct_prefill_chunks_of_one_prompt_count_once(cfg):
    reqs, tb = table(cfg, [100, 100], [5, 5], prompt=np.array([7, 7]))
    ranks, _, _ = make_ranks(cfg, tb, reqs)
    ranks.waiting[0].append(0)
    ranks.waiting[1].append(1)
    chunks = set()
    assert ranks.prefill_batch(0, 0.0, chunks)[2] == 100
    assert ranks.prefill_batch(1, 0.0, chunks)[2] == 0               # the same (prompt, position, length)


def test_join_then_advance_ends_requests_at_their_last_step(cfg):
    reqs, tb = table(cfg, [1000, 1000], [3, 5])
    ranks, memory, _ = make_ranks(cfg, tb, reqs)
    memory.used[0] += tb.hold[0] + tb.hold[1]
    ranks.join([(0, [0, 1])])
    assert ranks.running[0] == 2 and ranks.sum_l[0] == 2000 and ranks.max_jump([0]) == 1   # age 0: one step
    ended = []
    assert ranks.advance([0], 2, ended) == 1 and ended == [(0, True)]     # 2 decode steps: request 0 is done
    assert ranks.running[0] == 1 and memory.used[0] == tb.hold[1]
    assert ranks.advance([0], 2, ended) == 1 and ranks.running[0] == 0


# ---- memory ------------------------------------------------------------------------------------------
def test_memory_refuses_what_does_not_fit_and_crashes_where_hisparse_would(cfg):
    reqs, tb = table(cfg, [100, 100000], [5, 5])
    mem = DeviceMemory(1, 10_000, tb, prefix_pages=0)
    assert mem.take(0, 0, 0.0) and mem.used[0] == tb.hold[0]
    mem.used[0] = 9_000.0
    assert not mem.take(0, 1, 1.0)                                 # a long request's buffer does not fit ...
    assert mem.crash is not None and mem.crash.rank == 0 and mem.crash.time == 1.0   # ... but its check passed
    mem2 = DeviceMemory(1, 10_000, tb, prefix_pages=0)
    mem2.used[0] = 9_990.0
    assert not mem2.take(0, 1, 0.0) and mem2.crash is None         # the check fails too: it waits
    mem.free(0, [0])
    assert mem.used[0] == 9_000.0 - tb.hold[0]


# ---- staging -----------------------------------------------------------------------------------------
def test_staged_requests_are_acknowledged_in_order_and_a_cold_one_a_step_later(cfg):
    reqs, tb = table(cfg, [100, 100, 100], [5, 5, 5], cached=[0, 99, 99])
    st = Staging(cfg, tb, Model(cfg), cold_staging=False)
    st.on_admit(0, 0)                                              # prefilled from scratch: staged cold
    assert st.cold == [True, False, False]
    st.stage(0, 0, it=5)
    st.stage(0, 1, it=5)                                           # warm, but staged behind the cold one
    st.stage(1, 2, it=5)
    assert st.ready(6) == [(1, [2])] and st.count == 2
    assert st.ready(7) == [(0, [0, 1])] and st.count == 0


def test_without_hisparse_a_prefilled_request_decodes_in_the_next_iteration():
    gpu = resolve("sac-testbed", "gpu")
    reqs, tb = table(gpu, [100, 100], [5, 5], cached=[99, 99])
    st = Staging(gpu, tb, Model(gpu), cold_staging=True)
    st.on_admit(0, 0)
    st.stage(0, 0, it=5)                                           # its prefill ended before iteration 5
    assert st.ready(5) == [(0, [0])] and st.count == 0             # merged into iteration 5's batch


def test_first_hit_of_a_prompt_on_a_rank_is_cold_with_cold_staging(cfg):
    reqs, tb = table(cfg, [100] * 3, [5] * 3, cached=[99] * 3, prompt=np.array([1, 1, 1]))
    st = Staging(cfg, tb, Model(cfg), cold_staging=True)
    for r, i in ((0, 0), (0, 1), (1, 2)):
        st.on_admit(r, i)
    assert st.cold == [True, False, True]


def test_backup_time_is_the_slowest_ranks_prompt_bytes_over_its_share(cfg):
    reqs, tb = table(cfg, [1000, 1000, 3000], [5, 5, 5])
    model = Model(cfg)
    st = Staging(cfg, tb, model, cold_staging=False)
    for i in range(3):
        st.on_admit(0, i)
    hold, k = st.backups([0, 1, 2], rank_of=[0, 0, 1])
    from sacmodel.serving.config import backup_bandwidth
    bw = backup_bandwidth(cfg, (0, 1))
    assert k == 2 and hold == pytest.approx(max(model.backup(2000, bw[0]), model.backup(3000, bw[1])))


# ---- iteration cost ----------------------------------------------------------------------------------
def test_iteration_time_is_shared_part_plus_the_slowest_rank_and_shrinks_to_the_horizon(cfg):
    reqs, tb = table(cfg, [40000] * 2, [2000] * 2)
    ranks, _, _ = make_ranks(cfg, tb, reqs)
    ranks.join([(0, [0]), (1, [1])])
    ranks.clock[1] = ranks.joined[1] = 0
    model = ranks.staging.model
    cost = IterationCost(model, tb)
    T, jump, shared, slowest = cost.iteration_time(ranks, [], [0, 1], 1, 2, 2, 0.0, math.inf)
    a, c, g, k, d, h = model.rank_coeffs(1, 2, True)
    M = ranks.acc_at[0][1] - ranks.acc_at[0][0]
    assert shared == model.shared(2, False, 2)
    # one request per rank: it is also the busiest block of its swap-in
    assert T == pytest.approx(shared + a + c * (40000 + 1.0) + max(g, h) * M) and jump == 1
    assert slowest[0] == 1
    T10, j10, _, _ = cost.iteration_time(ranks, [], [0, 1], 10, 2, 2, 0.0, 3.5 * T)
    assert j10 < 10 and j10 * T10 <= 3.5 * T + 1e-12                # cut so as to end by the horizon


def test_launch_time_is_the_eager_launches_of_an_iteration_without_a_graph(cfg):
    reqs, tb = table(cfg, [40000] * 3, [2000] * 3)
    ranks, _, _ = make_ranks(cfg, tb, reqs)
    ranks.join([(0, [0]), (1, [1])])
    cost = IterationCost(ranks.staging.model, tb)
    assert cost.launch_time(ranks, [], [0, 1]) == 0.0                           # a CUDA-graph decode
    assert cost.launch_time(ranks, [(2, [(2, 64)])], [0, 1]) == cost.t_eager     # a rank prefills
    cost.graph_bs = 0                                                              # batches above the graphs
    assert cost.launch_time(ranks, [], [0, 1]) == cost.t_eager


def test_first_tokens_wait_for_the_work_before_their_ranks_next_launch(cfg):
    """With HiSparse a decoding rank first prepares its step on the CPU (t_hs + t_hs_req per request) and an
    admitting rank admits (t_hs_admit per request); then an iteration without a CUDA graph launches eagerly,
    and a rank with no batch launches an IDLE one (its MLP part). Without HiSparse only the eager launches are
    left; beside a CUDA-graph decode an idle rank hands its tokens on at once."""
    reqs, tb = table(cfg, [40000] * 4, [2000] * 4)
    ranks, _, _ = make_ranks(cfg, tb, reqs)
    ranks.join([(0, [0, 1]), (1, [2])])
    cost = IterationCost(ranks.staging.model, tb)
    v = cost.model.v
    # every rank waits at the DP-attention barrier (the all-gather of prepare_mlp_sync_batch) for the slowest
    # rank's preparation: here rank 0's two requests
    prep = v["t_hs"] + 2 * v["t_hs_req"]
    assert cost.send_delays(ranks, [], [0, 1]) == pytest.approx([prep] * cfg.dp)
    d = cost.send_delays(ranks, [(2, [(3, 64)])], [0, 1])
    eager = cost.t_eager
    # 11 of a DSA layer's 32 kernels: the layer norm and the MoE part (hand count of hardware.sizing)
    assert cost.t_eager_idle == pytest.approx(eager * 11 / 32)
    sync = max(prep, v["t_hs_admit"])
    assert d == pytest.approx([sync + eager] * 3 + [sync + cost.t_eager_idle] * (cfg.dp - 3))
    gpu = resolve("sac-testbed", "gpu")
    reqs, tb = table(gpu, [40000] * 3, [2000] * 3)
    ranks, _, _ = make_ranks(gpu, tb, reqs)
    ranks.join([(0, [0])])
    gcost = IterationCost(ranks.staging.model, tb)
    assert gcost.send_delays(ranks, [], [0]) == [0.0] * gpu.dp
    assert gcost.send_delays(ranks, [(1, [(1, 64)])], [0]) == pytest.approx(
        [gcost.t_eager, gcost.t_eager] + [gcost.t_eager_idle] * (gpu.dp - 2))


def test_the_dp_barrier_holds_every_rank_for_the_slowest_preparation(cfg):
    """SGLang's overlap loop gathers every rank's batch shape on the CPU group (``prepare_mlp_sync_batch``,
    scheduler_dp_attn_mixin.py) after each rank has prepared its batch: so a rank with nothing to run takes its
    next requests in only after an admitting rank's HiSparse admission (4 requests: 4 x t_hs_admit), and a
    decoding rank beside it hands its tokens on after it too. Beside a lone graph decode an idle rank waits for
    that rank's step preparation."""
    reqs, tb = table(cfg, [40000] * 6, [2000] * 6)
    ranks, _, _ = make_ranks(cfg, tb, reqs)
    ranks.join([(0, [0])])
    cost = IterationCost(ranks.staging.model, tb)
    v = cost.model.v
    admit = 4 * v["t_hs_admit"]
    assert admit > v["t_hs"] + v["t_hs_req"]                 # the admission is the slowest preparation
    d = cost.send_delays(ranks, [(1, [(1, 64), (2, 64), (3, 64), (4, 64)])], [0])
    assert d[0] == pytest.approx(admit + cost.t_eager)                      # the decoding rank waits for it
    assert d[1] == pytest.approx(admit + cost.t_eager)
    assert d[5] == pytest.approx(admit + cost.model.launch_cpu(cost.t_eager_idle))   # so does an idle one
    lone = cost.send_delays(ranks, [], [0])
    assert lone == pytest.approx([v["t_hs"] + v["t_hs_req"]] * cfg.dp)
    ranks.prefilled[5] = 1024       # a later chunk of request 5: admitted with its first chunk (admit_on), so
    later = cost.send_delays(ranks, [(2, [(5, 1024)])], [0])       # only the decoding rank's step is awaited
    step = v["t_hs"] + v["t_hs_req"]
    assert later[2] == pytest.approx(step + cost.t_eager)
    assert later[3] == pytest.approx(step + cost.model.launch_cpu(cost.t_eager_idle))


def test_a_first_token_waits_for_the_eager_launch_of_its_ranks_next_batch():
    """Request 1 arrives while request 0 prefills: the next iteration prefills it on rank 1 without a CUDA graph
    and decodes request 0 on rank 0, whose first token leaves once that iteration's kernels are launched. With
    request 1 far away the next iteration is a graph decode and the token leaves at once."""
    from sacmodel.serving.engine import run_engine
    gpu = resolve("sac-testbed", "gpu")
    runs = [run_engine(gpu, Requests(np.array([0.0, later]), np.array([500, 500]), np.array([50, 50]), np.zeros(2)), 2)
            for later in (0.01, 100.0)]
    assert runs[0].first[0] - runs[1].first[0] == pytest.approx(Model(gpu).t_eager, rel=1e-9)


def test_a_request_handed_on_after_its_ranks_loop_took_requests_in_waits_for_the_next_loop():
    """SGLang's overlap loop takes requests in (recv_requests), then launches the iteration and processes the
    last one's results: beside a CUDA-graph decode, launched at once, a request handed on just before an
    iteration starts is taken in as the next one is launched, and one handed on just after it a whole
    iteration later (the engine's boundaries s0 < s1 < s2)."""
    from sacmodel.serving.engine.loop import open_engine
    gpu = resolve("sac-testbed", "gpu")

    def taken_in(delta: float) -> tuple[list[float], float]:
        eng = open_engine(gpu, max_output=400)
        eng.submit(0.0, 500, 400)
        for _ in range(40):                       # one iteration per step: the prefill, then graph decodes
            eng.step(eng.t)
        assert eng.ranks.running[0] == 1 and eng.cost.launch_time(eng.ranks, [], [0]) == 0.0
        s = [eng.t]
        eng.submit(s[0] + delta - eng.model.v["t_token"] * 500, 500, 50)    # handed on at s0 + delta
        while 1 not in eng.dispatch.taken_in:
            eng.step(eng.t)
            s.append(eng.t)
        return s, eng.dispatch.taken_in[1]

    s, before = taken_in(-1e-4)
    assert before == s[1]
    s, after = taken_in(+1e-4)
    assert after == s[2] and s[2] > s[1] > s[0]


def test_swap_unit_is_the_rank_coefficient_and_sharing_follows_the_pool():
    one = Model(resolve("sac-testbed", "cxl", cxl_devices=1))
    for b, active in ((8, 1), (4, 2), (16, 8)):       # enough blocks in flight that the route's share binds
        assert one.swap_unit(active) == pytest.approx(one.rank_coeffs(b, active, True)[2])
    assert one.route_shared                                  # eight GPUs on one CXL device
    assert one.swap_unit(8) == pytest.approx(8 * one.swap_unit(1))
    assert not Model(resolve("sac-testbed", "dram")).route_shared      # each GPU over its own PCIe link
    assert not Model(resolve("sac-testbed", "gpu")).route_shared and Model(resolve("sac-testbed", "gpu")).swap_unit(8) == 0


def test_ranks_split_a_shared_route_by_their_demands():
    """One CXL device: rank 1 with three new requests, rank 0 with one. Both copy at half the device until rank 0's
    misses are in; then rank 1 has the device alone. Its swap-in ends when every rank's misses have passed."""
    cfg1 = resolve("sac-testbed", "cxl", cxl_devices=1)
    reqs, tb = table(cfg1, [40000] * 4, [2000] * 4)
    ranks, _, _ = make_ranks(cfg1, tb, reqs)
    ranks.join([(0, [0]), (1, [1, 2, 3])])
    model = ranks.staging.model
    cost = IterationCost(model, tb)
    T, _, shared, slowest = cost.iteration_time(ranks, [], [0, 1], 1, 4, 4, 0.0, math.inf)
    m = ranks.acc_at[0][1] - ranks.acc_at[0][0]                     # one new request's misses per layer
    assert ranks.acc_at[1][1] - ranks.acc_at[1][0] == pytest.approx(3 * m)
    fair = m * model.swap_unit(2) + 2 * m * model.swap_unit(1)
    assert fair == pytest.approx(4 * m * model.swap_unit(1))         # all four requests' misses over the device
    parts = []
    for b, q in ((1, max(m * model.swap_unit(2), m * model.rank_coeffs(1, 1, True)[2])),
                 (3, max(fair, 3 * m * model.rank_coeffs(3, 1, True)[2]))):
        a, c, g, k, d, h = model.rank_coeffs(b, 2, True)
        parts.append(a + c * (40000 + 1.0) + max(q, h * m))
    assert T == pytest.approx(shared + max(parts)) and slowest[0] == 3
    a, c, g, k, d, h = model.rank_coeffs(3, 2, True)                # equal halves of the device throughout
    assert T < shared + a + c * (40000 + 1.0) + g * 3 * m


def test_prefill_part_adds_the_admission_work_of_each_new_request(cfg):
    """The slowest rank's batch: each request's chunk, plus HiSparse's admission work on its first chunk."""
    reqs, tb = table(cfg, [32768, 32768], [5, 5], cached=[32768, 0])
    model = Model(cfg)
    cost = IterationCost(model, tb)
    p = cost.prefill_part([(0, [(0, 64)]), (1, [(1, 8192)])], prefilled=[0, 0])
    hit = model.prefill(64, 32768 - 64) + model.v["t_hs_admit"]
    cold = model.prefill(8192, 0) + model.v["t_hs_admit"]
    assert model.v["t_hs_admit"] > 0 and p == pytest.approx(max(hit, cold))
    later = cost.prefill_part([(1, [(1, 8192)])], prefilled=[0, 8192])       # its second chunk: no admission
    assert later == pytest.approx(model.prefill(8192, 8192))



def test_a_dense_mla_batch_takes_one_attention_path_by_its_prefixes_in_all():
    """SGLang (deepseek_v2.py _handle_attention_backend) runs a dense-MLA prefill batch as multi-head attention
    only when the batch's prefixes sum to 0 or at least 8192, else every request of it absorbed: the rest of a
    chunked 2,000-token prompt (prefix 192) takes the new prompts behind it into the absorbed form."""
    from sacmodel import scenario
    from sacmodel.serving.engine.stepmodel import MLA_CHUNKED_PREFIX, batch_mha
    assert (batch_mha(0), batch_mha(1), batch_mha(MLA_CHUNKED_PREFIX - 1), batch_mha(MLA_CHUNKED_PREFIX)) == \
        (True, False, False, True)
    r1 = resolve(scenario("h200", model="deepseek-r1", weights="fp8"), "gpu")
    reqs, tb = table(r1, [2000, 2000, 2000], [5, 5, 5])
    model = Model(r1)
    cost = IterationCost(model, tb)
    mixed = cost.prefill_part([(0, [(0, 1808), (1, 2000), (2, 2000)])], prefilled=[192, 0, 0])
    absorbed = model.prefill(1808, 192, False, False) + 2 * model.prefill(2000, 0, True, False)
    assert mixed == pytest.approx(absorbed, rel=1e-12)
    assert model.prefill(2000, 0, True, False) > model.prefill(2000, 0, True)          # alone it would be MHA
    fresh = cost.prefill_part([(0, [(1, 2000), (2, 2000)])], prefilled=[0, 0, 0])      # no prefix: MHA
    assert fresh == pytest.approx(2 * model.prefill(2000, 0, True, True), rel=1e-12)
    deep = cost.prefill_part([(0, [(0, 64), (1, 2000)])], prefilled=[MLA_CHUNKED_PREFIX, 0, 0])
    assert deep == pytest.approx(model.prefill(64, MLA_CHUNKED_PREFIX, False, True)
                                 + model.prefill(2000, 0, True, True), rel=1e-12)

# ---- distinct tokens, emission, stats ----------------------------------------------------------------
def test_distinct_tokens_count_a_ranks_requests_of_one_prompt_and_join_clock_once():
    """Rows of one batch with the same prompt and age are identical; on another rank they are not (batch
    non-invariance), so each rank's groups count."""
    d = DistinctTokens(2, [0, 0, 0, 0])
    d.join(0, [0, 1], clock=5)                 # two requests of the prompt join rank 0 at clock 5
    d.join(1, [2], clock=0)                    # one joins rank 1 at its clock 0
    clock = [5, 0]
    assert d.count([0], clock) == 1            # rank 0's two identical rows: one token
    assert d.count([0, 1], clock) == 2         # same age on rank 1, but another batch
    d.join(0, [3], clock=8)
    assert d.count([0, 1], [8, 3]) == 3        # rank 0 now has two join clocks
    d.leave(0, [0, 1], joined=[5, 5, 0, 8], clock=8)
    assert d.count([0, 1], [8, 3]) == 2


def test_distinct_tokens_of_several_prompts():
    d = DistinctTokens(1, [1, 2, 1])
    d.join(0, [0, 1, 2], clock=0)
    assert d.count([0], [0]) == 2              # prompts 1 and 2 at age 0


def test_emission_of_first_and_decode_tokens():
    fe = FrontEnd()
    em = Emission(fe, rank_of=[0, 1, 0], out=[5, 1, 5])
    em.unsent += [0, 1, 2]
    em.first_tokens(2.0)
    assert [(b[0], b[1], b[2]) for b in fe.msgs] == [(2.0, 1, [(0, False), (2, False)]), (2.0, 1, [(1, False), (1, True)])]
    assert em.unsent == []
    fe1 = FrontEnd()                  # rank 0 launches an eager batch first: its first tokens leave 0.5 s later
    em1 = Emission(fe1, rank_of=[0, 1, 0], out=[5, 5, 5])
    em1.unsent += [0, 1, 2]
    em1.first_tokens(2.0, [0.5, 0.0])
    assert [(b[0], b[2]) for b in fe1.msgs] == [(2.0, [(1, False)]), (2.5, [(0, False), (2, False)])]
    fe2 = FrontEnd()
    em2 = Emission(fe2, [0, 1], [5, 5])
    em2.decode_tokens(3.0, [0, 1], jump=4, ended=[(1, True)])
    # 8 messages: 7 plain ones at the iteration's end; rank 1's last, which carries the last token, waits for
    # the rank's next launch (process_batch_result_decode runs after run_batch)
    assert [(b[0], b[1], b[2]) for b in fe2.msgs] == [(3.0, 7, None)]
    assert em2.unsent_last == {1: [(1, True)]}
    em2.last_tokens(3.1, [0.5, 0.02])
    assert [(b[0], b[1], b[2]) for b in fe2.msgs] == [(3.0, 7, None), (3.12, 1, [(1, True)])]
    assert em2.unsent_last == {}


def test_stats_account_prefill_and_decode_iterations():
    s = Stats()
    s.add_iteration(1, 0.5, 0.1, 0.2, True, 0, None)
    s.add_iteration(4, 0.05, 0.01, 0.0, False, 2, (3, 1000.0, 10.0, True))
    d = s.as_dict(peak_used=7.0)
    assert d["iterations"] == 5 and d["prefill_iterations"] == 1 and d["decode_steps"] == 4
    assert d["prefill_s"] == 0.5 and d["decode_s"] == pytest.approx(0.2) and d["fetch_s"] == 0.2
    assert d["swap_states"] == {(3, 2, True): [4.0, 4000.0, 40.0]} and d["peak_used"] == 7.0


def test_timeline_samples_every_40_decode_steps():
    tl = Timeline(True, 1)
    tl.decode(1.0, 0, 30, 4, 100.0)
    tl.decode(2.0, 0, 55, 4, 100.0)            # 85 steps: two samples
    assert tl.rows == [(2.0, 0, "decode", 4, 100.0)] * 2


def test_miss_curves_of_requests_that_fit_the_buffer(cfg):
    """A request that fits the 4096-slot buffer for its whole life loads nothing (it is prefilled into the
    buffer); one that grows past it loads its context at admission, then only the misses beyond B."""
    curves = MissCurves(Model(cfg), max_out=10)
    assert cfg.device_buffer == 4096 and curves.over_life((1000, 9)) is None
    c = curves.over_life((4090, 9))
    assert c[0] == 0 and c[1] == 4090 and c[5] == 4090 and c[-1] > 4090    # past B from age 6 on
    assert curves.over_life((4090, 9)) is c                                 # made once per shape


def test_eager_launches_overlap_the_gpu_work_by_hand():
    """An iteration without a CUDA graph: the CPU launches n kernels at t_launch each while the GPU runs the ones
    launched before, so it lasts max(GPU + t_launch, n t_launch + t_graph_kernel), not GPU + the launches. A
    server whose forward waits on the GPU between launches (launch_overlap 0, the testbed's fork) adds them."""
    m = Model(resolve("h200-cxl-large", "gpu"))
    m.t_launch, m.t_graph, m.launch_overlap = 50e-6, 5e-6, 1.0
    n = 61 * 23
    excess = n * (50e-6 - 5e-6)
    assert m.overlapped(0.010, excess) == pytest.approx(n * 50e-6 + 5e-6)       # CPU-bound: the launches
    assert m.overlapped(0.500, excess) == pytest.approx(0.500 + 50e-6)          # GPU-bound: they hide
    assert m.overlapped(0.500, 0.0) == 0.500                                    # a graph replay
    m.launch_overlap = 0.0
    assert m.overlapped(0.500, excess) == pytest.approx(0.500 + excess)         # added, as before
    m.launch_overlap = 0.5
    assert m.overlapped(0.500, excess) == pytest.approx(0.5 * (0.50005 + 0.500 + excess))
    # the CPU has launched them all (and hands the last batch's first tokens on) after n t_launch when they
    # overlap, after the excess over the floor where the fork adds them (its fit's reading)
    m.launch_overlap = 1.0
    assert m.launch_cpu(excess) == pytest.approx(n * 50e-6) and m.launch_cpu(0.0) == 0.0
    m.launch_overlap = 0.0
    assert m.launch_cpu(excess) == excess


def test_the_testbed_adds_its_launches_and_a_built_machine_overlaps_them():
    """The testbed's scenario says its fork adds the launches (its logs' admission intervals); a cold 8K prompt
    of DeepSeek-V3.2 on a built 8 x H200 (DP8) reaches its first token sooner with the launches overlapped than
    added, and no sooner than the prompt's GPU work alone."""
    import sacmodel
    from sacmodel.hardware.params import with_params
    assert Model(resolve("sac-testbed", "gpu")).launch_overlap == 0.0
    t = sacmodel.scenario("h200", model="deepseek-v3.2", dp=8)
    assert t.param("launch_overlap") == 1.0
    kw = dict(context=8192, output=16, concurrency=1, requests=1, prompts="distinct", prefix_cached=False)
    over = sacmodel.predict(t, "gpu", **kw).ttft_mean_ms
    added = sacmodel.predict(with_params(t, {"launch_overlap": 0.0}), "gpu", **kw).ttft_mean_ms
    m = Model(resolve(t, "gpu"))
    chunks = math.ceil(8192 / m.cfg.prefill_chunk)
    assert over < added - 0.5 * chunks * 1e3 * m.t_eager
    gpu_only = sum(m.prefill(m.cfg.prefill_chunk, i * m.cfg.prefill_chunk, i == 0) for i in range(chunks)) * 1e3
    assert over > gpu_only



def _on_rank_zero(cfg, outs, follow: bool = False, at_once: bool = False):
    """An open engine with requests of ``outs`` output tokens (16K prompts on a cached prefix) all on rank 0,
    stepped to the end. ``follow``: when the client sees request 0's last token it sends one more request to
    rank 0 (a closed loop). ``at_once``: last tokens leave at the end of the iteration that computed them (the
    counterfactual). Returns (engine, the ends of the iterations)."""
    from sacmodel.serving.engine.emit import Emission
    from sacmodel.serving.engine.loop import open_engine
    eng = open_engine(cfg, max_output=max(outs))
    if at_once:
        plain = eng.emit.decode_tokens
        def now(when, decoding, jump, ended):
            plain(when, decoding, jump, ended)
            Emission.last_tokens(eng.emit, when)
        eng.emit.decode_tokens = now
    for o in outs:
        eng.submit(0.0, 16384, o, cached=16320, rank=0)
    if follow:
        def listener(i, last, when):
            if i == 0 and last:
                eng.submit(when, 16384, 50, cached=16320, rank=0)
        eng.client.listener = listener
    ends = []
    for _ in range(10000):
        if eng.finished == eng.table.n and not eng.emit.unsent_last and not eng.emit.unsent:
            break
        if eng.step():
            ends.append(eng.t)
    eng.frontend.run(math.inf, eng.dispatch.push, eng.client.deliver)
    return eng, ends


def test_a_last_token_leaves_after_its_ranks_next_launch(cfg):
    """Law of the overlap loop (process_batch_result_decode runs after the next batch's launch; HiSparse
    prepares that decode step on the CPU, t_hs + t_hs_req per request, serialised with the GPU): request 0 ends
    while request 1 goes on decoding on its rank, so its last token reaches the client t_hs + t_hs_req (one
    request in the next batch) after the iteration that computed it; alone, when nothing runs after it, at once."""
    v = Model(cfg).v
    eng, ends = _on_rank_zero(cfg, [10, 200])
    end0 = max(e for e in ends if e <= eng.client.done[0])
    assert eng.client.done[0] - end0 == pytest.approx(v["t_hs"] + v["t_hs_req"], rel=1e-9)
    alone, ends = _on_rank_zero(cfg, [10])                 # alone: the server then idles
    end0 = max(e for e in ends if e <= alone.client.done[0])
    assert alone.client.done[0] - end0 == pytest.approx(0.0, abs=1e-12)


def test_a_closed_loop_request_sent_at_a_last_token_waits_one_more_decode_step(cfg):
    """The next request of a closed loop goes out when the client sees a last token, which leaves with the
    rank's next launch; so it reaches the rank (its 16K prompt's intake, 9 ms, is shorter than that send delay,
    t_hs + t_hs_req = 18 ms) after the rank's loop took requests in for the iteration already running, and its
    prefill comes after the next decode step instead of right after the current one. Against last tokens sent
    at the iteration's end, its time to first token is one decode step (of request 1 alone) longer, less the
    send delay by which it went out later."""
    v = Model(cfg).v
    delay = v["t_hs"] + v["t_hs_req"]
    assert v["t_token"] * 16384 < delay
    late, ends = _on_rank_zero(cfg, [10, 400], follow=True)
    soon, _ = _on_rank_zero(cfg, [10, 400], follow=True, at_once=True)
    ttft = [e.client.first[2] - e.client.sent[2] for e in (late, soon)]
    j = ends.index(max(e for e in ends if e <= late.client.done[0]))      # request 0's last iteration
    step = ends[j + 1] - ends[j]                                          # request 1 decoding alone
    assert ttft[0] - ttft[1] == pytest.approx(step - delay, rel=0.02)
