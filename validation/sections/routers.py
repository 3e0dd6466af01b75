"""Published router comparisons rebuilt and predicted (validation report, section 9): llm-d's two scheduling
benchmarks, the 73% and the 37% KV-capacity runs.

llm-d's "KV-cache wins you can see" benchmark, 73% KV-capacity run (`validation/data/llmd_73capacity.csv`,
from llm-d/llm-d-kv-cache-manager `benchmarking/73-capacity/README.md` at a378f5b3): 8 vLLM pods of Qwen3-32B on
2 x H100 each (307,328 KV tokens per pod), inference-perf's shared-prefix workload (150 groups x 5 prompts, a
6,000-token system prompt and a 1,200-token question; the 750 prompts shuffled once and cycled), Poisson
arrivals over a ladder of 16 load steps run back to back after a 50 s warm-up at 15 QPS; four schedulers:
random, load (queue + KV-use scorers), estimated (approximate prefix scorer fed by its own decisions, weights
1/1/1) and precise (prefix scorer fed by the pods' KV events; weights prefix 3, KV 2, queue 2).

Output length: the workload asks for 1,000 tokens, but the report's own throughput is 10,497 output tok/s at
59.2 completed req/s (177 tokens per request) and it gives the live decode length as 200-230 tokens, so the
replay uses 200; with 1,000 every scheduler would saturate at the lowest steps (one pod holds ~37 such requests
and decodes ~1,300 tok/s, the cluster ~10K tok/s against 60K asked at 60 QPS). Checked on vLLM pods: with
1,000 output tokens the cache-blind schedulers' p90 TTFT is 34-62 s over the 3-15 QPS steps (the 50 s warm-up
at 15 QPS leaves a decode backlog the lower steps inherit), with 200 it is 0.5-1.8 s (published 0.8-7.0 s).

The pods run vLLM (``engine="vllm"``): its KV pool for Qwen3-32B at TP2 comes out at 322,000 tokens per pod
against the 307,328 the report states (+4.8%; SGLang's would be 280,069, -8.9%).

The 37% KV-capacity run (`validation/data/llmd_37capacity.csv`, `benchmarking/37-capacity/README.md` at the same
commit): 4 pods of Llama-3.1-70B on 4 x H100 (TP4), 83 groups x 3 prompts of an 8,000-token system prompt and a
1,000-token question, 1,000 output tokens (its throughput at the lowest step, 2,580 tok/s at 3 QPS, is
consistent with that), constant-rate arrivals over 9 steps after a 30 s warm-up at 9 QPS; schedulers random,
load (queue 1 + KV 1), default (approximate prefix 2 + queue 1 + KV 1) and precise (prefix 2 + KV 1 + queue 1).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import sacmodel
from sacmodel.cluster.replay import INFERENCE_PERF_BARRIER, replay
from sacmodel.workloads import shared_prefix, stage_of

HERE = Path(__file__).resolve().parents[1] / "data"
BREAK_S = 10.0        # a scheduler "breaks away" at the first load step whose p90 TTFT exceeds this


@dataclass(frozen=True)
class Bench:
    """One published benchmark: its data file, cluster, workload and schedulers."""
    name: str
    data: Path
    source: str
    gpus: int
    model: str
    instances: int
    shape: tuple          # groups, prompts per group, system tokens, question tokens
    output: int
    warmup: tuple         # (qps, seconds)
    arrivals: str
    configs: dict         # llm-d scheduler -> (sacmodel router, parameters)


BENCHES = {
    "73": Bench("73% KV capacity", HERE / "llmd_73capacity.csv", "benchmarking/73-capacity", 2, "qwen3-32b", 8,
                (150, 5, 6000, 1200), 200, (15.0, 50.0), "poisson", {
                    "random": ("random", {}),
                    "load": ("llm_d", {"prefix": "none", "kv_weight": 1, "queue_weight": 1}),
                    "estimated": ("llm_d", {"prefix": "estimated", "prefix_weight": 1, "kv_weight": 1,
                                            "queue_weight": 1}),
                    "precise": ("llm_d", {"prefix": "precise", "prefix_weight": 3, "kv_weight": 2, "queue_weight": 2})}),
    "37": Bench("37% KV capacity", HERE / "llmd_37capacity.csv", "benchmarking/37-capacity", 4, "llama-3.1-70b", 4,
                (83, 3, 8000, 1000), 1000, (9.0, 30.0), "constant", {
                    "random": ("random", {}),
                    "load": ("llm_d", {"prefix": "none", "kv_weight": 1, "queue_weight": 1}),
                    "default": ("llm_d", {"prefix": "estimated", "prefix_weight": 2, "kv_weight": 1,
                                          "queue_weight": 1}),
                    "precise": ("llm_d", {"prefix": "precise", "prefix_weight": 2, "kv_weight": 1, "queue_weight": 1})}),
}
CONFIGS = BENCHES["73"].configs
OUTPUT = BENCHES["73"].output


def published(b: Bench = BENCHES["73"]) -> tuple[list[tuple[float, float]], dict]:
    """The ladder [(qps, seconds)] and {router: [p90 TTFT s per step]}."""
    rows = list(csv.DictReader(b.data.open()))
    ladder = []
    p90: dict = {}
    for r in rows:
        step = (float(r["qps"]), float(r["duration_s"]))
        if step not in ladder:
            ladder.append(step)
        p90.setdefault(r["router"], []).append(float(r["ttft_p90_s"]))
    return ladder, p90


def break_away(qps: list[float], p90: list[float]) -> float | None:
    return next((q for q, x in zip(qps, p90) if x > BREAK_S), None)


def reproduce(b: Bench = BENCHES["73"], names: list[str] | None = None) -> dict:
    """Replay the ladder for every scheduler (or those ``names``: a part, for :func:`merge`); p90 TTFT per step
    and the break-away loads, with the published ones."""
    ladder, pub = published(b)
    stages = [b.warmup] + ladder
    tr = shared_prefix(*b.shape, b.output, rate=stages, seed=1, block_tokens=64, arrivals=b.arrivals)
    pod = sacmodel.scenario("h100", gpus=b.gpus, model=b.model, weights="bf16", engine="vllm")   # the pods run vLLM
    step = stage_of(tr, stages)
    qps = [q for q, _ in ladder]
    out = {"bench": b, "qps": qps, "requests": len(tr), "predicted": {}, "published": pub, "hit": {}}
    for name in (b.configs if names is None else names):
        router, params = b.configs[name]
        # inference-perf drains each stage before it starts the next (its stage barrier)
        p = replay(pod, "gpu", tr, router=router, router_params=params, instances=b.instances,
                   stage_barrier=INFERENCE_PERF_BARRIER)
        ttft = p.per_request["ttft_ms"] / 1e3
        row = []
        for j in range(1, len(stages)):
            x = ttft[step == j]
            row.append(float(np.percentile(np.where(np.isnan(x), np.inf, x), 90)) if len(x) else math.nan)
        out["predicted"][name] = row
        out["hit"][name] = p.summary["hit_rate_total"]
    return out if names is not None else merge([out])


def merge(parts: list[dict]) -> dict:
    """One benchmark's result from the parts :func:`reproduce` returned for some of its schedulers each (the
    schedulers in the benchmark's order), with the break-away loads."""
    b = parts[0]["bench"]
    out = {**parts[0], "predicted": {}, "hit": {}}
    for n in b.configs:
        for part in parts:
            if n in part["predicted"]:
                out["predicted"][n], out["hit"][n] = part["predicted"][n], part["hit"][n]
    out["break"] = {n: (break_away(out["qps"], out["published"][n]), break_away(out["qps"], out["predicted"][n]))
                    for n in b.configs}
    return out


