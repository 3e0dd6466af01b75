"""Readers for measured data: the testbed's fetch micro-benchmarks and serving runs, SGLang bench_serving.

Every reader names the file (and field) it could not use. The shared data folder is ``../shared/data``
relative to the repository (override with ``SACMODEL_DATA``).
"""
from __future__ import annotations

import csv
import heapq
import io
import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from ..util.reading import check_input, read_text
from .records import LIMITS, DataError, E2ERun, ManifestRow, first_error, read_json

REPO = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    return Path(os.environ.get("SACMODEL_DATA", REPO.parent / "shared" / "data"))


def _json(path: Path):
    return read_json(path)


# ---- serving runs ---------------------------------------------------------------------------------
METRICS = ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s", "e2e_mean_ms")


@dataclass
class Run:
    """One measured serving run: its configuration and measured metrics.

    ``output`` is the fixed output length, or for variable outputs (drawn uniformly in ``output_min`` ..
    ``output_max``) the mean of the drawn lengths; ``outputs`` holds every request's actual output length
    and ``ttfts`` its measured first-token latency (ms, in the order the client sent them) when the file
    has them; ``latencies`` each request's time from send to last token (ms, send order). ``split`` is the
    manifest's split (``calibration-1``, ``release-2``).
    """
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
    output_min: int | None = None
    output_max: int | None = None
    outputs: np.ndarray | None = field(default=None, repr=False, compare=False)
    ttfts: np.ndarray | None = field(default=None, repr=False, compare=False)   # per request, ms, send order
    latencies: np.ndarray | None = field(default=None, repr=False, compare=False)   # send to last token, ms
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    server_log: Path | None = None
    split: str | None = None

    @property
    def failed(self) -> bool:
        return self.num_success is not None and self.num_success < self.requests

    @property
    def variable_output(self) -> bool:
        return self.output_min is not None and self.output_max is not None and self.output_min != self.output_max

    def key(self) -> str:
        extra = f" cxl={self.cxl_devices}" if self.system == "cxl" else ""
        cold = "" if self.prefix_cached else " cold"
        out = f"{self.output_min}:{self.output_max}" if self.variable_output else f"{self.output}"
        return f"{self.system}{extra} L={self.context} c={self.concurrency} out={out}{cold}"


_SYS_RE = [(re.compile(r"(?:^|_)cxl(\d+)?(?:_|$)"), "cxl"), (re.compile(r"(?:^|_)dram()(?:_|$)"), "dram"),
           (re.compile(r"(?:^|_)rdma(\d+)?(?:nic)?(?:_|$)"), "rdma"), (re.compile(r"(?:^|_)gpu()(?:_|$)"), "gpu")]
RUN_SYSTEMS = ("gpu", "dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk")


def system_from_name(name: str) -> tuple[str | None, int | None]:
    """(system, device or NIC count) from a run file name such as ``p1_01_cxl2_ctx16k...``."""
    for rx, sysname in _SYS_RE:
        m = rx.search(name)
        if m:
            return sysname, int(m.group(1)) if m.group(1) else None
    return None, None


@lru_cache(maxsize=16)
def _manifest_file(path: str, mtime: float) -> dict[str, ManifestRow]:
    text = read_text(path, limit=LIMITS["manifest_bytes"], what="manifest", err=DataError)
    rows = {}
    rd = csv.DictReader(io.StringIO(text, newline=""))
    try:
        for row in rd:
            try:
                r = ManifestRow.model_validate({k: v for k, v in row.items() if isinstance(k, str)})
            except ValidationError as exc:
                raise DataError(f"{path}:{rd.line_num}: {first_error(exc)}") from None
            rows[r.file] = r
    except csv.Error as exc:
        raise DataError(f"{path}:{rd.line_num}: cannot read the manifest ({exc})") from None
    return rows


