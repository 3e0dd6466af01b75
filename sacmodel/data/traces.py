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
from pydantic import ValidationError

from ..util.reading import check_input, iter_lines
from .records import LIMITS, AzureRecord, DataError, MooncakeRecord, first_error, json_line

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
    # a generated ladder's stages [(requests/s, seconds), ...], run back to back from 0 (None: not a ladder)
    stages: tuple | None = None

    def __len__(self) -> int:
        return len(self.arrival)

    def head(self, n: int) -> "Trace":
        blocks, offsets = self.blocks, self.offsets
        if offsets is not None:
            offsets = offsets[:n + 1]
            blocks = blocks[:offsets[-1]]
        return Trace(self.name, self.arrival[:n], self.input_len[:n], self.output_len[:n], self.cached[:n],
                     self.has_prefix_info, blocks, offsets, self.block_tokens,
                     None if self.lines is None else self.lines[:n], self.stages)


def _bad(path, line, msg):
    return DataError(f"{path}:{line}: {msg}")


def load_trace(path: str | Path, limit: int | None = None) -> Trace:
    """Read a Mooncake JSONL or Azure CSV trace (first ``limit`` requests).

    Requests must be in time order; at most ``LIMITS['trace_requests']`` (1,000,000) are read per call
    (pass ``limit`` to read the head of a longer trace). Errors name the file and line.
    """
    if not isinstance(path, (str, Path)):
        raise DataError(f"a trace is a file path, not {type(path).__name__}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"limit must be a positive whole number of requests, got {limit!r}")
    if limit is not None and limit > LIMITS["trace_requests"]:
        raise DataError(f"limit {limit} is over the {LIMITS['trace_requests']}-request limit per call")
    path = Path(path)
    check_input(path, "trace file", DataError)
    if path.suffix == ".jsonl":
        return _mooncake(path, limit)
    if path.suffix == ".csv":
        return _azure(path, limit)
    raise DataError(f"{path}: unknown trace format (expected .jsonl Mooncake or .csv Azure)")


def _lines(path: Path):
    """(line number, text) of a trace file, streamed through :func:`sacmodel.util.reading.iter_lines` (regular
    files only, each line checked for length and UTF-8)."""
    for ln, raw in iter_lines(path, line_bytes=LIMITS["line_bytes"], limit=LIMITS["trace_bytes"],
                              what="trace file", err=DataError):
        try:
            yield ln, raw.decode("utf-8-sig" if ln == 1 else "utf-8")
        except UnicodeDecodeError:
            raise _bad(path, ln, "not UTF-8 text") from None


MAX_SPAN_S = 1e9
"""The longest a trace may span, first to last request (s; about 32 years): a timestamp beyond it is a broken
field, not a workload (a 10^15 ms stamp gave a 'successful' 10^12 s trace)."""


def _too_long(span: float, shown: str) -> str:
    return (f"timestamp {shown} is {span:.3g} s after the first request's: a trace spans at most "
            f"{MAX_SPAN_S:.0e} s (about 32 years)")


class _Requests:
    """Collects requests in time order, up to the per-call limit."""

    def __init__(self, path: Path, limit: int | None):
        self.path, self.limit = path, limit
        self.ts: list[float] = []
        self.inp: list[int] = []
        self.outp: list[int] = []

    def full(self, ln: int) -> bool:
        if self.limit is not None and len(self.ts) >= self.limit:
            return True
        if len(self.ts) >= LIMITS["trace_requests"]:
            raise _bad(self.path, ln, f"more than {LIMITS['trace_requests']} requests; read the head of the "
                                      "trace with limit= (--limit) or split it")
        return False

    def add(self, ln: int, t: float, n_in: int, n_out: int, shown: str) -> None:
        if self.ts and t < self.ts[-1]:
            raise _bad(self.path, ln, f"timestamp {shown} is earlier than the previous request's: the trace "
                                      "must be in time order")
        if self.ts and t - self.ts[0] > MAX_SPAN_S:
            raise _bad(self.path, ln, _too_long(t - self.ts[0], shown))
        self.ts.append(t)
        self.inp.append(n_in)
        self.outp.append(n_out)

    def arrays(self):
        if not self.ts:
            raise DataError(f"{self.path}: no requests")
        a = np.array(self.ts, float)
        return a - a[0], np.array(self.inp, np.int64), np.array(self.outp, np.int64)


def iter_mooncake(path: str | Path, limit: int | None = None):
    """Stream a Mooncake JSONL trace: yields (line, timestamp s, input, output, hash_ids) per request (hash_ids
    None when the trace has none: every line has them or none does).

    Lines are validated one at a time (a broken one raises naming the file and line); nothing is kept but
    the previous timestamp (requests must be in time order).
    """
    path = Path(path)
    n, last, first = 0, -math.inf, None
    with_ids = None                  # (first line, whether it has hash_ids): every line alike
    for ln, text in _lines(path):
        if limit is not None and n >= limit:
            break
        if n >= LIMITS["trace_requests"]:
            raise _bad(path, ln, f"more than {LIMITS['trace_requests']} requests; read the head of the "
                                 "trace with limit= (--limit) or split it")
        if not text.strip():
            continue
        try:
            d = json_line(text)
        except json.JSONDecodeError as exc:
            raise _bad(path, ln, f"not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise _bad(path, ln, "not valid JSON (nested too deeply)") from None
        except ValueError as exc:     # NaN / Infinity, or an integer of more than 4300 digits
            raise _bad(path, ln, f"not valid JSON ({str(exc)[:80]})") from None
        if not isinstance(d, dict):
            raise _bad(path, ln, "expected a JSON object")
        try:
            rec = MooncakeRecord(**{k: v for k, v in d.items() if k in MooncakeRecord.model_fields})
            ids = array("q", rec.hash_ids)          # 64-bit block ids (checked in C)
        except ValidationError as exc:
            raise _bad(path, ln, first_error(exc)) from None
        except OverflowError:
            raise _bad(path, ln, "hash_ids: a block id does not fit in 64 bits") from None
        _check_blocks(path, ln, rec, ids)
        has = "hash_ids" in d
        if with_ids is None:
            with_ids = (ln, has)
        elif with_ids[1] != has:
            raise _bad(path, ln, f"{'hash_ids' if has else 'no hash_ids'}, but line {with_ids[0]} has "
                                 f"{'none' if has else 'them'}: give every line its hash_ids (or none)")
        t = rec.timestamp / 1e3
        if t < last:
            raise _bad(path, ln, f"timestamp {rec.timestamp:g} ms is earlier than the previous request's: "
                                 "the trace must be in time order")
        first = t if first is None else first
        if t - first > MAX_SPAN_S:
            raise _bad(path, ln, _too_long(t - first, f"{rec.timestamp:g} ms"))
        last = t
        n += 1
        yield ln, t, rec.input_length, rec.output_length, (ids if has else None)


def _check_blocks(path: Path, ln: int, rec, ids) -> None:
    """A Mooncake line's ``hash_ids`` against its length: non-negative, and at most one id per 512-token
    block of the prompt (ceil(input_length / 512))."""
    most = -(-rec.input_length // MOONCAKE_BLOCK)
    if len(ids) > most:
        raise _bad(path, ln, f"hash_ids: {len(ids):,} block ids for a {rec.input_length:,}-token prompt; at most "
                             f"{most:,} (one per {MOONCAKE_BLOCK}-token block)")
    if ids and min(ids) < 0:
        raise _bad(path, ln, f"hash_ids: block id {min(ids)} is negative; block ids are 0 or more")


class _SeenIds:
    """Block ids seen so far: a byte per id for the dense non-negative ids of remapped traces (Mooncake's),
    a set for the others, so that a million-request trace does not hold millions of int objects."""
    DENSE = 1 << 30

    def __init__(self):
        self.bits = bytearray()
        self.other: set = set()
        self.count = 0                  # ids put in the byte map

    def __contains__(self, h: int) -> bool:
        if 0 <= h < len(self.bits) and self.bits[h] == 1:
            return True
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
            # the byte map grows only as far as the ids seen so far fill it: one stray large id goes to the set
            if 0 <= h < self.DENSE and (h < len(bits) or h < 8 * self.count + (1 << 20)):
                self.count += 1
                if h >= len(bits):
                    bits.extend(bytes(max(h + 1 - len(bits), len(bits) // 2)))
                bits[h] = 1
            else:
                self.other.add(h)


def _mooncake(path: Path, limit):
    ts, inp, outp, hit = array("d"), array("q"), array("q"), array("d")
    blocks, offsets, lines = array("q"), array("q", [0]), array("q")
    seen = _SeenIds()
    prefix_info = True
    for ln, t, n_in, n_out, ids in iter_mooncake(path, limit):
        if ids is None:                       # a trace without hash_ids: no prefix information, like Azure's
            prefix_info, ids = False, array("q")
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
    return Trace(path.stem, a - a[0], np.frombuffer(inp, np.int64), np.frombuffer(outp, np.int64),
                 np.frombuffer(hit, float), prefix_info,
                 *((np.frombuffer(blocks, np.int64), np.frombuffer(offsets, np.int64)) if prefix_info else (None, None)),
                 lines=np.frombuffer(lines, np.int64))


AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def _azure(path: Path, limit):
    reqs = _Requests(path, limit)
    lines = _lines(path)
    rd = csv.reader(text for _, text in lines)
    try:
        header = next(rd, None)
        if header != AZURE_HEADER:
            raise _bad(path, 1, f"expected header {','.join(AZURE_HEADER)}, got {str(header)[:80]}")
        for row in rd:
            ln = rd.line_num
            if reqs.full(ln):
                break
            if not row:
                continue
            if len(row) != 3:
                raise _bad(path, ln, f"expected 3 columns, got {len(row)}")
            try:
                stamp = datetime.fromisoformat(row[0][:26]).timestamp()
            except ValueError:
                raise _bad(path, ln, f"TIMESTAMP: not a date and time, got {row[0][:40]!r}") from None
            try:
                rec = AzureRecord(ContextTokens=_int(row[1]), GeneratedTokens=_int(row[2]))
            except (ValueError, ValidationError) as exc:
                msg = first_error(exc) if isinstance(exc, ValidationError) else str(exc)
                raise _bad(path, ln, msg) from None
            reqs.add(ln, stamp, rec.ContextTokens, max(rec.GeneratedTokens, 1), row[0][:40])
    except csv.Error as exc:
        raise _bad(path, rd.line_num, f"malformed CSV ({exc})") from None
    a, inp, outp = reqs.arrays()
    return Trace(path.stem, a, inp, outp, np.zeros(len(a)), False)


def _int(text: str) -> int:
    text = text.strip()
    if not text.isdigit() or len(text) > 12:
        raise ValueError(f"token count {text[:40]!r} is not a whole number")
    return int(text)


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


