"""Behaviours pinned with independent expectations (issue 9, "Tests that would not notice a bug").

Each test would fail on the planted one-line bug named in its docstring: the expectation is a hand-computed
case, a known root or a stub model with a known answer, never the library's own arithmetic restated.
"""
import math
from dataclasses import asdict, dataclass

import numpy as np
import pytest
import sympy as sp
import yaml

import sacmodel.planning.breakeven as breakeven_mod
import sacmodel.planning.plan as plan_mod
import sacmodel.planning.sensitivity as sensitivity_mod
import sacmodel.planning.sweep as sweep_mod
from sacmodel.hardware.scenarios import load_topology
from sacmodel.hardware.topology import max_min_share
from sacmodel.planning.breakeven import breakeven
from sacmodel.planning.plan import configuration_cost, max_load
from sacmodel.planning.sensitivity import sensitivity_loaded
from sacmodel.planning.sweep import winner_map
from sacmodel.serving.reference import attention, indexer_scores, select_topk

GB = 1e9


# ---- topology: per-flow cap ------------------------------------------------------------------------------
def chain(per_flow=("10 GB/s", "30 GB/s"), capacity="100 GB/s", gpus=1):
    """A GPU (or group) -> rc -> sw -> dram chain whose two upper links carry per-flow caps."""
    num = lambda v: {"value": v, "source": "test"}  # noqa: E731
    gpu = {"id": "g", "kind": "gpu", "count": gpus, "hbm_capacity": num("80 GB"), "hbm_bandwidth": num("3 TB/s"),
           "flops_bf16": num("900 TFLOP/s"), "flops_fp8": num("1800 TFLOP/s")}
    return load_topology({
        "schema_version": 1, "name": "chain", "model": "deepseek-v3.2",
        "nodes": [gpu, {"id": "rc", "kind": "cpu_root_complex"}, {"id": "sw", "kind": "pcie_switch"},
                  {"id": "mem", "kind": "host_dram", "capacity": num("1 TB"), "bandwidth": num("1000 GB/s"),
                   "latency": num("100 ns")}],
        "links": [{"from": "g", "to": "rc", "protocol": "pcie5", "bandwidth": num(capacity)},
                  {"from": "rc", "to": "sw", "protocol": "pcie5", "bandwidth": num(capacity),
                   "per_flow_bandwidth": num(per_flow[0])},
                  {"from": "sw", "to": "mem", "protocol": "ddr5", "bandwidth": num(capacity),
                   "per_flow_bandwidth": num(per_flow[1])}],
        "pools": {"dram": ["mem"]}})


def test_per_flow_cap_is_the_smallest_on_the_path():
    """Bug caught: the per-flow cap taking the max (30 GB/s) of the path's caps instead of the min."""
    t = chain()
    path = t.route("mem", "g")
    assert t.flow_cap(path) == 10 * GB and t.bottleneck(path) == 10 * GB
    assert max_min_share(t, [("mem", "g")]) == pytest.approx([10 * GB])
    assert chain(per_flow=("30 GB/s", "10 GB/s")).flow_cap(path) == 10 * GB     # order does not matter


def test_per_flow_cap_and_shared_capacity_hand_computed():
    """Two GPUs share the 25 GB/s links: with a 10 GB/s cap each gets 10; with a 20 GB/s cap the link binds
    and each gets 12.5; with a 5 GB/s demand on one, the other takes the rest up to its cap (20)."""
    flows = [("mem", "g[0]"), ("mem", "g[1]")]
    assert max_min_share(chain(("10 GB/s", "40 GB/s"), "25 GB/s", 2), flows) == pytest.approx([10 * GB, 10 * GB])
    assert max_min_share(chain(("20 GB/s", "40 GB/s"), "25 GB/s", 2), flows) == pytest.approx([12.5 * GB] * 2)
    t = chain(("20 GB/s", "40 GB/s"), "25 GB/s", 2)
    assert max_min_share(t, [("mem", "g[0]", 5 * GB), ("mem", "g[1]")]) == pytest.approx([5 * GB, 20 * GB])