def _manifest(dirpath: Path) -> tuple[dict[str, ManifestRow], Path | None]:
    """The manifest rows of the runs in ``dirpath`` (its ``manifest.csv`` or its parent's) and its folder; a
    folder reached through a symbolic link is looked up where it really is too (``my_runs -> .../runs``)."""
    real = dirpath.resolve()
    for cand in dict.fromkeys((dirpath / "manifest.csv", dirpath.parent / "manifest.csv", real / "manifest.csv",
                               real.parent / "manifest.csv")):
        if cand.is_file():
            return _manifest_file(str(cand), cand.stat().st_mtime), cand.parent
    return {}, None


def _buffer_slots(stem: str, man: ManifestRow | None, cfg) -> int | None:
    """GPU buffer slots of a run: manifest column, a config field, or a file-name token (buf6144, buf6k)."""
    if man is not None and man.device_buffer:
        return man.device_buffer
    for key in ("device_buffer", "buffer_slots", "hisparse_device_buffer"):
        v = getattr(cfg, key, None)
        if v:
            return v
    m = re.search(r"buf(?:fer)?[_-]?(\d{1,9})(k?)", stem, re.IGNORECASE)
    if m:
        return int(m.group(1)) * (1024 if m.group(2) else 1)
    return None


def load_run(path: str | Path, system: str | None = None, round_: int = 2) -> Run:
    """A run in the testbed's ``e2e_bench_fast`` format or an SGLang ``bench_serving`` / vLLM ``bench serve``
    result file of one run (:func:`load_runs` reads a JSONL file of several).

    ``round_=1`` reads the testbed's cache-filling round (cold prefill) instead of the measured round 2.
    The file is validated (:mod:`sacmodel.data.records`, :mod:`sacmodel.data.bench`): finite non-negative
    metrics, whole counts, at most as many successes as requests; errors name the file and field.
    """
    runs = _load_file(Path(path), system, round_)
    if len(runs) != 1:
        raise DataError(f"{path}: holds {len(runs)} benchmark runs; read them with load_runs")
    return runs[0]


def _load_file(path: Path, system: str | None, round_: int) -> list[Run]:
    """The runs of one file: one testbed run, or every run of a benchmark result file."""
    from .bench import looks_like_bench
    if round_ not in (1, 2):
        raise DataError(f"round must be 1 or 2, not {round_!r}")
    rows, man_dir = _manifest(path.parent)
    man = rows.get(path.name)
    name_sys, name_n = system_from_name(path.stem)
    sysname = system or (man.system if man else None) or name_sys
    if not sysname:
        raise DataError(f"{path}: cannot tell the system (dram/cxl/rdma/gpu) from the file name; pass --system")
    if sysname not in RUN_SYSTEMS:
        raise DataError(f"{path}: unknown system {sysname!r} (known: {', '.join(RUN_SYSTEMS)})")
    devices = (man.cxl_devices or None) if man and man.cxl_devices is not None else \
        (name_n if sysname == "cxl" else None)
    nics = (man.rdma_nics or None) if man and man.rdma_nics is not None else (name_n if sysname == "rdma" else None)
    if looks_like_bench(path):
        runs = _bench_runs(path, sysname, devices, nics, man)
    else:
        runs = [_testbed_file(path, sysname, devices, nics, man, round_)]
    for run in runs:
        if max(run.context, run.output) > LIMITS["request_tokens"]:
            raise DataError(f"{path}: a request of {run.context} + {run.output} tokens is over the "
                            f"{LIMITS['request_tokens']}-token limit")
        if run.num_success is not None and run.num_success > run.requests:
            raise DataError(f"{path}: num_success {run.num_success} is above the {run.requests} requests")
        if man is not None:
            run.split = man.split or None
            run.max_total_tokens, run.max_running_requests = man.max_total_tokens, man.max_running_requests
            if man.server_log and man_dir is not None:
                run.server_log = (man_dir / man.server_log).resolve()
    return runs


