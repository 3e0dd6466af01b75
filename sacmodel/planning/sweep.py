"""Sweeps: a metric over a grid (vectorised closed forms, or the serving engine at every point), and the map
of which system wins over two parameters.
"""
from __future__ import annotations

import itertools
import math
import os

import numpy as np
import sympy as sp

from ..serving.config import ConfigError
from ..serving.predict import predict
from ..serving.systems import check_system
from ..util.names import HIGHER_IS_BETTER, LIMITS, kind_of
from ..util.progress import track
from .closed_forms import _check_vary, evaluate, mean_misses_grid, symbolic
from .common import WORKLOAD_SYMBOLS, SolverError, _finite_array, _metric_kind, _positive_tokens, _topology, _with_value

_LAMBDAS: dict = {}


def sweep(scenario, system: str, grid: dict, metric: str = "tbt", *, context=None, output=1024,
          **resources) -> dict[str, np.ndarray]:
    """Vectorised unloaded ``metric`` over the Cartesian product of ``grid`` (name -> array of values).

    Grid names are symbols of the closed form (``context``/``L``, ``output``/``O``, ``sw_bw``, ``hbm_bw``,
    ``t_graph_kernel``, ...); ``output`` (default 1024) matters through the context a decode step sees. Returns
    columns: one per grid name plus ``metric`` (seconds or bytes).
    """
    if not isinstance(grid, dict) or not grid:
        raise SolverError("grid must be a non-empty dict of name -> values")
    names = list(grid)
    syms = [WORKLOAD_SYMBOLS.get(n, n) for n in names]
    ctx = None if "L" in syms else _positive_tokens("context", context, required=False)
    out_ = None if "O" in syms else _positive_tokens("output", output)
    if ctx is None and "L" not in syms:
        raise SolverError("give context= or put 'context' in the grid")
    axes = [_finite_array(n, grid[n], positive=kind_of(n) not in ("time", "number")) for n in names]
    size = math.prod(len(x) for x in axes)
    if size > LIMITS["sweep_points"]:
        raise SolverError(f"the grid has {size:,} points; at most {LIMITS['sweep_points']:,} per sweep "
                          "(a documented limit: split it)")
    topo = _topology(scenario)
    expr = symbolic(system, metric, topo, free=tuple(syms), context=ctx, output=out_, **resources)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = {n: m.ravel() for n, m in zip(names, mesh)}
    args = [cols[n] for n in names]
    if sp.Symbol("m_mean", positive=True) in expr.free_symbols:     # context or output in the grid
        L_ = cols[names[syms.index("L")]] if "L" in syms else ctx
        O_ = cols[names[syms.index("O")]] if "O" in syms else out_
        f = _lambdify(expr, tuple(syms) + ("m_mean",))
        val = f(*args, mean_misses_grid(topo, system, L_, O_, **resources))
    else:
        f = _lambdify(expr, tuple(syms))
        val = f(*args)
    cols[metric] = np.broadcast_to(np.asarray(val, dtype=float), (mesh[0].size,)).copy()
    return cols


def _lambdify(expr, names):
    key = (sp.srepr(expr), names)
    if key not in _LAMBDAS:
        _LAMBDAS[key] = sp.lambdify([sp.Symbol(n, positive=True) for n in names], expr, modules="numpy")
    return _LAMBDAS[key]


def _predict_point(args):
    """One point of a full sweep; a point the configuration cannot take (a context beyond the model's
    positions, more CXL devices than the scenario has...) is an infeasible row with the reason, not an abort."""
    scenario, system, kw = args
    try:
        p = predict(scenario, system, **kw)
    except ConfigError as exc:
        from ..serving.predict import Prediction, output_spec
        lo, hi = output_spec(kw.get("output", 1024))
        n = kw.get("requests") or 8 * kw.get("concurrency", 1)
        p = Prediction(system, getattr(scenario, "name", str(scenario)), kw.get("context", 0),
                       hi if lo == hi else (lo, hi), kw.get("concurrency", 1), n, False, str(exc),
                       success_fraction=0.0, config={k: v for k, v in kw.items() if k not in ("context", "output")})
    return p.to_dict()


