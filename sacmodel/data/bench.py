"""Readers of the standard serving-benchmark outputs people already have: SGLang ``bench_serving`` result files
and vLLM ``bench serve --save-result`` JSON, recognised by content, validated at the edge (pydantic), read
through :mod:`sacmodel.util.reading` with its size, depth and item limits.

Field names are those the benchmarks write, from their source:

- **SGLang** ``python/sglang/bench_serving.py`` (sgl-project/sglang at 0033168f, the v0.5 line), function
  ``benchmark``: ``--output-file`` appends one JSON object per run (JSONL) with the arguments ``backend``,
  ``dataset_name``, ``request_rate`` (``Infinity`` when every request is sent at once: Python's ``json.dumps``
  of ``inf``), ``max_concurrency``, ``random_input_len``, ``random_output_len``, ``random_range_ratio`` (the
  random dataset's lengths are uniform in [max(1, int(L x ratio)), L]) and the results ``duration``,
  ``completed``, ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
  ``output_throughput``, ``mean_ttft_ms``, ``mean_tpot_ms``, ``mean_itl_ms``, ``mean_e2e_latency_ms``, ...;
  with ``--output-details`` also the per-request arrays ``input_lens``, ``output_lens``, ``ttfts`` (s),
  ``itls`` (s, one list per request), ``generated_texts``, ``errors`` (a failed request has an error text and
  no tokens). Later versions add ``num_prompts`` and the model; both are read when present.
- **vLLM** ``vllm/benchmarks/serve.py`` (vllm-project/vllm at 009e6d4a), ``main`` and ``benchmark``:
  ``date``, ``endpoint_type``, ``backend``, ``model_id``, ``tokenizer_id``, ``num_prompts``, ``request_rate``
  (the string ``"inf"`` or a number), ``burstiness``, ``max_concurrency``, then ``duration``, ``completed``,
  ``failed``, ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``output_throughput``,
  ``mean_ttft_ms``, ``mean_tpot_ms``, ...; with ``--save-detailed`` the same per-request arrays as SGLang's
  (``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``errors``). ``--append-result`` writes one object
  per line, read like SGLang's JSONL.

Per-request arrays are used when present (the measured TTFT and TPOT are then the means over the successful
requests, and the engine is given each request's own lengths); the summary means otherwise.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, Field, ValidationError, model_validator

from ..util.names import FP8_GEMM_BACKENDS
from ..util.reading import check_tree, read_text, shown
from .records import LIMITS, STRICT, DataError, Measured, Positive, RunCount, first_error

BENCH_BYTES = 64 << 20          # one result file (a detailed run of 10,000 requests is about 20-60 MB)
SECONDS = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
Len = Annotated[int, Field(ge=0, le=LIMITS["request_tokens"])]
PerReq = Field(default=None, max_length=LIMITS["run_requests"])
SUMMARY_KEYS = ("mean_ttft_ms", "output_throughput", "completed")


def _rate(v):
    if v == "inf" or (isinstance(v, float) and v == math.inf):
        return math.inf
    return v


class BenchRecord(BaseModel):
    """One run of SGLang ``bench_serving`` or vLLM ``bench serve`` (the fields sacmodel uses)."""
    model_config = STRICT
    completed: RunCount
    failed: Optional[Annotated[int, Field(ge=0, le=LIMITS["run_requests"])]] = None
    duration: Optional[Positive] = None          # not used; some writers leave it out
    mean_ttft_ms: Positive
    mean_tpot_ms: Optional[Measured] = None
    output_throughput: Positive
    mean_e2e_latency_ms: Optional[Measured] = None
    total_input_tokens: Optional[Annotated[int, Field(ge=1, le=LIMITS["count"])]] = None
    total_output_tokens: Optional[Annotated[int, Field(ge=1, le=LIMITS["count"])]] = None
    request_rate: Optional[Union[Annotated[float, Field(gt=0)], Literal["inf"]]] = None
    max_concurrency: Optional[RunCount] = None
    num_prompts: Optional[RunCount] = None
    dataset_name: Optional[str] = None
    random_input_len: Optional[Annotated[int, Field(ge=1, le=LIMITS["request_tokens"])]] = None
    random_output_len: Optional[Annotated[int, Field(ge=1, le=LIMITS["request_tokens"])]] = None
    random_range_ratio: Optional[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]] = None
    model_id: Optional[str] = None
    model: Optional[str] = None
    input_lens: Optional[list[Len]] = PerReq
    output_lens: Optional[list[Len]] = PerReq
    ttfts: Optional[list[SECONDS]] = PerReq
    itls: Optional[list[list[SECONDS]]] = PerReq
    errors: Optional[list[Optional[str]]] = PerReq

    @model_validator(mode="before")
    @classmethod
    def _inf_rate(cls, v):
        if isinstance(v, dict) and v.get("request_rate") in ("inf", math.inf):
            v = {**v, "request_rate": "inf"}
        return v

    @model_validator(mode="after")
    def _arrays(self):
        arrays = {k: getattr(self, k) for k in ("input_lens", "output_lens", "ttfts", "itls")}
        given = {k: len(v) for k, v in arrays.items() if v is not None}
        if given and len(set(given.values())) > 1:
            raise ValueError("per-request arrays differ in length: " + ", ".join(f"{k} {n}" for k, n in given.items()))
        if given and set(given) != set(arrays):
            missing = sorted(set(arrays) - set(given))
            raise ValueError(f"per-request arrays incomplete: {', '.join(missing)} missing")
        if self.mean_tpot_ms is None and not given:
            raise ValueError("missing field 'mean_tpot_ms' (and no per-request 'itls')")
        return self


@dataclass
class BenchRun:
    """One measured run, as the fit uses it: the client's workload and what it measured (ms, tok/s)."""
    source: str                     # file:line
    harness: str                    # 'sglang bench_serving' or 'vllm bench serve'
    model: str | None               # the model the file names (None: it names none)
    requests: int
    concurrency: int                # max_concurrency (the number of requests when unlimited)
    request_rate: float             # requests/s (inf: all sent at once)
    isl: int                        # nominal (mean when only totals are known) prompt length
    osl: int
    range_ratio: float              # lengths uniform in [ratio x nominal, nominal] (1: fixed)
    ttft_mean_ms: float
    tpot_mean_ms: float
    output_tok_s: float
    per_request: bool = False       # measured means from the per-request arrays
    input_lens: np.ndarray | None = field(default=None, repr=False)
    output_lens: np.ndarray | None = field(default=None, repr=False)
    ttfts_s: np.ndarray | None = field(default=None, repr=False)
    digest: str = field(default="", repr=False, compare=False)     # of the record as written (a copy has the same)
    completed: int | None = None    # requests that succeeded
    e2e_mean_ms: float | None = None

    def label(self) -> str:
        return f"{self.source} (prompt {self.isl}, output {self.osl}, concurrency {self.concurrency})"


