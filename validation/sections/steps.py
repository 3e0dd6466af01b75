"""Section 3: the decode step model against the server logs, and device tokens held."""
from __future__ import annotations

import numpy as np

from common import PLOTS, category_of, fixed, fmt, table
from sacmodel.data.server_logs import load_server_log
from sacmodel.fit.calibrate import step_residuals, variable_output_steps
from sacmodel.fit.compare import run_kwargs
from sacmodel.serving.predict import predict


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
    """The engine against the variable-output runs' decode intervals (not fitted), like with like: the log's
    intervals of 40 steps with an unchanged running count against the engine's own timeline of the same run,
    sampled the same way (both hold the iterations of other ranks' admissions); median per running count."""
    obs = variable_output_steps(runs)
    engine = {}
    for o in obs:
        if o.run.file not in engine:
            engine[o.run.file] = engine_intervals(topo, o.run)
    out = []
    for o in obs:
        got = engine[o.run.file].get(o.b)
        if not got:
            continue
        pred = float(np.median(got))
        out.append({"file": o.run.file, "system": o.run.system, "concurrency": o.run.concurrency, "b": o.b,
                    "intervals": o.weight, "engine_intervals": len(got), "measured_ms": o.step_s * 1e3,
                    "predicted_ms": pred * 1e3, "error_pct": 100 * (pred / o.step_s - 1)})
    return out


def engine_intervals(topo, run) -> dict[int, list[float]]:
    """Seconds per decode step of the engine's 40-step intervals with an unchanged running count, by that count
    (the server log's sampling: every 40 decode steps of every rank)."""
    p = predict(topo, run.system, record=True, **run_kwargs(run))
    by_rank: dict[int, list[tuple[float, int]]] = {}
    for t, r, kind, b, _ in p.breakdown["timeline"]:
        if kind == "decode":
            by_rank.setdefault(r, []).append((t, b))
    per_b: dict[int, list[float]] = {}
    for xs in by_rank.values():
        for (t0, b0), (t1, b1) in zip(xs, xs[1:]):
            if b0 == b1:
                per_b.setdefault(b1, []).append((t1 - t0) / 40)
    return per_b


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


def render(rep) -> list[str]:
    """The report's section 3 section (markdown lines)."""
    L: list[str] = []
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
              "requests have mixed ages and a request is admitted whenever one ends, so each row compares like "
              "with like: the median of the log's 40-step intervals with an unchanged running count against the "
              "median of the engine's own intervals of the same run, sampled the same way (both hold the "
              "iterations of the other ranks' admissions). RDMA is left out (its intervals hold the prefix "
              "copies). Step-time error with 1-4 requests per rank: "
              f"{fmt(float(np.mean([r['error_pct'] for r in few])) if few else float('nan'))}% (mean, signed); "
              f"with more: {fmt(float(np.mean([r['error_pct'] for r in many])) if many else float('nan'))}% "
              f"(MAPE {fmt(float(np.mean([abs(r['error_pct']) for r in many])) if many else float('nan'))}%).", "",
              table([[r["file"][:40], r["system"], r["concurrency"], r["b"], r["intervals"], fmt(r["measured_ms"]),
                      fmt(r["predicted_ms"]), f"{r['error_pct']:+.1f}"] for r in var if r["b"] > 4],
                    ["run", "system", "concurrency", "requests/rank", "log intervals", "log step ms",
                     "engine ms", "error %"]), ""]
    L += ["Device tokens held per rank (the logs' `#token` at the most common running count) against the engine's "
          "peak: the capacity model counts each request's buffer (device_buffer + 64 slots) and the shared "
          "prefix's device pages.", "",
          table([[r["file"][:48], r["system"], r["context"], r["requests_per_rank"], fmt(r["measured"], 0),
                  fmt(r["predicted_peak"], 0)] for r in rep["device_tokens"][:12]],
                ["run", "system", "context", "requests/rank", "log #token", "model"]), ""]
    return L
