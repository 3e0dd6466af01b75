"""Section 5: leave one category out, every fitted constant refitted without it: the expected error on
unseen runs."""
from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from common import CATEGORIES, KEY, LABEL, SCENARIO, SYSTEMS, errors, fmt, mape, table
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
    """The report's section 5 section (markdown lines)."""
    L: list[str] = []
    cv = rep.get("cross_validation")
    if cv:
        pooled = {m: [] for m in KEY}
        per_system: dict[str, dict[str, list]] = {}
        fitted_only = []
        worst = {}
        for name, d in cv.items():
            for r in d["runs"]:
                for m in KEY:
                    if r[f"{m}_error_pct"] is not None:
                        pooled[m].append(abs(r[f"{m}_error_pct"]))
                        per_system.setdefault(r["system"], {k: [] for k in KEY})[m].append(abs(r[f"{m}_error_pct"]))
                        if m == "ttft_mean_ms" and (r["system"], m) not in NOT_FITTED:
                            fitted_only.append(abs(r[f"{m}_error_pct"]))
            worst[name] = {m: d["mape_pct"]["all"][m] for m in KEY}
        L += ["## 5. Leave one category out: the expected error on unseen runs", "",
              "For each category every fitted constant (both calibration stages) is refitted on the other runs, "
              "then the category's runs are predicted. Categories overlap (a run can be in two).", "",
              table([[name, d["mape_pct"]["all"]["runs"], d["trained_on"],
                      *[fmt(d["mape_pct"]["all"][m]) for m in KEY],
                      fmt(d["mape_pct"]["all"]["completion_right_pct"], 0)] for name, d in cv.items()],
                    ["left out", "runs", "trained on", "TTFT %", "TBT %", "throughput %", "completion right %"]),
              "Pooled over all held-out predictions: " + ", ".join(
                  f"{LABEL[m]} {fmt(float(np.mean(v)))}%" for m, v in pooled.items() if v) +
              (f" (TTFT without RDMA {fmt(float(np.mean(fitted_only)))}%)" if fitted_only else "") +
              "; worst category: " + ", ".join(
                  f"{LABEL[m]} {fmt(max(w[m] or 0 for w in worst.values()))}%" for m in KEY) + ". Pooled per system "
              "(TTFT / TBT / throughput): " + ", ".join(
                  f"{sy} " + " / ".join(fmt(float(np.mean(v[m]))) if v[m] else "-" for m in KEY) + "%"
                  for sy, v in sorted(per_system.items())) + ".", "",
              "Per category and system (TTFT / TBT / throughput, %):", "",
              table([[name, *[f"{fmt(d['mape_pct'][s]['ttft_mean_ms'])} / "
                              f"{fmt(d['mape_pct'][s]['tbt_mean_ms'])} / {fmt(d['mape_pct'][s]['output_throughput_tok_s'])}"
                              if s in d["mape_pct"] else "-" for s in SYSTEMS]] for name, d in cv.items()],
                    ["left out", *SYSTEMS]), ""]
    return L
