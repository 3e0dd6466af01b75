"""Generate the validation report: predicted vs measured, in-sample and leave-one-category-out, the step model
against the server logs, the access process against its numpy reference, every fitted constant.

    python validation/run.py [--quick] [--workers N]

Writes validation/report.md, validation/report.json and validation/plots/*.png. ``--quick`` skips the
cross-validation refits and the cluster replays and reuses those sections (report.json, cluster_section.md).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sacmodel.data.microbench import latest_per_backend, load_microbench
from sacmodel.data.runs import closed_loop_releases, load_runs
from sacmodel.data.server_logs import load_server_log
from sacmodel.fit.calibrate import (
    NOT_FITTED,
    PARAM_UNITS,
    PLAUSIBLE,
    PREFILL_PARAMS,
    SERVING_PARAMS,
    STEP_PARAMS,
    fit_serving,
    fit_steps,
    from_prior,
    front_end_observations,
    front_end_per_token,
    step_observations,
    step_residuals,
    variable_output_steps,
)
from sacmodel.fit.compare import compare_runs, run_kwargs
from sacmodel.hardware.params import get_param, with_params
from sacmodel.hardware.scenarios import as_topology
from sacmodel.serving.predict import predict  # noqa: E402
from sacmodel.serving.systems import fetch_latency_us  # noqa: E402

SCENARIO = "sac-testbed"
PLOTS = HERE / "plots"
KEY = ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s")
LABEL = {"ttft_mean_ms": "TTFT", "tbt_mean_ms": "TBT", "output_throughput_tok_s": "throughput"}
SYSTEMS = ("gpu", "dram", "cxl", "rdma")


# ---- categories of runs ---------------------------------------------------------------------------------
def fixed(r):
    return r.output_min is None or r.output_min == r.output_max


CATEGORIES = {
    "output > 1024": lambda r: fixed(r) and r.output > 1024,
    "buffer 6144 (dc_0502)": lambda r: fixed(r) and r.device_buffer == 6144,
    "one CXL device": lambda r: r.system == "cxl" and r.cxl_devices == 1,
    "GPU only": lambda r: r.system == "gpu",
    "concurrency > 96": lambda r: r.concurrency > 96,
    "context 16K": lambda r: r.context == 16384,
    "context 32K": lambda r: r.context == 32768,
    "context 64K": lambda r: r.context == 65536,
    "context 128K": lambda r: r.context == 131072,
}


def category_of(r) -> list[str]:
    return [c for c, f in CATEGORIES.items() if f(r)] or ["base"]


# ---- pieces -------------------------------------------------------------------------------------------
def microbench_case():
    pts = latest_per_backend(load_microbench())
    rows, per = [], {}
    for p in pts:
        pred = fetch_latency_us(SCENARIO, p.backend, topk=p.topk, entry_bytes=p.entry_bytes)
        rows.append({"backend": p.backend, "context": p.context, "topk": p.topk, "measured_us": p.mean_us,
                     "predicted_us": pred, "error_pct": 100 * (pred / p.mean_us - 1), "file": p.file})
        per.setdefault(p.backend, []).append(abs(pred / p.mean_us - 1))
    return {"rows": rows, "mape_pct": {b: 100 * float(np.mean(v)) for b, v in per.items()}}


def _reference_case(args):
    from sacmodel.serving.reference import simulate
    c, steps, seed = args
    return simulate(**c, steps=steps, seed=seed, dims=256, per_step=True)["misses_per_step"]


def reference_vs_closed_form(seeds: int = 6, workers: int = 1):
    """Mean misses per step of the numpy reference (drifting query, real top-k, LRU) vs the closed forms."""
    from sacmodel.serving.access import exact_steady_state, miss_series
    cases = [dict(context=16384, topk=1024, buffer_slots=2048, correlation=0.99),
             dict(context=16384, topk=1024, buffer_slots=3072, correlation=0.995),
             dict(context=32768, topk=2048, buffer_slots=4096, correlation=0.98),
             dict(context=8192, topk=512, buffer_slots=1024, correlation=0.95)]
    steps_of = [300 if c["correlation"] >= 0.995 else 120 for c in cases]
    jobs = [(c, n, s) for c, n in zip(cases, steps_of) for s in range(seeds)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            sims_all = list(ex.map(_reference_case, jobs))
    else:
        sims_all = [_reference_case(j) for j in jobs]
    rows = []
    for i, (c, steps) in enumerate(zip(cases, steps_of)):
        sims = np.mean(sims_all[i * seeds:(i + 1) * seeds], axis=0)
        closed = miss_series(**c, steps=steps, exact=True)
        m_ss, t_c = exact_steady_state(**c)
        tail = slice(int(max(2 * t_c, 40)), steps)
        rows.append({"case": c, "fill_steps": t_c,
                     "total_pct": 100 * (closed.sum() / sims.sum() - 1),
                     "first_steps_pct": 100 * (closed[1:6].sum() / sims[1:6].sum() - 1),
                     "steady_pct": 100 * (m_ss / sims[tail].mean() - 1)})
    return rows


def errors(comps):
    out = []
    for c in comps:
        row = {"file": c.run.file, "system": c.run.system, "context": c.run.context, "concurrency": c.run.concurrency,
               "output": c.run.output, "categories": category_of(c.run), "failed": c.run.failed,
               "measured_success": (c.run.num_success or 0) / max(c.run.requests, 1),
               "predicted_success": c.predicted.get("success_fraction")}
        for m in KEY:
            row[f"{m}_measured"] = c.run.metrics.get(m)
            row[f"{m}_predicted"] = c.predicted.get(m)
            e = c.error(m)
            row[f"{m}_error_pct"] = None if e is None else 100 * e
        out.append(row)
    return out


def mape(rows, systems=SYSTEMS):
    """MAPE % per system and metric (and 'all') over rows of :func:`errors`."""
    out = {}
    for s in (*systems, "all"):
        sel = [r for r in rows if s == "all" or r["system"] == s]
        if not sel:
            continue
        d = {"runs": len(sel)}
        for m in KEY:       # every prediction counts, those of metrics left out of the fit included
            e = [abs(r[f"{m}_error_pct"]) for r in sel if r[f"{m}_error_pct"] is not None]
            d[m] = float(np.mean(e)) if e else None
            e_fit = [abs(r[f"{m}_error_pct"]) for r in sel if r[f"{m}_error_pct"] is not None
                     and (r["system"], m) not in NOT_FITTED]
            d[f"{m}_fitted_only"] = float(np.mean(e_fit)) if e_fit else None
        d["completion_right_pct"] = 100 * float(np.mean([
            (r["predicted_success"] is not None and r["predicted_success"] >= 1.0) == (not r["failed"]) for r in sel]))
        out[s] = d
    return out


def comparisons(topo, runs):
    return compare_runs(topo, runs)


def fit_all(runs, obs, start=SCENARIO):
    """Stage 2 (decode steps from the logs) and stage 3 (front end, admission, copy) on ``runs``, from the
    constants of ``start``."""
    names = {o.run.file for o in obs}
    steps = fit_steps(start, runs, obs=[o for o in obs if o.run.file in {r.file for r in runs} & names])
    topo = with_params(start, steps.params)
    serving = fit_serving(topo, [r for r in runs if not r.failed])
    return {**steps.params, **serving.params}


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


def cross_validate(runs, obs, workers):
    jobs = [(name, runs, obs) for name in CATEGORIES]
    out = {}
    if workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            results = list(ex.map(_fold, jobs))
    else:
        results = [_fold(j) for j in jobs]
    for name, rows, params, n_train, secs in results:
        out[name] = {"runs": rows, "mape_pct": mape(rows), "trained_on": n_train, "seconds": secs,
                     "params": {k: v / PARAM_UNITS[k][1] for k, v in params.items()}}
        print(f"  left out {name}: trained on {n_train}, tested on {len(rows)} ({secs} s)", flush=True)
    return out


def step_model(obs, topo):
    """Step-time errors of the model against the server logs, per system and category."""
    e = step_residuals(topo, obs)
    rows = [{"file": o.run.file, "system": o.run.system, "b": o.b, "age": o.age, "measured_ms": o.step_s * 1e3,
             "error_pct": 100 * x, "categories": category_of(o.run)} for o, x in zip(obs, e)]
    by = {}
    for r in rows:
        for key in (r["system"], *[f"{r['system']} / {c}" for c in r["categories"]]):
            by.setdefault(key, []).append(abs(r["error_pct"]))
    return {"mape_pct": {k: float(np.mean(v)) for k, v in sorted(by.items())},
            "all_pct": float(np.mean([abs(r["error_pct"]) for r in rows])), "intervals": len(rows)}


def variable_steps(topo, runs):
    """The step model against the variable-output runs' decode intervals (not fitted): per run and running count."""
    obs = variable_output_steps(runs)
    e = step_residuals(topo, obs) if obs else []
    return [{"file": o.run.file, "system": o.run.system, "concurrency": o.run.concurrency, "b": o.b,
             "intervals": o.weight, "measured_ms": o.step_s * 1e3, "predicted_ms": o.step_s * 1e3 * (1 + x),
             "error_pct": 100 * x} for o, x in zip(obs, e)]


