"""Entries a HiSparse request loads into its GPU buffer, step by step: its miss curve.

A request admitted on a cached prefix starts with an empty buffer: its first steps load the buffer
(``B`` entries over ``T_C`` steps), then the steady misses of the score process at its current correlation
(:mod:`sacmodel.serving.access`, :func:`sacmodel.serving.config.score_correlation`). The engine keeps the
cumulative curve C[a] = entries loaded in steps 0..a-1 per layer."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from ..access import steady_state
from ..config import Config, score_correlation


def cumulative_misses(cfg: Config, context: int, max_age: int) -> np.ndarray:
    """C[a] for a = 0..max_age+1 (see :meth:`Model.misses`); zeros when nothing is swapped."""
    n = max_age + 2
    if not _swaps(cfg, context, max_age):
        return np.zeros(n)
    per = _per_step(cfg, context, np.arange(n, dtype=float))
    return np.concatenate([[0.0], np.cumsum(per)])[:n]


def cumulative_misses_at(cfg: Config, context: int, ages) -> np.ndarray:
    """C[a] at any ages (array), also far beyond an engine run: exact sums up to ``EXACT_AGES``, then the
    per-step misses (smooth there: settled correlation, slowly growing context) integrated on a geometric grid."""
    ages = np.asarray(ages, dtype=float)
    top = int(np.max(ages)) if ages.size else 0
    if top <= EXACT_AGES:
        return cumulative_misses(cfg, context, max(top, 1))[ages.astype(int)]
    if not _swaps(cfg, context, top):
        return np.zeros(ages.shape)
    c0 = cumulative_misses(cfg, context, EXACT_AGES)          # C[0..EXACT_AGES + 1]
    g = np.unique(np.concatenate([np.geomspace(EXACT_AGES, top + 1, 512), [float(EXACT_AGES), top + 1.0]]))
    m = _per_step(cfg, context, g, first_fill=False)
    cg = c0[EXACT_AGES] + np.concatenate([[0.0], np.cumsum(np.diff(g) * (m[1:] + m[:-1]) / 2)])
    out = np.interp(ages, g, cg)
    low = ages <= EXACT_AGES
    out[low] = c0[ages[low].astype(int)]
    return out


EXACT_AGES = 8192


def _swaps(cfg: Config, context: int, max_age: int) -> bool:
    return bool(cfg.hisparse and cfg.model.sparse and cfg.device_buffer < context + max_age)


def _per_step(cfg: Config, context: int, ages: np.ndarray, first_fill: bool = True) -> np.ndarray:
    """Entries loaded per layer at each age (decode steps since admission): the top-k into an empty buffer at
    age 0, the buffer's fill over ``T_C`` steps, then the steady misses at the age's correlation and context
    (the top-k is min(index_topk, context + age): a context shorter than the top-k is selected whole)."""
    B = float(cfg.device_buffer)
    phi = score_correlation(cfg, ages)
    m, _ = steady_state(context=context + ages, topk=cfg.model.topk, buffer_slots=B, correlation=phi,
                        need_fill=False)
    if B >= context:            # fits the buffer at first: loaded whole once, misses only as it grows past B
        per = np.where(context + ages > B, m, 0.0)
        if first_fill:
            per[ages == 0] = context
        return per
    if not first_fill:
        return m
    k = float(min(cfg.model.topk, context))
    # just past the buffer it may take longer than the request's life to fill: count that life at most
    t_fill = float(steady_state(context=context, topk=k, buffer_slots=B, correlation=score_correlation(cfg, np.zeros(1)),
                                max_steps=len(ages) + 2)[1][0])
    t_fill = max(1.0, t_fill if math.isfinite(t_fill) else float(len(ages)))
    per = np.where(ages < t_fill, (B - k) / max(t_fill - 1.0, 1.0), m)
    per[ages == 0] = k
    return per


CURVE_CACHE_BYTES = 64 << 20
"""Bytes of miss curves a cache keeps (least recently used ones leave first): one curve per prompt length, each
as long as the longest output, so 8,758 lengths x 7,070 steps held 0.5 GB and took a run past 1 GB."""


class CurveCache(OrderedDict):
    """An LRU mapping of curves (arrays or None) bounded by :data:`CURVE_CACHE_BYTES` of their data."""

    limit = CURVE_CACHE_BYTES

    def __init__(self):
        super().__init__()
        self.nbytes = 0

    def get(self, key, default=None):
        x = OrderedDict.get(self, key, _MISSING)
        if x is _MISSING:
            return default
        self.move_to_end(key)
        return x

    def put(self, key, value):
        self[key] = value
        self.nbytes += _size(value)
        while self.nbytes > self.limit and len(self) > 1:
            self.nbytes -= _size(self.popitem(last=False)[1])
        return value

    def clear(self) -> None:
        super().clear()
        self.nbytes = 0


_MISSING = object()


def _size(x) -> int:
    """Bytes a cached curve keeps alive: its whole base array (a request's curve is a view of its length's; an
    array unpickled in a worker process has a bytes buffer as its base, which holds its own data)."""
    if x is None:
        return 0
    return x.base.nbytes if isinstance(x.base, np.ndarray) else x.nbytes


class MissCurves:
    """The miss curves of one run's requests, each computed once while it is in use: by prompt length, and cut
    to a request's life (None when it loads nothing)."""

    def __init__(self, model, max_out: int):
        self.model, self.max_out = model, max_out
        self._by_context = CurveCache()
        self._by_shape = CurveCache()
        # the last shape asked and its curve: most requests of a run share their shape, and a repeated lookup
        # would only move the same entry to the end of the cache, where it already is
        self._last: tuple = (None, None)

    def of_context(self, c: int) -> np.ndarray:
        x = self._by_context.get(c)
        if x is None:
            x = self._by_context.put(c, self.model.misses(c, self.max_out))
        return x

    def over_life(self, shape: tuple[int, int]) -> np.ndarray | None:
        """C[0..steps] of a request of ``shape`` (prompt length, decode steps); None when it loads nothing
        (its share of the rank's miss sums is 0 throughout)."""
        last = self._last
        if shape == last[0]:
            return last[1]
        x = self._by_shape.get(shape, _MISSING)
        if x is _MISSING:
            if shape[1] > self.max_out:        # a request longer than any so far (a cluster adds them as they come)
                self.max_out = max(shape[1], 2 * self.max_out)
                self._by_context.clear()
            x = self.of_context(shape[0])[:shape[1] + 1]
            x = self._by_shape.put(shape, x if x.any() else None)
        self._last = (shape, x)
        return x
