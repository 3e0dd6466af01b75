"""Numpy executable reference of sparse top-k KV access: what each decode step moves.

A layer-first KV pool in a numpy byte array (entries of ``entry_bytes``, pages of ``page_tokens`` tokens),
lightning-indexer scores -> top-k -> gather, and a per-request LRU GPU buffer of ``buffer_slots`` entries
carried across decode steps. Two drivers: real query/key vectors (:func:`decode_step`), and the score
process of :mod:`sacmodel.serving.access` run literally (:func:`simulate`): fixed random keys, a query that drifts
from step to step, the top-k by score, and a buffer that starts empty at admission, as SGLang HiSparse
gives a request whose prefix is cached. Counting conventions (shared with :func:`sacmodel.access_counts`):

- ``misses``: entries copied into the buffer; ``hits``: selected entries already resident.
- A context that fits in the buffer (``buffer_slots >= context``) is loaded whole at the first step
  (HiSparse skips the swap-in afterwards): ``context`` misses once, then only hits.
- ``bytes_fetched`` = misses x entry_bytes; ``cachelines`` = 64 B lines each missed entry touches at its
  offset in the layer region (alignment included); ``pages`` = distinct pages holding missed entries;
  ``rdma_ops`` = one READ per run of adjacent missed entries. All summed over steps, for one layer.
"""
from __future__ import annotations

import numpy as np

LINE = 64


class KVPool:
    """Layer-first pool: layer l's entries are contiguous, token t at byte ``t * entry_bytes`` of its region."""

    def __init__(self, layers: int, context: int, entry_bytes: int, page_tokens: int = 64):
        if min(layers, context, entry_bytes, page_tokens) <= 0:
            raise ValueError("layers, context, entry_bytes and page_tokens must be positive")
        self.layers, self.context, self.entry_bytes, self.page_tokens = layers, context, entry_bytes, page_tokens
        self.data = np.zeros(layers * context * entry_bytes, dtype=np.uint8)

    def offset(self, layer: int, token) -> np.ndarray:
        return layer * self.context * self.entry_bytes + np.asarray(token) * self.entry_bytes

    def write(self, layer: int, tokens: np.ndarray, entries: np.ndarray) -> None:
        raw = np.ascontiguousarray(entries).view(np.uint8).reshape(len(tokens), -1)
        if raw.shape[1] != self.entry_bytes:
            raise ValueError(f"entry is {raw.shape[1]} B, pool entries are {self.entry_bytes} B")
        for t, row in zip(tokens, raw):
            o = int(self.offset(layer, t))
            self.data[o:o + self.entry_bytes] = row

    def gather(self, layer: int, tokens: np.ndarray, dtype=np.float32) -> np.ndarray:
        idx = self.offset(layer, np.asarray(tokens))[:, None] + np.arange(self.entry_bytes)[None, :]
        return self.data[idx].view(dtype).reshape(len(tokens), -1)


class LRUBuffer:
    """Per-request, per-layer GPU buffer of ``slots`` entries with least-recently-used eviction."""

    def __init__(self, context: int, slots: int):
        self.context, self.slots = context, slots
        self.resident = np.zeros(context, dtype=bool)
        self.last = np.full(context, -1, dtype=np.int64)
        self.step = 0

    def access(self, tokens: np.ndarray) -> tuple[int, np.ndarray]:
        """Touch ``tokens`` (one step's selection); returns (hits, sorted missed token ids)."""
        tokens = np.unique(tokens)
        if self.step == 0 and self.slots >= self.context:   # whole context fits: load it once
            missed = np.arange(self.context)
            self.resident[:] = True
            self.last[tokens] = self.step
            self.step += 1
            return 0, missed
        if len(tokens) > self.slots:
            raise ValueError(f"{len(tokens)} selected entries do not fit in {self.slots} buffer slots")
        res = self.resident[tokens]
        hits, missed = int(res.sum()), tokens[~res]
        overflow = int(self.resident.sum()) + len(missed) - self.slots
        if overflow > 0:
            cand = np.flatnonzero(self.resident)
            cand = cand[~np.isin(cand, tokens)]
            order = np.lexsort((cand, self.last[cand]))       # oldest first, ties by token id
            self.resident[cand[order[:overflow]]] = False
        self.resident[missed] = True
        self.last[tokens] = self.step
        self.step += 1
        return hits, missed


