import csv
import json
import math

import numpy as np
import pytest
import sympy as sp

from sacmodel.cli import main
from sacmodel.planning.common import SolverError
from sacmodel.planning.breakeven import breakeven
from sacmodel.planning.plan import configuration_cost, max_load, plan
from sacmodel.planning.closed_forms import evaluate
from sacmodel.planning.sensitivity import sensitivity
from sacmodel.planning.sweep import sweep, sweep_predict, winner_map
from sacmodel.planning.closed_forms import symbolic, unloaded_expression
from sacmodel.serving.costs import SYMBOLS, check_dimensions
from sacmodel.serving.predict import predict

SYSTEMS = ["gpu", "dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk"]


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("context", [3000, 98304])
def test_symbolic_equals_predict_at_concurrency_one(system, context):
    p = predict("sac-testbed", system, context=context, output=300, concurrency=1, requests=1, cold_staging=False,
                exact_prompt=True)
    for metric, field in (("ttft", "ttft_mean_ms"), ("tbt", "tbt_mean_ms"), ("e2e", "e2e_mean_ms")):
        e = symbolic(system, metric, "sac-testbed", context=context, output=300)
        assert e.is_Number
        assert float(e) * 1e3 == pytest.approx(getattr(p, field), rel=1e-12)
    cold = predict("sac-testbed", system, context=context, output=300, concurrency=1, requests=1,
                   prefix_cached=False)
    e = symbolic(system, "ttft_cold", "sac-testbed", context=context, output=300)
    assert float(e) * 1e3 == pytest.approx(cold.ttft_mean_ms, rel=1e-12)


@pytest.mark.parametrize("system", SYSTEMS)
def test_unbound_forms_are_documented_and_dimensionally_sound(system):
    for metric, unit in (("ttft", "second"), ("tbt", "second"), ("e2e", "second"), ("bytes_per_step", "byte"),
                         ("ttft_cold", "second")):
        e = unloaded_expression(system, metric)
        assert all(s.name in SYMBOLS and SYMBOLS[s.name][2] for s in e.free_symbols), metric
        if e != 0:   # a constant zero (gpu: no pool bytes) has every dimension
            # xreplace, not subs: the same expression (L and O are atoms), without subs's matching, which took
            # 1-2 CPU s a system on the chunked cold prefill's Sum
            check_dimensions(e.xreplace({sp.Symbol("L", positive=True): 70000, sp.Symbol("O", positive=True): 10}),
                             unit)


def test_breakeven_in_output_length():
    """cxl-prefetch pays a bulk copy up front but then decodes from DRAM: it wins for long outputs."""
    be = breakeven("sac-testbed", "cxl", "cxl-prefetch", metric="e2e", vary="output", lo=1, hi=10**6,
                   context=131072)
    assert be.found and len(be.values) == 1 and be.residual < 1e-9
    assert be.winner_below == "cxl" and be.winner_above == "cxl-prefetch"
    x = be.value
    lo = evaluate("sac-testbed", "cxl", "e2e", "output", x * 0.9, context=131072) - evaluate(
        "sac-testbed", "cxl-prefetch", "e2e", "output", x * 0.9, context=131072)
    hi = evaluate("sac-testbed", "cxl", "e2e", "output", x * 1.1, context=131072) - evaluate(
        "sac-testbed", "cxl-prefetch", "e2e", "output", x * 1.1, context=131072)
    assert lo < 0 < hi


def test_breakeven_closed_form_in_a_bandwidth():
    """E2E is rational in the bulk-copy bandwidth: sympy solves the crossing exactly."""
    be = breakeven("sac-testbed", "cxl", "cxl-prefetch", metric="e2e", vary="pf_dma_bw", lo=1e9, hi=1e12,
                   context=131072, output=16384)
    assert be.found and be.method == "symbolic" and be.residual < 1e-12
    assert be.winner_below == "cxl" and be.winner_above == "cxl-prefetch"
    e = symbolic("cxl-prefetch", "e2e", "sac-testbed", free=("pf_dma_bw",), context=131072, output=16384)
    at = float(e.subs(sp.Symbol("pf_dma_bw", positive=True), be.value))
    assert at == pytest.approx(float(symbolic("cxl", "e2e", "sac-testbed", context=131072, output=16384)),
                               rel=1e-12)


