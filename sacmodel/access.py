"""Closed-form expected access counts of the synthetic top-k process (counterpart of ``reference.simulate``).

Model, per layer: step 0 selects k = min(topk, L) tokens at random (all cold misses). Each later step keeps
round(overlap k) of them (resident, so hits) and draws n = k - keep new tokens uniformly from the L - k
others; a new token hits iff it is among the R - k resident non-selected tokens, R = min(B, D) with D the
expected number of distinct tokens touched so far (the buffer only evicts once full). Missed tokens are
spread uniformly, so pages follow hypergeometric coverage and RDMA runs the adjacent-pair count.
A context that fits the buffer is loaded whole once (exact counts).
"""
from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from .costs import lines_per_entry
from .reference import KEYS, _check, lines_touched, new_per_step


def expected_pages(m: float, context: int, page_tokens: int) -> float:
    """Expected distinct pages holding ``m`` tokens drawn without replacement from ``context`` tokens."""
    if m <= 0:
        return 0.0
    if m >= context:
        return float(-(-context // page_tokens))
    sizes = np.full(context // page_tokens, page_tokens, dtype=float)
    if context % page_tokens:
        sizes = np.append(sizes, context % page_tokens)
    # P(page untouched) = C(L - p, m) / C(L, m), with real m via log-gamma
    lg = lambda a, b: gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)  # noqa: E731
    ok = context - sizes >= m
    p_none = np.where(ok, np.exp(lg(np.maximum(context - sizes, m), m) - lg(context, m)), 0.0)
    return float((1.0 - p_none).sum())


def expected_runs(m: float, context: int) -> float:
    """Expected runs of adjacent tokens among ``m`` tokens drawn from ``context``: m - m(m-1)/L."""
    return 0.0 if m <= 0 else max(1.0, m - m * (m - 1) / context)


def miss_series(context: int, topk: int, steps: int, buffer_slots: int, overlap: float) -> np.ndarray:
    """Expected misses at each step (length ``steps``)."""
    _check(context, topk, steps, buffer_slots, overlap)
    L, B = context, buffer_slots
    k = min(topk, L)
    if B >= L:
        return np.array([float(L)] + [0.0] * (steps - 1))
    n_new = new_per_step(context, topk, overlap)
    out = np.empty(steps)
    out[0] = k
    D = float(k)
    for t in range(1, steps):
        resident_others = min(B, D) - k
        p_hit = resident_others / (L - k)
        out[t] = n_new * (1.0 - p_hit)
        D += n_new * (1.0 - (D - k) / (L - k))
    return out


def access_counts(*, context: int, topk: int, entry_bytes: int = 656, steps: int = 100,
                  buffer_slots: int = 4096, overlap: float = 0.9, page_tokens: int = 64) -> dict[str, float]:
    """Expected totals of ``misses, hits, bytes_fetched, cachelines, pages, rdma_ops`` over ``steps``."""
    L = context
    k = min(topk, L)
    misses = miss_series(context, topk, steps, buffer_slots, overlap)
    if buffer_slots >= L:   # whole context loaded once: exact
        return {"misses": float(L), "hits": float((steps - 1) * k), "bytes_fetched": float(L * entry_bytes),
                "cachelines": float(lines_touched(np.arange(L), entry_bytes)),
                "pages": float(-(-L // page_tokens)), "rdma_ops": 1.0}
    total = float(misses.sum())
    out = {"misses": total, "hits": float(steps * k - total), "bytes_fetched": total * entry_bytes,
           "cachelines": total * lines_per_entry(entry_bytes),
           "pages": float(sum(expected_pages(m, L, page_tokens) for m in misses)),
           "rdma_ops": float(sum(expected_runs(m, L) for m in misses))}
    assert set(out) == set(KEYS)
    return out


def steady_state_misses(context: float, topk: float, buffer_slots: float, overlap: float) -> float:
    """Long-run expected misses per step (buffer full): n_new x (1 - (B - k)/(L - k)); 0 if L <= B.

    ``n_new = k (1 - overlap)`` without rounding, so that the serving model is smooth in ``overlap``.
    """
    k = min(topk, context)
    if buffer_slots >= context:
        return 0.0
    n_new = min(k * (1.0 - overlap), context - k)
    return n_new * (1.0 - (buffer_slots - k) / (context - k))
