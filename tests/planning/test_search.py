"""The searches that reuse work (issue 34): the grid scan finds the sign changes a full scan finds with fewer
evaluations, a loaded break-even by the scan equals the one over every grid point, a parameter that moves no
number a prediction reads is recognised, and each search counts its predictions."""
import math

import numpy as np
import pytest

import sacmodel.planning.breakeven as breakeven_mod
from sacmodel.planning.search import Tally, scan, tally_line
from sacmodel.planning.sensitivity import reads


def full_changes(v: np.ndarray) -> list[int]:
    """Grid intervals (i, i + 1) where a full scan sees a sign change or a feasibility edge."""
    return [i for i in range(len(v) - 1)
            if math.isfinite(v[i]) != math.isfinite(v[i + 1]) or
            (math.isfinite(v[i]) and math.isfinite(v[i + 1]) and v[i] * v[i + 1] <= 0)]


def scanned_changes(known: dict) -> list[int]:
    """The grid intervals (i, i + 1) with both ends evaluated where the scan sees a change."""
    return [i for i in sorted(known) if i + 1 in known and full_changes(np.array([known[i], known[i + 1]]))]


@pytest.mark.parametrize("roots", [[13.3], [5.5, 40.2], [2.2, 30.7, 41.1]])
def test_scan_locates_every_sign_change_with_fewer_evaluations(roots):
    """f(i) = prod(i - r): a full scan of 48 points sees a change in each interval holding a root; the scan
    without a hint (bisection from every 16th point) finds the same intervals, as does the scan with a hint
    that is off by a constant (the correction takes it out)."""
    n = 48
    f = lambda i: float(np.prod([i - r for r in roots]))  # noqa: E731
    v = np.array([f(i) for i in range(n)])
    want = full_changes(v)
    assert len(want) == len(roots)
    for hint in (None, v + 0.5 * np.abs(v).max() * 0.01, v * 1.3):
        calls = []
        known = scan(n, lambda i: calls.append(i) or f(i), hint)
        assert scanned_changes(known) == want
        assert len(calls) == len(set(calls)) < n          # each index once, not every index
    known = scan(n, f, v * 1.3)
    assert len(known) <= 4 + 2 * len(roots)              # the hint's brackets: the guard points and two per root


def test_scan_finds_a_feasibility_edge():
    """nan beyond index 30 (infeasible): the scan narrows the edge to (30, 31) as a full scan sees it."""
    f = lambda i: 1.0 if i <= 30 else math.nan  # noqa: E731
    known = scan(48, f)
    assert 30 in known and 31 in known and known[30] == 1.0 and math.isnan(known[31])


def test_loaded_breakeven_by_the_scan_equals_every_grid_point(monkeypatch):
    """A stub loaded metric with a known crossing: a(x) = x, b = 1000 (a crosses 1.1 x b at x = 1100); the
    analytic estimate is off by 3%. The scan's answer equals the one over the whole grid, with far fewer engine
    evaluations, and the counts say how many of each ran."""
    def fake_evaluate(topo, system, metric, vary, value, method="engine", **fixed):
        v = float(value) if system == "cxl" else 1000.0
        return v * (1.03 if method == "analytic" else 1.0)
    monkeypatch.setattr(breakeven_mod, "evaluate", fake_evaluate)
    kw = dict(metric="tbt_mean_ms", vary="t_graph_kernel", lo=100.0, hi=5000.0, ratio=1.1, context=32768, output=64)
    full = breakeven_mod.breakeven("sac-testbed", "cxl", "dram", curve=True, **kw)
    fast = breakeven_mod.breakeven("sac-testbed", "cxl", "dram", **kw)
    assert full.values == pytest.approx([1100.0], rel=1e-3) and fast.values == pytest.approx([1100.0], rel=1e-3)
    assert (fast.winner_below, fast.winner_above) == (full.winner_below, full.winner_above) == ("cxl", "dram")
    assert full.predictions["analytic"] == 0 and full.predictions["engine"] >= 96
    assert fast.predictions["engine"] < full.predictions["engine"] / 2 and fast.predictions["analytic"] > 0
    assert set(fast.curve["x"]) < set(full.curve["x"])


def test_tally_line_names_what_ran():
    t = Tally()
    t.add("engine", 14)
    t.add("analytic", 30)
    assert t.line() == "predictions: 14 engine, 30 analytic"
    assert tally_line({"closed_form": 3}) == "predictions: 3 closed form" and tally_line({}) == "predictions: none"


def test_reads_see_a_binding_number_and_not_an_idle_one():
    """The numbers a cxl prediction reads move with the GPU's HBM bandwidth (in every step) and not with the
    host DRAM's (its entries come from the CXL devices) nor with a PCIe link's that binds no route; an unknown
    route-cache key leaves nothing concluded."""
    import copy

    from sacmodel.hardware.params import get_param, set_param
    from sacmodel.hardware.scenarios import load_topology
    from sacmodel.serving.predict import predict
    topo = load_topology("sac-testbed")
    wl = dict(context=32768, output=64, concurrency=8, draws=1)
    probe = copy.deepcopy(topo)
    probe._routes.clear()
    predict(probe, "cxl", **wl)
    keys = [k for k in probe._routes if k != ("miss curves",)]
    base = reads(copy.deepcopy(topo), "cxl", wl, keys)

    def moved(name):
        t = copy.deepcopy(topo)
        set_param(t, name, get_param(topo, name) * 1.01)
        return reads(t, "cxl", wl, keys)
    assert base is not None
    assert moved("node:gpu.hbm_bandwidth") != base
    assert moved("node@dram0.bandwidth") == base and moved("link@rc0->gpu_s0[1].bandwidth") == base
    assert reads(copy.deepcopy(topo), "cxl", wl, keys + [("unknown kind", 1)]) is None


def test_loaded_winner_map_decides_between_agreeing_points(monkeypatch):
    """Stub loaded metric: cxl's TBT is x + y, dram's is 12 (dram wins where x + y > 12), the analytic estimate
    3% high for both. The map decided from every other point and the estimate equals the map of every point,
    with fewer engine evaluations; a cell next to the boundary runs the engine."""
    import sacmodel.planning.sweep as sweep_mod

    def fake_evaluate(topo, system, metric, method="engine", **kw):
        v = kw["context"] / 1000 + kw["output"] / 1000 if system == "cxl" else 12.0
        return v * (1.03 if method == "analytic" else 1.0)
    monkeypatch.setattr(sweep_mod, "evaluate", fake_evaluate)
    grid = (("context", np.arange(1, 10) * 1000.0), ("output", np.arange(1, 10) * 1000.0))
    every = sweep_mod.winner_map("sac-testbed", ["cxl", "dram"], "tbt_mean_ms", *grid, values=True, concurrency=8)
    fast = sweep_mod.winner_map("sac-testbed", ["cxl", "dram"], "tbt_mean_ms", *grid, concurrency=8)
    assert fast["winner"].tolist() == every["winner"].tolist()
    assert every["predictions"]["engine"] == 2 * 81
    assert fast["predictions"]["engine"] < every["predictions"]["engine"] * 0.75
    assert {0, 1} == set(fast["winner"].ravel().tolist())