# ---- breakeven: roots ------------------------------------------------------------------------------------
def stub_closed_forms(monkeypatch, forms):
    """Replace the closed forms the solver builds with ``forms`` (system -> sympy expression in the varied
    symbol): the solver's root finding then runs on functions with known roots."""
    monkeypatch.setattr(breakeven_mod, "_free_form", lambda system, metric, topo, name, fx, res: forms[system])


def test_breakeven_returns_the_first_root_numeric(monkeypatch):
    """Bug caught: returning the last root. f_a - f_b = (x - 3)(x - 7) has roots 3 and 7 in [1, 10]."""
    x = sp.Symbol("t_graph_kernel", positive=True)
    stub_closed_forms(monkeypatch, {"cxl": (x - 3) * (x - 7) + 10, "dram": sp.Integer(10)})
    monkeypatch.setattr(breakeven_mod, "_symbolic_roots", lambda *args: None)     # the numeric path (brentq)
    be = breakeven("sac-testbed", "cxl", "dram", metric="tbt", vary="t_graph_kernel", lo=1.0, hi=10.0, points=40,
                   context=32768, output=64)
    assert be.method == "numeric" and be.found
    assert be.value == pytest.approx(3.0, abs=1e-6) and be.values == pytest.approx([3.0, 7.0], abs=1e-6)
    assert (be.winner_below, be.winner_above) == ("dram", "cxl")   # below 3 cxl's metric is higher (worse)


def test_breakeven_symbolic_roots_filtered_to_the_range(monkeypatch):
    """Bug caught: symbolic roots not filtered to [lo, hi]. The difference x^3 - 27x^2 + 150x - 200 =
    (x - 2)(x - 5)(x - 20): in [1, 10] the roots are 2 and 5, never 20."""
    x = sp.Symbol("t_graph_kernel", positive=True)
    stub_closed_forms(monkeypatch, {"cxl": x**3 - 27 * x**2 + 150 * x, "dram": sp.Integer(200)})
    be = breakeven("sac-testbed", "cxl", "dram", metric="tbt", vary="t_graph_kernel", lo=1.0, hi=10.0,
                   context=32768, output=64)
    assert be.method == "symbolic" and be.values == pytest.approx([2.0, 5.0]) and be.value == pytest.approx(2.0)
    wide = breakeven("sac-testbed", "cxl", "dram", metric="tbt", vary="t_graph_kernel", lo=1.0, hi=30.0,
                     context=32768, output=64)
    assert wide.values == pytest.approx([2.0, 5.0, 20.0])
    narrow = breakeven("sac-testbed", "cxl", "dram", metric="tbt", vary="t_graph_kernel", lo=6.0, hi=19.0,
                       context=32768, output=64)
    assert not narrow.found and narrow.winner == "cxl"    # (x-2)(x-5)(x-20) < 0 on [6, 19]: cxl is lower


def test_breakeven_discrete_bisection_is_not_off_by_one(monkeypatch):
    """Bug caught: an off-by-one root in the integer bisection. f_a(n) = n, f_b = 10.5 (a loaded metric):
    a first exceeds b at n = 11, the first integer on the other side."""
    def fake_evaluate(topo, system, metric, vary, value, **fixed):
        return float(value) if system == "cxl" else 10.5
    monkeypatch.setattr(breakeven_mod, "evaluate", fake_evaluate)
    for points in (4, 7, 48):
        be = breakeven("sac-testbed", "cxl", "dram", metric="tbt_mean_ms", vary="concurrency", lo=1, hi=40,
                       points=points, context=32768, output=64)
        assert be.found and be.values == [11.0], points
        assert (be.winner_below, be.winner_above) == ("cxl", "dram")


# ---- max_load --------------------------------------------------------------------------------------------
@dataclass
class FakePrediction:
    feasible: bool
    tbt_mean_ms: float
    output_throughput_tok_s: float = 1.0
    success_fraction: float = 1.0           # every request completes (plan refuses part-failing answers)

    def to_dict(self):
        return asdict(self)