def test_breakeven_numeric_in_context_and_no_crossing():
    # a short answer: at short contexts the bulk copy is cheap, at long ones loading in place (SAC) wins
    be = breakeven("sac-testbed", "cxl", "cxl-prefetch", metric="e2e", vary="context", lo=8192, hi=262144,
                   output=100)
    assert be.found and be.method == "numeric" and be.residual < 1e-9
    assert (be.winner_below, be.winner_above) == ("cxl-prefetch", "cxl")
    none = breakeven("sac-testbed", "cxl", "rdma", metric="e2e", vary="context", lo=8192, hi=131072,
                     output=1024, points=12)
    assert not none.found and none.winner == "cxl" and "throughout" in none.message
    with pytest.raises(SolverError):
        breakeven("sac-testbed", "cxl", "rdma", metric="e2e", vary="context", lo=5, hi=1, output=1)
    with pytest.raises(SolverError, match="unknown metric"):
        breakeven("sac-testbed", "cxl", "rdma", metric="speed", vary="context", lo=1, hi=5, output=1)


def test_breakeven_of_two_equal_systems_finds_no_crossing():
    """The unloaded TTFT of cxl and rdma is one closed form (the prefix copy comes after the first token): it
    used to report a 'crossing' at every grid point and 'None is better below'."""
    be = breakeven("sac-testbed", "cxl", "rdma", metric="ttft", vary="context", lo=8192, hi=131072, output=1024,
                   points=8)
    assert be.curve["cxl"] == be.curve["rdma"]            # the premise: equal at every point
    assert not be.found and be.values == [] and be.winner is None and be.winner_below is None
    assert "equal throughout" in be.message


def test_winner_map_marks_systems_with_equal_values():
    """The unloaded TTFT of the pools is one closed form; the map gave the point to the first system listed
    ('best system: dram at 9 points'). gpu skips the pool's admission: it wins alone."""
    wm = winner_map("sac-testbed", ["cxl", "rdma", "gpu"], "ttft", ("context", [8192, 65536]),
                    ("output", [64, 1024]))
    v = wm["values"]
    assert (v[0] == v[1]).all() and (v[2] < v[0]).all()          # the premise
    assert wm["tied"][2].all() and not wm["tied"][:2].any() and (wm["winner"] == 2).all()
    wm = winner_map("sac-testbed", ["cxl", "rdma"], "ttft", ("context", [8192, 65536]), ("output", [64, 1024]))
    assert wm["tied"].all()


def test_breakeven_loaded_hardware_parameter():
    be = breakeven("sac-testbed", "cxl", "dram", metric="tbt_mean_ms", vary="link:gpu.latency", lo=1e-7,
                   hi=2e-5, ratio=1.1, points=12, context=131072, output=256, concurrency=64)
    assert be.found
    a = evaluate("sac-testbed", "cxl", "tbt_mean_ms", "link:gpu.latency", be.value, context=131072, output=256,
                 concurrency=64)
    b = evaluate("sac-testbed", "dram", "tbt_mean_ms", "link:gpu.latency", be.value, context=131072, output=256,
                 concurrency=64)
    # the engine is piecewise continuous in a hardware number (an admission can move to the next iteration),
    # so the root is where the ratio crosses 1.1 to within such a step
    assert a == pytest.approx(1.1 * b, rel=0.01)