def _constant(name: str):
    if name == "Infinity":           # Python's json.dumps of float('inf'): SGLang's request_rate when unset
        return math.inf
    raise ValueError(f"{name} is not a number")


def _objects(text: str, where: str) -> list[tuple[int, Any]]:
    """(line, object) of a JSON document or of each non-empty line of a JSONL file."""
    try:
        return [(1, json.loads(text, parse_constant=_constant))]
    except ValueError:
        pass
    except RecursionError:
        raise DataError(f"{where}: nested deeper than {LIMITS['json_depth']} levels") from None
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line, parse_constant=_constant)))
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}:{n}: not valid JSON ({exc.msg}; a truncated file?)") from None
        except RecursionError:
            raise DataError(f"{where}:{n}: nested deeper than {LIMITS['json_depth']} levels") from None
        except ValueError as exc:
            raise DataError(f"{where}:{n}: not valid JSON ({str(exc)[:80]})") from None
    return out


def looks_like_bench(path: str | Path) -> bool:
    """Whether a file begins as a benchmark result (a JSON object with the summary keys in its first 1 MiB),
    read by content; a file that cannot be opened is not one (its own reader says why)."""
    from ..util.reading import open_input
    try:
        with open_input(path, "benchmark result file", DataError) as fh:
            head = fh.read(1 << 20)
    except (DataError, OSError):
        return False
    if head.lstrip()[:1] not in (b"{", b"["):
        return False
    return b'"completed"' in head and b'"output_throughput"' in head and (b'"mean_ttft_ms"' in head
                                                                           or b'"ttfts"' in head)


