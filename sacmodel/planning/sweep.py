"""Sweeps: a metric over a grid (vectorised closed forms, or the serving engine at every point), and the map
of which system wins over two parameters.
"""
from __future__ import annotations

import itertools
import math
import os

import numpy as np

from ..serving.config import ConfigError
from ..serving.predict import predict
from ..serving.systems import check_system
from ..util.lazy import lazy_module
from ..util.names import HIGHER_IS_BETTER, LIMITS, kind_of
from ..util.progress import track
from .closed_forms import _check_vary, evaluate, mean_misses_grid, symbolic
from .common import (EQUAL_RTOL, WORKLOAD_SYMBOLS, SolverError, _finite_array, _metric_kind, _positive_tokens, _topology,
                     _with_value)
from .search import Tally

sp = lazy_module("sympy")      # loads when an expression is first built (a loaded search needs none)

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


def winner_map(scenario, systems, metric: str, x: tuple[str, np.ndarray], y: tuple[str, np.ndarray], *,
               values: bool = False, counts: Tally | None = None, **fixed) -> dict:
    """Which system has the best ``metric`` at every (x, y) grid point.

    An unloaded metric (``tbt``, ``ttft``, ``e2e``...: one request alone) is evaluated by vectorised sweeps of
    its closed form; a loaded one (``tbt_mean_ms``...: a Prediction field) by ``predict`` with the ``fixed``
    workload (give ``concurrency``): every system at every other point of each axis (and the last), then at a
    point between them only where those around it disagree on the winner or the analytic steady state names
    another (elsewhere the winner is decided; ``values=True`` runs every point). ``winner`` holds indices
    into ``systems``, -1 where no system is feasible (the first of equal ones: ``tied`` [system, x, y] marks the
    systems whose value equals the winner's); ``values`` the metric per system (nan where infeasible or
    not run); ``predictions`` the predictions run by method (also added to ``counts``).
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
    counts = counts if counts is not None else Tally()
    if kind == "unloaded":
        arr = np.stack([np.asarray(sweep(topo, s, {xn: xv, yn: yv}, metric, **fixed)[metric],
                                   dtype=float).reshape(len(xv), len(yv)) for s in systems])
        counts.add("closed_form", arr.size)
        best, decided = _best(arr, metric), {}
    else:
        arr, decided = _loaded_map(topo, systems, metric, (xn, xv), (yn, yv), fixed, values, counts)
        best = _best(arr, metric)
    for (i, j), w in decided.items():
        best[i, j] = w
    return {"x": xv, "y": yv, "winner": best, "tied": _tied(arr, best), "systems": list(systems), "values": arr,
            "kind": kind, "predictions": counts.to_dict()}


def _tied(arr: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Per point and system, whether its value equals the winner's (to :data:`EQUAL_RTOL`): the winner and every
    system tied with it (e.g. the unloaded TTFT of the pools, one closed form). A point with one such system has
    a single winner."""
    pick = np.take_along_axis(arr, np.maximum(best, 0)[None], axis=0)
    with np.errstate(invalid="ignore"):
        same = np.abs(arr - pick) <= EQUAL_RTOL * np.abs(pick)
    return same & np.isfinite(arr) & (best >= 0)[None]


def _best(arr: np.ndarray, metric: str) -> np.ndarray:
    """Index of the best system at each point (-1 where none has a value)."""
    ok = np.isfinite(arr)
    pick = np.where(ok, arr, -np.inf if metric in HIGHER_IS_BETTER else np.inf)
    best = np.argmax(pick, axis=0) if metric in HIGHER_IS_BETTER else np.argmin(pick, axis=0)
    return np.where(ok.any(axis=0), best, -1)


def _loaded_map(topo, systems, metric, x, y, fixed, values: bool, counts: Tally):
    """The loaded metric of each system (nan where not run) and the winners decided without the engine."""
    (xn, xv), (yn, yv) = x, y
    _check_vary(topo, xn)
    _check_vary(topo, yn)
    arr = np.full((len(systems), len(xv), len(yv)), math.nan)

    def at(i, j, s, method="engine"):
        t, kw = _with_value(topo, xn, xv[i])
        t, kw2 = _with_value(t, yn, yv[j])
        args = {**fixed, **kw, **kw2, **({"method": method} if method != "engine" else {})}
        counts.add(args.get("method", "engine"))
        return evaluate(t, s, metric, **args)
    coarse = [(i, j) for i in _every_other(len(xv)) for j in _every_other(len(yv))]
    cells = list(itertools.product(range(len(xv)), range(len(yv)))) if values else coarse
    for (i, j), k in track([(c, k) for c in cells for k in range(len(systems))], "winner map"):
        arr[k, i, j] = at(i, j, systems[k])
    decided = {}
    if values:
        return arr, decided
    won = _best(arr, metric)
    for i, j in itertools.product(range(len(xv)), range(len(yv))):
        if (i, j) in coarse:
            continue
        near = {int(won[a, b]) for a in (i - 1, i, i + 1) for b in (j - 1, j, j + 1) if (a, b) in coarse}
        if len(near) == 1:
            try:
                hint = _best(np.array([[[at(i, j, s, "analytic")]] for s in systems]), metric)[0, 0]
            except (ValueError, ArithmeticError):
                hint = None
            if hint == next(iter(near)):
                decided[i, j] = int(hint)
                continue
        for k, s in enumerate(systems):
            arr[k, i, j] = at(i, j, s)
    return arr, decided


def _every_other(n: int) -> list[int]:
    return sorted({*range(0, n, 2), n - 1})
