"""Reader of SGLang server logs: the ``server_args`` line, start-up notes, per-rank prefill and decode batch
lines, request arrivals and scheduler exceptions (gzip or plain text)."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..util.reading import iter_lines
from .records import LIMITS, DataError

_TS = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: DP(\d+) TP\d+)?\] "
_BATCH_RE = re.compile(_TS + r"(Prefill|Decode) batch, (.*)$")
_POST_RE = re.compile(_TS + r"INFO:\s+\S+ - \"POST /v1/(?:chat/)?completions")
_EXC_RE = re.compile(_TS + r"Scheduler hit an exception")
_NOTE_RE = re.compile(_TS + r"WARNING server_args\.py:\d+: (.*)$")
_ERROR_RE = re.compile(r"^(\w*Error|\w*Exception): (.*)$")
PREFILL_FIELDS = ("new_seq", "new_tokens", "cached_tokens", "usage", "running", "queued")
DECODE_FIELDS = ("running", "tokens", "usage", "gen_tps", "queued")
_KEYS = {"#new-seq": "new_seq", "#new-token": "new_tokens", "#cached-token": "cached_tokens",
         "token usage": "usage", "#running-req": "running", "#queue-req": "queued", "#token": "tokens",
         "gen throughput (token/s)": "gen_tps"}

_LOG_CACHE: dict = {}


@dataclass
class ServerLog:
    """An SGLang server log, time-resolved per data-parallel rank.

    Times are seconds since the log's first timestamp (the log has one-second resolution). ``prefill`` and
    ``decode`` are arrays of records with a ``t`` and ``rank`` column plus the fields the server prints for
    each prefill batch (``new_seq, new_tokens, cached_tokens, usage, running, queued``) and for every
    ``decode_log_interval``-th decode step (``running``, ``tokens`` held on the GPU, ``usage``, ``gen_tps``
    = tokens generated per second since the rank's previous log line, ``queued``). ``arrivals`` are the
    times the HTTP server logged a generation request. ``settings`` is the ``server_args`` line parsed into
    values; ``notes`` the settings the server changed at start-up, with the reason it printed.
    """
    path: str
    settings: dict
    notes: list[str]
    prefill: np.ndarray
    decode: np.ndarray
    arrivals: np.ndarray
    exceptions: list[tuple[float, int, str]]
    t0: float = 0.0

    @property
    def ranks(self) -> int:
        dp = self.settings.get("dp_size")
        return int(dp) if isinstance(dp, int) and dp > 0 else int(max(self.decode["rank"].max(initial=0),
                                                                          self.prefill["rank"].max(initial=0)) + 1)

    def window(self, start: float, end: float = math.inf) -> "ServerLog":
        """The events with ``start <= t < end``."""
        sel = lambda a: a[(a["t"] >= start) & (a["t"] < end)]  # noqa: E731
        return ServerLog(self.path, self.settings, self.notes, sel(self.prefill), sel(self.decode),
                         self.arrivals[(self.arrivals >= start) & (self.arrivals < end)],
                         [e for e in self.exceptions if start <= e[0] < end], self.t0)

    def round_start(self, first_round_requests: int) -> float:
        """Time of the first request after the first ``first_round_requests`` (the benchmark's round 2)."""
        if len(self.arrivals) <= first_round_requests:
            raise DataError(f"{self.path}: {len(self.arrivals)} requests logged, no second round after "
                            f"{first_round_requests}")
        return float(np.sort(self.arrivals)[first_round_requests])

    def rounds(self, first_round_requests: int = 8) -> tuple["ServerLog", "ServerLog"]:
        """(round 1, round 2) of the testbed benchmark: the cache-filling round, then the measured one."""
        t2 = self.round_start(first_round_requests)
        t1 = float(np.sort(self.arrivals)[0]) if len(self.arrivals) else 0.0
        return self.window(t1, t2), self.window(t2)

    def rank(self, r: int) -> "ServerLog":
        return ServerLog(self.path, self.settings, self.notes, self.prefill[self.prefill["rank"] == r],
                         self.decode[self.decode["rank"] == r], self.arrivals,
                         [e for e in self.exceptions if e[1] == r], self.t0)

    def step_times(self) -> np.ndarray:
        """Decode step time (s) per rank between consecutive decode log lines with no prefill between them.

        Records: ``t`` (end of the interval), ``rank``, ``running`` (requests decoding), ``tokens``,
        ``step_s`` = running / gen_tps (the rank generated one token per running request per step).
        Intervals where the running count changed or the rank ran a prefill batch are left out.
        """
        rows = []
        for r in np.unique(self.decode["rank"]):
            d = self.decode[self.decode["rank"] == r]
            p = np.sort(self.prefill["t"][self.prefill["rank"] == r])
            for a, b in zip(d[:-1], d[1:]):
                if a["running"] != b["running"] or b["gen_tps"] <= 0:
                    continue
                if np.any((p >= a["t"]) & (p <= b["t"])):
                    continue
                rows.append((b["t"], r, b["running"], b["tokens"], b["running"] / b["gen_tps"]))
        return np.array(rows, dtype=[("t", float), ("rank", int), ("running", int), ("tokens", int),
                                     ("step_s", float)])


def _parse_value(text: str):
    """A literal of the ``server_args`` line: quoted string, number, True/False/None, else the raw text."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        s = t[1:-1]
        if s[:1] in "{[":
            try:
                return json.loads(s)
            except (ValueError, RecursionError):      # not JSON, NaN, or nested too deeply: kept as text
                return s
        return s
    if t in ("True", "False"):
        return t == "True"
    if t == "None":
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def parse_server_args(line: str) -> dict:
    """``key=value`` pairs of a ``server_args=ServerArgs(...)`` line (top-level commas only; nothing evaluated)."""
    start = line.find("ServerArgs(")
    if start < 0:
        return {}
    body = line[start + len("ServerArgs("):].rstrip().rstrip(")")
    out, depth, quote, key, buf = {}, 0, "", None, []
    for ch in body + ",":
        if quote:
            buf.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0 and key is None:
            key, buf = "".join(buf).strip(), []
            continue
        elif ch == "," and depth == 0:
            if key:
                out[key] = _parse_value("".join(buf))
            key, buf = None, []
            continue
        buf.append(ch)
    return out


def load_server_log(path: str | Path) -> ServerLog:
    """Parse an SGLang server log (plain or ``.gz``) into a :class:`ServerLog` (kept per file and version:
    a log read again, unchanged, is not parsed again)."""
    path = Path(path)
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key in _LOG_CACHE:
        return _LOG_CACHE[key]
    log = _disk_cached(path)
    for a in (log.prefill, log.decode, log.arrivals):     # shared between callers: read-only
        a.flags.writeable = False
    if key is not None:
        if len(_LOG_CACHE) >= 256:
            _LOG_CACHE.clear()
        _LOG_CACHE[key] = log
    return log


_PARSER_SOURCES = ("data/server_logs.py", "data/records.py", "util/reading.py", "util/names.py")


def _disk_cached(path: Path) -> ServerLog:
    """The parsed log from the on-disk cache (:mod:`sacmodel.util.cache`), keyed on the file's bytes and the
    parser's code; parsed (and stored) when absent. A file that cannot be read is left to the parser's errors."""
    from ..util import cache
    try:
        data = path.read_bytes() if path.is_file() and path.stat().st_size <= LIMITS["log_bytes"] else None
    except OSError:
        data = None
    k = None if data is None else cache.key(data, str(path), code=_PARSER_SOURCES)
    log = cache.load("server-log", k) if k else None
    if isinstance(log, ServerLog):
        return log
    log = _parse_server_log(path)
    if k:
        cache.store("server-log", k, log)
    return log


def _log_lines(path: Path):
    """(line number, text) of a server log, streamed through :func:`sacmodel.util.reading.iter_lines` (regular
    files only, gzip for ``.gz``, at most ``log_bytes`` after decompression and ``log_line_bytes`` a line)."""
    for ln, raw in iter_lines(path, line_bytes=LIMITS["log_line_bytes"], limit=LIMITS["log_bytes"],
                              what="server log", err=DataError):
        yield ln, raw.decode("utf-8", errors="replace")


MAX_RANK = 1 << 16        # a data-parallel rank index (DPn) above this is not a server's


def _batch_record(m, path: Path, lineno: int, t: float) -> tuple:
    """(t, rank, fields...) of a prefill or decode batch line; every field present, finite and a number."""
    rank = int(m.group(2) or 0)
    if rank > MAX_RANK:
        raise DataError(f"{path}: line {lineno}: data-parallel rank DP{m.group(2)[:20]} is above {MAX_RANK}")
    kv = {}
    for part in m.group(4).split(", "):
        k, _, v = part.partition(":")
        k = k.strip()
        if k in _KEYS:
            try:
                x = float(v)
            except ValueError:
                x = math.nan
            if not math.isfinite(x):
                raise DataError(f"{path}: line {lineno}: bad value for {k!r}: {v.strip()[:40]!r}") from None
            kv[_KEYS[k]] = x
    fields = PREFILL_FIELDS if m.group(3) == "Prefill" else DECODE_FIELDS
    missing = [f for f in fields if f not in kv]
    if missing:
        raise DataError(f"{path}: line {lineno}: {m.group(3).lower()} batch line without {', '.join(missing)}")
    for f in fields:
        _check_physical(f, kv[f], path, lineno)
    return (t, rank, *(kv[f] for f in fields))


def _log_name(f: str) -> str:
    """The log's own name of the batch-line field ``f`` (for an error)."""
    return next(k for k, v in _KEYS.items() if v == f)


COUNT_FIELDS = {"new_seq", "new_tokens", "cached_tokens", "running", "queued", "tokens"}
BACKWARD_S = 5.0          # the ranks' processes share one log: a line may carry a stamp a second older


def _check_physical(f: str, x: float, path: Path, lineno: int) -> None:
    """A batch line's field against what a server can print: counts whole, 0 to 2^31; the token usage a
    fraction of the pool (0 to 1); the generation throughput 0 to 1e10 tokens/s."""
    if f in COUNT_FIELDS:
        if x < 0:
            raise DataError(f"{path}: line {lineno}: negative {f} in a batch line ({_log_name(f)} {x:g})")
        if x > LIMITS["count"] or not float(x).is_integer():
            raise DataError(f"{path}: line {lineno}: {_log_name(f)} {x:.6g} is not a count a server prints "
                            f"(a whole number from 0 to {LIMITS['count']:,})")
    elif f == "usage" and not 0 <= x <= 1:
        raise DataError(f"{path}: line {lineno}: token usage {x:g} is not a fraction of the KV pool (0 to 1)")
    elif f == "gen_tps" and not 0 <= x <= LIMITS["measured"]:
        raise DataError(f"{path}: line {lineno}: gen throughput {x:g} tokens/s is outside 0 to "
                        f"{LIMITS['measured']:g}")


def _parse_server_log(path: Path) -> ServerLog:
    import datetime as _dt
    settings: dict = {}
    notes: list[str] = []
    pre, dec, arr, exc = [], [], [], []
    t0 = None
    pending_exc = None
    lineno = 0
    seen: dict[str, float] = {}          # log stamps have one-second resolution: parse each once
    latest = [-math.inf]                 # the latest time stamped so far

    def stamp(s: str) -> float:
        nonlocal t0
        t = seen.get(s)
        if t is None:
            try:
                when = _dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S")
            except ValueError:
                raise DataError(f"{path}: line {lineno}: not a date and time: {s!r}") from None
            t = seen[s] = when.replace(tzinfo=_dt.timezone.utc).timestamp()
        if t0 is None:
            t0 = t
        latest[0] = max(latest[0], t)
        if t < latest[0] - BACKWARD_S:
            raise DataError(f"{path}: line {lineno}: time {s} is {latest[0] - t:,.0f} s before an earlier line's; "
                            "a server log's times only go forward")
        return t - t0
    for lineno, line in _log_lines(path):
        if "server_args=ServerArgs(" in line and not settings:
            settings = parse_server_args(line)
            continue
        m = _BATCH_RE.match(line)
        if m:
            rec = _batch_record(m, path, lineno, stamp(m.group(1)))
            (pre if m.group(3) == "Prefill" else dec).append(rec)
            continue
        m = _POST_RE.match(line)
        if m:
            arr.append(stamp(m.group(1)))
            continue
        m = _EXC_RE.match(line)
        if m:
            pending_exc = (stamp(m.group(1)), int(m.group(2) or 0))
            continue
        if pending_exc:
            e = _ERROR_RE.match(line.strip())
            if e:
                exc.append((*pending_exc, line.strip()))
                pending_exc = None
            continue
        m = _NOTE_RE.match(line)
        if m:
            stamp(m.group(1))
            notes.append(m.group(3).strip())
    if pending_exc:
        exc.append((*pending_exc, "scheduler exception (message not found)"))
    ptype = [("t", float), ("rank", int)] + [(f, float) for f in PREFILL_FIELDS]
    dtype = [("t", float), ("rank", int)] + [(f, float) for f in DECODE_FIELDS]
    prefill = np.array(pre, dtype=ptype)
    decode = np.array(dec, dtype=dtype)
    for a, fields in ((prefill, ("new_seq", "new_tokens", "cached_tokens", "running", "queued")),
                      (decode, ("running", "tokens", "queued"))):
        for f in fields:
            if a.size and np.any(a[f] < 0):
                raise DataError(f"{path}: negative {f} in a batch line")
    return ServerLog(str(path), settings, notes, prefill, decode, np.array(arr, dtype=float), exc, 0.0)
