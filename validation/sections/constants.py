"""Section 6: every fitted constant with its bounds, plausible range, stage and elasticities."""
from __future__ import annotations

import math

from common import KEY, SYSTEMS, fmt, table
from sacmodel.fit.calibrate import PARAM_UNITS, PLAUSIBLE, PREFILL_PARAMS, SERVING_PARAMS, STEP_PARAMS
from sacmodel.hardware.params import get_param, with_params
from sacmodel.serving.predict import predict


def elasticities(topo, rel=0.05):
    """d ln(metric) / d ln(constant) of every fitted constant at reference workloads (engine)."""
    cases = {"gpu": dict(context=32768, output=1024, concurrency=32),
             "dram": dict(context=32768, output=1024, concurrency=64),
             "cxl": dict(context=32768, output=1024, concurrency=64),
             "rdma": dict(context=32768, output=1024, concurrency=64)}
    out = {}
    for name in (*STEP_PARAMS, *SERVING_PARAMS, *PREFILL_PARAMS):
        v0 = get_param(topo, name)
        # a correlation near 1 is moved through its complement 1 - phi (the decorrelation per step)
        if name == "score_correlation":
            up_v, dn_v = 1 - (1 - v0) * (1 + rel), 1 - (1 - v0) / (1 + rel)
        else:
            up_v, dn_v = v0 * (1 + rel), v0 / (1 + rel)
        row = {}
        for s, kw in cases.items():
            up = predict(with_params(topo, {name: up_v}), s, requests=4 * kw["concurrency"], **kw)
            dn = predict(with_params(topo, {name: dn_v}), s, requests=4 * kw["concurrency"], **kw)
            for m in KEY:
                a, b = getattr(up, m), getattr(dn, m)
                row[f"{s} {m}"] = (math.log(a / b) / (2 * math.log(1 + rel))) if a > 0 and b > 0 else None
        out[name] = row
    return out


def render(rep) -> list[str]:
    """The report's section 6 section (markdown lines)."""
    L: list[str] = []
    fc = rep["constants"]
    L += ["## 6. Fitted constants", "",
          "Stage 1 (micro-benchmark), stage 2 (decode steps of the server logs), stage 3 (runs' TTFT, TBT, "
          "throughput), stage 4 (cold first rounds). Elasticity = d ln(metric) / d ln(constant) at 32K, "
          "concurrency 64 (gpu: 32), by the engine; a constant that carries most of a metric would show an "
          "elasticity near 1. For score_correlation the elasticity is with respect to its complement 1 - phi "
          "(the decorrelation per step).", "",
          table([[k, v["value"], v["bounds"], v["plausible"], v["stage"],
                  " ".join(f"{s}:{fmt(v['elasticity'].get(f'{s} tbt_mean_ms'), 2)}" for s in SYSTEMS)
                  if v.get("elasticity") else "-",
                  " ".join(f"{s}:{fmt(v['elasticity'].get(f'{s} ttft_mean_ms'), 2)}" for s in SYSTEMS)
                  if v.get("elasticity") else "-"] for k, v in fc.items()],
                ["constant", "value", "fit bounds", "plausible range (why)", "stage", "elasticity of TBT",
                 "elasticity of TTFT"]), ""]
    return L


def table_of(topo) -> dict:
    """Every fitted constant: value, fit bounds, plausible range, stage, elasticities."""
    elast = elasticities(topo)
    stage = {**{k: "2 (server logs)" for k in STEP_PARAMS}, **{k: "3 (runs)" for k in SERVING_PARAMS},
             **{k: "4 (cold rounds)" for k in PREFILL_PARAMS}}
    return {k: {"value": f"{get_param(topo, k) / PARAM_UNITS[k][1]:.4g} {PARAM_UNITS[k][0]}".strip(),
                "bounds": f"{PARAM_UNITS[k][2]:g} .. {PARAM_UNITS[k][3]:g} {PARAM_UNITS[k][0]}".strip(),
                "plausible": PLAUSIBLE.get(k, ""), "stage": stage[k], "elasticity": elast.get(k)}
            for k in stage}
