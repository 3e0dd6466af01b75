"""Section 6: every constant of the testbed scenario that is not a datasheet number: its value, fit bounds and
physical range, the stage that fits it (or "a priori"), the metric it carries (elasticities at two step sizes)
and how it transfers to another machine (:mod:`sacmodel.hardware.transfer`)."""
from __future__ import annotations

import math

from common import KEY, LABEL, SYSTEMS, fmt, table
from sacmodel.fit.calibrate import (MEASURED_PARAMS, MICROBENCH_PARAMS, PARAM_UNITS, PLAUSIBLE, PREFILL_PARAMS,
                                    SERVING_PARAMS, STEP_PARAMS)
from sacmodel.hardware.params import get_param, with_params
from sacmodel.hardware.transfer import RULES
from sacmodel.planning.sensitivity import SENSITIVITY_DRAWS
from sacmodel.serving.predict import predict

CASES = {"gpu": dict(context=32768, output=1024, concurrency=32),
         "dram": dict(context=32768, output=1024, concurrency=64),
         "cxl": dict(context=32768, output=1024, concurrency=64),
         "rdma": dict(context=32768, output=1024, concurrency=64)}
STEPS = (0.01, 0.05)
# the report's elasticities average 64 draws per prediction (`sensitivity --draws 64`); the agreement of the
# two steps is also given at the command's default, SENSITIVITY_DRAWS
ELASTICITY_DRAWS = 64
A_PRIORI = ("hbm_eff", "sparse_prefill_eff", "moe_eff", "t_collective", "t_launch")


def _moved(name: str, v0: float, rel: float) -> tuple[float, float]:
    # a correlation near 1 is moved through its complement 1 - phi (the decorrelation per step)
    if name == "score_correlation":
        return 1 - (1 - v0) * (1 + rel), 1 - (1 - v0) / (1 + rel)
    return v0 * (1 + rel), v0 / (1 + rel)


def elasticities(topo, names, rel: float, draws: int = ELASTICITY_DRAWS) -> dict:
    """d ln(metric) / d ln(constant) of each constant at the reference workloads (engine, central differences)."""
    out = {}
    for name in names:
        up_v, dn_v = _moved(name, get_param(topo, name), rel)
        row = {}
        for s, kw in CASES.items():
            up = predict(with_params(topo, {name: up_v}), s, draws=draws, **kw)
            dn = predict(with_params(topo, {name: dn_v}), s, draws=draws, **kw)
            for m in KEY:
                a, b = getattr(up, m), getattr(dn, m)
                row[f"{s} {m}"] = (math.log(a / b) / (2 * math.log(1 + rel))) if a > 0 and b > 0 else None
        out[name] = row
    return out


def _carries(el: dict) -> str:
    """The metric and system a constant moves most, with its elasticity."""
    best = max(((abs(v), k) for k, v in el.items() if v is not None), default=(0.0, ""))
    if not best[1]:
        return "-"
    s, m = best[1].split(" ", 1)
    return f"{LABEL[m]} of {s} ({el[best[1]]:+.2f})"


def _stages() -> dict:
    return {**{k: "1 (micro-benchmark)" for k in MICROBENCH_PARAMS if not k.startswith(("node:", "link:"))},
            **{k: "2 (server logs)" for k in STEP_PARAMS}, **{k: "3 (runs)" for k in SERVING_PARAMS},
            **{k: "3, measured (server logs)" for k in MEASURED_PARAMS},
            **{k: "4 (cold rounds)" for k in PREFILL_PARAMS}, **{k: "a priori" for k in A_PRIORI}}


FIELDS = {(STEPS[0], ELASTICITY_DRAWS): "elasticity", (STEPS[1], ELASTICITY_DRAWS): "elasticity_5pct",
          (STEPS[0], SENSITIVITY_DRAWS): "elasticity_default_draws",
          (STEPS[1], SENSITIVITY_DRAWS): "elasticity_5pct_default_draws"}


def elasticity_jobs(topo) -> list[tuple]:
    """The independent pieces of the elasticities: (topology, [constant], step, draws), one per constant, step and
    number of draws, each the arguments of :func:`elasticities` (run them in any order, in any process)."""
    names = [k for k in _stages() if topo.has_param(k)]
    return [(topo, [name], rel, draws) for rel, draws in FIELDS for name in names]


