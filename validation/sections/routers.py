"""Published router comparisons rebuilt and predicted (validation report, section 9).

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
and decodes ~1,300 tok/s, the cluster ~10K tok/s against 60K asked at 60 QPS).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

import sacmodel
from sacmodel.cluster.replay import replay
from sacmodel.workloads import shared_prefix, stage_of

DATA = Path(__file__).resolve().parents[1] / "data" / "llmd_73capacity.csv"
WARMUP = (15.0, 50.0)
CONFIGS = {   # llm-d scheduler -> sacmodel router and parameters (the report's EPP configurations)
    "random": ("random", {}),
    "load": ("llm_d", {"prefix": "none", "kv_weight": 1, "queue_weight": 1}),
    "estimated": ("llm_d", {"prefix": "estimated", "prefix_weight": 1, "kv_weight": 1, "queue_weight": 1}),
    "precise": ("llm_d", {"prefix": "precise", "prefix_weight": 3, "kv_weight": 2, "queue_weight": 2}),
}
BREAK_S = 10.0        # a scheduler "breaks away" at the first load step whose p90 TTFT exceeds this
OUTPUT = 200


def published() -> tuple[list[tuple[float, float]], dict]:
    """The ladder [(qps, seconds)] and {router: [p90 TTFT s per step]}."""
    rows = list(csv.DictReader(DATA.open()))
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


def reproduce() -> dict:
    """Replay the ladder for the four schedulers; p90 TTFT per step and the break-away loads, with the
    published ones."""
    ladder, pub = published()
    stages = [WARMUP] + ladder
    tr = shared_prefix(150, 5, 6000, 1200, OUTPUT, rate=stages, seed=1, block_tokens=64)
    pod = sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16")
    step = stage_of(tr, stages)
    qps = [q for q, _ in ladder]
    out = {"qps": qps, "requests": len(tr), "predicted": {}, "published": pub, "hit": {}}
    for name, (router, params) in CONFIGS.items():
        p = replay(pod, "gpu", tr, router=router, router_params=params, instances=8)
        ttft = p.per_request["ttft_ms"] / 1e3
        row = []
        for j in range(1, len(stages)):
            x = ttft[(step == j) & np.isfinite(ttft)]
            row.append(float(np.percentile(x, 90)) if len(x) else math.nan)
        out["predicted"][name] = row
        out["hit"][name] = p.summary["hit_rate_total"]
    out["break"] = {n: (break_away(qps, out["published"][n]), break_away(qps, out["predicted"][n])) for n in CONFIGS}
    return out


def markdown(r: dict) -> list[str]:
    qps = r["qps"]
    md = ["### Published router comparison: llm-d's scheduling benchmark", "",
          "8 pods of Qwen3-32B on 2 x H100 (`sacmodel.scenario(\"h100\", gpus=2, model=\"qwen3-32b\", "
          "weights=\"bf16\")`, 8 instances), llm-d's shared-prefix workload and load ladder, each scheduler as "
          "the report configures it (`random`; `llm_d` with prefix none / estimated / precise and the report's "
          f"weights). Output {OUTPUT} tokens (see `validation/sections/routers.py` for why). Source: "
          "llm-d/llm-d-kv-cache-manager `benchmarking/73-capacity` (a378f5b3). Cells: p90 TTFT in s, "
          "published / predicted. The published pods run vLLM; the model's engine is SGLang's scheduler.", "",
          "| QPS | " + " | ".join(CONFIGS) + " |", "|---|" + "---|" * len(CONFIGS)]
    for j, q in enumerate(qps):
        md.append(f"| {q:g} | " + " | ".join(f"{r['published'][n][j]:.2f} / {r['predicted'][n][j]:.2f}"
                                              for n in CONFIGS) + " |")
    md += ["", f"Break-away load (first step with p90 TTFT above {BREAK_S:g} s), published / predicted: "
           + "; ".join(f"{n} {_q(a)} / {_q(b)}" for n, (a, b) in r["break"].items()) + "."]
    steps = {n: _steps_apart(qps, a, b) for n, (a, b) in r["break"].items()}
    md.append("Within one load step for " + f"{sum(1 for s in steps.values() if s <= 1)} of {len(steps)} schedulers "
              f"({', '.join(f'{n}: {s} step(s)' for n, s in steps.items())}). Order at the highest load, "
              f"published: {_order(r['published'], -1)}; predicted: {_order(r['predicted'], -1)}. Prefix hit "
              "rate over the run: " + ", ".join(f"{n} {100 * h:.0f}%" for n, h in r["hit"].items()) + ".")
    md += ["", f"{r['requests']:,} requests per replay. Not rebuilt: the 37%-capacity run (Llama-3.1-70B, 4 pods of "
           "4 x H100; same method), Mooncake's routing figure (one load point, its prefill/decode split not "
           "stated), SGLang v0.4's router (A100 is not in the GPU catalog) and Dynamo's router benchmark "
           "(L40S; one concurrency).", ""]
    return md


def _q(x) -> str:
    return "none up to 60" if x is None else f"{x:g} QPS"


def _steps_apart(qps, a, b) -> int:
    idx = lambda x: len(qps) if x is None else qps.index(x)  # noqa: E731
    return abs(idx(a) - idx(b))


def _order(table: dict, j: int) -> str:
    return " < ".join(sorted(table, key=lambda n: table[n][j]))
