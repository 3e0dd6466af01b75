"""Request traces: read public traces and replay them through the serving engine.

Formats: Mooncake JSONL (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token
prefix blocks) and Azure LLM inference CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``). A broken line is
reported with its file and line number. For Mooncake traces the cached part of each prompt is the run of
leading blocks seen in earlier requests (an unbounded prefix cache); Azure traces carry no prefix
information, so ``cache="none"`` (everything prefilled) or ``"all"`` (every prompt cached) must be chosen.
"""
from __future__ import annotations

import csv
import json
import math
from array import array
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from .measured import DataError
from .serving import Prediction, Requests, capacity, resolve, run_engine

MOONCAKE_BLOCK = 512   # tokens per hash_id (shared/data/README.md)


@dataclass
class Trace:
    """Per-request arrays: arrival (s from the first request), input and output tokens, cached prefix tokens."""
    name: str
    arrival: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    cached: np.ndarray
    has_prefix_info: bool
    # prefix blocks of every request, flat (request i: blocks[offsets[i]:offsets[i + 1]]), each of
    # ``block_tokens`` tokens; None when the trace has no prefix information
    blocks: np.ndarray | None = None
    offsets: np.ndarray | None = None
    block_tokens: int = MOONCAKE_BLOCK
    lines: np.ndarray | None = None       # line of the file each request came from

    def __len__(self) -> int:
        return len(self.arrival)

    def head(self, n: int) -> "Trace":
        blocks, offsets = self.blocks, self.offsets
        if offsets is not None:
            offsets = offsets[:n + 1]
            blocks = blocks[:offsets[-1]]
        return Trace(self.name, self.arrival[:n], self.input_len[:n], self.output_len[:n], self.cached[:n],
                     self.has_prefix_info, blocks, offsets, self.block_tokens,
                     None if self.lines is None else self.lines[:n])


def _bad(path, line, msg):
    return DataError(f"{path}:{line}: {msg}")


