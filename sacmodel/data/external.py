"""Measured serving runs of other machines (``shared/data/external/`` and the validation's public checks).

One CSV row per benchmark point: the machine (``gpu``, ``gpus``, ``model``, ``weights``, ``kv_dtype``, ``tp``,
``dp`` = attention data-parallel groups, ``ep``), the server settings that differ from SGLang's defaults
(``mem_fraction``, ``chunked_prefill``, ``scheduler_recv_interval``, ``piecewise_cuda_graph`` = 1 where the
server ran short prefills as piecewise CUDA graphs, ``fp8_gemm_backend`` = SGLang's FP8 GEMM backend where the server
did not run DeepGEMM: ``flashinfer_trtllm``; ``engine`` = ``vllm`` for a vLLM server, else SGLang), ``engine_version`` = the
release the server ran (empty or ``unknown``: not stated; it selects the kernels a release ran,
:func:`sacmodel.hardware.transfer.moe_prefill_factor`), the client's workload (``isl``/``osl`` nominal lengths, each request's
lengths drawn uniformly in [``range_ratio`` x nominal, nominal], ``concurrency`` in flight at most, ``requests`` in
all) and the measured means (``ttft_mean_ms``, ``tpot_mean_ms`` = the mean over requests of (E2E - TTFT) / (output -
1), ``output_tok_s``), and where the source gives them the TTFT's and the TPOT's median and 99th percentile over
requests (``ttft_median_ms``, ``ttft_p99_ms``, ``tpot_median_ms``, ``tpot_p99_ms``; empty: not published). The shared file names its columns a little differently (``attn_dp``, ``moe_ep``,
``sglang_version``) and states no client settings: :data:`INFERENCEX_CLIENT` supplies them.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from ..util.names import ENGINES, FP8_GEMM_BACKENDS, release
from ..util.reading import read_text
from .records import DataError

# The client and server settings of the InferenceX benchmarks the aiconfigurator "silicon" rows come from:
# SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/dsr1_fp8_h200*.sh and utils/bench_serving
# (random lengths in [0.8 L, L], ignore_eos, 10 x concurrency prompts; --mem-fraction-static 0.82,
# --chunked-prefill-size 32768).
INFERENCEX_CLIENT = {"range_ratio": 0.8, "requests_per_concurrency": 10, "mem_fraction": 0.82,
                     "chunked_prefill": 32768}


@dataclass(frozen=True)
class ExternalRun:
    """One measured benchmark point of a machine other than the testbed (times in ms, throughput tok/s)."""
    id: str
    group: str
    gpu: str
    gpus: int
    model: str
    weights: str
    kv_dtype: str
    tp: int
    dp: int
    ep: int
    mem_fraction: float | None
    chunked_prefill: int | None
    isl: int
    osl: int
    range_ratio: float
    concurrency: int
    requests: int
    ttft_mean_ms: float
    tpot_mean_ms: float
    output_tok_s: float
    source: str
    scheduler_recv_interval: int | None = None
    piecewise_cuda_graph: bool = False
    fp8_gemm_backend: str = "auto"
    ttft_median_ms: float = math.nan
    ttft_p99_ms: float = math.nan
    tpot_median_ms: float = math.nan
    tpot_p99_ms: float = math.nan
    engine: str = "sglang"
    engine_version: str | None = None

    def scenario_kwargs(self) -> dict:
        """Arguments of :func:`sacmodel.scenario` for the machine and its server settings."""
        kw = dict(gpus=self.gpus, model=self.model, weights=self.weights, kv_dtype=self.kv_dtype, dp=self.dp,
                  tp=self.tp, ep=self.ep)
        if self.mem_fraction:
            kw["mem_fraction"] = self.mem_fraction
        if self.chunked_prefill:
            kw["chunked_prefill"] = self.chunked_prefill
        if self.scheduler_recv_interval:
            kw["scheduler_recv_interval"] = self.scheduler_recv_interval
        if self.piecewise_cuda_graph:
            kw["piecewise_cuda_graph"] = True
        if self.fp8_gemm_backend != "auto":
            kw["fp8_gemm_backend"] = self.fp8_gemm_backend
        if self.engine != "sglang":
            kw["engine"] = self.engine
        if self.engine_version and self.engine == "sglang":        # SGLang's releases select its kernels
            kw["engine_version"] = self.engine_version
        return kw


def _num(row: dict, key: str, where: str, cast=float, default=None):
    v = (row.get(key) or "").strip()
    if not v:
        if default is not None:
            return default
        raise DataError(f"{where}: column {key!r} is empty")
    try:
        x = cast(float(v))
    except ValueError:
        raise DataError(f"{where}: column {key!r} is not a number: {v[:40]!r}") from None
    if isinstance(x, float) and not math.isfinite(x):
        raise DataError(f"{where}: column {key!r} is not finite")
    return x


def _flag(row: dict, key: str, where: str) -> bool:
    v = (row.get(key) or "0").strip()
    if v not in ("0", "1"):
        raise DataError(f"{where}: column {key!r} must be 0 or 1, got {v[:40]!r}")
    return v == "1"


def _choice(row: dict, key: str, where: str, choices: tuple[str, ...]) -> str:
    """A column naming one of ``choices``; empty is the first (the default)."""
    v = (row.get(key) or "").strip() or choices[0]
    if v not in choices:
        raise DataError(f"{where}: column {key!r} must be one of {', '.join(choices)}, got {v[:40]!r}")
    return v


def _percentiles(row: dict, where: str, metric: str = "ttft") -> tuple[float, float]:
    """(median, p99) of ``metric`` (``ttft`` or ``tpot``) in ms where the row gives them, NaN where it does not."""
    kmed, kp99 = f"{metric}_median_ms", f"{metric}_p99_ms"
    med, p99 = (_num(row, k, where, float, math.nan) for k in (kmed, kp99))
    for k, v in ((kmed, med), (kp99, p99)):
        if v <= 0:
            raise DataError(f"{where}: column {k!r} must be positive, got {v:g}")
    if med > p99:
        raise DataError(f"{where}: column {kmed!r} ({med:g}) is above {kp99!r} ({p99:g})")
    return med, p99


def _version(row: dict, key: str, where: str) -> str | None:
    """A release number such as 0.5.3 (empty or ``unknown``: None)."""
    v = (row.get(key) or "").strip()
    try:
        return release(v)
    except ValueError:
        raise DataError(f"{where}: column {key!r} must be a release such as 0.5.3, got {v[:40]!r}") from None


def load_external_runs(path: str | Path, source: str | None = None) -> list[ExternalRun]:
    """The runs of an external CSV (the validation's checks, or ``shared/data/external/*.csv``)."""
    path = Path(path)
    text = read_text(path, limit=16 << 20, what="external runs file", err=DataError)
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise DataError(f"{path}: no rows")
    out = []
    for n, row in enumerate(rows, start=2):
        where = f"{path}:{n}"
        shared = "sglang_version" in row             # the shared file's columns and the InferenceX client
        conc = _num(row, "concurrency", where, int)
        c = INFERENCEX_CLIENT
        med, p99 = _percentiles(row, where)
        tmed, tp99 = _percentiles(row, where, "tpot")
        out.append(ExternalRun(
            id=row.get("id") or f"{path.stem}-{n - 1}", group=row.get("group") or f"{path.stem}",
            gpu=row["gpu"].lower(), gpus=_num(row, "gpus", where, int), model=row["model"].lower(),
            weights=row["weights"].lower(), kv_dtype=(row.get("kv_dtype") or "auto").lower(),
            tp=_num(row, "tp", where, int), dp=_num(row, "attn_dp" if shared else "dp", where, int),
            ep=_num(row, "moe_ep" if shared else "ep", where, int),
            mem_fraction=c["mem_fraction"] if shared else _num(row, "mem_fraction", where, float, 0.0) or None,
            chunked_prefill=c["chunked_prefill"] if shared else _num(row, "chunked_prefill", where, int, 0) or None,
            isl=_num(row, "isl", where, int), osl=_num(row, "osl", where, int),
            range_ratio=c["range_ratio"] if shared else _num(row, "range_ratio", where, float),
            concurrency=conc,
            requests=c["requests_per_concurrency"] * conc if shared else _num(row, "requests", where, int),
            ttft_mean_ms=_num(row, "ttft_mean_ms", where), tpot_mean_ms=_num(row, "tpot_mean_ms", where),
            output_tok_s=_num(row, "output_tok_s", where, float, math.nan),
            source=source or row.get("source") or str(path),
            scheduler_recv_interval=_num(row, "scheduler_recv_interval", where, int, 0) or None,
            piecewise_cuda_graph=_flag(row, "piecewise_cuda_graph", where),
            fp8_gemm_backend=_choice(row, "fp8_gemm_backend", where, FP8_GEMM_BACKENDS),
            ttft_median_ms=med, ttft_p99_ms=p99, tpot_median_ms=tmed, tpot_p99_ms=tp99,
            engine=_choice(row, "engine", where, ENGINES) if row.get("engine") else "sglang",
            engine_version=_version(row, "sglang_version" if shared else "engine_version", where)))
    return out