def _testbed_file(path: Path, sysname, devices, nics, man: ManifestRow | None, round_: int) -> Run:
    d = _json(path)
    if not isinstance(d, dict):
        raise DataError(f"{path}: expected a JSON object at the top level, got {type(d).__name__}")
    if "round2" not in d:
        raise DataError(f"{path}: neither a testbed run (no 'round2') nor a bench_serving result "
                        "(no 'mean_ttft_ms', 'output_throughput' and 'completed')")
    try:
        return _testbed_run(path, d, sysname, devices, nics, man, round_)
    except ValidationError as exc:
        raise DataError(f"{path}: {first_error(exc)}") from None


def _testbed_run(path: Path, d: dict, sysname, devices, nics, man: ManifestRow | None, round_: int) -> Run:
    r = E2ERun.model_validate(d)
    cfg = r.config
    buf = _buffer_slots(path.stem, man, cfg)
    if round_ == 1:                      # testbed cache-filling round
        if r.round1 is None:
            raise DataError(f"{path}: missing field 'round1'")
        m = r.round1.metrics
        if m.num_requests is None or m.total_output_tokens is None:
            raise DataError(f"{path}: round1.metrics: missing field "
                            f"{'num_requests' if m.num_requests is None else 'total_output_tokens'!r}")
        n = m.num_requests
        return Run(path.name + "#round1", sysname, cfg.target_input_tokens, round(m.total_output_tokens / n),
                   cfg.round1_max_concurrency or n, n, devices, nics, buf, m.num_success, _metrics(m),
                   prefix_cached=False)
    m = r.round2.metrics
    lo = cfg.round2_output_min if cfg.round2_output_min is not None else (man.output_min if man else None)
    hi = cfg.round2_output_max if cfg.round2_output_max is not None else (man.output_max if man else None)
    if (lo is None) != (hi is None):
        raise DataError(f"{path}: config: round2_output_min and round2_output_max go together (only "
                        f"{'round2_output_min' if hi is None else 'round2_output_max'} is given)")
    outputs = np.array([q.output_len for q in r.round2.per_request], dtype=np.int64) \
        if r.round2.per_request else None
    ttfts = _per_request_ms(r.round2.per_request, "ttft_ms")
    lats = _per_request_ms(r.round2.per_request, "latency_ms")
    if lo is not None and hi is not None and lo != hi:     # variable outputs: the mean of the drawn lengths
        mean = man.output if man and man.output is not None else \
            (float(outputs.mean()) if outputs is not None else (lo + hi) / 2)
        out_len = max(1, round(mean))
    else:
        out_len = hi if hi is not None else cfg.output_tokens
    if not out_len:
        raise DataError(f"{path}: config: the output length must be positive")
    requests = cfg.round2_num_requests or m.num_requests
    if requests is None:
        raise DataError(f"{path}: config: missing field 'round2_num_requests'")
    return Run(path.name, sysname, cfg.target_input_tokens, out_len, cfg.max_concurrency, requests, devices,
               nics, buf, m.num_success, _metrics(m), output_min=lo, output_max=hi, outputs=outputs, ttfts=ttfts,
               latencies=lats)


def _per_request_ms(rows, name: str) -> np.ndarray | None:
    """One per-request latency field (ms) in send order, NaN where a request lacks it; None without rows."""
    if not rows:
        return None
    return np.array([math.nan if (x := getattr(q, name)) is None else x for q in rows], dtype=float)


def _metrics(m) -> dict[str, float]:
    return {k: float(getattr(m, k)) for k in METRICS if getattr(m, k) is not None}


