"""Which top-k entries a decode step must load: the score process and its closed forms.

**Process** (one layer of one request; :func:`sacmodel.serving.reference.simulate` runs it literally). The lightning
indexer scores every context token against the query; the keys are fixed and the query drifts from step
to step, ``q(t+1) = phi q(t) + sqrt(1 - phi^2) eps(t)``. With many key dimensions, the score of each token is
then a stationary Gaussian AR(1) sequence with lag-1 correlation ``phi`` (the *score correlation*), nearly
independent across tokens. Each step selects the ``k`` best-scoring tokens (``k = min(topk, L)``), i.e. the
tokens whose score exceeds ``theta = Phi^-1(1 - k / L)``. The GPU buffer of ``B`` slots per layer keeps the
most recently selected tokens (LRU) and starts **empty** when a request is admitted with a cached prefix
(SGLang HiSparse allocates the buffer empty on a prefix hit), so its first step loads all ``k`` entries.

**Closed forms** (Che's approximation for LRU, exact for the fill phase). ``D(T) = L (1 - P(T))`` is the
expected number of distinct tokens selected in ``T`` consecutive steps, where ``P(T)`` is the probability
that an AR(1) score stays below ``theta`` for ``T`` steps, computed from the spectrum of the kernel
restricted to ``(-inf, theta]`` (Gauss-Legendre quadrature). While ``D`` is below ``B`` nothing is evicted,
so step ``a`` loads ``D(a+1) - D(a)`` entries; the buffer is full after ``T_C`` steps (``D(T_C) = B``), and
from then on a selected token is resident iff it was selected within the last ``T_C`` steps, so a step loads
``m = D(T_C + 1) - D(T_C)`` entries (the steady state). The top-k overlap between consecutive steps,
``1 - (D(2) - D(1)) / k``, follows from ``phi`` and ``k / L``: longer contexts churn more at the same
correlation. Everything depends only on ``(phi, L / k, B / k)``; :func:`steady_state` interpolates a
precomputed table of that function (``sacmodel/data/access_table.npz``, rebuilt by :func:`build_table`),
:func:`exact_steady_state` computes it directly.
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

from .costs import lines_per_entry
from .reference import KEYS, lines_touched

TABLE_PATH = Path(__file__).resolve().parents[1] / "data" / "access_table.npz"
# table axes: log(1 - phi), log2(L / k), B / k
TABLE_LOG_ONE_MINUS_PHI = np.linspace(math.log(5e-4), math.log(0.5), 64)
TABLE_LOG2_L_OVER_K = np.arange(0.0, 14.01, 0.25)
TABLE_B_OVER_K = np.array([1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0])


# The normal CDF and its inverse from the standard library, and a 3-D linear interpolation in numpy:
# scipy.special and scipy.interpolate would add about 0.8 s of import to every prediction.
_SQRT_HALF = math.sqrt(0.5)
_erfc = np.frompyfunc(math.erfc, 1, 1)
ndtri = NormalDist().inv_cdf


def ndtr(x):
    """Standard normal CDF of a number or an array."""
    if np.ndim(x) == 0:
        return 0.5 * math.erfc(-float(x) * _SQRT_HALF)
    return 0.5 * _erfc(-np.asarray(x, dtype=float) * _SQRT_HALF).astype(float)


class GridInterpolator:
    """Linear interpolation on a rectilinear 3-D grid, as scipy's ``RegularGridInterpolator`` (linear) computes
    it: a weighted sum of the cell's eight corners, so a NaN corner makes the result NaN. Points must lie
    inside the grid (callers clip)."""

    def __init__(self, axes, values):
        self.axes = tuple(np.asarray(a, dtype=float) for a in axes)
        self.values = np.ascontiguousarray(values, dtype=float)
        self._flat = self.values.ravel()
        self._strides = np.array(self.values.strides) // self.values.itemsize
        self._offsets = np.array(list(itertools.product((0, 1), repeat=len(self.axes)))) @ self._strides

    def __call__(self, pts) -> np.ndarray:
        pts = np.asarray(pts, dtype=float)
        n = len(pts)
        base = np.zeros(n, dtype=np.intp)       # flat index of each point's lower corner
        w = np.ones((n, 1))                     # weights of the corners, in itertools.product order
        for d, ax in enumerate(self.axes):
            x = pts[:, d]
            i = np.clip(np.searchsorted(ax, x, side="right") - 1, 0, len(ax) - 2)
            f = (x - ax[i]) / (ax[i + 1] - ax[i])
            base += i * self._strides[d]
            w = (w[:, :, None] * np.stack([1.0 - f, f], axis=1)[:, None, :]).reshape(n, -1)
        return (self._flat[base[:, None] + self._offsets[None, :]] * w).sum(axis=1)


def check_process(context, topk, buffer_slots, correlation) -> None:
    if context <= 0 or topk <= 0:
        raise ValueError("context and topk must be positive")
    if not 0.0 <= correlation < 1.0:
        raise ValueError(f"score correlation must be in [0, 1), got {correlation}")
    if buffer_slots < min(topk, context):
        raise ValueError(f"buffer_slots ({buffer_slots}) must hold one step's selection "
                         f"(min(topk, context) = {min(topk, context)})")


# ---- exact evaluation -----------------------------------------------------------------------------
@lru_cache(maxsize=256)
@lru_cache(maxsize=64)
def _leggauss(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


def _kernel(phi: float, theta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Quadrature of the AR(1) kernel restricted to scores <= theta.

    Gauss-Legendre nodes on ``[theta - span, theta]``; ``move[i, j]`` carries probability mass from node i to
    node j in one step, ``leak[i]`` the mass that drifts below the grid, which is counted as never exceeding
    ``theta`` (the span is wide enough that it cannot come back within the horizons that matter).
    """
    s = math.sqrt(1.0 - phi * phi)
    span = min(9.0, max(4.0, 80.0 * s))
    n = int(min(400, max(64, 6.0 * span / max(s, 1e-9))))
    g, wg = _leggauss(n)
    lo = theta - span
    x = lo + (g + 1.0) * (span / 2.0)
    w = wg * (span / 2.0)
    z = (x[None, :] - phi * x[:, None]) / s
    move = np.exp(-0.5 * z * z) / (s * math.sqrt(2.0 * math.pi)) * w[None, :]
    leak = ndtr((lo - phi * x) / s)
    mass0 = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * w
    return move, leak, mass0, float(ndtr(lo))


