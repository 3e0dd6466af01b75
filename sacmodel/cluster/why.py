"""Why no cluster size meets an SLO: the requests that miss it even alone on an idle instance.

A request's TTFT is at least the time to prefill the blocks of its prompt that no earlier request of the trace
had (nothing can have cached them), alone on an idle instance. If more requests than an SLO percentile allows
exceed the bound, no number of instances, router or pool size meets it.
"""
from __future__ import annotations

import math

import numpy as np

from ..data.traces import Trace
from ..serving.predict import predict

GRID_POINTS = 12


def new_tokens(tr: Trace) -> np.ndarray:
    """Prompt tokens of each request that no earlier request of the trace holds (all of them without
    prefix information)."""
    if not tr.has_prefix_info or tr.offsets is None:
        return tr.input_len.astype(np.int64)
    seen: set = set()
    out = np.empty(len(tr), dtype=np.int64)
    for i in range(len(tr)):
        ids = tr.blocks[tr.offsets[i]:tr.offsets[i + 1]].tolist()
        k = 0
        while k < len(ids) and ids[k] in seen:       # a prefix cache matches leading blocks only
            k += 1
        seen.update(ids)
        out[i] = max(1, int(tr.input_len[i]) - k * tr.block_tokens)
    return out


def prefill_floor(host, system: str, tokens: np.ndarray) -> np.ndarray:
    """Lower bound (s) of each request's TTFT: the idle-instance TTFT of a cold prompt of the grid length at or
    below its new tokens (TTFT grows with the prompt, so the grid point below is a bound)."""
    top = int(tokens.max())
    grid = np.unique(np.geomspace(64, max(top, 64), GRID_POINTS).astype(int))
    ttft = np.array([predict(host, system, context=int(n), output=1, concurrency=1, requests=1,
                             prefix_cached=False, draws=1).ttft_mean_ms / 1e3 for n in grid])
    idx = np.searchsorted(grid, tokens, side="right") - 1
    return np.where(idx >= 0, ttft[np.clip(idx, 0, None)], 0.0)


def why_not(host, system: str, tr: Trace, slo: dict) -> str | None:
    """One sentence naming the requests that make a TTFT or E2E SLO impossible at any size, or None."""
    for m, bound_ms in slo.items():
        kind, _, q = m.partition("_")
        if kind not in ("ttft", "e2e") or not m.endswith("_ms"):
            continue
        q = q[:-3]
        floor = prefill_floor(host, system, new := new_tokens(tr)) * 1e3
        if q == "mean":
            if floor.mean() <= bound_ms:
                continue
            lead = f"the requests' mean prefill alone is {floor.mean() / 1e3:,.1f} s"
        elif q.startswith("p") and q[1:].isdigit():
            allowed = math.floor(len(tr) * (1 - int(q[1:]) / 100))
            over = int((floor > bound_ms).sum())
            if over <= allowed:
                continue
            lead = (f"{over:,} request(s) take longer than {bound_ms / 1e3:,.1f} s to prefill alone on an idle "
                    f"instance (the {q} allows {allowed:,})")
        else:
            continue
        i = int(np.argmax(floor))
        return (f"{m} = {bound_ms:,.0f} is out of reach at any size: {lead}; the longest, request {i} "
                f"({int(tr.input_len[i]):,} prompt tokens, {int(new[i]):,} never seen before), takes "
                f"{floor[i] / 1e3:,.1f} s")
    return None