def release_spread(release_s, concurrency: int) -> float:
    """Mean time (s) over which a later wave is released: the ``concurrency`` requests sent after each of the
    previous wave's completions, in send order (every wave after the first)."""
    rel = np.sort(np.asarray(release_s, dtype=float))
    waves = [rel[w * concurrency:(w + 1) * concurrency] for w in range(1, len(rel) // concurrency)]
    return float(np.mean([np.ptp(x) for x in waves]))


def wave_ttft(topo, runs):
    """Mean TTFT of a run's first wave (every request released into an idle server) and of its later waves
    (released as the previous wave's requests finish), measured (per request) against the engine; and the
    time over which a later wave is released (the closed-loop send times, reconstructed from the measured
    latencies, against the engine's)."""
    out = []
    for r in runs:
        if r.ttfts is None or not fixed(r) or r.failed or r.requests < 4 * r.concurrency:
            continue
        p = predict(topo, r.system, **run_kwargs(r))
        c = r.concurrency
        meas, pred = r.ttfts, p.per_request["ttft_ms"]
        row = {"file": r.file, "system": r.system, "context": r.context, "concurrency": c,
               "first_measured": float(np.nanmean(meas[:c])), "first_predicted": float(np.nanmean(pred[:c])),
               "later_measured": float(np.nanmean(meas[c:])), "later_predicted": float(np.nanmean(pred[c:]))}
        if r.latencies is not None and np.all(np.isfinite(r.latencies)):
            row["spread_measured"] = release_spread(closed_loop_releases(r.latencies, c), c)
            row["spread_predicted"] = release_spread(p.per_request["release_s"], c)
        out.append(row)
    return out


def front_end_rate(topo, runs):
    """The front end's time per prompt token measured from the server logs' request arrivals, against the
    fitted ``t_token`` (which the run means fit)."""
    obs = front_end_observations(runs)
    if not obs:
        return None
    per_ctx: dict[int, list[float]] = {}
    for r, sec in obs:
        per_ctx.setdefault(r.context, []).append(sec / r.context)
    return {"fitted_us": get_param(topo, "t_token") * 1e6, "measured_us": front_end_per_token(obs) * 1e6,
            "runs": len(obs), "per_context_us": {c: float(np.median(v)) * 1e6 for c, v in sorted(per_ctx.items())}}


def device_tokens(topo, runs):
    """Device tokens held per rank (the log's #token) against the engine's, for runs of every pool."""
    out = []
    for r in runs:
        if r.system == "gpu" or not r.server_log or not fixed(r):
            continue
        log = load_server_log(r.server_log).rounds(8)[1]
        d = log.decode
        meas = float(np.median(d["tokens"][d["running"] == np.bincount(d["running"].astype(int)).argmax()]))
        b = int(np.bincount(d["running"].astype(int)).argmax())
        p = predict(topo, r.system, **run_kwargs(r))
        out.append({"file": r.file, "system": r.system, "context": r.context, "requests_per_rank": b,
                    "measured": meas, "predicted_peak": p.breakdown.get("peak_device_tokens_per_rank")})
    return out


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


# ---- plots --------------------------------------------------------------------------------------------
def plot_steps(topo, obs):
    from sacmodel.fit.calibrate import predicted_steps
    from sacmodel.plots.serving import plt
    pick = [o for o in obs if o.run.context == 32768 and o.b == 8 and o.run.output == 8192]
    pick += [o for o in obs if o.run.context == 131072 and o.b == 8 and o.run.output == 1024 and o.run.device_buffer == 4096]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = {"dram": "#1f77b4", "cxl": "#d62728", "rdma": "#2ca02c", "gpu": "#7f7f7f"}
    for ax, (ctx, out) in zip(axes, ((32768, 8192), (131072, 1024))):
        for s, col in colors.items():
            sel = sorted([o for o in pick if o.run.system == s and o.run.context == ctx and o.run.output == out],
                         key=lambda o: o.age)
            if not sel:
                continue
            ax.plot([o.age for o in sel], [o.step_s * 1e3 for o in sel], "o", ms=3.5, color=col,
                    label=f"{s} measured")
            ax.plot([o.age for o in sel], predicted_steps(topo, sel) * 1e3, "-", color=col, label=f"{s} model")
        ax.set_xlabel("request age (decode steps since admission)")
        ax.set_ylabel("decode step time (ms)")
        ax.set_title(f"{ctx // 1024}K context, 8 requests per rank, output {out}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
    fig.suptitle("Decode step time over a request's life: server logs (every 40 steps) vs the step model")
    fig.tight_layout()
    fig.savefig(PLOTS / "step_time_vs_age.png", dpi=110)
    plt.close(fig)


def plot_runs(comps, title, path):
    from sacmodel.plots.serving import plot_validation
    plot_validation(comps, path, title=title)


def plot_microbench(mb):
    from sacmodel.plots.serving import plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for b, col in (("dram", "#1f77b4"), ("cxl", "#d62728"), ("rdma", "#2ca02c")):
        rows = sorted([r for r in mb["rows"] if r["backend"] == b and r["context"] == 32768], key=lambda r: r["topk"])
        ax.plot([r["topk"] for r in rows], [r["measured_us"] for r in rows], "o", color=col, label=f"{b} measured")
        ax.plot([r["topk"] for r in rows], [r["predicted_us"] for r in rows], "-", color=col, label=f"{b} model")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("top-k (entries per layer)")
    ax.set_ylabel("single-layer gather latency (µs)")
    ax.set_title("Fetch micro-benchmark, 32K context", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(PLOTS / "microbench.png", dpi=110)
    plt.close(fig)


# ---- markdown -----------------------------------------------------------------------------------------
def table(rows, cols):
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(str(x) for x in r) + " |\n" for r in rows)


def fmt(v, nd=1):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def mape_table(tab, with_completion=True):
    rows = []
    for s, d in tab.items():
        row = [s, d["runs"]] + [fmt(d[m]) for m in KEY]
        if s == "all":
            row[2] = f"{fmt(d['ttft_mean_ms'])} ({fmt(d['ttft_mean_ms_fitted_only'])} without RDMA)"
        if with_completion:
            row.append(fmt(d["completion_right_pct"], 0))
        rows.append(row)
    return table(rows, ["system", "runs", "TTFT %", "TBT %", "throughput %"] + (["completion right %"] if with_completion else []))


def write_markdown(rep):
    L = ["# sacmodel validation report", "",
         "Generated by `python validation/run.py` from `../shared/data/sac-testbed` (both splits: `calibration-1` "
         "and `release-2`, 66 runs with their server logs) and `topologies/sac-testbed.yaml`. Errors are "
         "(predicted - measured) / measured; MAPE is the mean of their absolute values, in percent. "
         f"Run time: {rep['seconds']:.0f} s on this machine" + (
             f" (`--quick`: sections 5 and 9 are from the last full run, which took {rep['full_seconds']:.0f} s)."
             if rep.get("quick") and rep.get("full_seconds") else "."), "",
         "**The honest estimate of the error on runs the model was not fitted to is section 5** (leave one "
         "category out: every fitted constant refitted without the category, then the category predicted).", "",
         "RDMA first-token latency is predicted but left out of the fit (its remaining error comes from the "
         "front end, which delivers requests more slowly while prefix copies run, a mechanism the model does "
         "not have; fitting it would bend the copy bandwidth): every figure below includes it, and the pooled "
         "ones also say what they are without it.", ""]
    mb = rep["microbench"]
    L += ["## 1. Fetch micro-benchmark (single-layer top-k gather)", "",
          table([[b, fmt(v)] for b, v in mb["mape_pct"].items()], ["backend", "MAPE %"]),
          "![microbench](plots/microbench.png)", ""]
    L += ["## 2. Access process: numpy reference vs closed forms", "",
          "The reference (`sacmodel.serving.reference.simulate`) draws random keys, lets the query drift (AR(1) with the "
          "given correlation), selects the real top-k every step and runs the LRU buffer from empty, as the server "
          "admits a request on a cached prefix; mean of 6 seeds. The closed forms (`sacmodel.serving.access`) give the "
          "buffer fill (first steps) and the steady state from the AR(1) exceedance spectrum (difference in %):", "",
          table([[f"L={r['case']['context']} k={r['case']['topk']} B={r['case']['buffer_slots']} "
                  f"phi={r['case']['correlation']}", fmt(r["fill_steps"]), f"{r['first_steps_pct']:+.1f}",
                  f"{r['steady_pct']:+.1f}", f"{r['total_pct']:+.1f}"] for r in rep["reference"]],
                ["case", "fill steps T_C", "steps 1-5 %", "steady state %", "total %"]), ""]
    st = rep["step_model"]
    L += ["## 3. Decode step model against the server logs (time-resolved)", "",
          f"{st['intervals']} observations: every 40 decode steps of every rank, merged per request age (200-step "
          "bins), of every run with fixed outputs. The step model is fitted to these (stage 2 of the calibration). "
          f"MAPE of the step time: {fmt(st['all_pct'])}%.", "",
          table([[k, fmt(v)] for k, v in st["mape_pct"].items() if "/" not in k], ["system", "step-time MAPE %"]),
          "![steps](plots/step_time_vs_age.png)", ""]
    var = st.get("variable_output") or []
    if var:
        few = [r for r in var if r["b"] <= 4]
        many = [r for r in var if r["b"] > 4]
        L += ["Not fitted, a check beyond the fitted range: the variable-output runs (`high_con_0505`, outputs "
              "uniform in 0..1024, up to 24 requests per rank where the fitted runs have at most 12). Their "
              "requests have mixed ages, so each row is the median of the intervals with an unchanged running "
              "count, against the model at a nominal age of 300 steps. RDMA is left out (its intervals hold "
              "the prefix copies of the continual admissions). Step-time error with 1-4 requests per rank: "
              f"{fmt(float(np.mean([r['error_pct'] for r in few])) if few else float('nan'))}% (mean, signed); "
              f"with more: {fmt(float(np.mean([r['error_pct'] for r in many])) if many else float('nan'))}%.", "",
              table([[r["file"][:40], r["system"], r["concurrency"], r["b"], r["intervals"], fmt(r["measured_ms"]),
                      fmt(r["predicted_ms"]), f"{r['error_pct']:+.1f}"] for r in var if r["b"] > 4],
                    ["run", "system", "concurrency", "requests/rank", "intervals", "log step ms", "model ms",
                     "error %"]), ""]
    L += ["Device tokens held per rank (the logs' `#token` at the most common running count) against the engine's "
          "peak: the capacity model counts each request's buffer (device_buffer + 64 slots) and the shared "
          "prefix's device pages.", "",
          table([[r["file"][:48], r["system"], r["context"], r["requests_per_rank"], fmt(r["measured"], 0),
                  fmt(r["predicted_peak"], 0)] for r in rep["device_tokens"][:12]],
                ["run", "system", "context", "requests/rank", "log #token", "model"]), ""]
    L += ["## 4. Serving runs, in-sample (all 66 runs)", "",
          mape_table(rep["in_sample"]["mape_pct"]),
          "Per category (MAPE %, TTFT / TBT / throughput):", "",
          table([[c, *[f"{fmt(d[s]['ttft_mean_ms'])} / "
                       f"{fmt(d[s]['tbt_mean_ms'])} / {fmt(d[s]['output_throughput_tok_s'])}"
                       if s in d else "-" for s in SYSTEMS]] for c, d in rep["in_sample"]["by_category"].items()],
                ["category", *SYSTEMS]),
          "![runs](plots/runs_in_sample.png)", ""]
    waves = rep.get("waves") or []
    if waves:
        def err(a, b):
            return f"{fmt(b / 1e3, 2)} / {fmt(a / 1e3, 2)} ({100 * (b / a - 1):+.0f}%)"
        L += ["TTFT of the first wave (every request released at once into an idle server) and of the later "
              "waves (each request released as one of the previous wave finishes), measured per request "
              "against the engine, seconds (model / measured), runs with at least four waves:", "",
              table([[w["file"][:44], w["system"], w["context"], w["concurrency"],
                      err(w["first_measured"], w["first_predicted"]), err(w["later_measured"], w["later_predicted"]),
                      f"{fmt(w['spread_predicted'], 2)} / {fmt(w['spread_measured'], 2)}" if "spread_measured" in w
                      else "-"]
                     for w in waves], ["run", "system", "context", "concurrency", "first wave", "later waves",
                                       "later wave released over (s)"]), "",
              "The last column is the time over which one later wave is sent (mean over the run's later waves; "
              "measured: the closed-loop send times reconstructed from the per-request latencies). The "
              "measured waves are released over about one front-end slot per request at every context, and so "
              "are the model's: its front end hands on the finishing wave's last tokens at its intake pace "
              "(the fitted t_token against the logs' rate, below, sets how much longer).", ""]
        summ = []
        for part in ("first", "later"):
            for grp, sel in (("rdma", lambda w: w["system"] == "rdma"), ("other pools", lambda w: w["system"] != "rdma")):
                e = [100 * (w[f"{part}_predicted"] / w[f"{part}_measured"] - 1) for w in waves if sel(w)]
                if e:
                    summ.append(f"{part} waves, {grp}: mean error {float(np.mean(e)):+.0f}% (MAPE {float(np.mean(np.abs(e))):.0f}%)")
        L += ["; ".join(summ) + ".", ""]
    fe = rep.get("front_end")
    if fe:
        ctx = ", ".join(f"{c // 1024}K {v:.2f}" for c, v in fe["per_context_us"].items())
        L += [f"Front end (not fitted to this): the server logs' HTTP server takes in a released wave at "
              f"{fe['measured_us']:.2f} us per prompt token (median of {fe['runs']} runs whose first wave fills "
              f"three seconds of the log; by context {ctx} us), against the fitted t_token "
              f"{fe['fitted_us']:.2f} us" + (
                  f", {100 * (fe['fitted_us'] / fe['measured_us'] - 1):.0f}% slower: the fit lets the front end "
                  "stand in for what holds the first tokens of the 64K and 128K later waves, which the engine "
                  "does not have (see README, gaps)." if fe["fitted_us"] > 1.1 * fe["measured_us"] else "."), ""]
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
    L += ["## 7. Cold first rounds (prompt prefilled from scratch)", "",
          mape_table(rep["cold_rounds"], with_completion=False), ""]
    L += ["## 8. Per-run errors (in-sample)", "",
          table([[r["file"][:52], r["system"], r["context"], r["concurrency"], r["output"],
                  *[f"{fmt(r[f'{m}_measured'], 0 if m != 'tbt_mean_ms' else 1)} / "
                    f"{fmt(r[f'{m}_predicted'], 0 if m != 'tbt_mean_ms' else 1)} ({fmt(r[f'{m}_error_pct'])})"
                    for m in KEY], f"{fmt(r['measured_success'], 2)} / {fmt(r['predicted_success'], 2)}"]
                 for r in sorted(rep["in_sample"]["runs"], key=lambda r: (r["system"], r["context"], r["concurrency"]))],
                ["run", "system", "context", "conc", "output", "TTFT ms meas / pred (err %)",
                 "TBT ms meas / pred (err %)", "tok/s meas / pred (err %)", "completed meas / pred"]), "",
          f"Time per prediction (median over the runs): {rep['predict_ms_median']:.1f} ms.", ""]
    cl = HERE / "cluster_section.md"
    if cl.exists():
        L += ["## 9. " + cl.read_text().lstrip("# ")]
    (HERE / "report.md").write_text("\n".join(L))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the cross-validation refits and the cluster replays (reuse the last ones)")
    ap.add_argument("--workers", type=int, default=2, help="processes for the cross-validation folds")
    a = ap.parse_args()
    t0 = time.time()
    PLOTS.mkdir(exist_ok=True)
    topo = as_topology(SCENARIO)
    runs = load_runs()
    mb = microbench_case()
    print("access reference ...", flush=True)
    ref = reference_vs_closed_form(workers=a.workers)
    print("server logs ...", flush=True)
    obs = step_observations(runs)
    st = step_model(obs, topo)
    st["variable_output"] = variable_steps(topo, runs)
    plot_steps(topo, obs)
    print("in-sample runs ...", flush=True)
    tp = time.perf_counter()
    comps = comparisons(topo, runs)
    per_run_ms = 1e3 * (time.perf_counter() - tp) / len(runs)
    rows = errors(comps)
    by_cat = {c: mape([r for r in rows if c in r["categories"]]) for c in CATEGORIES}
    cold = errors(compare_runs(topo, load_runs(round_=1)))
    plot_runs(comps, "all 66 testbed runs (in-sample): predicted vs measured", PLOTS / "runs_in_sample.png")
    plot_microbench(mb)
    rep = {"microbench": mb, "reference": ref, "step_model": st, "device_tokens": device_tokens(topo, runs),
           "waves": wave_ttft(topo, runs), "front_end": front_end_rate(topo, runs),
           "in_sample": {"mape_pct": mape(rows), "by_category": by_cat, "runs": rows},
           "cold_rounds": mape(cold), "predict_ms_median": per_run_ms}
    old = HERE / "report.json"
    prev = json.loads(old.read_text()) if old.exists() else {}
    elast = {}
    if a.quick:
        cv = prev.get("cross_validation") or {}
        ok = all(isinstance(d, dict) and "all" in d.get("mape_pct", {}) for d in cv.values())
        rep["cross_validation"] = cv if cv and ok else None
    else:
        print("leave one category out (refits) ...", flush=True)
        rep["cross_validation"] = cross_validate(runs, obs, a.workers)
        old.write_text(json.dumps({**prev, "cross_validation": rep["cross_validation"]}, indent=1, default=float))
        print("cluster section ...", flush=True)
        import cluster_section
        (HERE / "cluster_section.md").write_text(cluster_section.render(PLOTS) + "\n")
    print("elasticities ...", flush=True)
    elast = elasticities(topo)
    stage = {**{k: "2 (server logs)" for k in STEP_PARAMS}, **{k: "3 (runs)" for k in SERVING_PARAMS},
             **{k: "4 (cold rounds)" for k in PREFILL_PARAMS}}
    rep["constants"] = {
        k: {"value": f"{get_param(topo, k) / PARAM_UNITS[k][1]:.4g} {PARAM_UNITS[k][0]}".strip(),
            "bounds": f"{PARAM_UNITS[k][2]:g} .. {PARAM_UNITS[k][3]:g} {PARAM_UNITS[k][0]}".strip(),
            "plausible": PLAUSIBLE.get(k, ""), "stage": stage[k], "elasticity": elast.get(k)}
        for k in stage}
    rep["seconds"] = time.time() - t0
    rep["quick"] = a.quick
    rep["full_seconds"] = prev.get("full_seconds") if a.quick else rep["seconds"]
    old.write_text(json.dumps(rep, indent=1, default=float))
    write_markdown(rep)
    print(f"wrote {HERE / 'report.md'} ({rep['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
