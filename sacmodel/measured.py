"""Readers for measured data: the testbed's fetch micro-benchmarks and serving runs, SGLang bench_serving.

Every reader names the file (and field) it could not use. The shared data folder is ``../shared/data``
relative to the repository (override with ``SACMODEL_DATA``).
"""
from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .schemas import DataError

REPO = Path(__file__).resolve().parent.parent


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
            out_len = int(cfg.get("round2_output_max") or cfg["output_tokens"])
            run = Run(path.name, sysname, int(cfg["target_input_tokens"]), out_len, int(cfg["max_concurrency"]),
                      int(cfg.get("round2_num_requests") or m["num_requests"]), devices, nics,
                      buf_slots, int(m["num_success"]),
                      {k: float(m[k]) for k in METRICS if m.get(k) is not None})
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
    return run


def load_runs(paths=None, system: str | None = None, round_: int = 2) -> list[Run]:
    """Runs from files and/or folders (default: the shared calibration runs); ``round_=1``: cold rounds."""
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
    return [load_run(f, system, round_) for f in files]


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
        if m is None or p is None or not m or not self.feasible or self.run.failed:
            return None
        return (p - m) / m


def compare_runs(scenario, runs: list[Run], **overrides) -> list[Comparison]:
    """Predict every run's configuration on ``scenario`` and pair it with the measurement."""
    from .calibrate import run_kwargs
    from .serving import predict
    out = []
    for r in runs:
        p = predict(scenario, r.system, **{**run_kwargs(r), **overrides})
        out.append(Comparison(r, {k: getattr(p, k) for k in METRICS}, p.feasible, p.limit))
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
