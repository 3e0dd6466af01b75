"""Predicting measured runs of other machines, and fitting the one thing the testbed cannot tell: the kernel
efficiencies of another GPU generation and weight format (:data:`sacmodel.hardware.transfer.KERNEL_EFFICIENCY`).

:func:`predict_external` builds the machine with :func:`sacmodel.scenario` (the testbed's constants carried over
by their transfer rules) and runs the run's own client workload through the engine; :func:`fit_kernel_efficiency`
fits the efficiencies of one (architecture, weights) class to such runs: to their TPOT, and to what a longer
prompt adds to the TTFT (:func:`prompt_pairs`), the part of the TTFT the kernels cost; the rest of it (the
benchmark's client, HTTP and whatever the server spends per request outside its kernels) is not a kernel
efficiency, and the public harnesses differ in it (two of one H200 configuration: 158 and 260 ms at 1K).
"""
from __future__ import annotations

import math

import numpy as np

from ..data.external import ExternalRun

EFFICIENCY_PARAMS = ("t_graph_kernel_scale", "moe_eff", "prefill_eff")      # in the order they are fitted
# published ranges of each: the floor's factor on the testbed's 6.2 us keeps a small in-graph kernel within
# 1.9-9.3 us (a CUDA graph's launch gap and a few memory round trips); grouped-GEMM MoE weight reads reach
# 0.5-0.77 of HBM (issue 32's survey of published grouped-GEMM rates); FP8 block GEMMs at prefill shapes reach
# 0.2 (vLLM's Triton / CUTLASS block-FP8 on H100, 400-490 of 1,979 TFLOP/s, vllm-project/vllm#23280) to 0.78
# (DeepGEMM's best, 1,550 on H800, deepseek-ai/DeepGEMM README)
EFFICIENCY_BOUNDS = {"t_graph_kernel_scale": (0.3, 1.5), "moe_eff": (0.5, 0.77), "prefill_eff": (0.2, 0.78)}


def external_scenario(run: ExternalRun, *, transfer: str = "fitted", values: dict | None = None):
    """The run's machine as a scenario; ``values`` replaces kernel efficiencies (``t_graph_kernel_scale``
    multiplies the transferred ``t_graph_kernel``; ``prefill_eff``, the class's rate, moves ``moe_prefill_eff``
    in proportion unless that is given too)."""
    from ..hardware.build import scenario
    from ..hardware.params import with_params
    topo = scenario(run.gpu, transfer=transfer, **run.scenario_kwargs())
    if not values:
        return topo
    vals = {k: v for k, v in values.items() if k != "t_graph_kernel_scale"}
    if "prefill_eff" in vals and "moe_prefill_eff" not in vals and topo.has_param("moe_prefill_eff"):
        # the class's rate: the routed experts' prefill GEMMs move with it, at the release's ratio
        vals["moe_prefill_eff"] = vals["prefill_eff"] * topo.param("moe_prefill_eff") / topo.param("prefill_eff")
    if "t_graph_kernel_scale" in values:
        vals["t_graph_kernel"] = topo.param("t_graph_kernel") * values["t_graph_kernel_scale"]
    return with_params(topo, vals)


def external_requests(run: ExternalRun, seed: int = 0):
    """The client's requests: distinct random prompts, lengths uniform in [range_ratio x nominal, nominal]."""
    from ..serving.engine.workload import Requests
    rng = np.random.default_rng(seed)
    n = run.requests

    def lengths(nominal: int) -> np.ndarray:
        lo = max(1, int(nominal * run.range_ratio))
        return rng.integers(lo, nominal + 1, size=n)
    # lead=0: the users start together (bench_serving / InferenceX send every request at once)
    return Requests(np.zeros(n), lengths(run.isl), np.maximum(lengths(run.osl), 2), np.zeros(n), lead=0)


def predict_external(run: ExternalRun, *, transfer: str = "fitted", values: dict | None = None,
                     topo=None) -> dict:
    """TTFT and TPOT mean, median and 99th percentile (ms; over requests, as the benchmarks report them) and
    output throughput of the run on its machine, and whether it was served (``limit`` names what failed)."""
    from ..serving.capacity import static_check
    from ..serving.config import resolve
    from ..serving.predict import simulate
    topo = topo or external_scenario(run, transfer=transfer, values=values)
    cfg = resolve(topo, "gpu")
    cap = static_check(cfg, context=run.isl, output=run.osl, concurrency=1, prompts="distinct")
    if not cap["feasible"]:
        return {"feasible": False, "limit": cap["limit"], "ttft_mean_ms": math.nan, "tpot_mean_ms": math.nan,
                "output_tok_s": math.nan, "ttft_median_ms": math.nan, "ttft_p99_ms": math.nan,
                "tpot_median_ms": math.nan, "tpot_p99_ms": math.nan}
    reqs = external_requests(run)
    p = simulate(cfg, reqs, run.concurrency)
    tpot = p.per_request["tbt_ms"]
    ok = p.per_request["completed"]
    ttft = p.per_request["ttft_ms"][ok]
    med, p99 = (float(np.percentile(ttft, q)) if ttft.size else math.nan for q in (50, 99))
    tp = tpot[ok][np.isfinite(tpot[ok])]
    tmed, tp99 = (float(np.percentile(tp, q)) if tp.size else math.nan for q in (50, 99))
    return {"feasible": p.feasible, "limit": p.limit, "ttft_mean_ms": p.ttft_mean_ms,
            "tpot_mean_ms": float(np.nanmean(tpot[ok])) if ok.any() else math.nan,
            "output_tok_s": p.output_throughput_tok_s, "ttft_median_ms": med, "ttft_p99_ms": p99,
            "tpot_median_ms": tmed, "tpot_p99_ms": tp99}