def markdown(r: dict) -> list[str]:
    """The section of one benchmark: the p90 ladder published / predicted and the break-away loads."""
    b, qps = r["bench"], r["qps"]
    md = [f"### Published router comparison: llm-d's scheduling benchmark, {b.name}", "",
          f"{b.instances} pods of {b.model} on {b.gpus} x H100 (`sacmodel.scenario(\"h100\", gpus={b.gpus}, "
          f"model=\"{b.model}\", weights=\"bf16\", engine=\"vllm\")`, {b.instances} instances), llm-d's shared-prefix "
          "workload "
          f"({b.shape[0]} groups x {b.shape[1]} prompts, {b.shape[2]:,} + {b.shape[3]:,} tokens, output "
          f"{b.output:,}; {b.arrivals} arrivals) and load ladder, each scheduler as the report configures it "
          "(`random`; `llm_d` with prefix none / estimated / precise and the report's weights; see "
          f"`validation/sections/routers.py`). Source: llm-d/llm-d-kv-cache-manager `{b.source}` (a378f5b3). "
          "Cells: p90 TTFT in s, published / predicted. The published pods run vLLM, and so do the model's "
          "(vLLM V1's scheduler: mixed prefill-decode batches under max_num_batched_tokens 8192, max_num_seqs "
          "1024, 16-token blocks; `sacmodel/serving/engine/vllm.py`; its API server's event loop (each request's "
          "intake and the output handler) and tokenizer thread, `vllm_front.py`). The client is inference-perf's, which waits for every request of a stage to "
          "finish before it starts the next (`stage_barrier`, 2 s; kubernetes-sigs/inference-perf d4215cec): "
          "each stage starts with empty queues.", "",
          "| QPS | " + " | ".join(b.configs) + " |", "|---|" + "---|" * len(b.configs)]
    for j, q in enumerate(qps):
        md.append(f"| {q:g} | " + " | ".join(f"{r['published'][n][j]:.2f} / {r['predicted'][n][j]:.2f}"
                                              for n in b.configs) + " |")
    top = f"{qps[-1]:g}"
    md += ["", f"Break-away load (first step with p90 TTFT above {BREAK_S:g} s), published / predicted: "
           + "; ".join(f"{n} {_q(a, top)} / {_q(c, top)}" for n, (a, c) in r["break"].items()) + "."]
    steps = {n: _steps_apart(qps, a, c) for n, (a, c) in r["break"].items()}
    md.append("Within one load step for " + f"{sum(1 for s in steps.values() if s <= 1)} of {len(steps)} schedulers "
              f"({', '.join(f'{n}: {s} step(s)' for n, s in steps.items())}). Order at the highest load, "
              f"published: {_order(r['published'], -1)}; predicted: {_order(r['predicted'], -1)}. Prefix hit "
              "rate over the run: " + ", ".join(f"{n} {100 * h:.0f}%" for n, h in r["hit"].items()) + ".")
    broke = [n for n, (a, c) in r["break"].items() if a is not None and c is not None]
    ratio = {n: r["predicted"][n][-1] / r["published"][n][-1] for n in broke}
    if ratio and max(ratio.values()) > 2:
        md.append("Past the break-away the predicted queues grow faster than the published ones (p90 at the highest "
                  "load, predicted / published: " + ", ".join(f"{n} {x:.1f}x" for n, x in ratio.items())
                  + "): the published ladder's p90 levels off near 100 s past the break-away (the client's "
                  "timeout or its cap on requests in flight, not modelled), while the model's queues keep growing "
                  "with the offered load.")
    md += ["", f"{r['requests']:,} requests per replay.", ""]
    return md


def markdown_all(results: list[dict]) -> list[str]:
    md = []
    for r in results:
        md += markdown(r)
    return md + ["Not rebuilt: Mooncake's routing figure (one load point, its prefill/decode split not stated), "
                 "SGLang v0.4's router (A100 is not in the GPU catalog) and Dynamo's router benchmark (L40S; one "
                 "concurrency).", ""]


def _q(x, top: str = "60") -> str:
    return f"none up to {top}" if x is None else f"{x:g} QPS"


def _steps_apart(qps, a, b) -> int:
    idx = lambda x: len(qps) if x is None else qps.index(x)  # noqa: E731
    return abs(idx(a) - idx(b))


def _order(table: dict, j: int) -> str:
    return " < ".join(sorted(table, key=lambda n: table[n][j]))
