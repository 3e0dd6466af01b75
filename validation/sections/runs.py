"""Sections 4, 7 and 8: the serving runs in-sample (waves, front end), the cold first rounds, per-run errors."""
from __future__ import annotations

import numpy as np

from common import KEY, SYSTEMS, fixed, fmt, mape_table, table
from sacmodel.data.runs import closed_loop_releases
from sacmodel.fit.calibrate import front_end_observations, front_end_per_token
from sacmodel.fit.compare import compare_runs, run_kwargs
from sacmodel.hardware.params import get_param
from sacmodel.serving.predict import predict


def comparisons(topo, runs):
    return compare_runs(topo, runs)


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


def first_requests(topo, runs):
    """The first request of each fixed-output run (the fastest of its first wave: tokenised first, nothing
    queued ahead of it), measured against the engine (ms); ``engine_ms`` is the model's time without
    ``t_request``, so ``measured - engine`` is what the run leaves for the serving path outside the engine."""
    t_request = get_param(topo, "t_request") * 1e3
    out = []
    for r in runs:
        if r.ttfts is None or not fixed(r) or r.failed or r.system == "rdma":
            continue
        c = min(r.concurrency, r.requests)
        pred = predict(topo, r.system, **run_kwargs(r)).per_request["ttft_ms"]
        m, q = float(np.nanmin(r.ttfts[:c])), float(np.nanmin(pred[:c]))
        out.append({"file": r.file, "system": r.system, "context": r.context, "concurrency": r.concurrency,
                    "measured_ms": m, "predicted_ms": q, "engine_ms": q - t_request})
    return out


def front_end_rate(topo, runs):
    """The front end's time per prompt token measured from the server logs' request arrivals (the scenario's
    ``t_token`` is this measurement over the calibration runs), per context."""
    obs = front_end_observations(runs)
    if not obs:
        return None
    per_ctx: dict[int, list[float]] = {}
    for r, sec in obs:
        per_ctx.setdefault(r.context, []).append(sec / r.context)
    return {"scenario_us": get_param(topo, "t_token") * 1e6, "measured_us": front_end_per_token(obs) * 1e6,
            "runs": len(obs), "per_context_us": {c: float(np.median(v)) * 1e6 for c, v in sorted(per_ctx.items())}}


def plot_runs(comps, title, path):
    from sacmodel.plots.serving import plot_validation
    plot_validation(comps, path, title=title)


def render(rep) -> list[str]:
    """The report's section 4 section (markdown lines)."""
    L: list[str] = []
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
              "(t_token, the logs' rate, below).", ""]
        summ = []
        for part in ("first", "later"):
            for grp, sel in (("rdma", lambda w: w["system"] == "rdma"), ("other pools", lambda w: w["system"] != "rdma")):
                e = [100 * (w[f"{part}_predicted"] / w[f"{part}_measured"] - 1) for w in waves if sel(w)]
                if e:
                    summ.append(f"{part} waves, {grp}: mean error {float(np.mean(e)):+.0f}% (MAPE {float(np.mean(np.abs(e))):.0f}%)")
        L += ["; ".join(summ) + ".", ""]
    L += _first_request_lines(rep.get("first_requests") or [], rep.get("t_request_ms"))
    fe = rep.get("front_end")
    if fe:
        ctx = ", ".join(f"{c // 1024}K {v:.2f}" for c, v in fe["per_context_us"].items())
        L += [f"Front end (measured, not fitted): the server logs' HTTP server takes in a released wave at "
              f"{fe['measured_us']:.2f} us per prompt token (median of {fe['runs']} runs whose first wave fills "
              f"three seconds of the log; by context {ctx} us); the scenario's t_token is "
              f"{fe['scenario_us']:.3f} us, the same measurement over the calibration runs.", ""]
    return L


def _first_request_lines(rows, t_request) -> list[str]:
    """The first request of each run's first wave: alone at concurrency 8, else the first of the tokens held
    while the front end takes the wave in. What each leaves for ``t_request``."""
    if not rows or t_request is None:
        return []
    groups = [("a lone request, HiSparse pools (concurrency 8)", lambda w: w["system"] != "gpu" and w["concurrency"] <= 8),
              ("a lone request, GPU only (concurrency 8)", lambda w: w["system"] == "gpu" and w["concurrency"] <= 8),
              ("the first held back, HiSparse pools (concurrency 16-96)",
               lambda w: w["system"] != "gpu" and 16 <= w["concurrency"] <= 96),
              ("the first held back, GPU only (concurrency 32)", lambda w: w["system"] == "gpu" and w["concurrency"] > 8)]
    body = []
    for name, sel in groups:
        g = [w for w in rows if sel(w)]
        if not g:
            continue
        meas, pred = np.array([w["measured_ms"] for w in g]), np.array([w["predicted_ms"] for w in g])
        left = meas - np.array([w["engine_ms"] for w in g])
        body.append([name, len(g), fmt(float(np.median(meas)), 0), fmt(float(np.median(pred)), 0),
                     f"{float(np.median(100 * (pred / meas - 1))):+.0f}%", fmt(float(np.median(left)), 0)])
    return ["The first request of each run's first wave (median over runs, ms; RDMA left out, its prefix copy "
            "dominates). At concurrency 8 it is alone: tokenised first, prefilled at once, its token handed on "
            "at once. In a larger wave its first token is ready while the front end still takes the wave in "
            "and leaves with the others when the intake ends:", "",
            table(body, ["first token of", "runs", "measured", "model", "error", "measured - engine"]), "",
            f"`measured - engine` is the measured time minus the model's without t_request ({t_request:.1f} ms "
            "fitted): what the run leaves for the path outside the engine (HTTP, detokeniser, streaming), to "
            "compare with the fitted value and with the 1-30 ms an HTTP response on localhost costs. The first "
            "tokens a large wave holds back leave when the front end has taken the wave in; the engine's later "
            "admissions wait for the scheduler's loop to come round (it takes requests in once it has launched "
            "the iteration on the GPU), the delay that grows with the load which t_request used to carry.", ""]


def render_cold(rep) -> list[str]:
    """Section 7: the cold first rounds."""
    L: list[str] = []
    L += ["## 7. Cold first rounds (prompt prefilled from scratch)", "",
          mape_table(rep["cold_rounds"], with_completion=False), ""]
    return L


def render_per_run(rep) -> list[str]:
    """Section 8: every run's errors."""
    L: list[str] = []
    L += ["## 8. Per-run errors (in-sample)", "",
          table([[r["file"][:52], r["system"], r["context"], r["concurrency"], r["output"],
                  *[f"{fmt(r[f'{m}_measured'], 0 if m != 'tbt_mean_ms' else 1)} / "
                    f"{fmt(r[f'{m}_predicted'], 0 if m != 'tbt_mean_ms' else 1)} ({fmt(r[f'{m}_error_pct'])})"
                    for m in KEY], f"{fmt(r['measured_success'], 2)} / {fmt(r['predicted_success'], 2)}"]
                 for r in sorted(rep["in_sample"]["runs"], key=lambda r: (r["system"], r["context"], r["concurrency"]))],
                ["run", "system", "context", "conc", "output", "TTFT ms meas / pred (err %)",
                 "TBT ms meas / pred (err %)", "tok/s meas / pred (err %)", "completed meas / pred"]), "",
          f"Time per prediction (median over the runs): {rep['predict_ms_median']:.1f} ms.", ""]
    return L
