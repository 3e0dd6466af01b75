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
that an AR(1) score stays below ``theta`` for ``T`` steps. The AR(1) kernel restricted to ``(-inf, theta]``
(Gauss-Legendre quadrature) is reversible, so its symmetrised matrix has an exact eigendecomposition and
``P(T)`` is a sum of geometric terms: any ``T`` costs the same. While ``D`` is below ``B`` nothing is evicted,
so step ``a`` loads ``D(a+1) - D(a)`` entries; the buffer is full after ``T_C`` steps (``D(T_C) = B``), and
from then on a selected token is resident iff it was selected within the last ``T_C`` steps, so a step loads
``m = D(T_C + 1) - D(T_C)`` entries (the steady state). The top-k overlap between consecutive steps,
``1 - (D(2) - D(1)) / k``, follows from ``phi`` and ``k / L``: longer contexts churn more at the same
correlation. Everything depends only on ``(phi, L / k, B / k)`` with ``k = min(topk, L)``: a context within
the top-k is selected whole, and one that fits the buffer (``B >= L``) is loaded once and then only hits.
:func:`steady_state` interpolates a precomputed table of ``m / (L - B)`` and ``T_C / -ln(1 - B / L)``
(``sacmodel/data/access_table.npz``, rebuilt by :func:`build_table` in about two minutes), which are smooth
over the whole domain, their limits as ``B -> L`` included (the principal mode alone: ``1 - lam_1`` and
``-1 / ln lam_1``); :func:`exact_steady_state` computes it directly, in bounded time, memoised per kernel.
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
TABLE_LOG_ONE_MINUS_PHI = np.concatenate([np.linspace(math.log(5e-4), math.log(0.5), 64),
                                          np.linspace(math.log(0.5), 0.0, 8)[1:]])        # phi 0.9995 .. 0
TABLE_LOG2_L_OVER_K = np.concatenate([[1 / 16], np.arange(0.25, 14.01, 0.25), np.arange(14.5, 25.01, 0.5)])
TABLE_B_OVER_K = np.concatenate([[1.0, 1.03125, 1.0625, 1.125, 1.1875, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0],
                                 8.0 * 2.0 ** np.arange(0, 23)])                          # .. 2^25


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


# ---- exact evaluation: the spectrum of the AR(1) kernel killed above theta ------------------------------
LO_FLOOR = -6.0     # the quadrature grid reaches down to here: 1e-9 of the scores start below it
N_MAX = 1600        # quadrature nodes at most (an eigendecomposition of about a second on one core)


