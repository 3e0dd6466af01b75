"""Readers for measured data: the testbed's fetch micro-benchmarks and serving runs, SGLang bench_serving.

Every reader names the file (and field) it could not use. The shared data folder is ``../shared/data``
relative to the repository (override with ``SACMODEL_DATA``).
"""
from __future__ import annotations

import csv
import json
import os
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


class DataError(ValueError):
    """A measured-data file that cannot be read."""


def shared_data_dir() -> Path:
    return Path(os.environ.get("SACMODEL_DATA", REPO.parent / "shared" / "data"))


def _json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None


# ---- micro-benchmark ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FetchPoint:
    file: str
    backend: str          # dram | cxl | rdma (rdma = rdma_total)
    context: int
    topk: int
    entry_bytes: int
    mean_us: float
    p50_us: float
    p99_us: float


def load_microbench(paths=None) -> list[FetchPoint]:
    """Points of ``sparse_kv_bench_*.json`` files (default: all in the shared micro-benchmark folder)."""
    if paths is None:
        d = shared_data_dir() / "sac-testbed" / "microbench"
        paths = sorted(d.glob("sparse_kv_bench_*.json"))
        if not paths:
            raise DataError(f"{d}: no sparse_kv_bench_*.json files")
    out = []
    for p in paths:
        d = _json(p)
        try:
            eb = int(d["config"]["item_size"])
            for ctx, by_k in d["results"].items():
                for k, by_b in by_k.items():
                    for b, m in by_b.items():
                        name = {"rdma_total": "rdma"}.get(b, b)
                        if name not in ("dram", "cxl", "rdma"):
                            continue
                        out.append(FetchPoint(Path(p).name, name, int(ctx), int(k), eb, float(m["mean_us"]),
                                              float(m["p50_us"]), float(m["p99_us"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{p}: unexpected micro-benchmark layout ({exc!r})") from None
    return out


def latest_per_backend(points: list[FetchPoint]) -> list[FetchPoint]:
    """For each backend, the points of the newest file that measured it (file names carry the time)."""
    newest = {}
    for pt in points:
        newest[pt.backend] = max(newest.get(pt.backend, ""), pt.file)
    return [pt for pt in points if pt.file == newest[pt.backend]]


# ---- serving runs ---------------------------------------------------------------------------------
METRICS = ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s", "e2e_mean_ms")


@dataclass
class Run:
    """One measured serving run: its configuration and measured metrics."""
    file: str
    system: str
    context: int
    output: int
    concurrency: int
    requests: int
    cxl_devices: int | None = None
    rdma_nics: int | None = None
    device_buffer: int | None = None
    num_success: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    prefix_cached: bool = True      # False for the testbed's cache-filling round 1 (cold prefill)
    output_min: int | None = None   # outputs drawn uniformly in [output_min, output_max] (equal: fixed)
    output_max: int | None = None
    outputs: np.ndarray | None = None   # the actual per-request output lengths, when the file has them
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    server_log: str | None = None
    split: str | None = None

    @property
    def failed(self) -> bool:
        return self.num_success is not None and self.num_success < self.requests

    def key(self) -> str:
        extra = f" cxl={self.cxl_devices}" if self.system == "cxl" else ""
        cold = "" if self.prefix_cached else " cold"
        return f"{self.system}{extra} L={self.context} c={self.concurrency} out={self.output}{cold}"


_SYS_RE = [(re.compile(r"(?:^|_)cxl(\d+)?(?:_|$)"), "cxl"), (re.compile(r"(?:^|_)dram()(?:_|$)"), "dram"),
           (re.compile(r"(?:^|_)rdma(\d+)?(?:nic)?(?:_|$)"), "rdma"), (re.compile(r"(?:^|_)gpu()(?:_|$)"), "gpu")]


def system_from_name(name: str) -> tuple[str | None, int | None]:
    """(system, device or NIC count) from a run file name such as ``p1_01_cxl2_ctx16k...``."""
    for rx, sysname in _SYS_RE:
        m = rx.search(name)
        if m:
            return sysname, int(m.group(1)) if m.group(1) else None
    return None, None


def _manifest(dirpath: Path) -> dict[str, dict]:
    for cand in (dirpath / "manifest.csv", dirpath.parent / "manifest.csv"):
        if cand.exists():
            with cand.open() as fh:
                return {r["file"]: r for r in csv.DictReader(fh)}
    return {}


def _buffer_slots(stem: str, manifest_row: dict, data: dict) -> int | None:
    """GPU buffer slots of a run: manifest column, a config field, or a file-name token (buf6144, buf6k)."""
    for key in ("device_buffer", "buffer_slots", "hisparse_device_buffer"):
        v = manifest_row.get(key) or (data.get("config", {}) or {}).get(key)
        if v not in (None, ""):
            return int(v)
    m = re.search(r"buf(?:fer)?[_-]?(\d+)(k?)", stem, re.IGNORECASE)
    if m:
        return int(m.group(1)) * (1024 if m.group(2) else 1)
    return None


def load_run(path: str | Path, system: str | None = None, round_: int = 2) -> Run:
    """A run in the testbed's ``e2e_bench_fast`` format or an SGLang ``bench_serving`` result file.

    ``round_=1`` reads the testbed's cache-filling round (cold prefill) instead of the measured round 2.
    """
    path = Path(path)
    d = _json(path)
    man = _manifest(path.parent).get(path.name, {})
    name_sys, name_n = system_from_name(path.stem)
    sysname = system or man.get("system") or name_sys
    if not sysname:
        raise DataError(f"{path}: cannot tell the system (dram/cxl/rdma/gpu) from the file name; pass --system")
    buf_slots = _buffer_slots(path.stem, man, d)
    devices = int(man["cxl_devices"]) if man.get("cxl_devices") else (name_n if sysname == "cxl" else None)
    nics = int(man["rdma_nics"]) if man.get("rdma_nics") else (name_n if sysname == "rdma" else None)
    try:
        if "round2" in d and round_ == 1:     # testbed cache-filling round
            cfg, m = d["config"], d["round1"]["metrics"]
            n = int(m["num_requests"])
            run = Run(path.name + "#round1", sysname, int(cfg["target_input_tokens"]),
                      round(m["total_output_tokens"] / max(n, 1)), int(cfg.get("round1_max_concurrency") or n), n,
                      devices, nics, buf_slots, int(m["num_success"]),
                      {k: float(m[k]) for k in METRICS if m.get(k) is not None}, prefix_cached=False)
        elif "round2" in d:                   # testbed e2e_bench_fast, measured round
            cfg, m = d["config"], d["round2"]["metrics"]
            hi = int(cfg.get("round2_output_max") or cfg["output_tokens"])
            lo = int(cfg["round2_output_min"]) if cfg.get("round2_output_min") is not None else hi
            per = d["round2"].get("per_request") or []
            outs = np.array([int(x["output_len"]) for x in per if x.get("success", True)]) if per else None
            out_len = hi if lo == hi else int(round(float(man.get("output") or (lo + hi) / 2)))
            run = Run(path.name, sysname, int(cfg["target_input_tokens"]), out_len, int(cfg["max_concurrency"]),
                      int(cfg.get("round2_num_requests") or m["num_requests"]), devices, nics,
                      buf_slots, int(m["num_success"]),
                      {k: float(m[k]) for k in METRICS if m.get(k) is not None}, output_min=lo, output_max=hi,
                      outputs=outs)
        elif "mean_ttft_ms" in d:            # SGLang bench_serving result
            n = int(d.get("completed", 0))
            ctx = int(d.get("random_input_len") or round(d["total_input_tokens"] / max(n, 1)))
            out_len = int(d.get("random_output_len") or round(d["total_output_tokens"] / max(n, 1)))
            tbt = d.get("mean_tpot_ms") or d.get("mean_itl_ms")
            run = Run(path.name, sysname, ctx, out_len, int(d.get("max_concurrency") or n),
                      int(d.get("num_prompts") or n), devices, nics, buf_slots, n,
                      {"ttft_mean_ms": float(d["mean_ttft_ms"]), "tbt_mean_ms": float(tbt),
                       "output_throughput_tok_s": float(d["output_throughput"]),
                       "e2e_mean_ms": float(d.get("mean_e2e_latency_ms", 0)) or None})
            run.metrics = {k: v for k, v in run.metrics.items() if v is not None}
        else:
            raise DataError(f"{path}: neither a testbed run (no 'round2') nor a bench_serving result "
                            "(no 'mean_ttft_ms')")
    except KeyError as exc:
        raise DataError(f"{path}: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path}: bad value ({exc})") from None
    for key in ("max_total_tokens", "max_running_requests"):
        if man.get(key):
            setattr(run, key, int(man[key]))
    if man.get("server_log"):
        run.server_log = str((path.parent.parent / man["server_log"]).resolve()) if (
            path.parent.parent / man["server_log"]).exists() else str(path.parent / man["server_log"])
    run.split = man.get("split") or None
    return run


def load_runs(paths=None, system: str | None = None, round_: int = 2, split: str | None = None) -> list[Run]:
    """Runs from files and/or folders (default: the shared testbed runs); ``round_=1``: cold rounds;
    ``split``: only the runs of that manifest split (``calibration-1``, ``release-2``)."""
    if paths is None:
        paths = [shared_data_dir() / "sac-testbed" / "runs"]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.glob("*.json"))
        elif p.exists():
            files.append(p)
        else:
            raise DataError(f"{p}: no such file or folder")
    if not files:
        raise DataError(f"no run files in {', '.join(map(str, paths))}")
    runs = [load_run(f, system, round_) for f in files]
    return [r for r in runs if split is None or r.split == split]


# ---- predicted vs measured ------------------------------------------------------------------------
@dataclass
class Comparison:
    run: Run
    predicted: dict[str, float]
    feasible: bool
    limit: str | None

    def error(self, metric: str) -> float | None:
        """Relative error (predicted - measured) / measured, or None when not comparable."""
        m, p = self.run.metrics.get(metric), self.predicted.get(metric)
        if m is None or p is None or not m or not math.isfinite(p) or self.run.failed:
            return None
        return (p - m) / m


def compare_runs(scenario, runs: list[Run], **overrides) -> list[Comparison]:
    """Predict every run's configuration on ``scenario`` and pair it with the measurement."""
    from .calibrate import run_kwargs
    from .serving import predict
    out = []
    for r in runs:
        p = predict(scenario, r.system, **{**run_kwargs(r), **overrides})
        out.append(Comparison(r, {**{k: getattr(p, k) for k in METRICS}, "success_fraction": p.success_fraction},
                              p.feasible, p.limit))
    return out


def mape_table(comps: list[Comparison], metrics=METRICS) -> dict[str, dict[str, float]]:
    """MAPE (%) per system and metric, plus the share of runs whose feasibility was predicted right."""
    out: dict[str, dict[str, float]] = {}
    for s in sorted({c.run.system for c in comps}):
        cs = [c for c in comps if c.run.system == s]
        row = {}
        for m in metrics:
            errs = [abs(e) for c in cs if (e := c.error(m)) is not None]
            if errs:
                row[m] = 100 * float(np.mean(errs))
        row["feasibility_right"] = 100 * float(np.mean([c.feasible == (not c.run.failed) for c in cs]))
        row["runs"] = len(cs)
        out[s] = row
    return out


# ---- SGLang server logs ---------------------------------------------------------------------------
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
            except json.JSONDecodeError:
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
    """Parse an SGLang server log (plain or ``.gz``) into a :class:`ServerLog`."""
    import datetime as _dt
    import gzip
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    settings: dict = {}
    notes: list[str] = []
    pre, dec, arr, exc = [], [], [], []
    t0 = None
    pending_exc = None

    def stamp(s: str) -> float:
        nonlocal t0
        t = _dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc).timestamp()
        if t0 is None:
            t0 = t
        return t - t0
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if "server_args=ServerArgs(" in line and not settings:
                    settings = parse_server_args(line)
                    continue
                m = _BATCH_RE.match(line)
                if m:
                    t, rank = stamp(m.group(1)), int(m.group(2) or 0)
                    kv = {}
                    for part in m.group(4).split(", "):
                        k, _, v = part.partition(":")
                        if k.strip() in _KEYS:
                            try:
                                kv[_KEYS[k.strip()]] = float(v)
                            except ValueError:
                                raise DataError(f"{path}: line {lineno}: bad value for {k.strip()!r}: "
                                                f"{v.strip()!r}") from None
                    fields = PREFILL_FIELDS if m.group(3) == "Prefill" else DECODE_FIELDS
                    missing = [f for f in fields if f not in kv]
                    if missing:
                        raise DataError(f"{path}: line {lineno}: {m.group(3).lower()} batch line without "
                                        f"{', '.join(missing)}")
                    (pre if m.group(3) == "Prefill" else dec).append((t, rank, *(kv[f] for f in fields)))
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
    except OSError as exc_:
        raise DataError(f"{path}: cannot read ({exc_.strerror or exc_})") from None
    except EOFError:
        raise DataError(f"{path}: truncated gzip file") from None
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