def _harness(obj: dict) -> str:
    return "vllm bench serve" if ("model_id" in obj or "endpoint_type" in obj) else "sglang bench_serving"


def _check_finite(obj: dict, where: str) -> None:
    for k, v in obj.items():
        if isinstance(v, float) and not math.isfinite(v) and k != "request_rate":
            raise DataError(f"{where}: {k}: {v} is not a finite number")


def load_bench_file(path: str | Path) -> list[BenchRun]:
    """Every run of one SGLang ``bench_serving`` JSONL or vLLM ``bench serve`` JSON file (see the module
    docstring); a :class:`DataError` naming the file, line and field otherwise."""
    where = shown(path)
    text = read_text(path, limit=BENCH_BYTES, what="benchmark result file", err=DataError)
    objs = _objects(text, where)
    if not objs:
        raise DataError(f"{where}: no benchmark runs (an empty file)")
    out = []
    for n, obj in objs:
        w = f"{where}:{n}"
        if not isinstance(obj, dict):
            raise DataError(f"{w}: expected a JSON object (one benchmark run), got {type(obj).__name__}")
        check_tree(obj, w, depth=LIMITS["json_depth"], items=LIMITS["json_items"], err=DataError)
        missing = [k for k in SUMMARY_KEYS if k not in obj]
        if missing:
            raise DataError(f"{w}: missing field {missing[0]!r}: not an SGLang bench_serving or vLLM bench serve "
                            "result")
        _check_finite(obj, w)
        try:
            rec = BenchRecord.model_validate(obj)
        except ValidationError as exc:
            raise DataError(f"{w}: {first_error(exc)}") from None
        run = _run(rec, w, _harness(obj))
        run.digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
        run.completed, run.e2e_mean_ms = rec.completed, rec.mean_e2e_latency_ms
        out.append(run)
    return out


def _run(rec: BenchRecord, where: str, harness: str) -> BenchRun:
    rate = math.inf if rec.request_rate in (None, "inf") else float(rec.request_rate)
    if rec.ttfts is not None:
        return _detailed(rec, where, harness, rate)
    n = rec.num_prompts or rec.completed + (rec.failed or 0)
    random = rec.random_input_len is not None and (rec.dataset_name or "random").startswith("random")
    if random:
        isl, osl = rec.random_input_len, rec.random_output_len or 1
        ratio = 1.0 if rec.random_range_ratio is None else rec.random_range_ratio
    elif rec.total_input_tokens and rec.total_output_tokens:
        isl = max(1, round(rec.total_input_tokens / rec.completed))
        osl = max(1, round(rec.total_output_tokens / rec.completed))
        ratio = 1.0
    else:
        raise DataError(f"{where}: missing field 'random_input_len' (or 'total_input_tokens' and "
                        "'total_output_tokens'): the run's prompt lengths are not known")
    if osl < 2:
        raise DataError(f"{where}: random_output_len: {osl} output tokens leave no time per output token")
    return BenchRun(where, harness, rec.model_id or rec.model, n, min(rec.max_concurrency or n, n), rate, isl, osl,
                    ratio, rec.mean_ttft_ms, rec.mean_tpot_ms, rec.output_throughput)


def _detailed(rec: BenchRecord, where: str, harness: str, rate: float) -> BenchRun:
    """A run with per-request arrays: TTFT and TPOT (mean over requests of the mean ITL) from them."""
    errs = rec.errors or [""] * len(rec.ttfts)
    if len(errs) != len(rec.ttfts):
        raise DataError(f"{where}: errors has {len(errs)} entries, ttfts {len(rec.ttfts)}")
    ok = np.array([not e and t > 0 and o >= 2 for e, t, o in zip(errs, rec.ttfts, rec.output_lens)], bool)
    if not ok.any():
        raise DataError(f"{where}: ttfts: no successful request with two or more output tokens")
    itl = [np.mean(x) if len(x) else math.nan for x in rec.itls]
    tpot = np.array(itl)[ok]
    if not np.isfinite(tpot).all():
        raise DataError(f"{where}: itls: a successful request has no inter-token latencies")
    ins, outs = np.array(rec.input_lens), np.array(rec.output_lens)
    if (ins[ok] < 1).any():
        raise DataError(f"{where}: input_lens: a successful request has no prompt tokens")
    n = len(rec.ttfts)
    return BenchRun(where, harness, rec.model_id or rec.model, n, min(rec.max_concurrency or n, n), rate,
                    int(round(ins[ok].mean())), int(round(outs[ok].mean())), 1.0,
                    float(np.mean(np.array(rec.ttfts)[ok]) * 1e3), float(tpot.mean() * 1e3),
                    rec.output_throughput, True, np.maximum(ins, 1), np.maximum(outs, 2),
                    np.array(rec.ttfts))