@lru_cache(maxsize=64)
def _leggauss(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


@lru_cache(maxsize=256)
def _spectrum(phi: float, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """(lam, w): modes of an AR(1) score killed when it exceeds ``theta``; P(it first exceeds theta at step
    t) = sum_j w_j lam_j^(t - 2) for t >= 2 (step 1 is the stationary start).

    Nystrom discretisation on Gauss-Legendre nodes of [lo, theta], lo = min(theta - 4, LO_FLOOR); mass that
    drifts below lo is counted as never exceeding theta. n = 3 (theta - lo) / s nodes resolve the kernel's
    width s = sqrt(1 - phi^2) (the values converge to 1e-9 there); beyond ``N_MAX`` nodes the grid is cut to
    N_MAX s / 3 below theta. The kernel is reversible under N(0, 1), so its symmetrised matrix has an exact
    eigendecomposition: every horizon costs O(n), whatever the number of steps.
    """
    s = math.sqrt(1.0 - phi * phi)
    span = max(4.0, theta - LO_FLOOR)
    n = int(max(64, math.ceil(3.0 * span / s)))
    if n > N_MAX:
        n, span = N_MAX, N_MAX * s / 3.0
    g, wg = _leggauss(n)
    lo = theta - span
    x = lo + (g + 1.0) * (span / 2.0)
    w = wg * (span / 2.0)
    pi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    z = (x[None, :] - phi * x[:, None]) / s
    # sqrt(w_i w_j) K(x_i, x_j) sqrt(pi_i / pi_j): symmetric since pi_i K(x_i, x_j) = pi_j K(x_j, x_i)
    sym = np.exp(-0.5 * z * z + 0.25 * (x[None, :] ** 2 - x[:, None] ** 2)) / (s * math.sqrt(2.0 * math.pi))
    sym = np.sqrt(w)[:, None] * sym * np.sqrt(w)[None, :]
    lam, U = np.linalg.eigh(0.5 * (sym + sym.T))
    lam = np.clip(lam, 0.0, np.nextafter(1.0, 0.0))
    a = np.sqrt(pi * w)                                   # the stationary start, in the symmetric basis
    leak = ndtr((lo - phi * x) / s)
    alpha = U.T @ a
    return lam, alpha * alpha * (1.0 - lam) - alpha * (U.T @ (a * leak))


def _geometric(lam: np.ndarray, t) -> np.ndarray:
    """sum_{u=0}^{t-1} lam^u for each t (rows) and mode (columns), stable as lam -> 1."""
    t = np.asarray(t, dtype=float)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = t * np.log(lam)
    return np.where(lam > 0.0, -np.expm1(q) / (1.0 - lam), np.minimum(t, 1.0))


def _distinct(spec, L: float, k: float, t) -> np.ndarray:
    """D(t): expected distinct tokens selected in t >= 1 steps (D(1) = k)."""
    lam, w = spec
    return k + L * (_geometric(lam, np.asarray(t, dtype=float) - 1.0) @ w)


def _new_at(spec, L: float, k: float, t) -> np.ndarray:
    """D(t) - D(t - 1), t >= 1: tokens selected at step t for the first time."""
    lam, w = spec
    t = np.asarray(t, dtype=float)
    return np.where(t <= 1.0, k, L * (np.power(lam, np.maximum(t - 2.0, 0.0)[..., None]) @ w))


def stay_below(phi: float, theta: float, steps) -> np.ndarray:
    """P(an AR(1) N(0, 1) sequence with lag-1 correlation ``phi`` stays <= theta for ``steps`` steps)."""
    steps = np.atleast_1d(np.asarray(steps, dtype=float))
    if phi == 0.0:
        return ndtr(theta) ** steps
    below = float(ndtr(theta))
    return np.clip(1.0 - _distinct(_spectrum(float(phi), float(theta)), 1.0, 1.0 - below, steps), 0.0, 1.0)


def distinct_selected(steps, *, context: float, topk: float, correlation: float) -> np.ndarray:
    """Expected distinct tokens selected over ``steps`` consecutive steps: D(T) = L (1 - P(T))."""
    L, k = float(context), float(min(topk, context))
    if k >= L:
        return np.full(np.shape(np.atleast_1d(steps)), L)
    theta = float(ndtri(1.0 - k / L))
    return L * (1.0 - stay_below(correlation, theta, steps))


def _fill(phi: float, L: float, k: float, B) -> tuple[np.ndarray, np.ndarray]:
    """(misses per step once the buffer is full, fill steps T_C) for buffers ``B`` (array, k <= B < L).

    T_C interpolates where D crosses B between consecutive integers t - 1 and t (found by bisection on the
    spectrum's closed form, so any T_C costs the same); the misses are the slope of D there, interpolated
    between the steps on either side. A B that D never reaches (the scores counted below the grid) gives
    (0, inf)."""
    B = np.atleast_1d(np.asarray(B, dtype=float))
    if phi == 0.0:                       # independent steps: P(t) = q^t, q = 1 - k/L
        q = 1.0 - k / L
        spec = (np.array([q]), np.array([q * (1.0 - q)]))
    else:
        spec = _spectrum(float(phi), float(ndtri(1.0 - k / L)))
    reach = _distinct(spec, L, k, np.array([2.0 ** 62]))[0]
    ok = B < reach * (1.0 - 1e-12)
    lo, hi = np.ones(B.shape), np.ones(B.shape)      # D(lo) < B <= D(hi) once found (D(1) = k <= B)
    while True:
        short = ok & (_distinct(spec, L, k, hi) < B)
        if not short.any():
            break
        lo, hi = np.where(short, hi, lo), np.where(short, 2.0 * hi, hi)
    while np.any(hi - lo > 1.0):
        mid = np.floor((lo + hi) / 2.0)
        up = _distinct(spec, L, k, mid) < B
        lo, hi = np.where(up & (hi - lo > 1), mid, lo), np.where(~up & (hi - lo > 1), mid, hi)
    t = np.where(B <= k, 1.0, hi)                    # d(t - 1) < B <= d(t); d(0) = 0
    d_prev = np.where(t > 1, _distinct(spec, L, k, np.maximum(t - 1.0, 1.0)), 0.0)
    step_t, step_next = _new_at(spec, L, k, t), _new_at(spec, L, k, t + 1.0)
    frac = (B - d_prev) / np.maximum(step_t, 1e-300)
    m = (1.0 - frac) * step_t + frac * step_next
    return np.where(ok, m, 0.0), np.where(ok, np.maximum(t - 1.0 + frac, 1.0), np.inf)


def exact_steady_state(*, context: float, topk: float, buffer_slots: float, correlation: float,
                       max_steps: float = math.inf) -> tuple[float, float]:
    """(misses per step once the buffer is full, steps to fill it T_C), computed directly in bounded time
    (one eigendecomposition, memoised per (correlation, k/L), and a bisection). ``max_steps``: a T_C beyond
    it is reported as ``inf`` (the misses are still given)."""
    L, k, B = float(context), float(min(topk, context)), float(buffer_slots)
    if not 0.0 <= correlation < 1.0:
        raise ValueError(f"score correlation must be in [0, 1), got {correlation}")
    if B >= L:
        return 0.0, 1.0
    m, tc = (float(v[0]) for v in _fill(float(correlation), L, k, B))
    return m, (tc if tc <= max_steps else math.inf)


def _table_cell(phi: float, r: float) -> tuple[np.ndarray, np.ndarray]:
    """log(m / (L - B)) and log(T_C / -ln(1 - B/L)) at k = 1, L = r and every B/k node. Nodes with B >= L
    (nothing swaps there) hold the limit B -> L, where T_C grows without bound and the principal mode alone
    is left: m / (L - B) = 1 - lam_1 and T_C / -ln(1 - B/L) = -1 / ln(lam_1); interpolation next to them is
    then smooth."""
    b = TABLE_B_OVER_K
    lam1 = 1.0 - 1.0 / r if phi == 0.0 else float(_spectrum(float(phi), float(ndtri(1.0 - 1.0 / r)))[0][-1])
    g, tau = np.full(b.shape, math.log(1.0 - lam1)), np.full(b.shape, -math.log(-math.log(lam1)))
    swap = b < r * (1.0 - 1e-9)
    if swap.any():
        m, tc = _fill(phi, r, 1.0, b[swap])
        g[swap] = np.log(np.maximum(m, 1e-300) / (r - b[swap]))
        tau[swap] = np.log(tc / -np.log1p(-b[swap] / r))
    return g, tau


def build_table(path: str | Path = TABLE_PATH) -> Path:
    """Compute the (phi, L/k, B/k) table of steady-state misses and fill steps (about two minutes on one core)."""
    shape = (len(TABLE_LOG_ONE_MINUS_PHI), len(TABLE_LOG2_L_OVER_K), len(TABLE_B_OVER_K))
    g, tau = np.zeros(shape), np.zeros(shape)
    for i, x in enumerate(TABLE_LOG_ONE_MINUS_PHI):
        phi = max(0.0, -math.expm1(x))
        for j, rho in enumerate(TABLE_LOG2_L_OVER_K):
            g[i, j], tau[i, j] = _table_cell(phi, 2.0 ** rho)
        _spectrum.cache_clear()
    path = Path(path)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez_compressed(tmp, log_one_minus_phi=TABLE_LOG_ONE_MINUS_PHI, log2_l_over_k=TABLE_LOG2_L_OVER_K,
                        b_over_k=TABLE_B_OVER_K, log_miss_share=g.astype(np.float32),
                        log_fill_scale=tau.astype(np.float32))
    tmp.replace(path)
    return path


@lru_cache(maxsize=1)
def _table():
    z = np.load(TABLE_PATH)
    axes = (z["log_one_minus_phi"], z["log2_l_over_k"], z["b_over_k"])
    return GridInterpolator(axes, z["log_miss_share"]), GridInterpolator(axes, z["log_fill_scale"]), axes


def steady_state(*, context, topk, buffer_slots, correlation, need_fill: bool = True,
                 max_steps: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
    """(misses per step in steady state, fill steps T_C), vectorised, from the precomputed table; k = min(topk,
    context) (a context shorter than the top-k is selected whole).

    The table holds m / (L - B) and T_C / -ln(1 - B/L), smooth over the whole domain (their limits as B -> L
    included), so every point is a lookup: a context that fits the buffer has no steady-state misses; B/k
    and L/k beyond the table (2^25) are clipped; a correlation above its top (1 - 5e-4) follows the table's
    power law in 1 - phi at the top. A T_C beyond ``max_steps`` is ``inf``; ``need_fill=False``: the caller
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
    f_g, f_tau, axes = _table()
    Ls, Bs, ks = L[swap], B[swap], k[swap]
    pts = np.stack([np.minimum(np.log1p(-phi[swap]), axes[0][-1]),        # no clip below: extrapolated
                    np.clip(np.log2(Ls / ks), axes[1][0], axes[1][-1]),
                    np.clip(Bs / ks, axes[2][0], axes[2][-1])], axis=-1)
    m[swap] = np.exp(f_g(pts)) * (Ls - Bs)
    if need_fill:
        t = np.maximum(np.exp(f_tau(pts)) * -np.log1p(-Bs / Ls), 1.0)
        tc[swap] = np.where(t <= max_steps, t, np.inf)
    else:
        tc[swap] = np.nan
    return m, tc


def _enter_next(phi: float, theta: float) -> float:
    """P(s_1 <= theta < s_2) for the stationary AR(1) score: the share of tokens a step selects anew,
    = s int_0^inf pdf(theta - s u) P(N(0, 1) > (theta (1 - phi) + phi s u) / s) du, u = (theta - s_1) / s,
    by Gauss-Legendre on [0, 12] (where it lives as phi -> 1) and on [12, (theta + 9) / s]."""
    s = math.sqrt(1.0 - phi * phi)
    total = 0.0
    for a, b in ((0.0, 12.0), (12.0, max(12.0, (theta + 9.0) / s))):
        if b <= a:
            continue
        g, w = _leggauss(200)
        u = a + (g + 1.0) * (b - a) / 2.0
        f = np.exp(-0.5 * (theta - s * u) ** 2) / math.sqrt(2.0 * math.pi) * ndtr(-(theta * (1.0 - phi) + phi * s * u) / s)
        total += float((f * w).sum()) * (b - a) / 2.0
    return s * total


def top_k_overlap(*, context: float, topk: float, correlation: float) -> float:
    """Expected share of a step's top-k already selected at the previous step: P(s' > theta | s > theta)."""
    L, k = float(context), float(min(topk, context))
    if k >= L:
        return 1.0
    theta = float(ndtri(1.0 - k / L))
    return float(1.0 - L * _enter_next(float(correlation), theta) / k)


def correlation_for_overlap(overlap: float, *, context: float, topk: float) -> float:
    """The score correlation whose consecutive-step top-k overlap at ``context`` is ``overlap``."""
    from scipy.optimize import brentq
    if not 0.0 < overlap < 1.0:
        raise ValueError(f"overlap must be in (0, 1), got {overlap}")
    lo, hi = 0.0, 1.0 - 1e-7
    f = lambda p: top_k_overlap(context=context, topk=topk, correlation=p) - overlap  # noqa: E731
    if f(lo) >= 0:
        return 0.0
    if f(hi) < 0:
        raise ValueError(f"an overlap of {overlap} at a context of {context} tokens and a top-k of {topk} needs a "
                         f"score correlation above {hi}")
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
