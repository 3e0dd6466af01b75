"""Section 11 (issue 33): your machine in two runs. For each public group (``shared/data/external`` and the checks of
``validation/data/external_checks.csv``) and for the testbed, calibrate the machine constants
(:mod:`sacmodel.fit.machine`) on two runs, the lowest and the highest load, and predict the others; zero-shot
and two-run errors side by side, signed and absolute.

The public rows are turned into SGLang ``bench_serving`` result lines (the fields ``bench_serving.py`` writes:
``random_input_len``, ``random_output_len``, ``random_range_ratio``, ``max_concurrency``, ``request_rate``,
``completed``, ``mean_ttft_ms``, ``mean_tpot_ms``, ``output_throughput``) and read back through
:func:`sacmodel.data.bench.load_bench_file`, so the validation goes through the reader a user's files go
through. The shared CSV states no throughput: its rows are fitted on TTFT and TPOT alone (``output_throughput``
is written as the closed loop's c x output / E2E, Little's law from the measured means, and not fitted), and
their throughput error is against that estimate.

Run alone: ``python3 validation/sections/calibration.py`` (prints the section and writes
``validation/calibration_section.json``; it does not touch report.md).
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent
SHARED = HERE.parent.parent / "shared" / "data" / "external" / "h200-deepseek-r1-sglang-tp8.csv"
CHECKS = HERE / "data" / "external_checks.csv"
TARGET = {"ttft": 15.0, "tpot": 8.0, "throughput": 8.0}       # issue 33, % on the runs not fitted
METRICS = ("ttft", "tpot", "throughput")


def bench_line(r, throughput_measured: bool) -> dict:
    """An SGLang bench_serving result line (``--output-file``, no details) of an external run."""
    osl_mean = r.osl * (1 + r.range_ratio) / 2
    tput = r.output_tok_s if throughput_measured else \
        r.concurrency * osl_mean / (r.ttft_mean_ms / 1e3 + (osl_mean - 1) * r.tpot_mean_ms / 1e3)
    return {"backend": "sglang", "dataset_name": "random", "request_rate": math.inf, "max_concurrency": r.concurrency,
            "random_input_len": r.isl, "random_output_len": r.osl, "random_range_ratio": r.range_ratio,
            "duration": r.requests * osl_mean / tput, "completed": r.requests, "output_throughput": tput,
            "mean_ttft_ms": r.ttft_mean_ms, "mean_tpot_ms": r.tpot_mean_ms}


def bench_runs(ext, throughput_measured: bool):
    """The runs as a user's bench_serving JSONL would give them (written to a temporary file, read back)."""
    from sacmodel.data.bench import load_bench_file
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "results.jsonl"
        path.write_text("".join(json.dumps(bench_line(r, throughput_measured)) + "\n" for r in ext))
        runs = load_bench_file(path)
    for b, r in zip(runs, ext):
        b.source = r.id
        if not throughput_measured:
            b.output_tok_s = math.nan          # not measured: not fitted
    return runs


class OwnSettings:
    """A run predicted on its own server settings (``scheduler_recv_interval`` differs within a machine's
    runs): the machine constants of the scenario the fit passes are applied to the run's own scenario."""

    def __init__(self, bench, ext, transfer: str = "rules"):
        from sacmodel.hardware.build import scenario
        self.bench, self.own = bench, scenario(ext.gpu, transfer=transfer, **ext.scenario_kwargs())
        for k in ("source", "ttft_mean_ms", "tpot_mean_ms", "output_tok_s", "concurrency", "isl", "osl"):
            setattr(self, k, getattr(bench, k))

    def predict(self, topo) -> dict:
        from sacmodel.fit.machine import apply_constants, predict_bench, transferred_values
        return predict_bench(apply_constants(self.own, transferred_values(topo)), self.bench)


MACHINE_KEYS = ("gpu", "gpus", "model", "weights", "kv_dtype", "tp", "dp", "ep")


def _errors(run, pred, derived_tput: float | None) -> dict:
    meas = {"ttft": run.ttft_mean_ms, "tpot": run.tpot_mean_ms,
            "throughput": run.output_tok_s if derived_tput is None else derived_tput}
    return {m: 100 * (pred[m] / meas[m] - 1) if pred["feasible"] and meas[m] > 0 else math.nan for m in METRICS}