def load_bench_runs(paths) -> list[BenchRun]:
    """The runs of several benchmark result files, in order. A run given twice (a file named twice, a line
    appended twice: every field equal) is refused: it would count double in the fit and be held out against
    itself in the leave-one-run-out check."""
    out, seen = [], {}
    for p in paths:
        for run in load_bench_file(p):
            if run.digest in seen:
                first = seen[run.digest]
                raise DataError(f"{run.source}: " + ("named twice" if first == run.source else
                                                      f"the same run as {first} (every field equal)") +
                                "; give each run once")
            seen[run.digest] = run.source
            out.append(run)
    return out


# ---- the server's launch arguments ------------------------------------------------------------------
# server_args field -> sacmodel.scenario() keyword (SGLang's ServerArgs names)
SERVER_ARGS = {"tp_size": "tp", "dp_size": "dp", "ep_size": "ep", "mem_fraction_static": "mem_fraction",
               "chunked_prefill_size": "chunked_prefill", "kv_cache_dtype": "kv_dtype",
               "max_running_requests": "max_running_requests", "max_total_tokens": "max_total_tokens",
               "scheduler_recv_interval": "scheduler_recv_interval"}


def machine_from_server_log(path: str | Path) -> dict:
    """Keywords of :func:`sacmodel.scenario` from a server log's ``server_args=ServerArgs(...)`` line (the
    GPU is not in it: give ``--gpu``). ``dp`` counts data-parallel attention groups, so it is 1 unless
    ``enable_dp_attention``; the model is the last component of ``model_path``."""
    from .server_logs import load_server_log
    s = load_server_log(path).settings
    if not s:
        raise DataError(f"{shown(path)}: no 'server_args=ServerArgs(...)' line: not an SGLang server log")
    kw = {}
    for key, name in SERVER_ARGS.items():
        v = s.get(key)
        if v is None or v == "auto" and name == "kv_dtype":
            continue
        if name == "kv_dtype":
            kw[name] = "fp8" if "fp8" in str(v) else "bf16" if str(v) in ("bf16", "bfloat16") else "auto"
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise DataError(f"{shown(path)}: server_args {key}={v!r} is not a positive number")
        kw[name] = v
    gemm = s.get("fp8_gemm_runner_backend")        # SGLang's --fp8-gemm-backend (auto: DeepGEMM where it is on)
    if gemm in FP8_GEMM_BACKENDS[1:]:                # a backend other than the default
        kw["fp8_gemm_backend"] = gemm
    if not s.get("enable_dp_attention"):
        kw.pop("dp", None)
    if "tp" in kw:
        kw["gpus"] = kw["tp"]
    if isinstance(s.get("model_path"), str):
        kw["model"] = s["model_path"].rstrip("/").split("/")[-1].lower()
    return kw


def same_model(named: str | None, model: str) -> bool:
    """Whether a run that names ``named`` (an HF id or path) is of ``model`` (a catalog name, alias or
    config.json); a run naming no model is taken as the user says."""
    if not named:
        return True
    from ..hardware.models import ModelError, get_model
    base = str(named).rstrip("/").split("/")[-1].lower()
    norm = lambda s: "".join(c for c in s.lower() if c.isalnum())  # noqa: E731
    try:
        return get_model(base).name == get_model(model).name
    except ModelError:
        return norm(base) == norm(Path(str(model)).stem if str(model).endswith(".json") else str(model))
