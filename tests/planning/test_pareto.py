"""Issue 22, item 6: the throughput-per-GPU vs interactivity frontier (sacmodel.pareto)."""
import math

import numpy as np
import pytest

import sacmodel
from sacmodel.planning.common import SolverError
from sacmodel.planning.pareto import dp_choices, pareto, pareto_front, with_dp
from sacmodel.serving.config import resolve


def dominates(a, b) -> bool:
    """Point a = (x, y) dominates b: at least as good on both axes (maximised), better on one."""
    return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])


def check_dominance_law(xy, valid, on):
    """No frontier point is dominated by a valid point; every valid point off it is dominated by one on it."""
    good = [i for i in range(len(xy)) if valid[i] and all(map(math.isfinite, xy[i]))]
    for i in good:
        if on[i]:
            assert not any(dominates(xy[j], xy[i]) for j in good), f"frontier point {i} {xy[i]} is dominated"
        else:
            assert any(on[j] and dominates(xy[j], xy[i]) for j in good), f"point {i} {xy[i]} is off the frontier " \
                                                                          "but no frontier point dominates it"
    assert not any(on[i] for i in range(len(xy)) if i not in good)


def test_frontier_of_a_hand_computed_set():
    #        A       B       C       D       E       F (= C)  G       H         I (NaN)       J (invalid)  K
    pts = [(1, 5), (2, 4), (3, 3), (4, 1), (2, 2), (3, 3), (1, 4), (4, 0.5), (5, math.nan), (6, 0), (0.5, 6)]
    valid = [True] * 9 + [False, True]
    on = pareto_front([p[0] for p in pts], [p[1] for p in pts], valid)
    # E is dominated by B and C, G by A, H by D; I has no throughput, J did not complete; C and F tie
    assert on.tolist() == [True, True, True, True, False, True, False, False, False, False, True]
    check_dominance_law(pts, valid, on)


@pytest.mark.parametrize("seed", range(6))
def test_dominance_law_on_random_sets_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = 60
    x, y = rng.integers(0, 8, n).astype(float), rng.integers(0, 8, n).astype(float)   # many ties
    valid = rng.random(n) > 0.2
    on = pareto_front(x, y, valid)
    check_dominance_law(list(zip(x, y)), valid, on)
    assert on.any()


def test_frontier_input_errors():
    with pytest.raises(SolverError):
        pareto_front([1, 2], [1])
    assert pareto_front([], []).tolist() == []


@pytest.fixture(scope="module")
def small():
    return pareto("sac-testbed", ["cxl", "dram", "rdma"], context=32768, output=256, concurrencies=[8, 64],
                  cxl_devices=[1, 2], dp=[4, 8], draws=1)


def test_every_configuration_is_predicted_and_marked(small):
    # cxl: 2 concurrencies x 2 devices x 2 dp; dram and rdma: 2 x 2
    assert len(small.points) == 8 + 4 + 4
    assert {(p.system, p.cxl_devices) for p in small.points} >= {("cxl", 1), ("cxl", 2), ("dram", None)}
    xy = [(p.tok_s_per_user, p.tok_s_per_gpu) for p in small.points]
    check_dominance_law(xy, [p.feasible for p in small.points], [p.on_frontier for p in small.points])
    for s in ("cxl", "dram", "rdma"):
        mine = [p for p in small.points if p.system == s]
        check_dominance_law([(p.tok_s_per_user, p.tok_s_per_gpu) for p in mine], [p.feasible for p in mine],
                            [p.on_system_frontier for p in mine])
    # a point no configuration beats is beaten by none of its own system either
    assert all(p.on_system_frontier for p in small.points if p.on_frontier)
    assert small.frontier and [p.tok_s_per_user for p in small.frontier] == \
        sorted(p.tok_s_per_user for p in small.frontier)


