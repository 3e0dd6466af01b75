"""``method="analytic"``: each term against a hand computation, and the whole against the engine's long-run
limit (issue 24: at 64K, concurrency 32, output 512 it gave an RDMA TBT of 166 ms against the engine's
113-128 ms, no test called it, and planted bugs in it survived)."""
import math
from dataclasses import replace

import numpy as np
import pytest

import sacmodel
from sacmodel.serving import analytic as an
from sacmodel.serving.access import ndtr
from sacmodel.serving.config import fetch_bandwidth, resolve
from sacmodel.serving.engine.stepmodel import Model
from sacmodel.serving.predict import workload


def setup(system, context=65536, output=512, requests=64, rate=None, scenario="sac-testbed", **kw):
    cfg = resolve(scenario, system)
    mdl = Model(cfg)
    reqs = workload(cfg, context=context, output=output, requests=requests, rate=rate, cold_staging=False, **kw)
    return cfg, mdl, an.load_of(cfg, mdl, reqs, rate)


# ---- the workload's averages -----------------------------------------------------------------------------
def test_load_averages_by_hand():
    cfg, mdl, ld = setup("cxl", context=32768, output=512, requests=4, exact_prompt=True)
    assert (ld.L, ld.O, ld.E, ld.chunks) == (32768, 512, 64, 1)      # a prefix hit prefills its last page
    assert ld.age == pytest.approx(511 * 510 / 2 / 511 + 1)         # mean age over the life, + 1 as the engine
    assert ld.m == pytest.approx(mdl.misses(32768, 511)[511] / 511)
    assert (ld.spread, ld.overlap, ld.waves, ld.shared, ld.cold) == (0.0, 1.0, True, True, False)
    reqs = workload(cfg, context=4096, output=(100, 300), requests=2, prefix_cached=False, prompts="distinct")
    reqs.output = np.array([100, 300])
    ld = an.load_of(cfg, mdl, reqs, None)
    # spans 0.5 and 1.5 of the mean: E|s1 - s2| / 2 over the four ordered pairs = 0.25, E min = 0.75
    assert (ld.O, ld.spread, ld.overlap) == (200, 0.25, 0.75)
    assert ld.age == pytest.approx((99 * 98 / 2 + 299 * 298 / 2) / 398 + 1)
    assert (ld.E, ld.chunks, ld.cold, ld.shared, ld.waves) == (4096, 4096 // cfg.prefill_chunk, True, False, False)


def test_occupancy_variance_and_the_busiest_rank_by_hand():
    _, _, ld = setup("cxl", output=(256, 768))
    ld = replace(ld, spread=0.1, overlap=0.8)
    assert an.occupancy_variance(4.0, ld, 8) == pytest.approx(4.0 * (0.1 + 0.8 / 8))
    assert an.occupancy_variance(4.0, replace(ld, waves=True), 8) == 0.0
    assert an.busiest(3.2, 0.0, 8) == {4: 1.0} and an.busiest(3.0, 0.0, 8) == {3: 1.0}
    # two ranks, mean 1, sd 0.5: P(max <= n) = Phi((n + 0.5 - 1) / 0.5)^2; an empty iteration counts as one
    d = an.busiest(1.0, 0.25, 2)
    F = [float(ndtr((n - 0.5) / 0.5)) ** 2 for n in range(4)]
    assert d[1] == pytest.approx(F[1]) and d[2] == pytest.approx(F[2] - F[1]) and d[3] == pytest.approx(F[3] - F[2])
    assert sum(d.values()) == pytest.approx(1.0)
    one = an.busiest(5.0, 1.0, 1)                        # one rank: the rank's own distribution, mean b
    assert sum(n * p for n, p in one.items()) == pytest.approx(5.0, abs=1e-5)     # Phi(-4.5) moved from 0 to 1


def test_iteration_terms_by_hand():
    cfg, mdl, ld = setup("cxl", output=512)             # waves: no spread, every rank exactly b
    part, eager = an.rank_part(mdl, {3: 0.25, 5: 0.75}, ld, 8)
    assert eager == 0.0
    assert part == pytest.approx(sum(p * mdl.rank_time(n, 8, ld.L + ld.age, n * ld.m, True) for n, p in ((3, .25), (5, .75))))
    assert an.rank_part(mdl, {cfg.graph_bs + 1: 0.5, 3: 0.5}, ld, 8)[1] == 0.5
    T = an.decode_iteration(mdl, ld, 4.0, 8)
    assert T == pytest.approx(mdl.shared(32, False, 32) + mdl.rank_time(4, 8, ld.L + ld.age, 4 * ld.m, True))
    assert an.decode_iteration(mdl, ld, 4.0, 8, groups=8) == pytest.approx(
        mdl.shared(32, False, 8) + mdl.rank_time(4, 8, ld.L + ld.age, 4 * ld.m, True))
    # one rank admits one request (its last page); the other seven decode 4 each
    Tp = an.prefill_iteration(mdl, ld, 4.0, 8, 1, 1)
    dec = mdl.rank_time(4, 8, ld.L + ld.age, 4 * ld.m, True)
    chunk = mdl.prefill(ld.E, ld.L - ld.E, True)
    shared = mdl.shared(round(ld.E + 28), True, round(ld.E + 28), 29)
    assert Tp == pytest.approx(shared + max(chunk, dec) + mdl.t_eager)
    assert an.prefill_iteration(mdl, ld, 0.0, 8, 2, 8) == pytest.approx(
        mdl.shared(round(16 * ld.E), True, round(16 * ld.E), 16) + 2 * chunk + mdl.t_eager)
    # the others decode 128 each: their part outlasts the one-page chunk, and the iteration waits for it
    dec_big = mdl.rank_time(128, 8, ld.L + ld.age, 128 * ld.m, True)
    assert dec_big > chunk
    eager = mdl.t_eager_pcg if ld.E <= mdl.pcg_tokens else mdl.t_eager
    assert an.prefill_iteration(mdl, ld, 128.0, 8, 1, 1) == pytest.approx(
        mdl.shared(round(ld.E + 7 * 128), True, round(ld.E + 7 * 128), 7 * 128 + 1) + dec_big + eager)


def test_copies_by_hand():
    cfg, mdl, ld = setup("rdma")
    bw4 = fetch_bandwidth(cfg, (0, 1, 2, 3))[0]
    assert an.copy_time(cfg, mdl, ld, 3, 4) == pytest.approx(3 * mdl.fetch(65536, bw4))
    assert an.copy_time(cfg, mdl, ld, 1, 1) == pytest.approx(mdl.fetch(65536, fetch_bandwidth(cfg, (0,))[0]))
    c2, m2, l2 = setup("cxl")
    assert an.copy_time(c2, m2, l2, 1, 1) == 0.0                      # a cached prompt: nothing copied
    assert an.copy_time(c2, m2, replace(l2, cold=True), 2, 1) == pytest.approx(
        2 * m2.backup(65536, __import__("sacmodel.serving.config", fromlist=["x"]).backup_bandwidth(c2, (0,))[0]))


def test_span_and_boundary_terms_by_hand():
    # two chunks of 0.1 s and a 1 s copy; the request's rank decodes in 7/8 of the prefill iterations
    assert an.episode_extra(0.1, 0.05, 1.0, 2, 1, 8) == pytest.approx(0.2 + 1.0 - 2 * 7 / 8 * 0.05)
    assert an.episode_extra(0.1, 0.05, 0.0, 1, 8, 8) == pytest.approx(0.1)      # every rank prefills
    assert an.wait_for_boundary(0.03, ((1.0, 0.05),)) == pytest.approx(0.02)
    assert an.wait_for_boundary(0.12, ((1.0, 0.05),)) == pytest.approx(0.03)  # two iterations later
    assert an.wait_for_boundary(0.03, ((0.5, 0.05), (0.5, 1.05))) == pytest.approx(0.5 * 0.02 + 0.5 * 1.02)
    # the loop takes requests in 0.01 s into each 0.05 s iteration: before that, admitted at the next boundary;
    # after it, at the boundary after that (0.03 s later in the iteration, then a whole one)
    assert an.wait_for_admission(0.005, 0.01, ((1.0, 0.05),)) == pytest.approx(0.045)
    assert an.wait_for_admission(0.03, 0.01, ((1.0, 0.05),)) == pytest.approx(0.02 + 0.05)
    assert an.wait_for_admission(0.03, 0.0, ((1.0, 0.05),)) == pytest.approx(an.wait_for_boundary(0.03, ((1.0, 0.05),))
                                                                               + 0.05)


def test_no_wave_state_keeps_its_laws():
    """The span law, Little's law on decode and the admission batch of a Poisson dispatch stream hold in
    the returned terms."""
    cfg, mdl, ld = setup("rdma", context=32768, output=(256, 768))
    t = an.no_waves(cfg, mdl, ld, 3.0, 32)
    assert t.X == pytest.approx(8 * 3.0 / t.S)
    ranks = max(1, min(8, round(8 * (1 - (1 - 1 / 8) ** t.g))))
    extra = an.episode_extra(t.T_p, t.T_d, t.t_c, 1, ranks, 8)
    assert t.S == pytest.approx(ld.O * t.T_d + t.t_c + 8 * 3.0 * (1 - 1 / 32) * extra / t.g, rel=1e-6)
    iters = t.X / t.g + (1 - t.stall) / t.T_d
    x = t.X / iters
    assert t.g == pytest.approx(x / -math.expm1(-x), rel=1e-6) and t.g >= 1.0
    assert t.stall == pytest.approx(t.X / t.g * (t.T_p + t.t_c))
    assert an.no_waves(cfg, mdl, ld, 1e-6, 32).g == pytest.approx(1.0, abs=1e-5)   # no load: one at a time
    # without copies, a request dispatched f = t_token L after a completion (f < T_d) comes after the loop took
    # requests in at that CUDA-graph decode's launch: it waits for that iteration and the next one, then its
    # prefill: its first token comes 2 T_d + T_p after it was sent
    c2, m2, l2 = setup("gpu", context=32768, output=(256, 768))
    t = an.no_waves(c2, m2, l2, 3.0, 32)
    # (and, when another request is admitted next, for that admission's eager launch)
    iters = t.X / t.g * l2.chunks + (1 - t.stall) / t.T_d
    p_next = t.X / t.g * l2.chunks / iters * (1 - 1 / 32)
    assert 0 < p_next < 1 and an.launch_wait(m2, l2, p_next) == pytest.approx(p_next * m2.t_eager)
    assert m2.v["t_token"] * 32768 < t.T_d and t.pre == pytest.approx(2 * t.T_d + t.T_p + p_next * m2.t_eager)


def test_waves_by_hand():
    cfg, mdl, ld = setup("rdma")                 # 64K: the first copy (8 s) outlasts the intake (32 x 43 ms)
    t = an.waves(cfg, mdl, ld, 32)
    f = mdl.v["t_token"] * 65536
    T1, c1 = an.prefill_iteration(mdl, ld, 4.0, 8, 1, 1), an.copy_time(cfg, mdl, ld, 1, 1)
    assert c1 + T1 > 32 * f
    Tp, tc = an.prefill_iteration(mdl, ld, 0.0, 8, 4, 8), an.copy_time(cfg, mdl, ld, 4, 8)
    rest = 512 * t.T_d + tc
    assert (t.T_p, t.t_c) == (pytest.approx(Tp), pytest.approx(tc))
    assert t.S == pytest.approx((Tp + c1 + rest + 31 * rest) / 32)
    assert t.X == pytest.approx(32 / (f + T1 + c1 + Tp + rest))
    c2, m2, l2 = setup("cxl")                    # no copies: admitted as the wave comes in
    g, Tp = an.wave_batch(m2, l2, 32, 8)
    assert g == pytest.approx(min(max(Tp / (m2.v["t_token"] * 65536), 1.0), 31.0), rel=1e-5)
    t = an.waves(c2, m2, l2, 32)
    n_ep = 1 + 31 / g
    assert t.S == pytest.approx(512 * t.T_d + (n_ep - 1) / 2 * an.episode_extra(Tp, t.T_d, 0.0, 1, round(g), 8))


def test_closed_and_open_loop_solutions():
    cfg, mdl, ld = setup("cxl", context=32768, output=(256, 768))
    t = an.solve(cfg, mdl, ld, 32, None)
    assert t.X * t.R == pytest.approx(32, rel=1e-6)                   # Little's law on the whole cycle
    slow = an.solve(cfg, mdl, replace(ld, waves=False), 32, 0.3)
    assert slow.X == pytest.approx(0.3, rel=1e-6) and slow.X * slow.R < 32
    assert an.solve(cfg, mdl, ld, 32, 1e3).X == pytest.approx(t.X)      # beyond capacity: the cap binds
    res = an.steady_state(cfg, workload(cfg, context=32768, output=(256, 768), requests=64, cold_staging=False), 32)
    assert res["tbt_mean_ms"] == pytest.approx(t.S / (ld.O - 1) * 1e3)
    assert res["output_throughput_tok_s"] == pytest.approx(t.X * ld.O)
    assert res["ttft_mean_ms"] == pytest.approx((t.pre + mdl.v["t_request"]) * 1e3)
    one = an.steady_state(cfg, workload(cfg, context=32768, output=1, requests=64), 32)
    assert math.isnan(one["tbt_mean_ms"]) and 0 < one["output_throughput_tok_s"] <= 1 / (mdl.v["t_token"] * 32768)


# ---- laws of the terms and of the metrics (campaign 3 of issue 23) ------------------------------------------
@pytest.mark.parametrize("b,var", [(4.0, 9.0), (1.0, 0.25), (30.0, 40.0)])
@pytest.mark.parametrize("ranks", [1, 8, 64])
def test_the_busiest_rank_is_a_distribution_whatever_the_number_of_ranks(b, var, ranks):
    """Probabilities of the busiest batch, the tail beyond the last batch listed included, add up to one, every
    batch holds a request at least, and the mean grows with the number of ranks."""
    d = an.busiest(b, var, ranks)
    assert sum(d.values()) == pytest.approx(1.0, abs=1e-12) and min(d) >= 1 and min(d.values()) > 0
    assert sum(n * p for n, p in d.items()) >= sum(n * p for n, p in an.busiest(b, var, 1).items()) - 1e-9


def test_a_lone_prefill_computes_one_sequence():
    """A prefill iteration with one request admitted and no rank decoding computes one next token: its shared
    part is over the prompt's new tokens and one sequence. On a GPU whose BF16 rate (1 TFLOP/s) makes the LM
    head compute-bound, one sequence more would show."""
    from sacmodel.hardware.params import with_params
    topo = with_params("sac-testbed", {"node:gpu.flops_bf16": 1e12})
    cfg, mdl, ld = setup("cxl", scenario=topo, exact_prompt=True)
    assert mdl.shared(64, True, 64, 1) < mdl.shared(64, True, 64, 2)
    want = mdl.shared(64, True, 64, 1) + mdl.prefill(64, 65536 - 64, True) + mdl.t_eager
    assert (ld.E, ld.chunks) == (64, 1)
    assert an.prefill_iteration(mdl, ld, 0.0, 8, 1, 1) == pytest.approx(want, rel=1e-12)


def test_a_wave_admitted_as_it_comes_in_by_hand():
    """cxl at 64K, concurrency 32 (no copies): the first token of a request waits for the intake f, half the
    other episodes, the next iteration boundary after f, its own prefill, HiSparse's preparation of its rank's
    next decode and, unless it is the wave's last admission, the eager launch of the next one."""
    cfg, mdl, ld = setup("cxl")
    f = mdl.v["t_token"] * 65536
    g, Tp = an.wave_batch(mdl, ld, 32, 8)
    t = an.waves(cfg, mdl, ld, 32)
    n_ep = 1 + 31 / g
    wait = Tp * (math.floor(f / Tp) + 1) - f             # to the next multiple of T_p after f
    prep = mdl.v["t_hs"] + mdl.v["t_hs_req"] * 32 / 8             # HiSparse's preparation of the rank's decode
    assert t.pre == pytest.approx(f + (n_ep - 1) / 2 * Tp + wait + Tp + (n_ep - 1) / n_ep * mdl.t_eager + prep,
                                  rel=1e-9)


def test_a_wave_whose_prefill_outlasts_its_intake_is_taken_whole_after_its_first_request():
    """Cold 64K prompts (64 chunks) take longer to prefill than to arrive: every admission after the first
    takes in the rest of the wave, C - 1 requests (never more), spread over the ranks round-robin."""
    cfg, mdl, ld = setup("cxl", prefix_cached=False)
    f = mdl.v["t_token"] * 65536
    for C in (2, 3, 4):
        g, Tp = an.wave_batch(mdl, ld, C, 8)
        assert ld.chunks * Tp > (C - 1) * f and g == C - 1
        # C - 1 ranks admit one each while the other 9 - C decode the wave's C / 8 requests each
        assert Tp == pytest.approx(an.prefill_iteration(mdl, ld, C / 8, 8, 1, C - 1), rel=1e-12)


def test_copies_of_a_wave_admitted_as_it_comes_in_are_stalls():
    """rdma at 64K with a wave of 256 (its intake, 11 s, outlasts the first copy, 8 s): admitted as it comes
    in, and the share of time stalled counts each episode's prefills and copies (episodes per wave n_ep,
    waves per second X / C)."""
    cfg, mdl, ld = setup("rdma")
    t = an.waves(cfg, mdl, ld, 256)
    assert t.t_c > 1.0 and t.g < 255
    n_ep = 1 + 255 / t.g
    assert t.stall == pytest.approx(t.X / 256 * n_ep * (t.T_p + t.t_c), rel=1e-12) and 0 < t.stall < 1


@pytest.mark.parametrize("C", [2, 3, 32])
def test_a_wave_gathered_by_its_first_copy_is_admitted_in_two_batches(C):
    """rdma at 64K: the first request's copy (8 s) outlasts the intake of C requests (43 ms each), so the wave
    is admitted in two episodes, its first request alone, then the other C - 1: C / 2 requests per admission
    (it said (C - 1) / 2, half a request per admission for a wave of two)."""
    cfg, mdl, ld = setup("rdma")
    assert an.copy_time(cfg, mdl, ld, 1, 1) > C * mdl.v["t_token"] * 65536
    assert an.waves(cfg, mdl, ld, C).g == C / 2


def test_open_loop_never_holds_more_than_the_cap():
    """An open-loop rate just under what C decoding requests per rank sustain, but above the closed loop's
    throughput at C in flight: the rate would need more than C in flight, so the client's cap binds and the
    closed loop at C answers."""
    cfg, mdl, ld = setup("cxl", context=32768, output=(256, 768))
    ld = replace(ld, waves=False)
    top = an.no_waves(cfg, mdl, ld, 32 / 8, 32)
    closed = an.solve(cfg, mdl, ld, 32, None)
    assert closed.X < top.X
    t = an.solve(cfg, mdl, ld, 32, (closed.X + top.X) / 2)
    assert t.X * t.R == pytest.approx(32, rel=1e-6) and t.X == pytest.approx(closed.X, rel=1e-9)


@pytest.mark.parametrize("system,output", [("cxl", (256, 768)), ("rdma", 512), ("gpu", 64)])
def test_end_to_end_is_the_first_token_then_the_decode_steps(system, output):
    """E2E = TTFT + (O - 1) TBT (TBT is the span over O - 1), and the throughputs are O per request."""
    cfg = resolve("sac-testbed", system)
    reqs = workload(cfg, context=16384, output=output, requests=64, cold_staging=False)
    r = an.steady_state(cfg, reqs, 16)
    O = float(np.mean(reqs.output))
    assert r["e2e_mean_ms"] == pytest.approx(r["ttft_mean_ms"] + (O - 1) * r["tbt_mean_ms"], rel=1e-12)
    assert r["output_throughput_tok_s"] == pytest.approx(O * r["request_throughput_req_s"], rel=1e-12)
    assert 0 < r["ttft_mean_ms"] < r["e2e_mean_ms"]


@pytest.mark.parametrize("system", ["cxl", "rdma"])
def test_a_request_of_one_token_ends_with_its_prefill(system):
    cfg = resolve("sac-testbed", system)
    r = an.steady_state(cfg, workload(cfg, context=16384, output=1, requests=64), 16)
    assert r["e2e_mean_ms"] == r["ttft_mean_ms"] > 0 and math.isnan(r["tbt_mean_ms"])
    assert r["breakdown"]["mean_step_ms"] == 0.0 and r["output_throughput_tok_s"] == r["request_throughput_req_s"]


# ---- against the engine ------------------------------------------------------------------------------------
def engine_steady(p, C: int) -> tuple[float, float]:
    """The engine's TBT (ms) and output throughput (tokens/s) once past its first two rounds of ``C`` requests
    and before its drain (a run's start and end are not the steady state the analytic method describes)."""
    pr = p.per_request
    rel, first, done, out = pr["release_s"], pr["first_s"], pr["done_s"], pr["output"].astype(float)
    late = np.arange(len(rel)) >= 2 * C
    tbt = (done - first)[late].sum() / (out[late] - 1).sum() * 1e3
    t_a, t_b = np.sort(done)[2 * C - 1], rel.max()
    window = (done > t_a) & (done <= t_b)
    return tbt, out[window].sum() / (t_b - t_a)


@pytest.mark.parametrize("system", ["gpu", "dram", "rdma", "cxl"])
def test_analytic_is_the_engines_long_run_limit_without_waves(system):
    """Steady closed-loop load (outputs 256-768, so no waves): TBT and throughput within 10% of the engine's
    over contexts and concurrencies (max 4.0% and 2.8% when written; 16 rounds of requests, about 0.5 s)."""
    for context in (8192, 65536):
        for C in (8, 32):
            kw = dict(context=context, output=(256, 768), concurrency=C, requests=16 * C, cold_staging=False)
            tbt, thr = engine_steady(sacmodel.predict("sac-testbed", system, draws=1, **kw), C)
            a = sacmodel.predict("sac-testbed", system, method="analytic", **kw)
            assert a.tbt_mean_ms == pytest.approx(tbt, rel=0.10), (context, C)
            assert a.output_throughput_tok_s == pytest.approx(thr, rel=0.10), (context, C)


@pytest.mark.parametrize("system", ["rdma", "cxl"])
def test_analytic_matches_the_engine_on_the_benchmark(system):
    """The benchmark (64K, concurrency 32, output 512, released at once: waves): TBT within 15% of the engine's
    run (rdma -6%, cxl 0% when written; before: +30% for rdma, its copies counted twice)."""
    kw = dict(context=65536, output=512, concurrency=32)
    e = sacmodel.predict("sac-testbed", system, **kw)
    a = sacmodel.predict("sac-testbed", system, method="analytic", **kw)
    assert a.tbt_mean_ms == pytest.approx(e.tbt_mean_ms, rel=0.15)
    assert a.tbt_mean_ms > 0 and a.output_throughput_tok_s > 0


def test_wave_batch_is_a_fixed_point_and_moves_smoothly():
    """cxl at 64K, concurrency 32: an admission of g requests takes T_p(g) (interpolated between whole
    counts), and g = chunks T_p(g) / f holds at the answer (T_p stepping at whole counts left the iteration
    alternating between 2.46 and 3.57 and returned one count with the other's prefill time); a 1% longer
    tokenisation moves g by less than 5%."""
    cfg, mdl, ld = setup("cxl")
    f = mdl.v["t_token"] * ld.L
    g, Tp = an.wave_batch(mdl, ld, 32, 8)
    assert 1.0 < g < 31.0
    assert g == pytest.approx(ld.chunks * Tp / f, rel=1e-6)
    n = int(g)
    lo = an.prefill_iteration(mdl, ld, 32 / 8, 8, 1, min(8, n))
    hi = an.prefill_iteration(mdl, ld, 32 / 8, 8, 1, min(8, n + 1))
    assert min(lo, hi) <= Tp <= max(lo, hi)
    t_token = mdl.v["t_token"]
    try:
        mdl.v["t_token"] = 1.01 * t_token
        g2, _ = an.wave_batch(mdl, ld, 32, 8)
    finally:
        mdl.v["t_token"] = t_token
    assert abs(g2 / g - 1) < 0.05


def test_a_prompt_not_a_multiple_of_the_chunk_takes_one_more_chunk():
    """Issue 36: chunks = ceil(E / chunk); the remainder is a chunk of its own (floor drops it)."""
    cfg, mdl, _ = setup("cxl")
    c = cfg.prefill_chunk
    reqs = workload(cfg, context=3 * c + 100, output=16, requests=2, prefix_cached=False, prompts="distinct",
                    cold_staging=False)
    ld = an.load_of(cfg, mdl, reqs, None)
    assert ld.E == 3 * c + 100 and ld.chunks == 4
    reqs = workload(cfg, context=3 * c, output=16, requests=2, prefix_cached=False, prompts="distinct",
                    cold_staging=False)
    assert an.load_of(cfg, mdl, reqs, None).chunks == 3


def test_later_chunks_of_a_prefill_attend_to_the_chunks_before_them():
    """A cold prompt of three chunks: the first attends to nothing before it, the later ones to the chunk
    before them at least (the admission's iteration is priced at the mean chunk). Nothing decodes: the
    iteration is the shared part of one chunk of one sequence and the mean chunk."""
    cfg, mdl, _ = setup("gpu")
    c = cfg.prefill_chunk
    reqs = workload(cfg, context=3 * c, output=16, requests=2, prefix_cached=False, prompts="distinct",
                    cold_staging=False)
    ld = an.load_of(cfg, mdl, reqs, None)
    assert (ld.L, ld.E, ld.chunks) == (3 * c, 3 * c, 3)
    first, later = mdl.prefill(c, 0, True), mdl.prefill(c, c, False)
    assert later > mdl.prefill(c, 0, False)                # attending c more tokens costs more
    eager = mdl.t_eager_pcg if c <= mdl.pcg_tokens else mdl.t_eager
    want = mdl.overlapped(mdl.shared(c, True, c, 1) + (first + 2 * later) / 3, eager)
    assert an.prefill_iteration(mdl, ld, 0.0, cfg.dp, 1, 1) == pytest.approx(want, rel=1e-12)


def test_a_prompt_dispatched_after_an_iteration_boundary_waits_for_the_one_after():
    """The front end dispatches a request t_token x L after the completion that freed its slot (the whole
    prompt is tokenised, even when its KV is cached). A 64K prompt on the testbed's GPUs takes 36 ms, longer
    than a 30 ms decode iteration: the loop takes it in at the second boundary, the iteration after admits it
    (3 T_d), then its one-page prefill (no copies on the gpu system)."""
    cfg, mdl, ld = setup("gpu", context=65536, output=(256, 768))
    t = an.no_waves(cfg, mdl, ld, 3.0, 32)
    f = mdl.v["t_token"] * 65536
    assert ld.E == 64 and t.T_d < f < 2 * t.T_d and t.t_c == 0.0
    iters = t.X / t.g * ld.chunks + (1 - t.stall) / t.T_d
    p_next = t.X / t.g * ld.chunks / iters * (1 - 1 / 32)
    assert t.pre == pytest.approx(3 * t.T_d + t.T_p + p_next * mdl.t_eager)
