"""What the searches share: a tally of the predictions they run, and a scan of a grid that runs the costly
evaluation only where the answer needs it, guided by a cheap form of the same quantity (the analytic steady
state, :mod:`sacmodel.serving.analytic`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# a scan evaluates the costly function at the ends of the grid and every PROBE_EVERY points in between (a guard
# against a sign change the cheap form does not show), then where the cheap form, corrected by what the costly
# one gave, says the sign changes
PROBE_EVERY = 16


@dataclass
class Tally:
    """Predictions a search ran, by method: ``engine`` (the event engine), ``analytic`` (its steady state),
    ``closed_form`` (the unloaded closed form, one request alone)."""
    engine: int = 0
    analytic: int = 0
    closed_form: int = 0

    def add(self, method: str, n: int = 1) -> None:
        setattr(self, method, getattr(self, method) + n)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "analytic": self.analytic, "closed_form": self.closed_form}

    def line(self) -> str:
        """'predictions: 14 engine, 30 analytic' (the methods that ran)."""
        parts = [f"{n:,} {k.replace('_', ' ')}" for k, n in self.to_dict().items() if n]
        return "predictions: " + (", ".join(parts) if parts else "none")


def tally_line(counts: dict | None) -> str:
    """The text line of a result's ``predictions`` field."""
    return Tally(**(counts or {})).line()


def _sign(v: float) -> float:
    return math.nan if not math.isfinite(v) else float(np.sign(v))


def _decided(u: float, v: float) -> bool:
    """Nothing to find between two evaluated points: both infeasible, or both feasible with the same sign."""
    if not math.isfinite(u) and not math.isfinite(v):
        return True
    return math.isfinite(u) and math.isfinite(v) and u * v > 0


def scan(n: int, value, hint=None, every: int = PROBE_EVERY) -> dict[int, float]:
    """Evaluate ``value(i)`` at the grid indices ``0..n-1`` a sign-change search needs; returns index -> value.

    Every pair of consecutive evaluated indices whose values change sign (or feasibility: nan on one side) is
    narrowed until the two are grid neighbours, so each such change is located to the same grid interval a full
    scan finds. ``hint``: a cheap estimate of ``value`` at every index (nan where unknown); the next index
    tried is where the hint, shifted by the costly values' offset from it at the pair's ends (interpolated
    linearly), changes sign; without a hint, or when a guess missed, the pair's middle. Assumes no two sign
    changes fall between evaluated points of the same sign that the hint does not show.
    """
    known: dict[int, float] = {}
    guessed: set[int] = set()
    todo = {0, n - 1, *range(0, n, max(1, every))}
    if hint is not None:
        h = np.asarray(hint, dtype=float)
        for i in range(n - 1):
            if not _decided(h[i], h[i + 1]):
                todo |= {i, i + 1}
    while todo:
        for i in sorted(todo):
            known[i] = value(i)
        todo = set()
        keys = sorted(known)
        for i, j in zip(keys, keys[1:]):
            if j == i + 1 or _decided(known[i], known[j]):
                continue
            g = None if hint is None or i in guessed or j in guessed else _guess(h, known, i, j)
            if g is None:
                todo.add((i + j) // 2)
            else:
                todo |= g
                guessed |= g
    return known


def _guess(h: np.ndarray, known: dict, i: int, j: int) -> set[int] | None:
    """The grid neighbours (k - 1, k) inside (i, j) where the hint, corrected by the known offsets at i and j,
    first changes sign; None when the hint cannot say."""
    if not all(math.isfinite(x) for x in (h[i], h[j], known[i], known[j])):
        return None
    k = np.arange(i, j + 1)
    if not np.isfinite(h[i:j + 1]).all():
        return None
    off = np.interp(k, [i, j], [known[i] - h[i], known[j] - h[j]])
    c = h[i:j + 1] + off
    change = np.flatnonzero(np.sign(c[1:]) != np.sign(c[:-1]))
    if not len(change):
        return None
    a = i + int(change[0])
    return {x for x in (a, a + 1) if i < x < j} or None