def stay_below(phi: float, theta: float, steps) -> np.ndarray:
    """P(an AR(1) N(0, 1) sequence with lag-1 correlation ``phi`` stays <= theta for ``steps`` steps)."""
    steps = np.atleast_1d(np.asarray(steps, dtype=int))
    if phi == 0.0:
        return ndtr(theta) ** steps
    move, leak, mass, below = _kernel(float(phi), float(theta))
    out = np.empty(len(steps))
    want = {int(t): [] for t in steps}
    for i, t in enumerate(steps):
        want[int(t)].append(i)
    for t in range(1, int(steps.max()) + 1):
        if t in want:
            out[want[t]] = below + mass.sum()
        below += mass @ leak
        mass = mass @ move
    return np.clip(out, 0.0, 1.0)


def distinct_selected(steps, *, context: float, topk: float, correlation: float) -> np.ndarray:
    """Expected distinct tokens selected over ``steps`` consecutive steps: D(T) = L (1 - P(T))."""
    L, k = float(context), float(min(topk, context))
    if k >= L:
        return np.full(np.shape(np.atleast_1d(steps)), L)
    theta = float(ndtri(1.0 - k / L))
    return L * (1.0 - stay_below(correlation, theta, steps))


def _crossing(d: np.ndarray, B: float) -> tuple[float, float]:
    """(misses per step, T_C) from d[t] = D(t), t = 0, 1, ... (D(0) = 0), once D has passed B.

    T_C interpolates where D crosses B between consecutive integers; the misses are the slope of D there,
    interpolated between the steps on either side.
    """
    t = int(np.searchsorted(d, B))           # d[t - 1] < B <= d[t]
    t = max(t, 1)
    lo, hi = d[t - 1], d[t]
    t_c = (t - 1) + (B - lo) / max(hi - lo, 1e-12)
    nxt = d[t + 1] if t + 1 < len(d) else hi + (hi - lo)
    frac = t_c - (t - 1)
    return float((1.0 - frac) * (hi - lo) + frac * (nxt - hi)), float(max(t_c, 1.0))


def _distinct_until(phi: float, L: float, k: float, B: float, max_steps: int) -> np.ndarray:
    """D(t) for t = 0, 1, ... until two steps past the first D(t) >= B (or ``max_steps``)."""
    theta = float(ndtri(1.0 - k / L))
    d = [0.0]
    if phi == 0.0:
        p = float(ndtr(theta))
        while len(d) < max_steps and (len(d) < 3 or d[-2] < B):
            d.append(L * (1.0 - p ** len(d)))
        return np.array(d)
    move, leak, mass, below = _kernel(float(phi), theta)
    while len(d) < max_steps and (len(d) < 3 or d[-2] < B):
        d.append(L * (1.0 - below - mass.sum()))
        below += mass @ leak
        mass = mass @ move
    return np.array(d)


