"""Edge validation of measured data and traces (pydantic, strict): run JSON, micro-benchmark JSON, manifest
rows and trace records. The readers in :mod:`sacmodel.data.runs` and :mod:`sacmodel.data.traces` turn a
:class:`pydantic.ValidationError` into a one-line :class:`DataError` naming the file and the field or line
(:func:`first_error`); past them every number is finite, in range and of the right kind.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..util.reading import read_json as _read_json

# Size limits of measured data and traces (documented in the README).
LIMITS = {
    "json_bytes": 64 << 20,          # a run or micro-benchmark JSON file
    "json_depth": 20,                # nesting levels of a JSON document
    "json_items": 2_000_000,         # values in a JSON document
    "line_bytes": 1 << 20,           # one trace line (JSONL or CSV)
    "trace_requests": 1_000_000,     # requests one load_trace call reads
    "request_tokens": 1 << 24,       # input or output tokens of one request
    "count": 1 << 31,                # token totals of a run
    "run_requests": 100_000,         # requests or concurrency of one measured run
    "measured": 1e10,                # a measured latency (ms, us) or throughput (tok/s), at most
    "measured_min": 1e-3,            # and, when not 0, at least (1 ns in us, 1 us in ms)
    "manifest_bytes": 16 << 20,      # the runs' manifest.csv
    "trace_bytes": 4 << 30,          # a trace file (streamed: bounds the time spent, not the memory)
    "log_bytes": 256 << 20,          # a server log, after decompression
    "log_line_bytes": 1 << 20,       # one line of a server log
}


class DataError(ValueError):
    """A measured-data or trace file that cannot be read; the message names the file and field or line."""


STRICT = ConfigDict(strict=True, extra="ignore")
Count = Annotated[int, Field(ge=0, le=LIMITS["count"])]
PosCount = Annotated[int, Field(ge=1, le=LIMITS["count"])]
RunCount = Annotated[int, Field(ge=1, le=LIMITS["run_requests"])]       # requests, concurrency
Successes = Annotated[int, Field(ge=0, le=LIMITS["run_requests"])]
Tokens = Annotated[int, Field(ge=1, le=LIMITS["request_tokens"])]
OutTokens = Annotated[int, Field(ge=0, le=LIMITS["request_tokens"])]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
def _plausible(v: float) -> float:
    if 0 < v < LIMITS["measured_min"]:
        raise ValueError(f"{v!r} is implausibly small (0, or at least {LIMITS['measured_min']:g})")
    return v


# measured latencies (ms, us) and throughputs: 0 (not measured) or within [measured_min, measured]
Measured = Annotated[float, Field(ge=0, le=LIMITS["measured"], allow_inf_nan=False), AfterValidator(_plausible)]
Positive = Annotated[float, Field(ge=LIMITS["measured_min"], le=LIMITS["measured"], allow_inf_nan=False)]


def first_error(exc: ValidationError) -> str:
    """``field.path: message`` of the first error of a pydantic validation."""
    e = exc.errors()[0]
    # a union's member tags ('constrained-float', "literal['inf']") are not fields: left out of the path
    loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in e["loc"]
                  if isinstance(x, int) or re.fullmatch(r"\w+", x)).lstrip(".")
    if e["type"] == "missing":
        return f"missing field {loc!r}"
    msg = e["msg"].removeprefix("Value error, ")
    got = repr(e.get("input"))
    if e["type"] in ("model_type", "dict_type", "model_attributes_type"):
        msg = "expected an object"
    msg = msg if e["type"] in ("value_error", "assertion_error") else f"{msg}, got {got[:40]}"
    return f"{loc}: {msg}" if loc else msg



def read_json(path: Path) -> Any:
    """A JSON file within the size and depth limits (``NaN``/``Infinity`` refused), read through
    :mod:`sacmodel.util.reading` (regular files only, the size limit held while reading); errors name file
    and line."""
    return _read_json(path, limit=LIMITS["json_bytes"], depth=LIMITS["json_depth"], items=LIMITS["json_items"],
                      what="JSON file", err=DataError)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def json_line(text: str) -> Any:
    """One JSON value of a trace line, ``NaN``/``Infinity`` refused (ValueError)."""
    return json.loads(text, parse_constant=_no_constant)


# ---- traces ---------------------------------------------------------------------------------------
class MooncakeRecord(BaseModel):
    """One line of a Mooncake trace: ``timestamp`` (ms), token counts, ``hash_ids`` of 512-token blocks."""
    model_config = STRICT
    timestamp: NonNeg
    input_length: Tokens
    output_length: Tokens
    hash_ids: list[int] = Field(default_factory=list, max_length=LIMITS["request_tokens"] // 512 + 1)


class AzureRecord(BaseModel):
    """One row of an Azure LLM trace (after the timestamp is parsed): token counts."""
    model_config = STRICT
    ContextTokens: Tokens
    GeneratedTokens: OutTokens


# ---- micro-benchmark ------------------------------------------------------------------------------
class FetchStats(BaseModel):
    model_config = STRICT
    mean_us: Positive
    p50_us: Positive
    p99_us: Positive


class MicrobenchConfig(BaseModel):
    model_config = STRICT
    item_size: Annotated[int, Field(ge=1, le=1 << 20)]


class MicrobenchFile(BaseModel):
    """``sparse_kv_bench_*.json``: results[context][topk][backend] = {mean_us, p50_us, p99_us}."""
    model_config = STRICT
    config: MicrobenchConfig
    results: dict[str, dict[str, dict[str, dict[str, Any]]]]

    @field_validator("results")
    @classmethod
    def _keys(cls, v: dict) -> dict:
        if not v:
            raise ValueError("no results")
        for ctx, by_k in v.items():
            _int_key(ctx, "context")
            if not by_k:
                raise ValueError(f"context {ctx}: no top-k results")
            for k in by_k:
                _int_key(k, f"context {ctx}: top-k")
        return v


def _int_key(s: str, what: str) -> int:
    if not s.isdigit() or not 1 <= int(s) <= LIMITS["request_tokens"]:
        raise ValueError(f"{what} {s[:40]!r} is not a positive whole number")
    return int(s)


# ---- serving runs ---------------------------------------------------------------------------------
class RoundMetrics(BaseModel):
    """Metrics of one benchmark round; latencies in ms must be finite and non-negative."""
    model_config = STRICT
    num_requests: Optional[RunCount] = None
    num_success: Successes
    ttft_mean_ms: Optional[Measured] = None
    tbt_mean_ms: Optional[Measured] = None
    output_throughput_tok_s: Optional[Measured] = None
    e2e_mean_ms: Optional[Measured] = None
    total_output_tokens: Optional[Count] = None


class PerRequest(BaseModel):
    model_config = STRICT
    output_len: OutTokens
    prompt_len: Optional[Tokens] = None         # the request's prompt (default: the run's target_input_tokens)
    success: Optional[bool] = None
    ttft_ms: Optional[Measured] = None
    latency_ms: Optional[Measured] = None      # send to last token (the closed-loop client then sends the next)


class Round(BaseModel):
    model_config = STRICT
    metrics: RoundMetrics
    per_request: list[PerRequest] = Field(default_factory=list, max_length=LIMITS["run_requests"])


class RunConfig(BaseModel):
    """``config`` of a testbed ``e2e_bench_fast`` run."""
    model_config = STRICT
    target_input_tokens: Tokens
    max_concurrency: RunCount
    output_tokens: Optional[OutTokens] = None
    round2_output_min: Optional[OutTokens] = None
    round2_output_max: Optional[OutTokens] = None
    round2_num_requests: Optional[RunCount] = None
    round1_max_concurrency: Optional[RunCount] = None
    device_buffer: Optional[Tokens] = None
    buffer_slots: Optional[Tokens] = None
    hisparse_device_buffer: Optional[Tokens] = None

    @model_validator(mode="after")
    def _outputs(self):
        if self.output_tokens is None and self.round2_output_max is None:
            raise ValueError("missing field 'output_tokens' (or 'round2_output_max')")
        lo, hi = self.round2_output_min, self.round2_output_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"round2_output_min {lo} is above round2_output_max {hi}")
        return self


class E2ERun(BaseModel):
    model_config = STRICT
    config: RunConfig
    round1: Optional[Round] = None
    round2: Round


def _optional_int(v: str, lo: int = 0) -> Optional[int]:
    v = v.strip()
    if v == "":
        return None
    if not v.isdigit() or not lo <= int(v) <= LIMITS["count"]:
        raise ValueError(f"{v[:40]!r} is not a whole number >= {lo}")
    return int(v)


class ManifestRow(BaseModel):
    """A row of the runs' ``manifest.csv`` (all columns text; empty = unknown)."""
    model_config = ConfigDict(extra="ignore")
    file: str
    system: str = ""
    cxl_devices: Optional[int] = None
    rdma_nics: Optional[int] = None
    output: Optional[float] = None
    output_min: Optional[int] = None
    output_max: Optional[int] = None
    device_buffer: Optional[int] = None
    max_total_tokens: Optional[int] = None
    max_running_requests: Optional[int] = None
    split: str = ""
    server_log: str = ""

    @field_validator("cxl_devices", "rdma_nics", "output_min", "output_max", "device_buffer",
                     "max_total_tokens", "max_running_requests", mode="before")
    @classmethod
    def _int(cls, v):
        return _optional_int(v) if isinstance(v, str) else v

    @field_validator("output", mode="before")
    @classmethod
    def _float(cls, v):
        if isinstance(v, str):
            if not v.strip():
                return None
            try:
                x = float(v)
            except ValueError:
                raise ValueError(f"{v[:40]!r} is not a number") from None
            if not (math.isfinite(x) and x >= 0):
                raise ValueError(f"{v[:40]!r} is not a finite non-negative number")
            return x
        return v
