"""What a cluster replays: a request trace, or the measured round of a testbed run."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from ..data.records import DataError, E2ERun, first_error, read_json
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
    if not isinstance(trace, (str, Path)):
        raise DataError(f"a trace is a file path or a Trace, not {type(trace).__name__}")
    p = Path(trace)
    if p.suffix != ".json":
        return load_trace(p, limit=limit), {}
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"limit must be a positive whole number of requests, got {limit!r}")
    rows, conc = _run_requests(p)
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise DataError(f"{p}: no successful requests")
    inp = np.array([r[0] for r in rows], dtype=np.int64)
    out = np.maximum(np.array([r[1] for r in rows], dtype=np.int64), 1)
    nb = -(-inp // 512)
    offsets = np.concatenate([[0], np.cumsum(nb)])
    blocks = np.concatenate([np.arange(k) for k in nb])     # one shared prompt: the same blocks for all
    tr = RunTrace(p.stem, np.zeros(len(rows)), inp, out, inp - 1.0, True, blocks, offsets, concurrency=conc)
    return tr, {"warm": True, "concurrency": conc}


def _run_requests(p: Path) -> tuple[list[tuple[int, int]], int]:
    """(prompt, output) tokens of the successful requests of a testbed run's measured round, and its
    concurrency; the file is read and validated by the run schema (:mod:`sacmodel.data.records`)."""
    d = read_json(p)
    if not isinstance(d, dict) or "round2" not in d:
        raise DataError(f"{p}: not a testbed run file (no 'round2'): replay takes the measured round of an "
                        "e2e_bench_fast run, or a Mooncake .jsonl / Azure .csv trace")
    try:
        run = E2ERun.model_validate(d)
    except ValidationError as exc:
        raise DataError(f"{p}: {first_error(exc)}") from None
    ctx = run.config.target_input_tokens
    rows = [(q.prompt_len or ctx, q.output_len) for q in run.round2.per_request if q.success is not False]
    return rows, run.config.max_concurrency