def table_of(topo, done: list[dict] | None = None, reuse: dict | None = None) -> dict:
    """Every fitted or a-priori constant: value, bounds, range, stage, transfer rule, elasticities at 1% and 5%.
    ``done``: the results of :func:`elasticity_jobs` (in their order), computed here when not given; ``reuse``:
    a previous table whose elasticities are taken instead (``--quick``: those of the last full run)."""
    stage = _stages()
    names = [k for k in stage if topo.has_param(k)]
    if reuse is not None and all(k in reuse and all(f in reuse[k] for f in FIELDS.values()) for k in names):
        el = {f: {k: reuse[k][f] for k in names} for f in FIELDS.values()}
    else:
        jobs = elasticity_jobs(topo)
        done = done if done is not None else [elasticities(*j) for j in jobs]
        el = {f: {} for f in FIELDS.values()}
        for (_, (name,), rel, draws), got in zip(jobs, done):
            el[FIELDS[rel, draws]][name] = got[name]
    out = {}
    for k in names:
        unit, scale = (PARAM_UNITS[k][0], PARAM_UNITS[k][1]) if k in PARAM_UNITS else ("", 1.0)
        out[k] = {"value": f"{get_param(topo, k) / scale:.4g} {unit}".strip(),
                  "bounds": f"{PARAM_UNITS[k][2]:g} .. {PARAM_UNITS[k][3]:g} {unit}".strip() if k in PARAM_UNITS else "-",
                  "plausible": PLAUSIBLE.get(k, topo.calibration[k].source if k in topo.calibration else ""),
                  "stage": stage[k], "transfer": RULES.get(k, ("", "carried over"))[1],
                  **{f: el[f][k] for f in FIELDS.values()},
                  "carries": _carries(el["elasticity_5pct"][k])}
    return out


def _pair(v: dict, s: str, m: str) -> str:
    a, b = v["elasticity"].get(f"{s} {m}"), v["elasticity_5pct"].get(f"{s} {m}")
    return f"{s}:{fmt(a, 2)}/{fmt(b, 2)}"


def agreement(fc: dict, suffix: str = "") -> tuple[int, int]:
    """(pairs of elasticities at 1% and 5% that agree in sign and within 20% or 0.02, pairs compared);
    ``suffix="_default_draws"``: those at the sensitivity command's default draws."""
    ok = n = 0
    for v in fc.values():
        if "elasticity" + suffix not in v:
            continue
        for key, a in v["elasticity" + suffix].items():
            b = v["elasticity_5pct" + suffix].get(key)
            if a is None or b is None:
                continue
            n += 1
            ok += abs(a - b) <= max(0.2 * max(abs(a), abs(b)), 0.02)
    return ok, n


def render(rep) -> list[str]:
    """The report's section 6 (markdown lines)."""
    fc = rep["constants"]
    ok, n = agreement(fc)
    ok16, n16 = agreement(fc, "_default_draws")
    L = ["## 6. Constants: fitted and a priori", "",
         "Stage 1 (micro-benchmark), stage 2 (decode steps of the server logs), stage 3 (runs' TTFT, TBT, "
         "throughput), stage 4 (cold first rounds); a-priori constants are cited, not fitted. Each fitted constant "
         "is fitted within its bounds and compared with its physical range. *Carries*: the metric and system it "
         "moves most (elasticity d ln(metric) / d ln(constant) at 32K, concurrency 64, gpu 32, by the engine, each "
         f"prediction the mean of {ELASTICITY_DRAWS} draws of the requests' randomness, `sensitivity --draws "
         f"{ELASTICITY_DRAWS}`). "
         "Elasticities are given at 1% / 5% steps: a smooth model gives the same number at both. For "
         "score_correlation the elasticity is with respect to its complement 1 - phi. *Transfer*: how the constant "
         "carries over to another machine (`sacmodel.hardware.transfer`).", "",
         f"Agreement of the two step sizes: {ok} of {n} elasticities agree in sign and within 20% (or 0.02) at "
         f"{ELASTICITY_DRAWS} draws per prediction; {ok16} of {n16} at `sensitivity`'s default {SENSITIVITY_DRAWS}, "
         "whose 1% steps move a closed-loop TTFT by about as much as the draws' own spread.", "",
         table([[k, v["value"], v["bounds"], v["plausible"], v["stage"], v["carries"], v["transfer"],
                 " ".join(_pair(v, s, "tbt_mean_ms") for s in SYSTEMS),
                 " ".join(_pair(v, s, "ttft_mean_ms") for s in SYSTEMS)] for k, v in fc.items()],
               ["constant", "value", "fit bounds", "physical range (why)", "stage", "carries", "transfer",
                "elasticity of TBT (1% / 5%)", "elasticity of TTFT (1% / 5%)"]), ""]
    return L