def test_axes_are_the_benchmarks_and_points_reproduce_with_predict(small):
    p = next(q for q in small.points if q.system == "cxl" and q.dp == 4 and q.cxl_devices == 1 and q.concurrency == 64)
    assert p.gpus == p.tp == 8
    assert p.tok_s_per_user == pytest.approx(1000.0 / p.tbt_mean_ms)
    assert p.tok_s_per_gpu == pytest.approx(p.output_throughput_tok_s / 8)
    settings = {k: v for k, v in p.settings.items() if k != "dp"}
    q = sacmodel.predict(with_dp("sac-testbed", p.dp), "cxl", concurrency=p.concurrency, draws=1, **settings,
                         **{k: v for k, v in p.workload.items() if k != "concurrency"})
    assert q.tbt_mean_ms == p.tbt_mean_ms and q.output_throughput_tok_s == p.output_throughput_tok_s


def test_json_form_names_the_axes_and_the_frontier(small):
    d = small.to_dict()
    assert "1000 / tbt_mean_ms" in d["x"] and "/ gpus" in d["y"]
    assert [d["points"][i]["on_frontier"] for i in d["frontier"]] == [True] * len(small.frontier)


def test_with_dp_keeps_the_gpus_and_rescales_the_chunk():
    base = resolve("sac-testbed", "gpu")
    t = with_dp("sac-testbed", 2)
    cfg = resolve(t, "gpu")
    assert (cfg.dp, cfg.tp) == (2, base.tp) and cfg.prefill_chunk == base.prefill_chunk * base.dp // 2
    assert t.param("mem_fraction") == 0.85                    # given on the testbed's launch line: kept
    built = sacmodel.scenario("h200", dp=8)
    mf8 = built.param("mem_fraction")
    mf1 = with_dp(built, 1).param("mem_fraction")             # SGLang's default: recomputed for dp 1
    assert mf1 > mf8 and mf1 == sacmodel.scenario("h200", dp=1).param("mem_fraction")
    assert resolve(with_dp(built, 1), "gpu").prefill_chunk == resolve(sacmodel.scenario("h200"), "gpu").prefill_chunk
    assert dp_choices("sac-testbed") == [1, 2, 4, 8]
    assert dp_choices(sacmodel.scenario("h100", model="qwen3-32b", gpus=2, weights="bf16")) == [1]
    with pytest.raises(SolverError, match="divide tp=8"):
        with_dp("sac-testbed", 3)


@pytest.mark.parametrize("kw,match", [
    (dict(systems=["nope"]), "unknown system"),
    (dict(systems=[]), "at least one system"),
    (dict(systems=["cxl"], concurrencies=[0]), "concurrency must be whole numbers"),
    (dict(systems=["cxl"], dp=[3]), "divide tp=8"),
    (dict(systems=["cxl"], cxl_devices=0), "cxl_devices must be whole numbers"),
    (dict(systems=["cxl"], dp=[]), "at least one value"),
    (dict(systems=["cxl"], concurrencies=3.5), "a whole number or a list"),
    (dict(systems=["cxl"], context="32K"), "context must be a positive number"),
    (dict(systems=["cxl"], concurrencies=list(range(1, 2001)), dp=[1, 2, 4, 8], cxl_devices=[1, 2]), "at most"),
])
def test_bad_questions_get_one_clear_error(kw, match):
    kw = {"context": 32768, **kw}
    systems = kw.pop("systems")
    with pytest.raises(ValueError, match=match):        # SolverError, or the library's unknown-system error
        pareto("sac-testbed", systems, **kw)


def test_a_pool_system_needs_its_pool():
    with pytest.raises(SolverError, match="needs a cxl pool"):
        pareto(sacmodel.scenario("h200"), ["cxl"], context=8192, concurrencies=[8])


def test_a_point_whose_users_waited_in_the_queue_is_never_on_the_frontier():
    """A queued point's TBT is that of the fewer users served at once (its wait is in its TTFT): it neither
    joins nor shapes the frontier. By hand: a queued point beating both others on both axes; off it, the two
    served points are on it (neither beats the other)."""
    from sacmodel.planning.pareto import ParetoPoint, _mark

    def pt(x, y, queued):
        return ParetoPoint("cxl", 64, 8, 8, 8, 2, None, True, 1.0, None, x, y, 100.0, 120.0, 1000.0 / x, 5000.0,
                           8 * y, queued=queued)
    points = [pt(50.0, 100.0, True), pt(20.0, 80.0, False), pt(40.0, 30.0, False)]
    _mark(points)
    assert [p.on_frontier for p in points] == [False, True, True]
    assert [p.on_system_frontier for p in points] == [False, True, True]
