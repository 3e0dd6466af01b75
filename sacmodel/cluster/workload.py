"""What a cluster replays: a request trace, or the measured round of a testbed run."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.records import DataError
from ..data.traces import Trace, load_trace


@dataclass
class RunTrace(Trace):
    """The measured round of a testbed run: released at once, at most ``concurrency`` in flight, its prompt
    cached by the run's first round."""
    concurrency: int = 1


def load_workload(trace, limit: int | None = None) -> tuple[Trace, dict]:
    """A trace from a Trace, a Mooncake JSONL / Azure CSV path, or a testbed run (.json: its measured round,
    all requests released at once, the prompt cached by the run's first round)."""
    if isinstance(trace, RunTrace):
        return trace, {"warm": True, "concurrency": trace.concurrency}
    if isinstance(trace, Trace):
        return (trace if limit is None else trace.head(limit)), {}
    p = Path(trace)
    if p.suffix != ".json":
        return load_trace(p, limit=limit), {}
    if not p.exists():
        raise DataError(f"{p}: no such trace file")
    try:
        d = json.loads(p.read_text())
        cfg, reqs = d["config"], d["round2"]["per_request"]
        rows = [(int(r["prompt_len"]), int(r["output_len"])) for r in reqs if r.get("success", True)]
        conc = int(cfg["max_concurrency"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{p}: not a testbed run file ({exc.__class__.__name__}: {exc})") from None
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise DataError(f"{p}: no successful requests")
    inp = np.array([r[0] for r in rows])
    out = np.maximum(np.array([r[1] for r in rows]), 1)
    nb = -(-inp // 512)
    offsets = np.concatenate([[0], np.cumsum(nb)])
    blocks = np.concatenate([np.arange(k) for k in nb])     # one shared prompt: the same blocks for all
    tr = RunTrace(p.stem, np.zeros(len(rows)), inp, out, inp - 1.0, True, blocks, offsets, concurrency=conc)
    return tr, {"warm": True, "concurrency": conc}