def _bench_runs(path: Path, sysname, devices, nics, man: ManifestRow | None) -> list[Run]:
    """Every run of an SGLang ``bench_serving`` (JSONL, ``request_rate: Infinity``) or vLLM ``bench serve``
    result file (:func:`sacmodel.data.bench.load_bench_file`) as the validation compares it: the random
    dataset's lengths uniform in [ratio x nominal, nominal] as a mean prompt and drawn outputs, or each
    request's own output length. A run at a finite request rate (Poisson arrivals) is refused: the comparison
    replays closed-loop runs, every request sent at once."""
    from .bench import load_bench_file
    bench = load_bench_file(path)
    out = []
    for b in bench:
        if math.isfinite(b.request_rate):
            raise DataError(f"{b.source}: request_rate {b.request_rate:g}/s: validate replays runs that send "
                            "every request at once (request_rate inf), not Poisson arrivals")
        ctx, out_len, lo, hi, outputs = b.isl, b.osl, None, None, None
        if b.per_request:
            outputs = b.output_lens
            lo, hi = int(outputs.min()), int(outputs.max())
        elif b.range_ratio < 1:
            ctx = round((max(1, int(b.isl * b.range_ratio)) + b.isl) / 2)
            lo, hi = max(1, int(b.osl * b.range_ratio)), b.osl
            out_len = round((lo + hi) / 2)
        metrics = {"ttft_mean_ms": b.ttft_mean_ms, "tbt_mean_ms": b.tpot_mean_ms,
                   "output_throughput_tok_s": b.output_tok_s}
        if b.e2e_mean_ms:
            metrics["e2e_mean_ms"] = b.e2e_mean_ms
        name = path.name if len(bench) == 1 else f"{path.name}:{b.source.rsplit(':', 1)[1]}"
        out.append(Run(name, sysname, ctx, out_len, b.concurrency, b.requests, devices, nics,
                       _buffer_slots(path.stem, man, None), b.completed, metrics, output_min=lo, output_max=hi,
                       outputs=outputs))
    return out


def _files(paths, pattern: str = "*.json") -> list[Path]:
    """Files of ``paths`` (files or folders, folders globbed for ``pattern``); a path that is neither is
    refused naming it (missing, a dangling link, a FIFO or device, a name too long)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if os.path.isdir(p):
            files += sorted(p.glob(pattern))
            continue
        check_input(p, "data file", DataError)
        files.append(p)
    if not files:
        raise DataError(f"no {pattern} files in {', '.join(map(str, paths))[:200]}")
    return files


SPLITS = ("calibration-1", "release-2")


def load_runs(paths=None, split: str | None = None, system: str | None = None, round_: int = 2) -> list[Run]:
    """Runs from files and/or folders (default: every shared run); ``split``: only runs of that manifest
    split (``calibration-1``, ``release-2``); ``round_=1``: the cold rounds."""
    if paths is None:
        paths = [shared_data_dir() / "sac-testbed" / "runs"]
    runs = [r for f in _files(paths) for r in _load_file(f, system, round_)]
    if split is not None:
        known = sorted({r.split for r in runs if r.split} | set(SPLITS))
        if split not in known:
            raise DataError(f"unknown split {split!r} (known: {', '.join(known)})")
        runs = [r for r in runs if r.split == split]
    return runs


def closed_loop_releases(latencies_ms, concurrency: int) -> np.ndarray:
    """When a closed-loop client sent each request (s from the first send, send order).

    The testbed's client keeps ``concurrency`` requests in flight and sends the next one as soon as one of
    them has received its last token, so request ``i >= concurrency`` left at the ``i - concurrency + 1``-th
    completion. ``latencies_ms``: each request's time from send to last token (``Run.latencies``).
    """
    lat = np.asarray(latencies_ms, dtype=float) / 1e3
    if concurrency < 1:
        raise DataError(f"concurrency must be at least 1, got {concurrency}")
    if not np.all(np.isfinite(lat)) or np.any(lat < 0):
        raise DataError("every request needs a finite, non-negative latency to reconstruct its send time")
    rel = np.zeros(len(lat))
    in_flight: list[float] = []                  # completion times of the requests in flight (a heap)
    for i, x in enumerate(lat.tolist()):
        rel[i] = 0.0 if i < concurrency else heapq.heappop(in_flight)
        heapq.heappush(in_flight, rel[i] + x)
    return rel
