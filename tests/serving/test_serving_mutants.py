"""Serving metrics from an engine run (:func:`sacmodel.serving.predict.fill`), the benchmark's workload, the draws'
average, one-instance trace replay and the fetch micro-benchmark model, against values worked by hand."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sacmodel.data.traces import Trace
from sacmodel.serving.capacity import static_check
from sacmodel.serving.config import resolve
from sacmodel.serving.engine.loop import EngineResult
from sacmodel.serving.engine.memory import Crash
from sacmodel.serving.engine.workload import Requests
from sacmodel.serving.predict import (
    ConfigError,
    Prediction,
    _average,
    fill,
    output_spec,
    percentile,
    predict,
    simulate,
    workload,
)
from sacmodel.serving.replay import memory_concurrency, replay


@pytest.fixture(scope="module")
def cxl():
    return resolve("sac-testbed", "cxl")


def four_requests(crash=None):
    """Sent at 0, 0, 1, 2 s; first tokens at 1, 2, 3 s; last at 5, 4, 8 s; the fourth never completes."""
    nan = math.nan
    res = EngineResult(np.array([0.0, 0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0, nan]), np.array([5.0, 4.0, 8.0, nan]),
                       np.array([True, True, True, False]), crash, stats={}, timeline=[])
    reqs = Requests(np.zeros(4), np.full(4, 1000), np.array([5, 3, 1, 4]), np.zeros(4))
    return res, reqs


def blank():
    return Prediction("cxl", "sac-testbed", 1000, 5, 4, 4, True, None)


def test_metrics_of_a_run_by_hand(cxl):
    res, reqs = four_requests()
    p = fill(blank(), cxl, reqs, res)
    assert p.success_fraction == 0.75 and p.feasible and p.limit is None
    assert p.ttft_mean_ms == pytest.approx(1e3 * (1 + 2 + 2) / 3)          # from each request's own send time
    assert p.ttft_p50_ms == pytest.approx(2e3) and p.ttft_p99_ms == pytest.approx(2e3)
    assert p.e2e_mean_ms == pytest.approx(1e3 * (5 + 4 + 7) / 3)
    # pooled gaps of the completed requests with more than one token: (4 + 2) s over (4 + 2) gaps
    assert p.tbt_mean_ms == pytest.approx(1e3) and p.tbt_p99_ms == pytest.approx(1e3)
    assert p.duration_s == 8.0                                             # first send to last token seen
    assert p.output_throughput_tok_s == pytest.approx((5 + 3 + 1) / 8)    # tokens of completed requests only
    assert p.request_throughput_req_s == pytest.approx(3 / 8)
    assert p.per_request["tbt_ms"][:2] == pytest.approx([1e3, 1e3]) and math.isnan(p.per_request["tbt_ms"][2])
    assert p.per_request["ttft_ms"][:3] == pytest.approx([1e3, 2e3, 2e3])


def test_a_crashed_run_ends_at_the_crash(cxl):
    res, reqs = four_requests(Crash(6.0, 3, "device-buffer allocation failed"))
    p = fill(blank(), cxl, reqs, res)
    assert not p.feasible and p.limit == "max_total_tokens: device-buffer allocation failed"
    assert p.duration_s == 6.0 and p.output_throughput_tok_s == pytest.approx(9 / 6)


def test_tbt_weights_each_gap_and_p99_is_per_request(cxl):
    """Request 0: 10 tokens over 9 s (1 s gaps); request 1: 2 tokens over 3 s (one 3 s gap). Pooled: 12 s over 10
    gaps; per request 1 s and 3 s, whose 99th percentile is 1 + 0.99 x 2 s."""
    res = EngineResult(np.zeros(2), np.array([1.0, 1.0]), np.array([10.0, 4.0]), np.array([True, True]), None,
                       stats={}, timeline=[])
    reqs = Requests(np.zeros(2), np.full(2, 100), np.array([10, 2]), np.zeros(2))
    p = fill(blank(), cxl, reqs, res)
    assert p.tbt_mean_ms == pytest.approx(1.2e3) and p.tbt_p99_ms == pytest.approx(1e3 * (1 + 0.99 * 2))
    assert p.per_request["tbt_ms"] == pytest.approx([1e3, 3e3])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40), st.floats(0.0, 100.0))
def test_percentile_is_numpys(x, q):
    assert percentile(x, q) == pytest.approx(float(np.percentile(np.array(x), q)), rel=1e-12, abs=1e-9)


def test_percentile_by_hand():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)
    assert percentile([7.0], 99) == 7.0 and percentile([1.0, 3.0], 0) == 1.0 and percentile([1.0, 3.0], 100) == 3.0


def test_draws_average_their_metrics_and_report_the_range():
    runs = []
    for ttft, ok in ((100.0, 1.0), (300.0, 0.5), (math.nan, 0.0), (200.0, 1.0)):
        r = blank()
        r.ttft_mean_ms, r.success_fraction, r.output_throughput_tok_s = ttft, ok, 10.0
        runs.append(r)
    out = _average(runs[0], runs)
    assert out is runs[0] and out.ttft_mean_ms == 200.0 and out.spread["ttft_mean_ms"] == [100.0, 300.0]
    assert out.success_fraction == 0.625 and out.spread["draws"] == 4
    assert out.output_throughput_tok_s == 10.0 and "tbt_mean_ms" not in out.spread     # all NaN: left out
    one = blank()
    assert _average(one, [one]) is one and one.spread == {}


def test_predict_averages_its_draws():
    kw = dict(context=20000, output=64, concurrency=16, requests=32)
    p = predict("sac-testbed", "cxl", draws=3, exact_prompt=False, **kw)      # tails drawn, on request
    lo, hi = p.spread["ttft_mean_ms"]
    assert p.spread["draws"] == 3 and lo <= p.ttft_mean_ms <= hi and lo < hi
    singles = [predict("sac-testbed", "cxl", draws=1, exact_prompt=False, **kw).ttft_mean_ms]
    assert lo <= singles[0] <= hi
    exact = predict("sac-testbed", "cxl", draws=3, **kw)
    assert exact.spread == {}                                 # the default prompt is exact: one run


# ---- the workload ---------------------------------------------------------------------------------------------
def test_shared_prompt_workload_by_hand(cxl):
    w = workload(cxl, context=32768, output=100, requests=6, seed=3, exact_prompt=False)
    assert list(w.context) == [32768] * 6 and list(w.output) == [100] * 6 and list(w.cached) == [32768] * 6
    assert list(w.arrival) == [0.0] * 6 and list(w.prompt) == [0] * 6 and w.cold_staging
    # the first round prefilled the prompt's last chunk on every rank: all of it but prefill_chunk - page tokens
    assert w.prefix_pages == 32768 - cxl.prefill_chunk + cxl.page
    assert w.tail is not None and np.all((w.tail >= 1) & (w.tail <= cxl.page)) and w.delay is None
    gpu = resolve("sac-testbed", "gpu")
    assert workload(gpu, context=32768, output=100, requests=2).prefix_pages == 32768
    assert workload(cxl, context=500, output=10, requests=2).prefix_pages == 0


def test_workload_variants(cxl):
    d = workload(cxl, context=4000, output=10, requests=5, prompts="distinct")
    assert d.prompt is None and d.prefix_pages == 0 and not d.cold_staging
    cold = workload(cxl, context=4000, output=10, requests=5, prefix_cached=False)
    assert list(cold.cached) == [0] * 5 and cold.tail is None and not cold.cold_staging and cold.prefix_pages == 0
    exact = workload(cxl, context=4000, output=10, requests=5)
    assert exact.tail is None                                               # the default: exact prompts
    a, b = (workload(cxl, context=4000, output=10, requests=50, phase=k, exact_prompt=False).tail for k in (0, 1))
    assert not np.array_equal(a, b) and set(a) <= set(range(1, 65))
    many = workload(cxl, context=4000, output=10, requests=3000, exact_prompt=False).tail
    assert many.min() == 1 and many.max() == 64                             # a partial last page of 1..64 tokens
    j = workload(cxl, context=4000, output=10, requests=50, jitter=0.01)
    assert j.delay is not None and np.all((j.delay >= 0) & (j.delay <= 0.01)) and j.delay.std() > 0
    r = workload(cxl, context=4000, output=(1, 3), requests=2000, rate=50.0, seed=1)
    assert set(r.output) == {1, 2, 3} and np.all(np.diff(r.arrival) > 0)
    assert r.arrival[-1] / 2000 == pytest.approx(1 / 50, rel=0.1)          # Poisson at 50 requests/s
    zero = workload(cxl, context=4000, output=(0, 1), requests=200, seed=1)
    assert set(zero.output) == {1}                                          # 0 counts as 1


@pytest.mark.parametrize("spec,want", [(5, (5, 5)), ((0, 7), (0, 7)), ([3, 3], (3, 3)), ((1, 1), (1, 1))])
def test_output_spec_by_hand(spec, want):
    assert output_spec(spec) == want


@pytest.mark.parametrize("spec", [0, (2, 1), (0, 0), (-1, 3), (1.5, 3), (True, 3), 10**9])
def test_output_spec_refuses(spec):
    with pytest.raises(ConfigError):
        output_spec(spec)


def test_simulate_names_the_workload(cxl):
    reqs = Requests(np.zeros(3), [1000, 2000, 3000], [10, 20, 31], [0, 0, 0])
    p = simulate(cxl, reqs, 2)
    assert (p.context, p.output, p.concurrency, p.requests) == (2000, 20, 2, 3)
    assert p.success_fraction == 1.0 and len(p.per_request["ttft_ms"]) == 3
    assert p.config == {} and p.capacity == {} and p.spread == {}
    d = p.to_dict(per_request=True)
    assert d["per_request"]["ttft_ms"] == pytest.approx(p.per_request["ttft_ms"].tolist())
    assert "per_request" not in p.to_dict()


@pytest.mark.parametrize("outputs", [[0, 5, 5, 5], [5, 5, 5], [5.0, 5.0, 5.0, 5.0], [5, 5, 5, 10**9]])
def test_explicit_outputs_are_checked(outputs):
    with pytest.raises(ConfigError, match="outputs must be 4 whole numbers"):
        predict("sac-testbed", "cxl", context=4000, output=5, concurrency=2, requests=4, outputs=outputs)


@pytest.mark.parametrize("cached", [True, False])
def test_the_measured_round_starts_on_rank_one(cached):
    """The server's warm-up request and (with a cached prompt) the first round's dp requests went round-robin
    before: the first request of the run goes to rank 1 either way."""
    p = predict("sac-testbed", "cxl", context=4000, output=4, concurrency=1, requests=1, record=True,
                prefix_cached=cached)
    ranks = [e[1] for e in p.breakdown["timeline"] if e[2] == "prefill"]
    assert ranks and set(ranks) == {1}


def test_breakdown_by_hand(cxl):
    """Two decode states of the slowest rank: 30 steps of 4 requests (mean context 1000, 80 misses) and 10 steps of
    2 (3000, 20): the step's terms are their step-weighted means; shares are of the run's duration."""
    from sacmodel.serving.config import swap_route
    from sacmodel.serving.engine import Model
    from sacmodel.serving.predict import breakdown
    stats = {"swap_states": {(4, 8, True): [30.0, 30 * 1000.0, 30 * 80.0], (2, 8, False): [10.0, 10 * 3000.0, 10 * 20.0]},
             "decode_steps": 40, "decode_s": 2.0, "shared_s": 0.8, "prefill_s": 1.0, "fetch_s": 0.5,
             "cold_backup_s": 0.25, "first_token_copy_wait_s": 0.3, "peak_used": 1234.0, "peak_rank_requests": 5}
    res = EngineResult(np.zeros(3), np.ones(3), np.full(3, 2.0), np.ones(3, bool), None, stats=stats, timeline=[])
    out = breakdown(cxl, res, 10.0)
    m = Model(cxl)
    a, b = m.rank_terms(4, 8, 1000.0, 80.0, True), m.rank_terms(2, 8, 3000.0, 20.0, False)
    for k in a:
        assert out[f"step_{k}_ms"] == pytest.approx(1e3 * (30 * a[k] + 10 * b[k]) / 40, rel=1e-12)
    assert out["step_shared_ms"] == pytest.approx(1e3 * 0.8 / 40) and out["mean_step_ms"] == pytest.approx(50.0)
    assert out["misses_per_layer_per_request"] == pytest.approx((30 * 80 / 4 + 10 * 20 / 2) / 40)
    assert (out["share_time_prefill"], out["share_time_prefix_fetch"], out["share_time_decode"],
            out["share_time_cold_backup"]) == pytest.approx((0.1, 0.05, 0.2, 0.025))
    assert out["cold_backup_s"] == 0.25 and out["ttft_copy_wait_ms"] == pytest.approx(1e3 * 0.3 / 3)
    assert out["peak_device_tokens_per_rank"] == 1234.0 and out["peak_requests_per_rank"] == 5
    assert out["swap_bandwidth_share_GBps"] == pytest.approx(swap_route(cxl, cxl.dp)[0] / 1e9)
    empty = breakdown(cxl, EngineResult(np.zeros(1), np.ones(1), np.ones(1), np.ones(1, bool), None), 0.0)
    assert empty["step_shared_ms"] == 0.0 and empty["mean_step_ms"] == 0.0 and empty["peak_requests_per_rank"] == 0
    assert "share_time_decode" not in empty and "ttft_copy_wait_ms" not in empty


# ---- trace replay ------------------------------------------------------------------------------------------
def test_memory_concurrency_is_the_largest_that_fits(cxl):
    for ctx, out in ((32768, 1024), (4000, 100), (120000, 2000), (60000, 500), (16000, 4000), (8000, 64),
                     (100000, 100), (2000, 2000), (50000, 50000)):
        c = memory_concurrency(cxl, ctx, out)
        fits = lambda n: static_check(cxl, context=ctx, output=out, concurrency=n, prompts="distinct")["fits_at_once"]  # noqa: E731
        assert fits(c) and not fits(c + 1), (ctx, out, c)


def _trace(n=6, input_len=5000, output_len=20, gap=0.5):
    return Trace("t", np.arange(n) * gap, np.full(n, input_len), np.full(n, output_len), np.zeros(n), False)


def test_replay_defaults_to_the_memory_concurrency(cxl):
    p = replay("sac-testbed", "cxl", _trace(), cache="none")
    assert p.concurrency == memory_concurrency(cxl, 5000, 20) and p.success_fraction == 1.0
    assert (p.context, p.output, p.requests) == (5000, 20, 6)
    assert p.per_request["release_s"].tolist() == pytest.approx([0.5 * i for i in range(6)])   # time scale 1


def test_replay_takes_a_request_up_to_the_models_maximum_position():
    from sacmodel.data.records import DataError
    top = resolve("sac-testbed", "gpu").model.max_position
    assert top > 0
    replay("sac-testbed", "gpu", _trace(n=1, input_len=top - 10, output_len=10), cache="none", concurrency=1)
    with pytest.raises(DataError, match="exceeds"):
        replay("sac-testbed", "gpu", _trace(n=1, input_len=top - 9, output_len=10), cache="none", concurrency=1)


def test_replay_time_scale_divides_the_arrivals():
    """With arrivals far apart each request runs alone: doubling the scale halves the span of the sends."""
    slow = replay("sac-testbed", "cxl", _trace(gap=20.0), cache="none", concurrency=8)
    fast = replay("sac-testbed", "cxl", _trace(gap=20.0), cache="none", concurrency=8, time_scale=2.0)
    assert slow.per_request["release_s"].tolist() == pytest.approx([20.0 * i for i in range(6)])
    assert fast.per_request["release_s"].tolist() == pytest.approx([10.0 * i for i in range(6)])
    assert fast.ttft_mean_ms == pytest.approx(slow.ttft_mean_ms, rel=1e-6)


def test_replay_cache_all_prefills_one_token_of_each_prompt():
    none = replay("sac-testbed", "gpu", _trace(gap=20.0), cache="none", concurrency=8)
    every = replay("sac-testbed", "gpu", _trace(gap=20.0), cache="all", concurrency=8)
    assert every.ttft_mean_ms < none.ttft_mean_ms / 3


def test_replay_refuses_a_request_that_can_never_fit():
    p = replay("sac-testbed", "gpu", _trace(input_len=150_000, output_len=10), cache="none", concurrency=1,
               max_total_tokens=100_000)
    assert not p.feasible and p.success_fraction == 0.0 and p.limit.endswith("(largest request alone)")


# ---- fetch micro-benchmark -------------------------------------------------------------------------------------
def test_rdma_fetch_latency_is_the_reads_plus_the_host_gather():
    from sacmodel.hardware.scenarios import as_topology
    from sacmodel.serving.systems import fetch_latency_us, gather_seconds, rdma_seconds, single_path
    topo = as_topology("sac-testbed")
    nic = topo.pool_for(0, "rdma")
    want = rdma_seconds(topo, nic, 2048, 2048 * 656) + gather_seconds(topo, single_path(topo, "dram", 0), 2048, 656)
    assert fetch_latency_us("sac-testbed", "rdma", topk=2048) == pytest.approx(1e6 * float(want), rel=1e-12)
    assert fetch_latency_us("sac-testbed", "rdma", topk=2048) > fetch_latency_us("sac-testbed", "dram", topk=2048)
    # an RDMA read of n ops over 2 NICs costs what n / 2 ops over one does
    assert float(rdma_seconds(topo, nic, 100, 6e5, n_nics=2)) == pytest.approx(float(rdma_seconds(topo, nic, 50, 3e5)))


@pytest.mark.parametrize("kw", [dict(topk=0), dict(topk=2048, entry_bytes=0), dict(topk=-1), dict(topk=8, entry_bytes=-5)])
def test_fetch_latency_refuses_empty_reads(kw):
    from sacmodel.serving.systems import fetch_latency_us
    with pytest.raises(ValueError, match="topk and entry_bytes must be positive"):
        fetch_latency_us("sac-testbed", "cxl", **kw)