def sweep_predict(scenario, system: str, grid: dict, *, fixed: dict | None = None, workers: int | None = None,
                  scheduler: str | None = None, progress: bool = True) -> list[dict]:
    """Full ``predict`` over the Cartesian product of ``grid`` (workload/resource arguments).

    Runs on all local cores (processes) with a progress bar, or on a Dask cluster when ``scheduler``
    (``tcp://host:port``) is given. Returns one Prediction dict per point, in grid order.
    """
    names = list(grid)
    bad = [n for n in names if n not in ("context", "output", "concurrency", "requests", "rate", "cxl_devices",
                                         "rdma_nics", "device_buffer")]
    if bad:
        raise SolverError(f"a full sweep varies predict() arguments (context, output, concurrency, requests, "
                          f"rate, cxl_devices, rdma_nics, device_buffer), not {', '.join(bad)}; vary hardware "
                          "numbers with the vectorised sweep or breakeven")
    size = math.prod(len(grid[n]) for n in names)
    if size > LIMITS["predictions"]:
        raise SolverError(f"the grid has {size:,} points; at most {LIMITS['predictions']:,} predictions per full "
                          "sweep (a documented limit)")
    combos = [dict(zip(names, vals)) for vals in itertools.product(*[list(grid[n]) for n in names])]
    topo = _topology(scenario)
    jobs = [(topo, system, {**(fixed or {}), **{k: (int(v) if k != "rate" else float(v)) for k, v in c.items()}})
            for c in combos]
    if scheduler:
        try:
            from dask.distributed import Client
        except ImportError:
            raise SolverError("--scheduler needs dask.distributed: pip install 'sacmodel[dask]'") from None
        with Client(scheduler, timeout="10s") as client:
            futures = client.map(_predict_point, jobs, pure=False)
            return client.gather(futures)
    workers = workers or os.cpu_count() or 1
    label = f"predict {system}"
    if workers == 1 or len(jobs) < 8:
        return [_predict_point(j) for j in (track(jobs, label) if progress else jobs)]
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(workers) as ex:
        results = ex.map(_predict_point, jobs, chunksize=max(1, len(jobs) // (8 * workers)))
        return list(track(results, label, total=len(jobs)) if progress else results)


def winner_map(scenario, systems, metric: str, x: tuple[str, np.ndarray], y: tuple[str, np.ndarray],
               **fixed) -> dict:
    """Which system has the best ``metric`` at every (x, y) grid point.

    An unloaded metric (``tbt``, ``ttft``, ``e2e``...: one request alone) is evaluated by vectorised sweeps of
    its closed form; a loaded one (``tbt_mean_ms``...: a Prediction field) by ``predict`` at every point with
    the ``fixed`` workload (give ``concurrency``). ``winner`` holds indices into ``systems``, -1 where no
    system is feasible; ``values`` the metric per system (nan where infeasible).
    """
    if isinstance(systems, str) or not systems:
        raise SolverError("systems must be a non-empty list of system names")
    for s in systems:
        check_system(s)
    kind = _metric_kind(metric)
    (xn, xv), (yn, yv) = x, y
    xv = _finite_array(xn, xv, positive=kind_of(xn) not in ("time", "number"))
    yv = _finite_array(yn, yv, positive=kind_of(yn) not in ("time", "number"))
    cells = len(xv) * len(yv)
    limit = LIMITS["map_cells"] if kind == "unloaded" else LIMITS["predictions"] // len(systems)
    if cells > limit:
        raise SolverError(f"the map has {cells:,} cells; at most {limit:,} for {len(systems)} {kind} systems "
                          "(a documented limit)")
    topo = _topology(scenario)
    vals = []
    for s in systems:
        if kind == "unloaded":
            v = sweep(topo, s, {xn: xv, yn: yv}, metric, **fixed)[metric]
        else:
            v = _loaded_grid(topo, s, metric, (xn, xv), (yn, yv), fixed)
        vals.append(np.asarray(v, dtype=float).reshape(len(xv), len(yv)))
    arr = np.stack(vals)
    ok = np.isfinite(arr)
    pick = np.where(ok, arr, -np.inf if metric in HIGHER_IS_BETTER else np.inf)
    best = np.argmax(pick, axis=0) if metric in HIGHER_IS_BETTER else np.argmin(pick, axis=0)
    best = np.where(ok.any(axis=0), best, -1)
    return {"x": xv, "y": yv, "winner": best, "systems": list(systems), "values": arr, "kind": kind}


def _loaded_grid(topo, system, metric, x, y, fixed) -> list[float]:
    """``predict`` at every (x, y) point (x-major), nan where infeasible."""
    (xn, xv), (yn, yv) = x, y
    _check_vary(topo, xn)
    _check_vary(topo, yn)
    out = []
    for xi, yi in track(list(itertools.product(xv, yv)), f"winner map: {system}"):
        t, kw = _with_value(topo, xn, xi)
        t, kw2 = _with_value(t, yn, yi)
        out.append(evaluate(t, system, metric, **{**fixed, **kw, **kw2}))
    return out