def test_plan_smallest_value_and_one_less_misses():
    slo = {"tbt_mean_ms": 80.0, "output_throughput_tok_s": 750.0}
    wl = dict(context=131072, output=1024, concurrency=64)
    r = plan("sac-testbed", "cxl", workload=wl, slo=slo, vary="cxl_devices", max_value=8)
    assert r.found and r.value >= 2
    assert r.prediction["tbt_mean_ms"] <= 80 and r.prediction["output_throughput_tok_s"] >= 750
    less = r.prediction_one_less
    assert less["tbt_mean_ms"] > 80 or less["output_throughput_tok_s"] < 750
    c = r.cost_usd_per_hour
    assert c["total"] == pytest.approx(sum(v for k, v in c.items() if k != "total"))
    assert configuration_cost("sac-testbed", "cxl", cxl_devices=r.value)["cxl_gb"] == c["cxl_gb"]
    miss = plan("sac-testbed", "cxl", workload=wl, slo={"tbt_mean_ms": 1.0}, vary="cxl_devices", max_value=3)
    assert not miss.found and "no cxl_devices" in miss.message


def test_max_load_is_the_edge_of_the_slo():
    r = max_load("sac-testbed", "cxl", workload=dict(context=32768, output=512), slo={"tbt_mean_ms": 60.0},
                 vary="concurrency", max_value=256)
    assert r.found and r.prediction["tbt_mean_ms"] <= 60 and r.prediction_one_less["tbt_mean_ms"] > 60


def test_sensitivity_matches_finite_differences():
    rows = sensitivity("sac-testbed", "cxl", "tbt", context=131072)
    el = dict((n, e) for n, e, _, _ in rows)
    assert abs(el["t_graph_kernel"]) > 0.1 and rows == sorted(rows, key=lambda r: -abs(r[1]))
    f = lambda v: float(symbolic("cxl", "tbt", "sac-testbed", free=("t_graph_kernel",), context=131072, output=1024).subs(  # noqa
        sp.Symbol("t_graph_kernel", positive=True), v))
    t0 = next(v for n, _, v, _ in rows if n == "t_graph_kernel")
    fd = (math.log(f(t0 * 1.001)) - math.log(f(t0 / 1.001))) / (2 * math.log(1.001))
    assert el["t_graph_kernel"] == pytest.approx(fd, rel=1e-4)


def test_loaded_sensitivity_ranks_the_cxl_device_for_sac():
    from sacmodel.planning.sensitivity import sensitivity_loaded
    rows = sensitivity_loaded("sac-testbed", "cxl", "tbt_mean_ms", context=131072, output=256, concurrency=64,
                              params=["node:cxl_device.bandwidth", "node:rdma_nic.rate", "link:gpu.latency"])
    el = {n: e for n, e, _, _ in rows}
    assert el["node:cxl_device.bandwidth"] < -0.05 and el["node:rdma_nic.rate"] == 0.0
    assert rows[0][0] == "node:cxl_device.bandwidth"


def test_vectorised_sweep_equals_pointwise():
    ctx = np.array([8192.0, 65536.0, 262144.0])
    bw = np.array([5e9, 20e9])
    cols = sweep("sac-testbed", "cxl", {"context": ctx, "sw_bw": bw}, "tbt")
    assert len(cols["tbt"]) == 6
    for L, b, v in zip(cols["context"], cols["sw_bw"], cols["tbt"]):
        e = symbolic("cxl", "tbt", "sac-testbed", free=("sw_bw",), context=L, output=1024)
        assert v == pytest.approx(float(e.subs(sp.Symbol("sw_bw", positive=True), b)), rel=1e-12)
    wm = winner_map("sac-testbed", ["cxl", "dram"], "tbt", ("context", ctx), ("sw_bw", bw))
    assert wm["winner"].shape == (3, 2)