def exact_steady_state(*, context: float, topk: float, buffer_slots: float, correlation: float,
                       max_steps: int = 200_000) -> tuple[float, float]:
    """(misses per step once the buffer is full, steps to fill it T_C), computed directly."""
    L, k, B = float(context), float(min(topk, context)), float(buffer_slots)
    if not 0.0 <= correlation < 1.0:
        raise ValueError(f"score correlation must be in [0, 1), got {correlation}")
    if B >= L:
        return 0.0, 1.0
    d = _distinct_until(correlation, L, k, B, max_steps)
    if d[-2] < B:
        return 0.0, math.inf
    return _crossing(d, B)


def build_table(path: str | Path = TABLE_PATH, max_steps: int = 400_000) -> Path:
    """Compute the (phi, L/k, B/k) table of steady-state misses / k and fill steps (a few minutes)."""
    k = 1.0
    shape = (len(TABLE_LOG_ONE_MINUS_PHI), len(TABLE_LOG2_L_OVER_K), len(TABLE_B_OVER_K))
    m = np.zeros(shape)
    tc = np.ones(shape)
    for i, x in enumerate(TABLE_LOG_ONE_MINUS_PHI):
        phi = 1.0 - math.exp(x)
        for j, r in enumerate(TABLE_LOG2_L_OVER_K):
            L = 2.0 ** r
            bs = [(b, bk) for b, bk in enumerate(TABLE_B_OVER_K) if bk < L]
            if not bs:
                continue
            d = _distinct_until(phi, L, k, max(bk for _, bk in bs), max_steps)
            for b, bk in bs:
                m[i, j, b], tc[i, j, b] = _crossing(d, bk) if d[-2] >= bk else (0.0, float(max_steps))
    path = Path(path)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez_compressed(tmp, log_one_minus_phi=TABLE_LOG_ONE_MINUS_PHI, log2_l_over_k=TABLE_LOG2_L_OVER_K,
                        b_over_k=TABLE_B_OVER_K, misses_over_k=m, log_fill_steps=np.log(tc))
    tmp.replace(path)
    return path


@lru_cache(maxsize=1)
def _table():
    z = np.load(TABLE_PATH)
    axes = (z["log_one_minus_phi"], z["log2_l_over_k"], z["b_over_k"])
    m = z["misses_over_k"]
    ok = m > 0                      # cells where the context fits the buffer have no steady state: NaN,
    with np.errstate(divide="ignore"):   # so that interpolating next to them falls back to the exact form
        return (GridInterpolator(axes, np.where(ok, np.log(np.where(ok, m, 1.0)), np.nan)),
                GridInterpolator(axes, np.where(ok, z["log_fill_steps"], np.nan)), axes,
                # next to those cells (a context just past the buffer) the misses go to 0: linear in m there
                GridInterpolator(axes, np.where(ok, m, 0.0)))


def steady_state(*, context, topk, buffer_slots, correlation, need_fill: bool = True,
                 max_steps: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """(misses per step in steady state, fill steps T_C), vectorised, from the precomputed table.

    Outside the table's range (correlation above 1 - 5e-4 or below 0.5, L/k beyond 16384) it falls back to
    :func:`exact_steady_state` (counting at most ``max_steps`` steps of the fill: ``inf`` if the buffer is not
    full by then). A context that fits the buffer has no steady-state misses. ``need_fill=False``: the caller
    uses the misses only (the fill steps are then NaN).
    """
    L, k, B, phi = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, dtype=float)) for v in (
        context, topk, buffer_slots, correlation)))
    k = np.minimum(k, L)
    m = np.zeros(L.shape)
    tc = np.ones(L.shape)
    swap = B < L
    if not swap.any():
        return m, tc
    f_m, f_tc, axes, f_lin = _table()
    x = np.log(np.maximum(1.0 - phi, 1e-300))
    r = np.log2(L / k)
    bk = B / k
    eps = 1e-9                      # rounding at the table's edges (a fitted correlation at its bound)
    inside = swap.copy()
    for v, ax in zip((x, r, bk), axes):
        inside &= (v >= ax[0] - eps) & (v <= ax[-1] + eps)
    if inside.any():
        pts = np.stack([np.clip(v[inside], ax[0], ax[-1]) for v, ax in zip((x, r, bk), axes)], axis=-1)
        mi = np.exp(f_m(pts))
        edge = ~np.isfinite(mi)
        if edge.any():
            mi[edge] = f_lin(pts[edge])
        m[inside] = mi * k[inside]
        tc[inside] = np.exp(f_tc(pts)) if need_fill else np.nan
        # at the edge the misses come from the linear table; its fill time is taken from the exact form
        # unless the caller does not need it
        inside[inside] = np.isfinite(m[inside]) & (np.isfinite(tc[inside]) | (not need_fill))
    todo = list(zip(*np.nonzero(swap & ~inside)))
    for idx, (mi, ti) in zip(todo, _exact_points(todo, L, k, B, phi, max_steps)):
        m[idx], tc[idx] = mi, ti
    return m, tc