def test_max_load_returns_the_last_passing_value(monkeypatch):
    """Bug caught: returning the first failing value. TBT = 10 + n ms against an SLO of 50.5 ms: n = 40
    is the last concurrency that passes, 41 the first that fails."""
    seen = []

    def fake_predict(topo, system, **kw):
        seen.append(kw["concurrency"])
        return FakePrediction(True, 10.0 + kw["concurrency"])
    monkeypatch.setattr(plan_mod, "predict", fake_predict)
    r = max_load("sac-testbed", "cxl", workload={"context": 32768}, slo={"tbt_mean_ms": 50.5}, max_value=1000)
    assert r.found and r.value == 40
    assert r.prediction["tbt_mean_ms"] == 50.0 and r.prediction_one_less["tbt_mean_ms"] == 51.0
    assert len(seen) < 30                              # bisection, not a scan
    r = max_load("sac-testbed", "cxl", workload={"context": 32768}, slo={"tbt_mean_ms": 50.0}, max_value=1000)
    assert r.value == 40                               # the edge itself passes (<=)


def test_max_load_agrees_with_a_brute_force_scan():
    """On the real model: the largest concurrency within a TBT SLO, found by bisection, equals a scan."""
    workload = dict(context=32768, output=64, requests=None)
    slo = {"tbt_mean_ms": 45.0}
    from sacmodel.serving.predict import predict
    passing = [c for c in range(1, 25) if (p := predict("sac-testbed", "cxl", context=32768, output=64,
                                                          concurrency=c)).feasible and p.tbt_mean_ms <= 45.0]
    r = max_load("sac-testbed", "cxl", workload=workload, slo=slo, max_value=24)
    assert passing and passing == list(range(1, len(passing) + 1))    # monotone: bisection applies
    assert r.value == passing[-1]


# ---- loaded sensitivity ----------------------------------------------------------------------------------
def test_loaded_elasticity_of_a_power_law(monkeypatch):
    """Bug caught: an elasticity off by a factor 2. With TBT = 5 * t_graph_kernel^0.7 (and throughput = 1/TBT) the
    central log difference is exactly 0.7 (and -0.7) at any step."""
    def fake_predict(topo, system, **kw):
        tbt = 5.0 * topo.param("t_graph_kernel") ** 0.7
        return FakePrediction(True, tbt, 1.0 / tbt)
    monkeypatch.setattr(sensitivity_mod, "predict", fake_predict)
    for rel in (0.01, 0.1):
        rows = sensitivity_loaded("sac-testbed", "cxl", "tbt_mean_ms", rel=rel, params=["t_graph_kernel"],
                                  context=32768)
        assert [(n, round(e, 12)) for n, e, _, _ in rows] == [("t_graph_kernel", 0.7)]
    rows = sensitivity_loaded("sac-testbed", "cxl", "output_throughput_tok_s", params=["t_graph_kernel"], context=32768)
    assert rows[0][1] == pytest.approx(-0.7, abs=1e-12)


def test_loaded_elasticity_hand_computed_on_the_real_model():
    """The elasticity of throughput in t_graph_kernel by hand: ln ratio of two predictions / ln ratio of t_graph_kernel."""
    from sacmodel.hardware.params import with_params
    from sacmodel.hardware.scenarios import load_topology as load
    from sacmodel.serving.predict import predict
    wl = dict(context=16384, output=32, concurrency=8, requests=8, draws=16)
    t0 = load("sac-testbed").param("t_graph_kernel")
    up = predict(with_params("sac-testbed", {"t_graph_kernel": t0 * 1.05}), "dram", **wl).output_throughput_tok_s
    down = predict(with_params("sac-testbed", {"t_graph_kernel": t0 / 1.05}), "dram", **wl).output_throughput_tok_s
    by_hand = math.log(up / down) / (2 * math.log(1.05))
    rows = sensitivity_loaded("sac-testbed", "dram", "output_throughput_tok_s", rel=0.05, params=["t_graph_kernel"], **wl)
    assert -1 < by_hand < 0 and rows[0][1] == pytest.approx(by_hand, rel=1e-9)