def test_a_sweep_point_the_configuration_cannot_take_is_an_infeasible_row():
    """A point past the model's positions is an infeasible row; more devices than the file lists are added."""
    rows = sweep_predict("sac-testbed", "cxl", {"context": [16384, 196608], "cxl_devices": [2, 3]},
                         fixed={"output": 64, "concurrency": 8}, workers=1, progress=False)
    ok = [(r["context"], r["config"]["cxl_devices"]) for r in rows if r["feasible"]]
    assert ok == [(16384, 2), (16384, 3)]        # a third device is a planned addition (issue 22), not an error
    bad = {(r["context"], r["config"]["cxl_devices"]): r["limit"] for r in rows if not r["feasible"]}
    assert "maximum position" in bad[(196608, 2)] and "maximum position" in bad[(196608, 3)]
    assert all(r["success_fraction"] == 0.0 and r["tbt_mean_ms"] is None for r in rows if not r["feasible"])


def test_full_predict_sweeps_local_processes_and_dask():
    grid = {"context": [16384, 65536], "concurrency": [8, 16]}
    serial = sweep_predict("sac-testbed", "cxl", grid, fixed={"output": 128}, workers=1)
    par = sweep_predict("sac-testbed", "cxl", grid, fixed={"output": 128}, workers=2)
    assert [r["tbt_mean_ms"] for r in serial] == [r["tbt_mean_ms"] for r in par]
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        dask = sweep_predict("sac-testbed", "cxl", grid, fixed={"output": 128}, scheduler=cluster.scheduler_address)
    assert [r["tbt_mean_ms"] for r in dask] == [r["tbt_mean_ms"] for r in serial]


def test_solver_cli_commands(capsys, tmp_path):
    assert main(["expr", "--system", "cxl", "--metric", "e2e", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "O" in d["plain"] and "\\" in d["latex"]
    assert main(["breakeven", "--a", "cxl", "--b", "cxl-prefetch", "--metric", "e2e", "--vary", "pf_dma_bw",
                 "--lo", "1 GB/s", "--hi", "1 TB/s", "--context", "128K", "--output", "16K", "--unloaded", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "symbolic"
    out = tmp_path / "s.csv"
    assert main(["sweep", "--system", "dram", "--grid", "context=8K:256K:5", "--grid", "t_graph_kernel=4 us,8 us",
                 "--csv", str(out)]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 10 and set(rows[0]) == {"context", "t_graph_kernel", "tbt_unloaded_s"}
    assert main(["plan", "--system", "cxl", "--context", "32K", "--slo", "tbt_mean_ms=75", "--max", "4",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["found"]
    assert main(["sensitivity", "--system", "rdma", "--context", "64K", "--json", "--plot",
                 str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").stat().st_size > 1000
    assert main(["breakeven", "--a", "cxl", "--b", "dram", "--metric", "e2e", "--vary", "context", "--lo", "9",
                 "--hi", "3"]) == 2


def test_breakeven_over_topk_and_page_granular_rdma_topk():
    be = breakeven("sac-testbed", "cxl", "dram", metric="tbt", vary="topk", lo=64, hi=2048, points=6,
                   context=65536, output=64)
    assert not be.found and be.winner == "dram"        # CXL gathers are never faster than DRAM ones
    small = evaluate("sac-testbed", "cxl", "tbt", "topk", 256, context=65536, output=64)
    large = evaluate("sac-testbed", "cxl", "tbt", "topk", 2048, context=65536, output=64)
    assert small < large


def test_rdma_topk_page_granularity_moves_whole_pages():
    import copy

    from sacmodel.hardware.scenarios import as_topology
    from sacmodel.hardware.topology import Param
    t = copy.deepcopy(as_topology("sac-testbed"))
    entry = predict(t, "rdma-topk", context=131072, output=64, concurrency=8)
    t.serving["rdma_topk_granularity"] = Param(float("nan"), "test", "page")
    page = predict(t, "rdma-topk", context=131072, output=64, concurrency=8)
    assert page.tbt_mean_ms > entry.tbt_mean_ms     # random misses: a 64-token page per missed entry