def load_trace(path: str | Path, limit: int | None = None) -> Trace:
    """Read a Mooncake JSONL or Azure CSV trace (first ``limit`` requests)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such trace file")
    if path.suffix == ".jsonl":
        return _mooncake(path, limit)
    if path.suffix == ".csv":
        return _azure(path, limit)
    raise DataError(f"{path}: unknown trace format (expected .jsonl Mooncake or .csv Azure)")


def _positive_int(v, path, line, name, allow_zero=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < (0 if allow_zero else 1):
        raise _bad(path, line, f"{name} must be a {'non-negative' if allow_zero else 'positive'} integer, "
                               f"got {v!r}")
    return int(v)


def iter_mooncake(path: str | Path, limit: int | None = None):
    """Stream a Mooncake JSONL trace: yields (line, timestamp s, input, output, hash_ids) per request.

    Lines are validated one at a time (a broken one raises naming the file and line); nothing is kept.
    """
    path = Path(path)
    n = 0
    with path.open() as fh:
        for ln, text in enumerate(fh, 1):
            if limit is not None and n >= limit:
                break
            if not text.strip():
                continue
            try:
                d = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _bad(path, ln, f"not valid JSON ({exc.msg})") from None
            if not isinstance(d, dict):
                raise _bad(path, ln, "expected a JSON object")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in d:
                    raise _bad(path, ln, f"missing field {key!r}")
            t = d["timestamp"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                raise _bad(path, ln, f"timestamp must be a non-negative number of ms, got {t!r}")
            n_in = _positive_int(d["input_length"], path, ln, "input_length")
            n_out = _positive_int(d["output_length"], path, ln, "output_length")
            ids = d.get("hash_ids", [])
            try:
                if not isinstance(ids, list):
                    raise TypeError
                array("q", ids)                  # integers only (checked in C)
            except (TypeError, OverflowError):
                raise _bad(path, ln, "hash_ids must be a list of integers") from None
            n += 1
            yield ln, t / 1e3, n_in, n_out, ids


class _SeenIds:
    """Block ids seen so far: a byte per id for the dense non-negative ids of remapped traces (Mooncake's),
    a set for the others, so that a million-request trace does not hold millions of int objects."""
    DENSE = 1 << 30

    def __init__(self):
        self.bits = bytearray()
        self.other: set = set()

    def __contains__(self, h: int) -> bool:
        if 0 <= h < self.DENSE:
            return h < len(self.bits) and self.bits[h] == 1
        return h in self.other

    def leading(self, ids) -> int:
        n = 0
        for h in ids:
            if h not in self:
                break
            n += 1
        return n

    def add(self, ids) -> None:
        bits = self.bits
        for h in ids:
            if 0 <= h < self.DENSE:
                if h >= len(bits):
                    bits.extend(bytes(max(h + 1 - len(bits), len(bits) // 2)))
                bits[h] = 1
            else:
                self.other.add(h)


def _mooncake(path: Path, limit):
    ts, inp, outp, hit = array("d"), array("q"), array("q"), array("d")
    blocks, offsets, lines = array("q"), array("q", [0]), array("q")
    seen = _SeenIds()
    for ln, t, n_in, n_out, ids in iter_mooncake(path, limit):
        lead = seen.leading(ids)
        seen.add(ids)
        ts.append(t)
        inp.append(n_in)
        outp.append(n_out)
        hit.append(min(lead * MOONCAKE_BLOCK, n_in - 1))   # at least the last token is computed
        blocks.extend(ids)
        offsets.append(len(blocks))
        lines.append(ln)
    if not ts:
        raise DataError(f"{path}: no requests")
    a = np.frombuffer(ts, float)
    return Trace(path.stem, a - a.min(), np.frombuffer(inp, np.int64), np.frombuffer(outp, np.int64),
                 np.frombuffer(hit, float), True, np.frombuffer(blocks, np.int64), np.frombuffer(offsets, np.int64),
                 lines=np.frombuffer(lines, np.int64))


def _azure(path: Path, limit):
    ts, inp, outp = [], [], []
    with path.open(newline="") as fh:
        rd = csv.reader(fh)
        header = next(rd, None)
        if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
            raise _bad(path, 1, f"expected header TIMESTAMP,ContextTokens,GeneratedTokens, got {header}")
        for ln, row in enumerate(rd, 2):
            if limit is not None and len(ts) >= limit:
                break
            if not row:
                continue
            if len(row) != 3:
                raise _bad(path, ln, f"expected 3 columns, got {len(row)}")
            try:
                stamp = datetime.fromisoformat(row[0][:26])
                n_in, n_out = int(row[1]), int(row[2])
            except ValueError as exc:
                raise _bad(path, ln, f"bad value ({exc})") from None
            if n_in < 1 or n_out < 0:
                raise _bad(path, ln, "token counts must be positive")
            ts.append(stamp.timestamp())
            inp.append(n_in)
            outp.append(max(n_out, 1))
    if not ts:
        raise DataError(f"{path}: no requests")
    a = np.array(ts)
    return Trace(path.stem, a - a.min(), np.array(inp), np.array(outp), np.zeros(len(a)), False)


def summarize(trace: Trace, topk: int = 2048) -> dict:
    """Arrival rate, length percentiles, share of prompts longer than top-k, cached-token ratio."""
    dur = float(trace.arrival.max()) if len(trace) > 1 else 0.0
    pct = lambda x: {f"p{q}": float(np.percentile(x, q)) for q in (50, 90, 99)}  # noqa: E731
    return {"name": trace.name, "requests": len(trace), "duration_s": dur,
            "rate_req_s": (len(trace) - 1) / dur if dur > 0 else math.nan,
            "input_mean": float(trace.input_len.mean()), "input": pct(trace.input_len),
            "output_mean": float(trace.output_len.mean()), "output": pct(trace.output_len),
            "share_input_above_topk": float((trace.input_len > topk).mean()),
            "cached_token_ratio": (float(trace.cached.sum() / trace.input_len.sum())
                                   if trace.has_prefix_info else None)}


def replay(scenario, system: str, trace: Trace, *, concurrency: int | None = None, time_scale: float = 1.0,
           cache: str = "trace", context_resolution: float = 1 / 16, **resources) -> Prediction:
    """Replay ``trace`` (arrivals divided by ``time_scale``) through the engine for ``system``.

    ``cache``: 'trace' (Mooncake prefix blocks), 'none' (prefill everything) or 'all' (every prompt cached).
    ``concurrency``: requests in flight at most (default: what the GPUs' memory holds at the trace's mean
    lengths). Decode steps use each rank's mean context, rounded to ``context_resolution``.
    """
    if cache not in ("trace", "none", "all"):
        raise DataError(f"cache must be 'trace', 'none' or 'all', not {cache!r}")
    if cache == "trace" and not trace.has_prefix_info:
        raise DataError(f"{trace.name}: the trace has no prefix information; choose cache='none' or 'all'")
    if not time_scale > 0:
        raise DataError("time_scale must be positive")
    cfg = resolve(scenario, system, **resources)
    L_max, O_max = int(trace.input_len.max()), int(trace.output_len.max())
    pred = Prediction(system, cfg.topo.name, int(trace.input_len.mean()), int(trace.output_len.mean()),
                      concurrency or 0, len(trace), True, None,
                      config={"trace": trace.name, "time_scale": time_scale, "cache": cache})
    alone = capacity(cfg, L_max, O_max, 1)
    if not alone["feasible"]:
        pred.feasible, pred.limit, pred.capacity = False, f"{alone['limit']} (largest request alone)", alone
        return pred
    if concurrency is None:
        concurrency = memory_concurrency(cfg, int(trace.input_len.mean()), int(trace.output_len.mean()))
        pred.concurrency = concurrency
    cached = {"trace": trace.cached, "none": np.zeros(len(trace)), "all": trace.input_len - 1.0}[cache]
    reqs = Requests(trace.arrival / time_scale, trace.input_len, trace.output_len, np.asarray(cached, float))
    res = run_engine(cfg, reqs, concurrency, context_resolution=context_resolution)
    for k, v in res.items():
        setattr(pred, k, v)
    return pred


def memory_concurrency(cfg, context: int, output: int) -> int:
    """Largest concurrency whose memory use fits (bisection on :func:`capacity`)."""
    lo, hi = 1, 1
    while capacity(cfg, context, output, hi * 2)["feasible"] and hi < 1 << 16:
        hi *= 2
    hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if capacity(cfg, context, output, mid)["feasible"]:
            lo = mid
        else:
            hi = mid
    return lo
