"""Break-even: where two systems give the same metric (or a given ratio of it) as one quantity varies.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..hardware.topology import Topology
from ..serving.costs import SYMBOLS
from ..serving.systems import check_system
from ..util.lazy import lazy_module
from ..util.names import HIGHER_IS_BETTER, LIMITS, fmt_value, kind_of
from ..util.progress import status, track
from .closed_forms import _check_vary, evaluate, mean_misses_grid, symbolic
from .common import DISCRETE, EQUAL_RTOL, WORKLOAD_SYMBOLS, SolverError, _metric_kind, _positive_tokens, _topology
from .search import Tally, scan
from .sweep import _lambdify

sp = lazy_module("sympy")      # loads when an expression is first built (a loaded search needs none)
optimize = lazy_module("scipy.optimize")      # brentq: loads when a crossing is refined


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
    curve: dict = field(default_factory=dict, repr=False)      # x and each system's metric at the grid points run
    searched: tuple | None = None        # (lo, hi) of the grid points where both systems have a value
    range_note: str = ""                 # says so when that is narrower than [lo, hi], and why
    message: str = ""
    predictions: dict = field(default_factory=dict)    # predictions run, by method (engine, analytic, closed_form)

    def to_dict(self) -> dict:
        return asdict(self)


def _better(metric: str, fa: float, fb: float, ratio: float, a: str, b: str) -> str:
    hib = metric in HIGHER_IS_BETTER
    return a if ((fa > ratio * fb) if hib else (fa < ratio * fb)) else b


def breakeven(scenario, a: str, b: str, *, metric: str, vary: str, lo: float, hi: float, ratio: float = 1.0,
              points: int = 48, curve: bool = False, **fixed) -> BreakEven:
    """Find where ``metric(a) = ratio x metric(b)`` as ``vary`` goes from ``lo`` to ``hi``.

    ``vary``: context, output, topk, concurrency, cxl_devices, rdma_nics, device_buffer, a scenario parameter
    (``t_graph_kernel``), or a hardware number (``node:cxl_device.bandwidth``, ``link:gpu.latency``). ``ratio``
    = 1.1 asks where ``a`` becomes 10% worse than ``b`` (for latency metrics). Unloaded metrics are solved
    in closed form by sympy when it can, else numerically (scipy ``brentq`` between sign changes on a
    grid of ``points``); every crossing in the range is reported.

    A loaded metric is first estimated at every grid point by the analytic steady state, which brackets the
    crossings; the engine then runs at the ends of the grid, every :data:`~sacmodel.planning.search.PROBE_EVERY`
    points, and where the estimate (corrected by the engine's values) changes sign, until each sign change is
    located between two grid neighbours (:func:`sacmodel.planning.search.scan`), and ``brentq`` refines it to
    a relative 1e-3 (:data:`LOADED_RTOL`). ``curve=True`` runs the engine at every grid point instead (the
    whole ``curve``, e.g. for a CSV); otherwise ``curve`` holds the grid points the search evaluated.
    ``predictions`` counts the predictions run, by method.
    """
    topo, kind = _check_arguments(scenario, a, b, metric, vary, lo, hi, ratio, points, fixed)
    asked = (lo, hi)
    hi = _position_cap(topo, vary, hi, fixed)
    if hi <= lo:
        raise SolverError(f"{vary}: the model's positions end at {hi:,.0f}, below --lo {lo:,.0f}")
    discrete = vary in DISCRETE
    fast = {s: _unloaded_fn(topo, s, metric, vary, fixed) for s in (a, b)} if kind == "unloaded" else {}
    sides = _Sides(topo, a, b, metric, vary, ratio, fixed, fast, kind)
    res = BreakEven(a, b, metric, vary, lo, hi, False, None, ratio=ratio)
    sym_roots = _symbolic_roots(topo, a, b, metric, vary, lo, hi, ratio, fixed) if kind == "unloaded" else None
    xs = _grid(lo, hi, points, discrete)
    if kind == "loaded" and not curve:
        with status(f"breakeven {a} vs {b} over {vary}"):
            xs = xs[sorted(scan(len(xs), lambda i: sides.d(xs[i]), sides.hint(xs)))]
    else:
        pairs = [(s_, x) for s_ in (a, b) for x in xs]
        for s_, x in (track(pairs, f"breakeven {a} vs {b} over {vary}")
                      if kind == "loaded" or not all(fast.values()) else pairs):
            sides.f(s_, x)
    fa, fb = np.array([sides.f(a, x) for x in xs]), np.array([sides.f(b, x) for x in xs])
    res.curve = {"x": xs.tolist(), a: fa.tolist(), b: fb.tolist()}
    diff = fa - ratio * fb
    ok = np.isfinite(diff)
    if not ok.any():
        res.message = "both systems are infeasible over the whole range"
    else:
        res.searched = (float(xs[ok].min()), float(xs[ok].max()))
        if sym_roots is not None:
            roots, res.method = sym_roots, "symbolic"
        else:
            tol = dict(xtol=0.5 if vary in ROUNDED else 1e-30, rtol=LOADED_RTOL) if kind == "loaded" else None
            roots = _grid_roots(sides.d, xs, diff, ok, discrete, tol)
        _conclude(res, topo, sides, asked, xs, fa, fb, ok, roots)
    res.predictions = sides.tally.to_dict()
    return res


# The engine's crossing is refined to this relative width (or to one whole number of a rounded quantity): the
# draws' own spread moves it by more (the README's example crosses at 16,072-16,162 tokens over seeds 0-3, 0.3%)
LOADED_RTOL = 1e-3
# on a longer grid the analytic estimate runs at every other point (a crossing is then bracketed to two grid
# intervals, and the engine's first guess narrows it to one)
HINT_EVERY_OTHER = 24
# quantities a prediction takes as whole numbers (:func:`sacmodel.planning.common._with_value` rounds them)
ROUNDED = {"context", "output", "concurrency", "requests", "cxl_devices", "rdma_nics", "device_buffer", "topk", "dp"}


class _Sides:
    """The two systems' metric at a value of the varied quantity, each computed once (by the closed form, the
    engine or the analytic steady state), and a tally of the predictions run."""

    def __init__(self, topo, a, b, metric, vary, ratio, fixed, fast, kind):
        self.topo, self.a, self.b, self.metric, self.vary, self.ratio = topo, a, b, metric, vary, ratio
        self.fixed, self.fast, self.kind = fixed, fast, kind
        self.tally, self.memo = Tally(), {}

    def f(self, s: str, x: float, method: str = "engine") -> float:
        fast = self.fast.get(s)
        key = (s, float(x) if fast or self.vary not in ROUNDED else int(round(x)), method)
        if key not in self.memo:
            with np.errstate(divide="ignore", invalid="ignore"):  # e.g. TBT at output 1: nan, not a warning
                if fast:
                    self.tally.add("closed_form")
                    self.memo[key] = float(fast(x))
                else:
                    kw = {**self.fixed, **({"method": method} if method != "engine" else {})}
                    self.tally.add("closed_form" if self.kind == "unloaded" else kw.get("method", "engine"))
                    self.memo[key] = evaluate(self.topo, s, self.metric, self.vary, x, **kw)
        return self.memo[key]

    def d(self, x: float) -> float:
        return self.f(self.a, x) - self.ratio * self.f(self.b, x)

    def hint(self, xs) -> np.ndarray | None:
        """The difference by the analytic steady state at the grid points (every other one on a grid of more than
        HINT_EVERY_OTHER points, linear in between; nan where it has no value), or None when it has none
        anywhere (a percentile metric, a workload it does not take)."""
        def one(x):
            try:
                return self.f(self.a, x, "analytic") - self.ratio * self.f(self.b, x, "analytic")
            except (ValueError, ArithmeticError):
                return math.nan
        n = len(xs)
        at = sorted({*range(0, n, 2 if n > HINT_EVERY_OTHER else 1), n - 1})
        with np.errstate(invalid="ignore"):
            h = np.full(n, math.nan)
            h[at] = [one(xs[i]) for i in at]
            for i, j in zip(at, at[1:]):
                if j > i + 1 and math.isfinite(h[i]) and math.isfinite(h[j]):
                    h[i + 1:j] = np.interp(np.arange(i + 1, j), [i, j], [h[i], h[j]])
        return h if np.isfinite(h).any() else None


def _grid(lo: float, hi: float, points: int, discrete: bool) -> np.ndarray:
    if discrete:
        return np.unique(np.round(np.linspace(lo, hi, min(points, int(hi - lo) + 1))).astype(int)).astype(float)
    if lo > 0 and hi / lo > 20:
        return np.geomspace(lo, hi, points)
    return np.linspace(lo, hi, points)


def _conclude(res: BreakEven, topo, sides: _Sides, asked, xs, fa, fb, ok, roots) -> None:
    """The message, the winner on each side of the first crossing (or throughout) and the residual."""
    a, b, metric, vary, ratio, f = res.a, res.b, res.metric, res.vary, res.ratio, sides.f
    at = lambda x: fmt_value(x, kind_of(vary))  # noqa: E731
    res.range_note = _range_note(topo, vary, *asked, res.searched, at)
    scale = np.maximum(np.abs(fa[ok]), np.abs(ratio * fb[ok]))
    if (np.abs(fa[ok] - ratio * fb[ok]) <= EQUAL_RTOL * scale).all():
        # the same value at every point (e.g. the unloaded TTFT of two pools, which differ only after the first
        # token): no crossing and no winner, rather than a 'crossing' at every grid point
        rel = "equal" if ratio == 1 else f"in the ratio {ratio:g} : 1"
        res.message = (f"no crossing for {vary} in [{at(res.lo)}, {at(res.hi)}]: {metric} of {a} and {b} are {rel} "
                       "throughout (neither is better)")
        return
    if not roots:
        w = {_better(metric, x, y, ratio, a, b) for x, y in zip(fa[ok], fb[ok])}
        res.winner = w.pop() if len(w) == 1 else None
        res.message = (f"no crossing for {vary} in [{at(res.lo)}, {at(res.hi)}]: "
                       f"{_throughout(metric, a, b, ratio, res.winner)}" if res.winner
                       else "no crossing found, but the winner changes where a system becomes infeasible")
        return
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


def _grid_roots(d, xs: np.ndarray, diff: np.ndarray, ok: np.ndarray, discrete: bool,
                tol: dict | None = None) -> list[float]:
    """Zeros of ``d`` between the grid points where ``diff`` (= d on the grid) changes sign: brentq, or for a
    discrete quantity the first whole value on the other side (bisection). ``tol``: brentq's ``xtol`` and
    ``rtol`` (default: 1e-9 of the value and 1e-12)."""
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
            t = tol or dict(xtol=1e-9 * max(1.0, abs(xs[i])), rtol=1e-12)
            roots.append(float(optimize.brentq(d, xs[i], xs[i + 1], **t)))
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