EXACT_STEPS = 1_000_000     # steps of the score process the exact fallback may take in one call (20-80 s)


class AccessError(ValueError):
    """A top-k access process outside the precomputed table whose exact evaluation would take too long."""


def _exact_points(todo, L, k, B, phi, max_steps: int) -> list[tuple[float, float]]:
    """:func:`exact_steady_state` at each point of ``todo`` (indices into the arrays), within :data:`EXACT_STEPS`
    steps in all: the first, middle and last points, each cut at three times its share of the budget, tell
    whether the rest fits; if not, :class:`AccessError` says so at once instead of running for minutes."""
    n, used, out = len(todo), 0, {}
    if not n:
        return []
    cap = int(min(max_steps, 3 * EXACT_STEPS // n + 3))
    for j in list(dict.fromkeys((0, n // 2, n - 1))) + list(range(n)):
        if j in out:
            continue
        idx = todo[j]
        sample = len(out) < min(3, n)
        steps_max = cap if sample else max_steps
        out[j] = exact_steady_state(context=L[idx], topk=k[idx], buffer_slots=B[idx], correlation=phi[idx],
                                    max_steps=steps_max)
        tc = out[j][1]
        used += math.ceil(tc) + 2 if math.isfinite(tc) else steps_max
        cut = sample and not math.isfinite(tc) and steps_max < max_steps
        if cut or used > EXACT_STEPS or (len(out) == min(3, n) and used / len(out) * n > EXACT_STEPS):
            raise AccessError(_too_slow(L[idx], k[idx], B[idx], phi[idx]))
    return [out[j] for j in range(n)]


def _too_slow(L: float, k: float, B: float, phi: float) -> str:
    """Why a point needs the exact evaluation, and what to change."""
    b_max, r_max = TABLE_B_OVER_K[-1], 2.0 ** TABLE_LOG2_L_OVER_K[-1]
    if B / k > b_max:
        why = (f"a GPU buffer of {B:,.0f} slots is {B / k:,.4g} x the top-k of {k:,.0f} (the access model's table "
               f"covers up to {b_max:g} x); give a device buffer of at most {b_max * k:,.0f} slots "
               "(--device-buffer) or a model with a larger index_topk")
    elif L / k > r_max:
        why = (f"a context of {L:,.0f} tokens is {L / k:,.4g} x the top-k of {k:,.0f} (the table covers up to "
               f"{r_max:,.0f} x); use a shorter context or a larger index_topk")
    else:
        why = f"a score correlation of {phi:.6g} is outside the table's range; change score_correlation"
    return (f"the top-k access model cannot be evaluated quickly here: {why} (its exact form would take more "
            f"than {EXACT_STEPS:,} steps)")


def top_k_overlap(*, context: float, topk: float, correlation: float) -> float:
    """Expected share of a step's top-k already selected at the previous step: P(s' > theta | s > theta)."""
    L, k = float(context), float(min(topk, context))
    if k >= L:
        return 1.0
    d = distinct_selected(np.array([1.0, 2.0]), context=L, topk=k, correlation=correlation)
    return float(1.0 - (d[1] - d[0]) / k)


def correlation_for_overlap(overlap: float, *, context: float, topk: float) -> float:
    """The score correlation whose consecutive-step top-k overlap at ``context`` is ``overlap``."""
    from scipy.optimize import brentq
    if not 0.0 < overlap < 1.0:
        raise ValueError(f"overlap must be in (0, 1), got {overlap}")
    lo, hi = 0.0, 1.0 - 1e-7
    f = lambda p: top_k_overlap(context=context, topk=topk, correlation=p) - overlap  # noqa: E731
    if f(lo) >= 0:
        return 0.0
    return float(brentq(f, lo, hi, xtol=1e-10))


# ---- per-step misses from admission ---------------------------------------------------------------
def miss_series(*, context: int, topk: int, steps: int, buffer_slots: int, correlation: float,
                exact: bool = True) -> np.ndarray:
    """Expected entries loaded at each of the first ``steps`` steps after admission (empty buffer).

    ``exact=False`` takes the steady state from the precomputed table (what the engine uses).
    """
    check_process(context, topk, buffer_slots, correlation)
    L, k, B = int(context), int(min(topk, context)), int(buffer_slots)
    if B >= L:                     # the whole context fits: loaded once, then always resident
        return np.array([float(L)] + [0.0] * (steps - 1))
    if exact:
        m, tc = exact_steady_state(context=L, topk=k, buffer_slots=B, correlation=correlation)
    else:
        m, tc = (float(v[0]) for v in steady_state(context=L, topk=k, buffer_slots=B, correlation=correlation))
    n_fill = int(min(steps, math.ceil(tc) + 1))
    D = np.concatenate([[0.0], distinct_selected(np.arange(1, n_fill + 1), context=L, topk=k,
                                                  correlation=correlation)])
    fill = np.diff(D)                                      # D(a+1) - D(a), a = 0..n_fill-1
    out = np.full(steps, m)
    a = np.arange(n_fill)
    out[:n_fill] = np.where(a < tc, fill, m)          # LRU (Che): new entries miss until the buffer is full
    out[0] = k                                             # an empty buffer: the first step loads the top-k
    return out


def expected_pages(m: float, context: int, page_tokens: int) -> float:
    """Expected distinct pages holding ``m`` tokens drawn without replacement from ``context`` tokens."""
    if m <= 0:
        return 0.0
    if m >= context:
        return float(-(-context // page_tokens))
    sizes = np.full(context // page_tokens, page_tokens, dtype=float)
    if context % page_tokens:
        sizes = np.append(sizes, context % page_tokens)
    from scipy.special import gammaln
    # P(page untouched) = C(L - p, m) / C(L, m), with real m via log-gamma
    lg = lambda a, b: gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)  # noqa: E731
    ok = context - sizes >= m
    p_none = np.where(ok, np.exp(lg(np.maximum(context - sizes, m), m) - lg(context, m)), 0.0)
    return float((1.0 - p_none).sum())


def expected_runs(m: float, context: int) -> float:
    """Expected runs of adjacent tokens among ``m`` tokens spread uniformly over ``context``: m - m(m-1)/L."""
    return 0.0 if m <= 0 else max(1.0, m - m * (m - 1) / context)


def access_counts(*, context: int, topk: int, steps: int = 100, buffer_slots: int = 4096,
                  correlation: float | None = None, overlap: float | None = None, entry_bytes: int = 1152,
                  page_tokens: int = 64) -> dict[str, float]:
    """Expected totals over the first ``steps`` steps after admission, for one layer of one request.

    Keys: ``misses, hits, bytes_fetched, cachelines, pages, rdma_ops`` (see :mod:`sacmodel.serving.reference`).
    Give the process by its score ``correlation`` or by the consecutive-step top-k ``overlap`` at this context.
    """
    if (correlation is None) == (overlap is None):
        raise ValueError("give exactly one of correlation= and overlap=")
    if correlation is None:
        correlation = correlation_for_overlap(overlap, context=context, topk=topk)
    check_process(context, topk, buffer_slots, correlation)
    if steps <= 0:
        raise ValueError("steps must be positive")
    L, k = int(context), int(min(topk, context))
    series = miss_series(context=L, topk=k, steps=steps, buffer_slots=buffer_slots, correlation=correlation)
    total = float(series.sum())
    if buffer_slots >= L:
        return {"misses": float(L), "hits": float((steps - 1) * k), "bytes_fetched": float(L * entry_bytes),
                "cachelines": float(lines_touched(np.arange(L), entry_bytes)),
                "pages": float(-(-L // page_tokens)), "rdma_ops": 1.0}
    out = {"misses": total, "hits": float(steps * k - total), "bytes_fetched": total * entry_bytes,
           "cachelines": total * lines_per_entry(entry_bytes),
           "pages": float(sum(expected_pages(m, L, page_tokens) for m in series)),
           "rdma_ops": float(sum(expected_runs(m, L) for m in series))}
    assert set(out) == set(KEYS)
    return out