# ---- winner map -------------------------------------------------------------------------------------------
def test_winner_map_takes_argmax_for_throughput_and_argmin_for_latency(monkeypatch):
    """Bug caught: argmin of a throughput metric. Stub sweeps: system i's value at (x, y) is known."""
    table = {"cxl": np.array([[1.0, 5.0], [3.0, 2.0]]), "dram": np.array([[2.0, 4.0], [1.0, 6.0]])}

    def fake_sweep(scenario, system, grid, metric, **fixed):
        return {metric: table[system].ravel()}
    monkeypatch.setattr(sweep_mod, "sweep", fake_sweep)
    grid = (("context", [8192, 16384]), ("output", [64, 128]))
    monkeypatch.setattr(sweep_mod, "HIGHER_IS_BETTER", sweep_mod.HIGHER_IS_BETTER | {"tbt"}, raising=True)
    hi = winner_map("sac-testbed", ["cxl", "dram"], "tbt", *grid)
    assert hi["winner"].tolist() == [[1, 0], [0, 1]]          # larger is better
    monkeypatch.setattr(sweep_mod, "HIGHER_IS_BETTER", sweep_mod.HIGHER_IS_BETTER - {"tbt"}, raising=True)
    lo = winner_map("sac-testbed", ["cxl", "dram"], "tbt", *grid)
    assert lo["winner"].tolist() == [[0, 1], [1, 0]]          # smaller is better


# ---- configuration cost -----------------------------------------------------------------------------------
def test_configuration_cost_counts_parts(tmp_path):
    """Bug caught: part counts ignored. Prices in distinct powers of ten make each count readable in the
    total: 8 GPUs, 2 (or 4) CXL devices (1 TB each), 2 adapters, 1 switch; 2 NICs and the 1 TB remote pool;
    the dram system's 2 TB host pool."""
    p = tmp_path / "prices.yaml"
    p.write_text(yaml.safe_dump({"parts": {k: {"usd_per_hour": v, "source": "test"} for k, v in {
        "gpu": 1000.0, "cxl_device": 100.0, "cxl_adapter": 10.0, "cxl_switch": 1.0, "rdma_nic": 0.1,
        "dram_gb": 1e-5}.items()}}))
    assert configuration_cost("sac-testbed", "cxl", price_table=p)["total"] == pytest.approx(8221.0)
    assert configuration_cost("sac-testbed", "cxl", cxl_devices=4, price_table=p)["total"] == pytest.approx(8421.0)
    assert configuration_cost("sac-testbed", "rdma", price_table=p)["total"] == pytest.approx(8000.2 + 0.01)
    assert configuration_cost("sac-testbed", "dram", dp=4, price_table=p)["total"] == pytest.approx(4000.02)


# ---- reference: indexer ReLU, attention scale, top-k ------------------------------------------------------------
def test_indexer_applies_relu_per_head_before_weighting():
    """Bug caught: the indexer's ReLU dropped or moved. Two heads, three keys, by hand:
    head 0 q=(1,-1): dots (1, -1, 0) -> relu (1, 0, 0) x 0.5; head 1 q=(-2,1): dots (-2, 1, -1) -> (0, 1, 0) x 3."""
    q = np.array([[1.0, -1.0], [-2.0, 1.0]])
    w = np.array([0.5, 3.0])
    keys = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(indexer_scores(q, w, keys), [0.5, 3.0, 0.0])


def test_attention_scale_is_one_over_sqrt_dk():
    """Bug caught: a changed attention scale. q=(1,0,0,0), keys (2,0,0,0) and 0, values 1 and 0, d_k = 4:
    scores (2/sqrt(4), 0) = (1, 0), so the output is e / (e + 1)."""
    q = np.array([[1.0, 0.0, 0.0, 0.0]])
    K = np.array([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    V = np.array([[1.0], [0.0]])
    np.testing.assert_allclose(attention(q, K, V), [[math.e / (math.e + 1)]], rtol=1e-12)
    masked = attention(q, K, V, mask=np.array([False, True]))
    np.testing.assert_allclose(masked, [[0.0]])


def test_select_topk_breaks_ties_by_lower_index():
    scores = np.array([0.5, 3.0, 0.0, 3.0, 1.0])
    assert select_topk(scores, 2).tolist() == [1, 3]
    assert select_topk(scores, 3).tolist() == [1, 3, 4]
    assert select_topk(np.array([1.0, 1.0, 1.0]), 2).tolist() == [0, 1]
    assert select_topk(scores, 99).tolist() == [0, 1, 2, 3, 4]