def errors(run: ExternalRun, pred: dict) -> dict:
    """Relative errors (predicted - measured) / measured of TTFT, TPOT and (if measured) throughput."""
    out = {"ttft": pred["ttft_mean_ms"] / run.ttft_mean_ms - 1, "tpot": pred["tpot_mean_ms"] / run.tpot_mean_ms - 1}
    if math.isfinite(run.output_tok_s) and run.output_tok_s > 0:
        out["throughput"] = pred["output_tok_s"] / run.output_tok_s - 1
    return out


def prompt_pairs(runs: list[ExternalRun]) -> list[tuple[int, int]]:
    """Indices (shorter, longer) of runs that differ only in their prompt length (same machine, settings,
    concurrency and output): the difference of their TTFTs is what the longer prompt costs."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(runs):
        key = (r.gpu, r.gpus, r.tp, r.dp, r.ep, r.concurrency, r.osl, r.weights, r.model)
        groups.setdefault(key, []).append(i)
    out = []
    for idx in groups.values():
        idx.sort(key=lambda i: runs[i].isl)
        out += [(a, b) for a, b in zip(idx, idx[1:]) if runs[b].isl > runs[a].isl]
    return out


def efficiency_residuals(runs: list[ExternalRun], preds: list[dict]) -> np.ndarray:
    """Log ratios predicted / measured of every run's TPOT and of the TTFT a longer prompt adds (pairs of
    :func:`prompt_pairs` whose measured difference is positive); 3 for a run predicted unserved."""
    def ratio(v: float, meas: float) -> float:
        return math.log(v / meas) if v > 0 and math.isfinite(v) else 3.0
    out = [ratio(p["tpot_mean_ms"], r.tpot_mean_ms) if p["feasible"] else 3.0 for r, p in zip(runs, preds)]
    for a, b in prompt_pairs(runs):
        meas = runs[b].ttft_mean_ms - runs[a].ttft_mean_ms
        if meas > 0:
            ok = preds[a]["feasible"] and preds[b]["feasible"]
            out.append(ratio(preds[b]["ttft_mean_ms"] - preds[a]["ttft_mean_ms"], meas) if ok else 3.0)
    return np.array(out)


def _stage_runs(runs: list[ExternalRun], name: str) -> list[ExternalRun]:
    """The evidence each constant is fitted on: the kernel floor on the runs at the lowest concurrency (a step
    of few tokens is mostly the floor), ``moe_eff`` on those at the highest (a step of many distinct tokens
    reads most experts), ``prefill_eff`` on every run (through the TTFT pairs of :func:`prompt_pairs`)."""
    if name == "t_graph_kernel_scale":
        low = min(r.concurrency for r in runs)
        return [r for r in runs if r.concurrency == low]
    if name == "moe_eff":
        high = max(r.concurrency for r in runs)
        return [r for r in runs if r.concurrency == high]
    return runs


def _stage_residuals(runs: list[ExternalRun], preds: list[dict], name: str) -> np.ndarray:
    """TPOT log ratios for the floor and ``moe_eff``; the TTFT-pair log ratios for ``prefill_eff``."""
    r = efficiency_residuals(runs, preds)
    return r[len(runs):] if name == "prefill_eff" else r[:len(runs)]


def fit_kernel_efficiency(runs: list[ExternalRun], names=EFFICIENCY_PARAMS) -> dict[str, float]:
    """The kernel efficiencies of the runs' machine class, fitted one at a time on separate evidence
    (:func:`_stage_runs`), each within its published range (:data:`EFFICIENCY_BOUNDS`), starting from the
    transfer rules alone: the floor first (the MoE rate at its carried value), then ``moe_eff`` with the floor
    fixed, then ``prefill_eff`` on what a longer prompt adds to the TTFT. A stage with no evidence in ``runs``
    (no prompt pair) keeps its starting value."""
    from scipy.optimize import minimize_scalar
    base = external_scenario(runs[0], transfer="rules")
    vals = {n: (1.0 if n == "t_graph_kernel_scale" else base.param(n)) for n in names}
    for name in EFFICIENCY_PARAMS:
        if name not in names:
            continue
        sub = _stage_runs(runs, name)
        if name == "prefill_eff" and not prompt_pairs(sub):
            continue
        lo, hi = EFFICIENCY_BOUNDS[name]

        def loss(x, name=name, sub=sub):
            preds = [predict_external(r, transfer="rules", values=dict(vals, **{name: x})) for r in sub]
            return float(np.sum(_stage_residuals(sub, preds, name) ** 2))
        res = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 2e-3 * (hi - lo)})
        vals[name] = float(res.x)
    return vals