def two_run_group(name: str, ext: list, throughput_measured: bool, start: str = "rules") -> dict:
    """Zero-shot (rules only, and as shipped) and two-run predictions of one group's runs not fitted. The fit
    starts from ``start``: "shipped" is where ``sacmodel calibrate`` starts (the scenario as built, its kernel
    classes fitted on shared/data/external), "rules" the testbed's constants carried by the rules alone (for
    the shared runs, on which the shipped classes are in-sample)."""
    from sacmodel.fit.machine import apply_constants, fit_machine, predict_bench
    from sacmodel.hardware.build import scenario
    own = {t: [] for t in ("rules", "fitted")}        # each run on its own settings, under either transfer
    for b, r in zip(bench_runs(ext, throughput_measured), ext):
        for t, runs_t in own.items():
            runs_t.append(OwnSettings(b, r, t))
    runs = own["fitted" if start == "shipped" else "rules"]
    load = [r.concurrency * (r.isl + r.osl) for r in ext]
    lo, hi = int(np.argmin(load)), int(np.argmax(load))
    kw = ext[0].scenario_kwargs()
    rules = scenario(ext[0].gpu, transfer="rules", **kw)
    shipped = scenario(ext[0].gpu, **kw)
    base = shipped if start == "shipped" else rules
    fit = fit_machine(base, [runs[lo], runs[hi]])
    cal = apply_constants(base, {n: fit.values[n] for n in fit.fitted})
    rows = []
    for i, (r, b) in enumerate(zip(ext, runs)):
        if i in (lo, hi):
            continue
        derived = None if throughput_measured else bench_line(r, False)["output_throughput"]
        rows.append({"id": r.id, "workload": f"{r.isl}/{r.osl} c{r.concurrency}",
                     "zero_shot_rules": _errors(b, own["rules"][i].predict(rules), derived),
                     "zero_shot_shipped": _errors(b, own["fitted"][i].predict(shipped), derived),
                     "two_run": _errors(b, b.predict(cal), derived)})
    return {"group": name, "start": start, "calibrated_on": [ext[lo].id, ext[hi].id],
            "calibrated_on_workload": [f"{ext[j].isl}/{ext[j].osl} c{ext[j].concurrency}" for j in (lo, hi)],
            "fitted": {n: fit.values[n] for n in fit.fitted}, "sd_rel": fit.sd, "interval": fit.interval, "at_bound": fit.at_bound,
            "unidentified": fit.unidentified, "throughput_measured": throughput_measured, "rows": rows,
            "summary": summary(rows)}


def summary(rows) -> dict:
    """Per variant and metric: MAPE and mean signed error (%)."""
    out = {}
    for v in ("zero_shot_rules", "zero_shot_shipped", "two_run"):
        out[v] = {}
        for m in METRICS:
            e = np.array([r[v][m] for r in rows if math.isfinite(r[v][m])])
            out[v][m] = {"mape": float(np.mean(np.abs(e))) if len(e) else None,
                         "signed": float(np.mean(e)) if len(e) else None}
    return out


def public_groups(skipped: list[str]) -> list[dict]:
    """Every public group (one machine each) with at least three runs; ``skipped`` gets the others."""
    jobs, sk = public_jobs()
    skipped += sk
    return [two_run_group(*j) for j in jobs]


class TestbedRun:
    """A testbed run as the machine fit takes it: its measured means and a prediction as the report makes it
    (:func:`sacmodel.fit.compare.run_kwargs`: the run's settings, exact prompt lengths)."""

    def __init__(self, run):
        self.run, self.source = run, Path(run.file).name
        m = run.metrics
        self.ttft_mean_ms, self.tpot_mean_ms = m.get("ttft_mean_ms"), m.get("tbt_mean_ms")
        self.output_tok_s = m.get("output_throughput_tok_s") or math.nan
        self.concurrency, self.isl, self.osl = run.concurrency, run.context, run.output

    def predict(self, topo) -> dict:
        from sacmodel.fit.compare import run_kwargs
        from sacmodel.serving.predict import predict
        p = predict(topo, self.run.system, **run_kwargs(self.run))
        return {"feasible": p.feasible, "limit": p.limit, "ttft": p.ttft_mean_ms, "tpot": p.tbt_mean_ms,
                "throughput": p.output_throughput_tok_s}


def _variant_errors(run, pred) -> dict:
    meas = {"ttft": run.ttft_mean_ms, "tpot": run.tpot_mean_ms, "throughput": run.output_tok_s}
    return {m: 100 * (pred[m] / meas[m] - 1) if pred["feasible"] and meas[m] and pred[m] else math.nan
            for m in METRICS}


