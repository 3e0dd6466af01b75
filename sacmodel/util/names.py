"""Names and limits the library and the command line share, importable without sympy, pint or scipy.

Also the kind of quantity each named workload, resource or hardware number is, so that it can be parsed
from the command line with the right unit and printed with one (``pf_dma_bw = 3.456 GB/s``).
"""
from __future__ import annotations

import math
from pathlib import Path

ENGINES = ("sglang", "vllm")       # serving engines an instance runs (sacmodel.serving.engine)
# SGLang's --fp8-gemm-backend (server_args fp8_gemm_runner_backend); the first is the default
FP8_GEMM_BACKENDS = ("auto", "deep_gemm", "flashinfer_trtllm")
SYSTEMS = ("gpu", "dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk")
MAIN_SYSTEMS = ("gpu", "dram", "cxl", "rdma")
BACKENDS = ("dram", "cxl", "rdma")
ROUTERS = ("round_robin", "random", "least_load", "prefix_affinity", "kv", "cache_aware", "llm_d")      # cluster routers (sacmodel.cluster)

# Metrics. Unloaded: closed forms with one request alone (seconds; bytes for bytes_per_step).
# Loaded: fields of a Prediction from the serving engine (ms, tokens/s, requests/s).
UNLOADED = ("ttft", "tbt", "e2e", "bytes_per_step", "ttft_cold")
LOADED = ("ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "tbt_mean_ms", "tbt_p99_ms", "e2e_mean_ms",
          "output_throughput_tok_s", "request_throughput_req_s")
# metrics only a cluster replay gives (plan --trace): percentiles over the trace's requests
CLUSTER_SLO = ("ttft_p90_ms", "tbt_p50_ms", "e2e_p50_ms", "queue_p50_s")
HIGHER_IS_BETTER = {"output_throughput_tok_s", "request_throughput_req_s"}
SHORT_METRICS = {"ttft": "ttft_mean_ms", "tbt": "tbt_mean_ms", "e2e": "e2e_mean_ms",
                 "throughput": "output_throughput_tok_s"}   # short name -> loaded Prediction field

PRICE_FILE = Path(__file__).resolve().parents[1] / "data" / "prices.yaml"

# Documented size limits (README, ``--help``): beyond them a command exits 2 instead of running away.
LIMITS = {
    "tokens": 16 * 1024 ** 2,       # a context or output length, tokens (16M)
    "concurrency": 10_000,          # requests in flight
    "requests": 100_000,            # requests per prediction (about 20 s of engine time with --rate)
    "points": 10_000,               # points of a break-even curve or of one sweep/map axis
    "sweep_points": 5_000_000,      # points of a vectorised (unloaded) sweep grid
    "predictions": 10_000,          # predict() calls of one sweep --full or loaded winner map
    "map_cells": 250_000,           # cells of an unloaded winner map (500 x 500)
    "contexts": 64,                 # entries of compare --contexts
    "path_chars": 1024,             # characters of a scenario, model, trace or output path
    "trace_requests": 1_000_000,    # replay / trace-stats --limit
    "workers": 256,
    "instances": 4096,              # serving instances of a cluster (a cluster file, replay/hitrate instances=)
    "hosts": 4096,                  # hosts of a cluster file
    "tiers": 64,                    # KV tiers of a cluster file
}

RATE_RANGE = (1e-4, 1e6)           # requests/s of an open-loop workload (predict rate=, --rate)
TIME_SCALE_RANGE = (1e-6, 1e6)     # replay time_scale= (--time-scale): arrivals that many times faster

TOKEN_NAMES = ("context", "output", "topk", "device_buffer")
COUNT_NAMES = ("concurrency", "requests", "cxl_devices", "rdma_nics", "dp")
WORKLOAD_NAMES = TOKEN_NAMES + COUNT_NAMES + ("rate",)


def kind_of(name: str) -> str:
    """Kind of quantity ``name`` holds: tokens, count, rate (requests/s), bandwidth, time, bytes, flops, number.

    ``name`` is a workload argument (``context``), a scenario parameter (``t_graph_kernel``), a symbol of the closed
    forms (``sw_bw``) or a hardware number (``node:cxl_device.bandwidth``, ``link:gpu.latency``).
    """
    if name in TOKEN_NAMES:
        return "tokens"
    if name in COUNT_NAMES:
        return "count"
    if name == "rate":
        return "rate"
    f = name.split(".")[-1]
    if "bandwidth" in f or f.endswith("_bw") or f == "rate" or f.endswith("_rate"):
        return "bandwidth"
    if "latency" in f or f.endswith("_lat") or f.startswith("t_") or "cost" in f or "poll" in f:
        return "time"
    if "capacity" in f or f.endswith("bytes") or f == "cacheline":
        return "bytes"
    if "flops" in f or f.startswith("peak_"):
        return "flops"
    return "number"


def fmt_value(x: float, kind: str, digits: int = 4) -> str:
    """``x`` (SI) with its unit, to ``digits`` significant digits: 3.456e9 bandwidth -> '3.456 GB/s'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return str(x)
    g = lambda v: f"{v:.{digits}g}"  # noqa: E731
    if kind == "tokens":
        return f"{round(x):,} tokens"            # tokens are whole: 163,392 tokens, never 163,392.000
    if kind == "count":
        return f"{x:g}"
    if kind == "rate":
        return f"{g(x)} requests/s"
    if kind == "bandwidth":
        return f"{g(x / 1e9)} GB/s"
    if kind == "bytes":
        return f"{g(x / 1e9)} GB" if abs(x) >= 1e6 else f"{g(x)} B"
    if kind == "flops":
        return f"{g(x / 1e12)} TFLOP/s"
    if kind == "time":
        for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
            if abs(x) >= scale:
                return f"{g(x / scale)} {unit}"
        return f"{g(x * 1e9)} ns"
    return g(x)


def release(version) -> str | None:
    """A serving engine's release such as ``0.5.3`` (packaging's version rule), checked; None where none is
    stated (None, empty or ``unknown``). Raises ValueError for anything else (the caller names its field)."""
    from packaging.version import InvalidVersion, Version
    if version is None or version in ("", "unknown"):
        return None
    if not isinstance(version, str):
        raise ValueError(f"not a release: {version!r}")
    try:
        Version(version)
    except InvalidVersion:
        raise ValueError(f"not a release: {version!r}") from None
    return version
