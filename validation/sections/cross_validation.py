"""Section 5: leave one category out, every fitted constant refitted without it: the expected error on
unseen runs."""
from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from common import (CATEGORIES, CONCURRENCY_BANDS, KEY, LABEL, SCENARIO, SYSTEMS, band_of, errors, fmt,
                    fmt_signed, mape, table)
from sacmodel.fit.calibrate import NOT_FITTED, PARAM_UNITS, fit_serving, fit_steps, from_prior, measure_front_end
from sacmodel.hardware.params import with_params
from sections.runs import comparisons


def fit_all(runs, obs, start=SCENARIO):
    """Stage 2 (decode steps from the logs) and stage 3 (the front end measured in the logs; admission and copy
    fitted) on ``runs``, from the constants of ``start``."""
    names = {o.run.file for o in obs}
    steps = fit_steps(start, runs, obs=[o for o in obs if o.run.file in {r.file for r in runs} & names])
    front = measure_front_end(runs)
    topo = with_params(start, {**steps.params, **front.params})
    serving = fit_serving(topo, [r for r in runs if not r.failed])
    return {**steps.params, **front.params, **serving.params}


def neutral_start():
    """The scenario with every fitted constant (stages 2 and 3) at its a-priori value (the middle of its
    plausible range, :func:`sacmodel.fit.calibrate.prior`): a fold starts from no fit at all, so nothing of the
    held-out runs reaches it through the starting point."""
    return from_prior(SCENARIO)


def _fold(args):
    name, runs, obs = args
    t0 = time.time()
    train = [r for r in runs if not CATEGORIES[name](r)]
    test = [r for r in runs if CATEGORIES[name](r)]
    params = fit_all(train, obs, start=neutral_start())
    topo = with_params(SCENARIO, params)
    comps = comparisons(topo, test)
    return name, errors(comps), params, len(train), round(time.time() - t0, 1)


def fold_jobs(runs, obs) -> list[tuple]:
    """One fold per category, each the argument of :func:`_fold` (any order, any process)."""
    return [(name, runs, obs) for name in CATEGORIES]


def collect(results) -> dict:
    """The section's figures from the folds' results (in :func:`fold_jobs`' order)."""
    out = {}
    for name, rows, params, n_train, secs in results:
        out[name] = {"runs": rows, "mape_pct": mape(rows), "trained_on": n_train, "seconds": secs,
                     "params": {k: v / PARAM_UNITS[k][1] for k, v in params.items()}}
        print(f"  left out {name}: trained on {n_train}, tested on {len(rows)} ({secs} s)", flush=True)
    return out


def cross_validate(runs, obs, workers):
    jobs = fold_jobs(runs, obs)
    if workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            results = list(ex.map(_fold, jobs))
    else:
        results = [_fold(j) for j in jobs]
    return collect(results)


def render(rep) -> list[str]:
    """The report's section 5 (markdown lines): every error as MAPE with its mean signed error beside it,
    per category, per system and per concurrency band."""
    cv = rep.get("cross_validation")
    if not cv:
        return []
    rows = [r for d in cv.values() for r in d["runs"]]
    no_rdma = [r for r in rows if r["system"] != "rdma"]
    by_system = {s: [r for r in rows if r["system"] == s] for s in SYSTEMS}
    by_band = {b: [r for r in rows if band_of(r["concurrency"]) == b] for b, _, _ in CONCURRENCY_BANDS}
    cats = {name: d["runs"] for name, d in cv.items()}
    worst = {m: max((d["mape_pct"]["all"][m] or 0) for d in cv.values()) for m in KEY}
    L = ["## 5. Leave one category out: the expected error on unseen runs", "",
         "For each category every fitted constant (both calibration stages) is refitted on the other runs, then "
         "the category's runs are predicted as a user would (`prompts=\"shared\"` and the run's settings; the "
         "prompt has exactly its context's tokens, the default). Categories overlap (a run can be in two). Each "
         "cell is the MAPE with the mean signed error in brackets (predicted above measured is positive).", "",
         table([[name, len(r), cv[name]["trained_on"], *[fmt_signed(r, m) for m in KEY],
                 fmt(cv[name]["mape_pct"]["all"]["completion_right_pct"], 0)] for name, r in cats.items()],
               ["left out", "runs", "trained on", "TTFT %", "TBT %", "throughput %", "completion right %"]),
         f"Pooled over all {len(rows)} held-out predictions: " + ", ".join(
             f"{LABEL[m]} {fmt_signed(rows, m)}%" for m in KEY) +
         f" (TTFT without RDMA {fmt_signed(no_rdma, 'ttft_mean_ms')}%); worst category: " + ", ".join(
             f"{LABEL[m]} {fmt(worst[m])}%" for m in KEY) + ".", "",
         "Per system and per concurrency band (pooled held-out predictions; TTFT / TBT / throughput, MAPE "
         "(signed) %):", "",
         table([[k, len(r), *[fmt_signed(r, m) for m in KEY]] for k, r in {**by_system, **by_band}.items() if r],
               ["system or concurrency", "predictions", "TTFT %", "TBT %", "throughput %"]),
         "Per category and system (TTFT / TBT / throughput, MAPE (signed) %):", "",
         table([[name, *[" / ".join(fmt_signed([x for x in r if x["system"] == s], m) for m in KEY)
                         if any(x["system"] == s for x in r) else "-" for s in SYSTEMS]]
                for name, r in cats.items()], ["left out", *SYSTEMS]), ""]
    return L