TESTBED_SYSTEMS = ("dram", "cxl", "rdma")


def testbed_groups() -> list[dict]:
    """Per system of the testbed (round 2, served runs): calibrated on its lowest- and highest-load runs from
    the a-priori constants (``calibrate --from-prior``'s), the other runs predicted; zero-shot = a priori;
    shipped = the constants fitted on all 66 runs (in-sample)."""
    return [g for system in TESTBED_SYSTEMS for g in testbed_group(system)]


def testbed_group(system: str) -> list[dict]:
    """:func:`testbed_groups`' group of one system (none without the testbed's runs)."""
    from sacmodel.data.runs import load_runs
    from sacmodel.fit.calibrate import from_prior
    from sacmodel.fit.machine import MACHINE_CONSTANTS, apply_constants, fit_machine
    from sacmodel.hardware.scenarios import as_topology
    try:
        runs = [TestbedRun(r) for r in load_runs(None) if not r.failed]
    except (OSError, ValueError):
        return []
    shipped = as_topology("sac-testbed")
    prior = from_prior(shipped, [c.param for c in MACHINE_CONSTANTS.values()])
    rs = [r for r in runs if r.run.system == system]
    load = [r.concurrency * r.isl for r in rs]
    lo, hi = int(np.argmin(load)), int(np.argmax(load))
    fit = fit_machine(prior, [rs[lo], rs[hi]])
    cal = apply_constants(prior, {n: fit.values[n] for n in fit.fitted})
    rows = [{"id": r.source, "workload": f"{r.isl}/{r.osl} c{r.concurrency}",
             "zero_shot_rules": _variant_errors(r, r.predict(prior)),
             "zero_shot_shipped": _variant_errors(r, r.predict(shipped)),
             "two_run": _variant_errors(r, r.predict(cal))} for i, r in enumerate(rs) if i not in (lo, hi)]
    return [{"group": f"testbed {system}", "calibrated_on": [rs[lo].source, rs[hi].source],
             "calibrated_on_workload": [f"{rs[j].isl}/{rs[j].osl} c{rs[j].concurrency}" for j in (lo, hi)],
             "fitted": {n: fit.values[n] for n in fit.fitted}, "sd_rel": fit.sd, "interval": fit.interval,
             "at_bound": fit.at_bound, "unidentified": fit.unidentified, "throughput_measured": True, "rows": rows,
             "summary": summary(rows)}]


def calibration_case() -> dict:
    skipped: list[str] = []
    return {"public": public_groups(skipped) + testbed_groups(), "skipped": skipped}


def public_jobs() -> tuple[list[tuple], list[str]]:
    """:func:`public_groups` as independent pieces: ([(name, runs, throughput measured)], skipped), each the
    arguments of :func:`two_run_group` (validation/run.py runs them in its processes)."""
    from sacmodel.data.external import load_external_runs
    jobs, skipped = [], []
    if SHARED.exists():
        shared = load_external_runs(SHARED)
        jobs.append(("shared/data/external H200 R1 TP8, all 15 runs", shared, False, "rules"))
        for isl, osl in sorted({(r.isl, r.osl) for r in shared}):
            sub = [r for r in shared if (r.isl, r.osl) == (isl, osl)]
            jobs.append((f"shared/data/external H200 R1 TP8 {isl}/{osl}", sub, False, "rules"))
    if CHECKS.exists():
        checks = load_external_runs(CHECKS)
        machines: dict = {}       # one calibration per machine: a group may hold runs of two (TP8 and TP4)
        for r in checks:
            machines.setdefault((r.group, r.gpu, tuple(getattr(r, k) for k in MACHINE_KEYS)), []).append(r)
        for (g, gpu, _), sub in sorted(machines.items(), key=lambda x: x[0][0]):
            if len(sub) >= 3:
                jobs.append((f"check {g} ({sub[0].gpus} x {gpu.upper()}, TP{sub[0].tp})", sub, True, "shipped"))
            else:
                skipped.append(f"{g} ({sub[0].gpus} x {gpu.upper()}, TP{sub[0].tp}): {len(sub)} runs")
    return jobs, skipped


def _public_group(name: str, ext: list, throughput_measured: bool, start: str) -> list[dict]:
    return [two_run_group(name, ext, throughput_measured, start)]


