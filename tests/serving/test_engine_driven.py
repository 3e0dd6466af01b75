"""The engine driven from outside, as a cluster drives it: requests submitted one by one as they arrive and the
clock advanced step by step give the same per-request times as one run over the whole workload."""
import math

import numpy as np
import pytest

from sacmodel.hardware.scenarios import load_topology
from sacmodel.serving.config import resolve
from sacmodel.serving.engine.loop import open_engine, run_engine
from sacmodel.serving.engine.stepmodel import Model
from sacmodel.serving.engine.workload import RequestTable, Requests


@pytest.fixture(scope="module")
def testbed():
    return load_topology("sac-testbed")


def _workload(seed: int, n: int = 40) -> Requests:
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.exponential(0.4, n).cumsum())
    ctx = rng.integers(2000, 40000, n)
    out = rng.integers(1, 300, n)
    cached = np.where(rng.random(n) < 0.5, np.floor(ctx * rng.random(n)), 0.0)
    return Requests(arrival, ctx, out, cached)


def _drive(cfg, reqs: Requests, model):
    eng = open_engine(cfg, model=model, max_output=int(reqs.output.max()))
    k = 0
    while k < len(reqs) or eng.due() < math.inf:
        nxt = reqs.arrival[k] if k < len(reqs) else math.inf
        if eng.due() < nxt:
            eng.step(nxt)
            continue
        eng.submit(nxt, int(reqs.context[k]), int(reqs.output[k]), float(reqs.cached[k]))
        k += 1
    return eng.result()


@pytest.mark.parametrize("system", ["gpu", "cxl", "dram"])
@pytest.mark.parametrize("seed", [0, 1])
def test_submitted_one_by_one_equals_one_run(testbed, system, seed):
    cfg = resolve(testbed, system)
    reqs = _workload(seed)
    model = Model(cfg)
    whole = run_engine(cfg, reqs, 1 << 30, model=model)
    driven = _drive(cfg, reqs, model)
    np.testing.assert_allclose(driven.first, whole.first, rtol=1e-12)
    np.testing.assert_allclose(driven.done, whole.done, rtol=1e-12)


def test_a_table_built_by_appends_equals_one_built_at_once(testbed):
    cfg = resolve(testbed, "cxl")
    reqs = _workload(3)
    whole = RequestTable(cfg, reqs)
    empty = RequestTable(cfg, Requests(np.zeros(0), np.zeros(0, int), np.zeros(0, int), np.zeros(0)))
    for a, L, o, c in zip(reqs.arrival, reqs.context, reqs.output, reqs.cached):
        empty.append(int(L), int(o), float(c), float(a))
    for f in ("L", "out", "todo", "hit", "long", "hold", "reserve", "life", "shape", "arrival"):
        assert getattr(empty, f) == getattr(whole, f), f