def lines_touched(tokens: np.ndarray, entry_bytes: int, line: int = LINE) -> int:
    """Cache lines the given entries touch, each counted per entry, at offsets ``token * entry_bytes``."""
    start = np.asarray(tokens, dtype=np.int64) * entry_bytes
    return int(((start + entry_bytes - 1) // line - start // line + 1).sum())


def step_counts(missed: np.ndarray, entry_bytes: int, page_tokens: int) -> dict[str, int]:
    """What one step moves for sorted missed token ids."""
    m = len(missed)
    return {"misses": m, "bytes_fetched": m * entry_bytes,
            "cachelines": lines_touched(missed, entry_bytes),
            "pages": int(len(np.unique(missed // page_tokens))) if m else 0,
            "rdma_ops": int(m - np.count_nonzero(np.diff(missed) == 1)) if m else 0}


KEYS = ("misses", "hits", "bytes_fetched", "cachelines", "pages", "rdma_ops")


def simulate(*, context: int, topk: int, steps: int = 100, buffer_slots: int = 4096, correlation=0.99,
             dims: int = 256, entry_bytes: int = 1152, page_tokens: int = 64, seed: int = 0,
             per_step: bool = False) -> dict:
    """Run the drifting-query score process through the LRU buffer; totals over ``steps`` for one layer.

    Keys: ``context`` fixed random vectors in ``dims`` dimensions. Query: ``q(t+1) = phi q(t) +
    sqrt(1 - phi^2) eps`` with ``phi = correlation`` (a number, or one value per step). Each step selects
    the ``min(topk, context)`` tokens with the largest ``q . key`` and touches them in a buffer that starts
    empty. ``per_step=True`` adds ``"misses_per_step"`` (array over steps, from admission).
    """
    if context <= 0 or topk <= 0 or steps <= 0 or dims <= 0:
        raise ValueError("context, topk, steps and dims must be positive")
    k = min(topk, context)
    if buffer_slots < k:
        raise ValueError(f"buffer_slots ({buffer_slots}) must hold one step's selection (min(topk, context) = {k})")
    phi = np.broadcast_to(np.asarray(correlation, dtype=float), (steps,))
    if np.any((phi < 0) | (phi >= 1)):
        raise ValueError("correlation must be in [0, 1)")
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((context, dims)).astype(np.float32)
    q = rng.standard_normal(dims).astype(np.float32)
    buf = LRUBuffer(context, buffer_slots)
    tot = dict.fromkeys(KEYS, 0)
    series = np.zeros(steps)
    for t in range(steps):
        scores = keys @ q
        sel = np.argpartition(-scores, k - 1)[:k] if k < context else np.arange(context)
        hits, missed = buf.access(sel)
        tot["hits"] += hits
        series[t] = len(missed)
        for key, v in step_counts(missed, entry_bytes, page_tokens).items():
            tot[key] += v
        if t + 1 < steps:
            p = phi[t + 1]
            q = (p * q + np.sqrt(1.0 - p * p) * rng.standard_normal(dims)).astype(np.float32)
    if per_step:
        tot["misses_per_step"] = series
    return tot


# ---- real vectors ---------------------------------------------------------------------------------
def indexer_scores(q_index: np.ndarray, weights: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """DSA lightning indexer: score[t] = sum_h w_h * relu(q_h . k_t); q (H, D), w (H,), keys (L, D)."""
    return (np.maximum(q_index @ keys.T, 0.0) * weights[:, None]).sum(axis=0)


def select_topk(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores (ties by lower index), sorted ascending."""
    k = min(k, len(scores))
    return np.sort(np.argsort(-scores, kind="stable")[:k])


def attention(q: np.ndarray, K: np.ndarray, V: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Softmax attention of heads q (H, Dk) over K (N, Dk), V (N, Dv); ``mask`` (N,) keeps True entries."""
    s = q @ K.T / np.sqrt(K.shape[1])
    if mask is not None:
        s = np.where(mask[None, :], s, -np.inf)
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=1, keepdims=True)) @ V


def decode_step(pool: KVPool, buffer: LRUBuffer, layer: int, *, q_index, index_weights, index_keys, q_attn,
                topk: int, v_dim: int) -> dict:
    """One layer of one decode step with real vectors: indexer -> top-k -> buffer -> gather -> attention.

    Pool entries are float32 vectors [V part (v_dim) | rest] read as keys whole (MLA/MQA style).
    Returns the selection, the sparse-attention output and what the step moved.
    """
    sel = select_topk(indexer_scores(q_index, index_weights, index_keys), topk)
    hits, missed = buffer.access(sel)
    entries = pool.gather(layer, sel)                    # from the buffer or, for misses, from the pool
    out = attention(q_attn, entries, entries[:, :v_dim])
    counts = step_counts(missed, pool.entry_bytes, pool.page_tokens)
    counts["hits"] = hits
    return {"selected": sel, "output": out, "counts": counts}
