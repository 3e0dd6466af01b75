import math

import numpy as np
import pytest

from sacmodel import compare, predict
from sacmodel.calibrate import with_params
from sacmodel.serving import ConfigError, admission_breakdown, bind, resolve, step_breakdown


def test_prediction_fields_and_breakdown():
    p = predict("sac-testbed", "cxl", context=32768, output=1024, concurrency=64)
    assert p.feasible and p.limit is None and p.requests == 512
    for k in ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s", "e2e_mean_ms"):
        assert math.isfinite(getattr(p, k)) and getattr(p, k) > 0
    assert p.e2e_mean_ms == pytest.approx(p.ttft_mean_ms + 1023 * p.tbt_mean_ms, rel=1e-6)
    assert p.breakdown["step_swap_ms"] > 0 and p.to_dict()["system"] == "cxl"


@pytest.mark.parametrize("system", ["gpu", "dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk"])
def test_single_request_equals_closed_form(system):
    """With one request in flight the engine reduces to request latency + fetch + admission + (O-1) steps."""
    L, O = 65536, 200
    p = predict("sac-testbed", system, context=L, output=O, concurrency=1, requests=1)
    cfg = resolve("sac-testbed", system)
    adm = admission_breakdown(cfg, bind(cfg, L, active_ranks=1))
    # a decode step sees the prompt plus half the output on average
    step = sum(step_breakdown(cfg, bind(cfg, L + (O - 1) / 2, active_ranks=1), 1, 1).values())
    poll = cfg.topo.param("prefetch_poll") / 2 if system in ("rdma", "cxl-prefetch") else 0.0
    ttft = cfg.topo.param("t_request") + adm["fetch"] + adm["copy"] + poll + adm["admit"]
    assert p.ttft_mean_ms == pytest.approx(ttft * 1e3, rel=1e-9)
    assert p.tbt_mean_ms == pytest.approx(step * 1e3, rel=1e-9)


def test_context_that_fits_the_buffer_skips_swap_in():
    p = predict("sac-testbed", "cxl", context=4000, output=64, concurrency=8)
    assert p.breakdown["step_swap_ms"] == 0.0


def test_capacity_limit_is_named_and_nothing_invented():
    p = predict("sac-testbed", "gpu", context=131072, output=8192, concurrency=192)
    assert not p.feasible and p.limit == "max_total_tokens"
    assert math.isnan(p.ttft_mean_ms) and p.to_dict()["tbt_mean_ms"] is None
    small = with_params("sac-testbed", {"mem_fraction": 0.3})
    q = predict(small, "dram", context=32768, output=1024, concurrency=64)
    assert not q.feasible and q.limit.startswith("hbm")


def test_open_loop_is_seeded_and_lighter_load_is_faster():
    a = predict("sac-testbed", "dram", context=32768, output=256, concurrency=64, requests=64, rate=0.5, seed=1)
    b = predict("sac-testbed", "dram", context=32768, output=256, concurrency=64, requests=64, rate=0.5, seed=1)
    assert a.to_dict() == b.to_dict()
    heavy = predict("sac-testbed", "dram", context=32768, output=256, concurrency=64, requests=64, rate=50.0)
    assert heavy.tbt_mean_ms >= a.tbt_mean_ms


@pytest.mark.parametrize("kw,msg", [(dict(context=0), "context"), (dict(concurrency=-1), "concurrency"),
                                    (dict(rate=-2.0), "rate"), (dict(cxl_devices=3), "cxl_devices=3"),
                                    (dict(device_buffer=0), "device_buffer")])
def test_bad_workload_is_a_clear_error(kw, msg):
    args = dict(context=32768, output=128, concurrency=8)
    with pytest.raises(ConfigError, match=msg):
        predict("sac-testbed", "cxl", **{**args, **kw})


def test_qualitative_findings_of_the_paper():
    """SAC/RDMA throughput grows with context; SAC near DRAM; RDMA TTFT an order of magnitude; 2 CXL > 1."""
    ratios, near, ttft = [], [], []
    for L in (16384, 32768, 65536, 131072):
        r = compare("sac-testbed", ("dram", "cxl", "rdma"), context=L, output=1024, concurrency=64)
        ratios.append(r["cxl"].output_throughput_tok_s / r["rdma"].output_throughput_tok_s)
        near.append(r["cxl"].output_throughput_tok_s / r["dram"].output_throughput_tok_s)
        ttft.append(r["rdma"].ttft_mean_ms / r["cxl"].ttft_mean_ms)
    assert np.all(np.diff(ratios) > 0) and ratios[-1] > 2.0
    assert min(near) > 0.8 and max(near) <= 1.0
    assert min(ttft) > 5 and ttft[-1] > 10
    one = predict("sac-testbed", "cxl", context=131072, output=1024, concurrency=64, cxl_devices=1)
    two = predict("sac-testbed", "cxl", context=131072, output=1024, concurrency=64, cxl_devices=2)
    assert two.output_throughput_tok_s > 1.05 * one.output_throughput_tok_s


def test_rdma_ttft_grows_with_concurrency():
    t = [predict("sac-testbed", "rdma", context=32768, output=1024, concurrency=c).ttft_mean_ms for c in (8, 32, 96)]
    assert t[0] < t[1] < t[2]


def test_cold_prompts_pay_the_prefill():
    warm = predict("sac-testbed", "dram", context=65536, output=64, concurrency=8)
    cold = predict("sac-testbed", "dram", context=65536, output=64, concurrency=8, prefix_cached=False)
    assert cold.ttft_mean_ms > 20 * warm.ttft_mean_ms and cold.config["prefix_cached"] is False
    longer = predict("sac-testbed", "dram", context=131072, output=64, concurrency=8, prefix_cached=False)
    assert longer.ttft_mean_ms > 2 * cold.ttft_mean_ms      # the O(L^2) indexer and attention terms


@pytest.mark.parametrize("system,context,conc", [("dram", 32768, 64), ("cxl", 131072, 64), ("rdma", 32768, 64)])
def test_analytic_steady_state_matches_engine_for_desynchronised_requests(system, context, conc):
    """With varied output lengths requests fall out of phase; the fixed point is their steady state."""
    from sacmodel.serving import Requests, run_engine, steady_state
    cfg = resolve("sac-testbed", system)
    n = 30 * conc
    out = np.random.default_rng(0).integers(512, 1537, n)
    eng = run_engine(cfg, Requests(np.zeros(n), np.full(n, context), out, np.full(n, context)), conc)
    ana = steady_state(cfg, context=context, output=1024, concurrency=conc)
    assert ana["tbt_mean_ms"] == pytest.approx(eng["tbt_mean_ms"], rel=0.06)
    assert ana["output_throughput_tok_s"] == pytest.approx(eng["output_throughput_tok_s"], rel=0.06)
    assert ana["ttft_mean_ms"] == pytest.approx(eng["ttft_mean_ms"], rel=0.25)


def test_analytic_open_loop_reports_saturation():
    ok = predict("sac-testbed", "cxl", context=32768, output=512, concurrency=64, rate=0.2, method="analytic")
    assert ok.feasible and ok.output_throughput_tok_s == pytest.approx(0.2 * 512)
    bad = predict("sac-testbed", "rdma", context=131072, output=512, concurrency=64, rate=50.0, method="analytic")
    assert not bad.feasible and "saturated" in bad.limit