def group_jobs() -> tuple[list[tuple], list[str]]:
    """The section's independent pieces in the report's order, [(label, function, arguments)], each returning a
    list of groups, and the machines skipped; :func:`collect` joins what they return."""
    jobs, skipped = public_jobs()
    return ([(j[0], _public_group, j) for j in jobs]
            + [(f"testbed {s}", testbed_group, (s,)) for s in TESTBED_SYSTEMS]), skipped


def collect(groups: list[dict], skipped: list[str]) -> dict:
    """:func:`calibration_case`'s result from its pieces: :func:`two_run_group` of each of :func:`public_jobs`
    in order, then the groups of :func:`testbed_group` in :data:`TESTBED_SYSTEMS`' order."""
    return {"public": list(groups), "skipped": list(skipped)}


def _f(x) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.1f}"


def _a(x) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1f}"


def render(rep) -> list[str]:
    case = rep.get("calibration")
    if not case:
        return []
    L = ["## 11. Your machine in two runs (issue 33)", "",
         "Each group's lowest- and highest-load runs (concurrency x (prompt + output)) are given to the fit of "
         "`sacmodel calibrate` (the constants they identify, each within its physical range, started where "
         "`calibrate` starts, the machine as built (shipped), for the checks, and from the testbed's constants "
         "carried by the transfer rules alone for the shared H200 runs, on which the shipped kernel classes are "
         "in-sample; each transferred value a prior as wide as the "
         "constant's range, `sacmodel.fit.machine.prior_width`, and kept where the runs ask a move of fewer than "
         "two of its standard deviations at their repeatability, `moved_sd`); the group's other runs are then "
         "predicted. "
         "Zero-shot: the rules alone, and as shipped (the shipped Hopper FP8 kernel efficiencies were fitted on "
         "the 15 shared H200 runs, so on those they are in-sample). On the testbed (per system, round 2, served "
         "runs; the run settings as the report predicts them) the fit starts from the constants' a-priori values "
         "(`calibrate --from-prior`'s), which are its zero-shot; shipped is the fit on all 66 runs (in-sample). "
         "Errors in %: MAPE, then the mean signed "
         f"error. Target of issue 33: TTFT {TARGET['ttft']:.0f}%, TPOT and throughput {TARGET['tpot']:.0f}%.", ""]
    head = "| group | fitted on | runs | " + " | ".join(
        f"{m} {v}" for m in ("TTFT", "TPOT", "tput") for v in ("0-shot", "shipped", "2-run")) + " |"
    L += [head, "|" + "---|" * (3 + 9)]
    for g in case["public"]:
        s = g["summary"]
        cells = []
        for m in METRICS:
            for v in ("zero_shot_rules", "zero_shot_shipped", "two_run"):
                cells.append(f"{_a(s[v][m]['mape'])} ({_f(s[v][m]['signed'])})")
        start = {"shipped": " (from shipped)", "rules": " (from rules)"}.get(g.get("start"), " (from prior)")
        L.append(f"| {g['group']} | {', '.join(g['calibrated_on_workload'])}{start} | {len(g['rows'])} | "
                 + " | ".join(cells) + " |")
    if case.get("skipped"):
        L += ["", "Machines with fewer than three runs (two to fit, none left to predict): "
              + "; ".join(case["skipped"]) + "."]
    L += ["", "Fitted constants per group (linearised relative sd; 68% interval of a seeded bootstrap over the "
          "runs, each resampled run remeasured at the benchmark's repeatability, `sacmodel.fit.machine.bootstrap`; "
          "with two runs only the draws holding both identify the constants; unidentified ones stay transferred):",
          ""]

    def _iv(g, n) -> str:
        iv = (g.get("interval") or {}).get(n) or {}
        return f", 68% {iv['p16']:.4g}-{iv['p84']:.4g}" if iv.get("draws") else ""
    for g in case["public"]:
        fitted = ", ".join(f"{n} {v:.4g} (+-{100 * g['sd_rel'][n]:.0f}%{_iv(g, n)}"
                           f"{', at bound' if n in g['at_bound'] else ''})" for n, v in g["fitted"].items())
        L.append(f"- {g['group']}: {fitted or 'none'}; not identified: {', '.join(g['unidentified']) or 'none'}"
                 + ("" if g["throughput_measured"] else "; throughput not measured (Little's law estimate)"))
    return L + [""]


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    rep = {"calibration": calibration_case()}
    (HERE / "calibration_section.json").write_text(json.dumps(rep, indent=1, default=float))
    print("\n".join(render(rep)))
