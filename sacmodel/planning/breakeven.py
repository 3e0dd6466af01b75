"""Break-even: where two systems give the same metric (or a given ratio of it) as one quantity varies.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import sympy as sp
from scipy.optimize import brentq

from ..hardware.topology import Topology
from ..serving.costs import SYMBOLS
from ..serving.systems import check_system
from ..util.names import HIGHER_IS_BETTER, LIMITS, fmt_value, kind_of
from ..util.progress import track
from .closed_forms import _check_vary, evaluate, mean_misses_grid, symbolic
from .common import DISCRETE, WORKLOAD_SYMBOLS, SolverError, _metric_kind, _positive_tokens, _topology
from .sweep import _lambdify


@dataclass
class BreakEven:
    """Where systems ``a`` and ``b`` give the same metric as ``vary`` goes from lo to hi."""
    a: str
    b: str
    metric: str
    vary: str
    lo: float
    hi: float
    found: bool
    value: float | None                       # the first crossing
    values: list[float] = field(default_factory=list)
    method: str = "numeric"
    residual: float | None = None             # |f_a - ratio f_b| / |f_b| at the crossing
    winner_below: str | None = None           # winner just below the first crossing
    winner_above: str | None = None           # winner just above it
    winner: str | None = None                 # winner throughout, when nothing crosses
    ratio: float = 1.0
    curve: dict = field(default_factory=dict, repr=False)
    searched: tuple | None = None        # (lo, hi) of the grid points where both systems have a value
    range_note: str = ""                 # says so when that is narrower than [lo, hi], and why
    message: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _better(metric: str, fa: float, fb: float, ratio: float, a: str, b: str) -> str:
    hib = metric in HIGHER_IS_BETTER
    return a if ((fa > ratio * fb) if hib else (fa < ratio * fb)) else b


def breakeven(scenario, a: str, b: str, *, metric: str, vary: str, lo: float, hi: float, ratio: float = 1.0,
              points: int = 48, **fixed) -> BreakEven:
    """Find where ``metric(a) = ratio x metric(b)`` as ``vary`` goes from ``lo`` to ``hi``.

    ``vary``: context, output, topk, concurrency, cxl_devices, rdma_nics, device_buffer, a scenario parameter
    (``t_graph_kernel``), or a hardware number (``node:cxl_device.bandwidth``, ``link:gpu.latency``). ``ratio``
    = 1.1 asks where ``a`` becomes 10% worse than ``b`` (for latency metrics). Unloaded metrics are solved
    in closed form by sympy when it can, else numerically (scipy ``brentq`` between sign changes on a
    grid of ``points``); every crossing in the range is reported.
    """
    topo, kind = _check_arguments(scenario, a, b, metric, vary, lo, hi, ratio, points, fixed)
    asked = (lo, hi)
    hi = _position_cap(topo, vary, hi, fixed)
    if hi <= lo:
        raise SolverError(f"{vary}: the model's positions end at {hi:,.0f}, below --lo {lo:,.0f}")
    discrete = vary in DISCRETE
    fast = {s: _unloaded_fn(topo, s, metric, vary, fixed) for s in (a, b)} if kind == "unloaded" else {}

    def f(s, x):
        with np.errstate(divide="ignore", invalid="ignore"):      # e.g. TBT at output 1: nan, not a warning
            if fast.get(s):
                return float(fast[s](x))
            return evaluate(topo, s, metric, vary, x, **fixed)
    d = lambda x: f(a, x) - ratio * f(b, x)  # noqa: E731
    res = BreakEven(a, b, metric, vary, lo, hi, False, None, ratio=ratio)

    sym_roots = _symbolic_roots(topo, a, b, metric, vary, lo, hi, ratio, fixed) if kind == "unloaded" else None
    if discrete:
        xs = np.unique(np.round(np.linspace(lo, hi, min(points, int(hi - lo) + 1))).astype(int)).astype(float)
    elif lo > 0 and hi / lo > 20:
        xs = np.geomspace(lo, hi, points)
    else:
        xs = np.linspace(lo, hi, points)
    pairs = [(s_, x) for s_ in (a, b) for x in xs]
    if kind == "loaded" or not all(fast.values()):
        pairs = track(pairs, f"breakeven {a} vs {b} over {vary}")
    vals = np.array([f(s_, x) for s_, x in pairs])
    fa, fb = vals[:len(xs)], vals[len(xs):]
    res.curve = {"x": xs.tolist(), a: fa.tolist(), b: fb.tolist()}
    diff = fa - ratio * fb
    ok = np.isfinite(diff)
    if not ok.any():
        res.message = "both systems are infeasible over the whole range"
        return res
    res.searched = (float(xs[ok].min()), float(xs[ok].max()))
    if sym_roots is not None:
        roots, res.method = sym_roots, "symbolic"
    else:
        roots = _grid_roots(d, xs, diff, ok, discrete)
    at = lambda x: fmt_value(x, kind_of(vary))  # noqa: E731
    res.range_note = _range_note(topo, vary, *asked, res.searched, at)
    if not roots:
        w = {_better(metric, x, y, ratio, a, b) for x, y in zip(fa[ok], fb[ok])}
        res.winner = w.pop() if len(w) == 1 else None
        res.message = (f"no crossing for {vary} in [{at(lo)}, {at(hi)}]: "
                       f"{_throughout(metric, a, b, ratio, res.winner)}" if res.winner
                       else "no crossing found, but the winner changes where a system becomes infeasible")
        return res
    res.found, res.values, res.value = True, roots, roots[0]
    fa0, fb0 = f(a, roots[0]), f(b, roots[0])
    res.residual = abs(fa0 - ratio * fb0) / max(abs(fb0), 1e-300)   # for a discrete vary: the gap there
    below = xs[xs < roots[0]]
    above = xs[xs > roots[0]]
    if len(below):
        res.winner_below = _better(metric, f(a, below[-1]), f(b, below[-1]), ratio, a, b)
    if len(above):
        res.winner_above = _better(metric, f(a, above[0]), f(b, above[0]), ratio, a, b)
    where = f"{vary} = {at(roots[0])}" + (f" (and at {', '.join(at(r) for r in roots[1:])})" if len(roots) > 1
                                          else "")
    res.message = (f"{a} and {b} cross at {where}" if ratio == 1 else
                   f"{metric} of {a} reaches {ratio:g} x that of {b} at {where}")
    return res


def _check_arguments(scenario, a, b, metric, vary, lo, hi, ratio, points, fixed) -> tuple[Topology, str]:
    """Validate :func:`breakeven`'s arguments; returns the scenario and the metric's kind (loaded/unloaded)."""
    check_system(a)
    check_system(b)
    for name, v in (("lo", lo), ("hi", hi), ("ratio", ratio)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise SolverError(f"{name} must be a finite number, got {v!r}")
    if lo >= hi:
        raise SolverError(f"need lo < hi, got lo={lo:g}, hi={hi:g}")
    if not ratio > 0:
        raise SolverError(f"ratio must be positive, got {ratio:g}")
    if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or not 2 <= points <= LIMITS["points"]:
        raise SolverError(f"points must be a whole number from 2 to {LIMITS['points']:,}, got {points!r}")
    if lo < 0 or (lo == 0 and kind_of(vary) not in ("time", "number")):
        raise SolverError(f"{vary} must stay positive: lo = {fmt_value(lo, kind_of(vary))}")
    for k in ("context", "output"):
        _positive_tokens(k, fixed.get(k), required=False, allow_range=True)
    kind = _metric_kind(metric)
    for k in ("context", "output"):
        if k not in fixed and vary != k:
            raise SolverError(f"breakeven needs {k}= (or vary={k!r})")
    topo = _topology(scenario)
    _check_vary(topo, vary, kind, (a, b), metric)
    return topo, kind


def _grid_roots(d, xs: np.ndarray, diff: np.ndarray, ok: np.ndarray, discrete: bool) -> list[float]:
    """Zeros of ``d`` between the grid points where ``diff`` (= d on the grid) changes sign: brentq, or for a
    discrete quantity the first whole value on the other side (bisection)."""
    roots = []
    for i in range(len(xs) - 1):
        if not (ok[i] and ok[i + 1]) or diff[i] * diff[i + 1] > 0:
            continue
        if diff[i] == 0:
            roots.append(float(xs[i]))
        elif discrete:                          # bisect on integers: first value on the other side
            lo_i, hi_i = int(xs[i]), int(xs[i + 1])
            while hi_i - lo_i > 1:
                mid = (lo_i + hi_i) // 2
                dm = d(mid)
                if math.isfinite(dm) and dm * diff[i] > 0:
                    lo_i = mid
                else:
                    hi_i = mid
            roots.append(float(hi_i))
        elif diff[i + 1] != 0:
            roots.append(float(brentq(d, xs[i], xs[i + 1], xtol=1e-9 * max(1.0, abs(xs[i])), rtol=1e-12)))
    return sorted(set(roots))


def _throughout(metric: str, a: str, b: str, ratio: float, winner: str) -> str:
    """Words for a side that holds over the whole range; with a ratio, 'stays within 1.05x', not 'wins'."""
    if ratio == 1:
        return f"{winner} is better throughout"
    below = (winner == a) != (metric in HIGHER_IS_BETTER)     # a's metric stays below ratio x b's
    if below and ratio > 1 and metric not in HIGHER_IS_BETTER:
        return f"{metric} of {a} stays within {ratio:g}x that of {b} throughout"
    return f"{metric} of {a} stays {'below' if below else 'above'} {ratio:g} x that of {b} throughout"


def _free_form(system, metric, topo, name, fx, res):
    """Closed form with ``name`` left free; a system whose metric does not depend on it gets a constant."""
    try:
        return symbolic(system, metric, topo, free=(name,), **fx, **res)
    except SolverError:
        if name not in SYMBOLS:
            raise
        return symbolic(system, metric, topo, **fx, **res)


def _unloaded_fn(topo, system, metric, vary, fixed):
    """A compiled f(x) of an unloaded metric when ``vary`` is a symbol of its closed form, else None."""
    name = WORKLOAD_SYMBOLS.get(vary, vary)
    if ":" in vary or vary in ("cxl_devices", "rdma_nics", "device_buffer", "topk", "dp", "concurrency"):
        return None
    fx = {k: v for k, v in fixed.items() if k in ("context", "output") and WORKLOAD_SYMBOLS[k] != name}
    res = {k: v for k, v in fixed.items() if k in ("cxl_devices", "rdma_nics", "device_buffer")}
    try:
        e = _free_form(system, metric, topo, name, fx, res)
    except SolverError:
        return None
    x = sp.Symbol(name, positive=True)
    mm = sp.Symbol("m_mean", positive=True)
    if e.free_symbols - {x, mm}:
        return None
    if mm in e.free_symbols:               # the mean misses follow the varied context or output numerically
        g = _lambdify(e, (name, "m_mean"))
        L0, O0 = fixed.get("context"), fixed.get("output")
        res_ = {k: v for k, v in fixed.items() if k in ("cxl_devices", "rdma_nics", "device_buffer")}

        def f_m(v):
            L_ = v if name == "L" else L0
            O_ = v if name == "O" else O0
            return g(v, mean_misses_grid(topo, system, L_, O_, **res_))
        return f_m
    f = _lambdify(e, (name,))
    return f if e.free_symbols else (lambda x_, c=float(e): c)


def _symbolic_roots(topo, a, b, metric, vary, lo, hi, ratio, fixed):
    """Closed-form roots when ``vary`` is a symbol and the difference is polynomial in it; else None."""
    name = {"context": "L", "output": "O"}.get(vary, vary)
    if vary in ("cxl_devices", "rdma_nics", "concurrency", "device_buffer", "topk", "dp") or ":" in vary:
        return None
    if "context" not in fixed and vary != "context" or "output" not in fixed and vary != "output":
        return None
    fx = {k: v for k, v in fixed.items() if k in ("context", "output")}
    res = {k: v for k, v in fixed.items() if k in ("cxl_devices", "rdma_nics", "device_buffer")}
    try:
        ea = _free_form(a, metric, topo, name, fx, res)
        eb = _free_form(b, metric, topo, name, fx, res)
    except SolverError:
        return None
    x = sp.Symbol(name, positive=True)
    if sp.Symbol("m_mean", positive=True) in (ea.free_symbols | eb.free_symbols):
        return None                 # the mean misses depend on the varied context/output numerically
    diff = ea - ratio * eb          # like terms of a and b already combine here, without simplify
    if any(x in f.free_symbols for f in diff.atoms(sp.Min, sp.Max, sp.Piecewise)):
        return None                 # piecewise in x: the numeric root finder handles it (simplify would be slow)
    diff = sp.simplify(diff)
    if diff.has(sp.Min, sp.Max, sp.Piecewise) or x not in diff.free_symbols:
        return None
    num, _ = sp.fraction(sp.together(diff))
    try:
        poly = sp.Poly(sp.expand(num), x)
    except sp.PolynomialError:
        return None
    if poly.degree() > 4:
        return None
    roots = [float(sp.re(r)) for r in sp.solve(poly.as_expr(), x)
             if abs(complex(r).imag) < 1e-12 * max(1.0, abs(complex(r).real)) and lo <= float(sp.re(r)) <= hi]
    return sorted(roots)


def _position_cap(topo, vary: str, hi: float, fixed: dict) -> float:
    """``hi``, or for a context range past the model's positions the longest prompt it takes (context +
    output <= max_position)."""
    if vary != "context":
        return hi
    from ..hardware.models import model_of
    mp = model_of(topo).max_position
    out = fixed.get("output", 1)
    out = max(out) if isinstance(out, tuple) else out
    return min(hi, mp - out) if mp else hi


def _range_note(topo, vary: str, lo: float, hi: float, searched: tuple, at) -> str:
    """'' when the grid's finite points span the asked [lo, hi]; else the range actually searched and why."""
    if searched[0] <= lo and searched[1] >= hi:
        return ""
    from ..hardware.models import model_of
    m = model_of(topo)
    why = (f"{m.name} has {m.max_position:,} positions (context + output at most that)"
           if vary == "context" and m.max_position and hi + 1 > m.max_position else
           "outside it neither system has a value (infeasible)")
    return f"searched {vary} in [{at(searched[0])}, {at(searched[1])}] of the asked [{at(lo)}, {at(hi)}]: {why}"
