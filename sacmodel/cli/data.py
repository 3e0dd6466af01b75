"""Commands on measured data: ``validate`` (predicted vs measured runs), ``calibrate`` (fit and write the
free constants) and ``trace-stats`` (summary of a request trace)."""
from __future__ import annotations

import re
import sys

from ..util.names import SYSTEMS
from .common import _fmt, _parser, add_json, add_plot, add_scenario, console, print_json, table, write_csv
from .types import LIMITS, arg, count, in_file, names_list, out_file


VALIDATE_METRICS = (("ttft_mean_ms", "TTFT ms"), ("tbt_mean_ms", "TBT ms"), ("output_throughput_tok_s", "tok/s"))


def cmd_validate(a):
    from ..data.runs import load_runs
    from ..fit.compare import compare_runs, mape_table
    from ..util.progress import track
    runs = load_runs(a.paths, system=a.system, round_=a.round)
    comps = [c for r in track(runs, "predict measured runs") for c in compare_runs(a.scenario, [r])]
    comps.sort(key=lambda c: (c.run.system, c.run.context, c.run.concurrency))
    mape = mape_table(comps)
    err = lambda c, m: None if (e := c.error(m)) is None else 100 * e  # noqa: E731
    if a.plot:
        from ..plots.serving import plot_validation
        plot_validation(comps, a.plot, title=f"predicted vs measured on {a.scenario}: {len(runs)} runs "
                                              f"({', '.join(sorted({c.run.system for c in comps}))}; round {a.round})")
        print(f"plot written to {a.plot}", file=sys.stderr)
    if a.csv:
        cols = [m for m, _ in VALIDATE_METRICS] + ["e2e_mean_ms"]
        write_csv(a.csv, ["file", "system", "context", "concurrency", "output", "measured_failed", "feasible",
                          "limit", *[f"{m}_{w}" for m in cols for w in ("measured", "predicted", "error_pct")]],
                  [[c.run.file, c.run.system, c.run.context, c.run.concurrency, c.run.output, c.run.failed,
                    c.feasible, c.limit, *[v for m in cols for v in (c.run.metrics.get(m), c.predicted.get(m),
                                                                     err(c, m))]] for c in comps])
    if a.json:
        print_json({"runs": [{"file": c.run.file, "system": c.run.system, "context": c.run.context,
                              "concurrency": c.run.concurrency, "output": c.run.output,
                              "measured": c.run.metrics, "predicted": c.predicted, "feasible": c.feasible,
                              "limit": c.limit, "measured_failed": c.run.failed,
                              "error_pct": {m: err(c, m) for m in c.run.metrics}} for c in comps],
                    "mape_pct": mape})
        return
    if a.csv == "-":
        return
    con = console()
    con.print(f"predicted vs measured on {a.scenario} ({len(runs)} runs, round {a.round})", highlight=False)
    t = table(None, ("run", "metric", "measured", "predicted", "error"), right=("measured", "predicted", "error"))
    for c in comps:
        r = c.run
        right = c.feasible == (not r.failed)
        if not c.feasible or r.failed:     # no metrics to compare: did the model see the failure coming?
            t.add_row(r.key(), "feasible", "no (failed)" if r.failed else "yes", "yes" if c.feasible else "no",
                      "ok" if right else "WRONG", end_section=True)
            continue
        for j, (m, label) in enumerate(VALIDATE_METRICS):
            e = err(c, m)
            t.add_row(r.key() if j == 0 else "", label, _fmt(r.metrics.get(m), 1), _fmt(c.predicted.get(m), 1),
                      "-" if e is None else f"{e:+.1f}%", end_section=j == len(VALIDATE_METRICS) - 1)
    con.print(t)
    m = table("mean absolute percentage error per system (%)",
              ("system", "runs", "TTFT", "TBT", "tok/s", "E2E", "feasibility right"),
              right=("runs", "TTFT", "TBT", "tok/s", "E2E", "feasibility right"))
    for s, row in mape.items():
        m.add_row(s, str(row.get("runs", "")), *[_fmt(row.get(c), 1) for c in
                                                  ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s",
                                                   "e2e_mean_ms", "feasibility_right")])
    con.print(m)


def _fit(a):
    """The fit ``calibrate`` asked for: (FitResult, what it was fitted to)."""
    from ..data.microbench import latest_per_backend, load_microbench
    from ..data.runs import load_runs
    from ..fit.calibrate import (
        MICROBENCH_PARAMS,
        PREFILL_PARAMS,
        calibrate_runs,
        fit_microbench,
        fit_serving,
        from_prior,
    )
    from ..util.progress import status
    if a.from_prior:
        if a.microbench:
            raise ValueError("--from-prior: the micro-benchmark constants have no a-priori values")
        a.scenario = from_prior(a.scenario, a.params or (PREFILL_PARAMS if a.round == 1 else None))
    with status("calibrate: least-squares fit"):
        if a.microbench:
            pts = latest_per_backend(load_microbench(a.paths or None))
            fit = fit_microbench(a.scenario, pts, a.params or MICROBENCH_PARAMS)
            what = "sac-testbed microbench (newest file per backend)"
        elif a.round == 1:
            runs = load_runs(a.paths or None, round_=1)
            fit = fit_serving(a.scenario, runs, a.params or PREFILL_PARAMS, ("ttft_mean_ms",))
            what = f"TTFT of the cold first rounds of {len(runs)} runs"
        else:
            runs = load_runs(a.paths or None)
            fit = calibrate_runs(a.scenario, runs, a.params)
            what = fit.what
    return fit, what


def _bench_machine(a) -> dict:
    """The machine the benchmark runs were measured on: a server log's ``server_args``, then the flags."""
    from ..data.bench import machine_from_server_log
    machine = machine_from_server_log(a.server_log) if a.server_log else {}
    machine.update(getattr(a, "machine_flags", None) or {})
    if "gpu" not in machine:
        raise ValueError("benchmark result files: give the machine they ran on: --gpu NAME (with --gpus, --tp, "
                         "--model, ... or --server-log FILE for the rest)")
    if "model" not in machine:
        raise ValueError("benchmark result files: give the served model: --model NAME (or --server-log FILE)")
    return machine


def _built(scenario, machine: dict, a):
    """``scenario(**machine)``; a refusal of a setting the server log gave names the log and its argument."""
    from ..data.bench import SERVER_ARGS
    from ..hardware.topology import TopologyError
    try:
        return scenario(**machine)
    except TopologyError as exc:
        flags = getattr(a, "machine_flags", None) or {}
        logged = [(arg, kw) for arg, kw in SERVER_ARGS.items() if kw in machine and kw not in flags]
        if not a.server_log or not logged:
            raise
        named = [(arg, kw) for arg, kw in logged if re.search(rf"\b{kw}\b", str(exc))] or logged
        args = ", ".join(f"{arg}={machine[kw]!r}" for arg, kw in named)
        raise TopologyError(f"{a.server_log}: server_args {args}: {exc}") from None


def _calibrate_bench(a):
    """``calibrate`` on SGLang bench_serving / vLLM bench serve results: fit the constants the runs identify
    (:mod:`sacmodel.fit.machine`) and write a scenario of the machine with them and their provenance."""
    import time
    from pathlib import Path

    from ..data.bench import load_bench_runs, same_model
    from ..data.records import DataError
    from ..fit.machine import (
        MACHINE_CONSTANTS,
        calibrated_scenario_dict,
        cross_validate,
        default_constants,
        fit_machine,
        jacobian,
        transferred_values,
        write_calibrated,
    )
    from ..hardware.build import scenario
    from ..hardware.scenario_io import calibration_target
    from ..util.progress import status
    t0 = time.perf_counter()
    machine = _bench_machine(a)
    if a.out is None and not a.dry_run:
        raise ValueError("benchmark result files: give --out FILE for the calibrated scenario (or --dry-run)")
    out = None if a.dry_run else calibration_target(Path(a.out + ".scenario"), a.out, force=a.force)
    names = list(a.params or [])
    bad = [n for n in names if n not in MACHINE_CONSTANTS]
    if bad:
        raise ValueError(f"--params: {bad[0]!r} is not a machine constant a benchmark run can fit "
                         f"({', '.join(MACHINE_CONSTANTS)})")
    runs = load_bench_runs(a.paths)
    for r in runs:
        if not same_model(r.model, machine["model"]):
            raise DataError(f"{r.source}: a run of {r.model}, not of {machine['model']} (--model); nothing written")
    topo = _built(scenario, machine, a)
    names = names or default_constants(topo)
    with status(f"calibrate: {len(runs)} benchmark runs"):
        J = jacobian(topo, runs, names, transferred_values(topo, names))
        fit = fit_machine(topo, runs, names, jac=J)
        cv = cross_validate(topo, runs, names, J, fit)
    if out is not None:
        write_calibrated(out, calibrated_scenario_dict(machine, fit, runs, cv),
                         f"# Calibrated by sacmodel calibrate on {len(runs)} benchmark runs: "
                         f"{', '.join(sorted(set(str(p) for p in a.paths)))}\n")
    _print_bench_fit(a, fit, cv, out, time.perf_counter() - t0)


def _print_bench_fit(a, fit, cv, out, seconds: float):
    from ..fit.machine import MACHINE_CONSTANTS
    rows = []
    for n, c in MACHINE_CONSTANTS.items():
        if n not in fit.values:
            continue
        state = ("fitted" + (" (at its bound)" if n in fit.at_bound else "")) if n in fit.fitted else \
            f"not identified: transferred; pinned by {fit.unidentified[n]}"
        rows.append({"constant": n, "kind": c.kind, "value": fit.values[n], "transferred": fit.transferred[n],
                     "sd_rel": fit.sd.get(n), "bootstrap": fit.interval.get(n), "state": state})
    if a.json:
        print_json({"constants": rows, "runs": fit.runs, "errors": fit.errors, "rms_log": fit.rms,
                    "cross_validation": cv, "warnings": fit.warnings(),
                    "written_to": None if out is None else str(out), "seconds": seconds})
        return
    con = console()
    t = table(f"calibrated on {len(fit.runs)} runs (rms log error {100 * fit.rms:.1f}%)",
              ("constant", "kind", "value", "+-1 sd", "68% (bootstrap over runs)", "transferred", "state"),
              right=("value", "+-1 sd", "transferred"))
    for r in rows:
        b = r["bootstrap"]
        t.add_row(r["constant"], r["kind"], f"{r['value']:.4g}", "-" if r["sd_rel"] is None else
                  f"{100 * r['sd_rel']:.1f}%", f"{b['p16']:.4g}-{b['p84']:.4g}" if b and b.get("draws") else "-",
                  f"{r['transferred']:.4g}", r["state"])
    con.print(t)
    for w in fit.warnings():
        con.print(f"warning: {w}: the model does not follow this run with these constants; they may be biased",
                  highlight=False)
    if cv.get("band"):
        con.print("leave-one-run-out error: " + ", ".join(f"{m} {100 * v:.1f}%" for m, v in cv["band"].items()),
                  highlight=False)
    con.print(("dry run: nothing written" if out is None else f"written to {out}") + f" ({seconds:.1f} s)",
              highlight=False)


def cmd_calibrate(a):
    from ..data.bench import looks_like_bench
    bench = [p for p in a.paths if looks_like_bench(p)]
    machine = bool((getattr(a, "machine_flags", None) or {}).get("gpu") or getattr(a, "server_log", None))
    if machine and a.paths and not bench:        # the testbed's runs need no machine: these are benchmark files
        bench = list(a.paths)
    if bench:
        other = [p for p in a.paths if p not in bench]
        if other:
            raise ValueError(f"{other[0]}: not a benchmark result file; give SGLang bench_serving / vLLM bench serve "
                             "results alone (or testbed runs alone)")
        return _calibrate_bench(a)
    if getattr(a, "server_log", None):
        raise ValueError("--server-log: only with benchmark result files (SGLang bench_serving, vLLM bench serve)")
    from ..fit.calibrate import write_params
    from ..hardware.scenario_io import calibration_target
    from ..hardware.scenarios import resolve_scenario_path
    scenario = resolve_scenario_path(a.scenario)
    out = None if a.dry_run else calibration_target(scenario, a.out, force=a.force)   # refuse before fitting
    try:
        fit, what = _fit(a)
    except ValueError as exc:          # no data, nothing to fit: say that the scenario was left alone
        raise ValueError(f"{exc}; nothing written") from None
    if out is not None:
        write_params(out, fit, a.source or what, template=scenario)
    if a.csv:
        write_csv(a.csv, ["parameter", "value_si", "value"], [[k, fit.params.get(k), v] for k, v in fit.display.items()])
    if a.json:
        print_json({"params": fit.params, "display": fit.display, "residual_rms": fit.residual_rms,
                    "points": fit.n_points, "written_to": None if a.dry_run else str(out)})
        return
    if a.csv == "-":
        return
    con = console()
    t = table(f"fitted to {fit.what} (rms residual {fit.residual_rms:.3f})", ("parameter", "value"), right=("value",))
    for k, v in fit.display.items():
        t.add_row(k, v)
    con.print(t)
    con.print("dry run: nothing written" if a.dry_run else f"written to {out}")


def cmd_trace_stats(a):
    from ..data.traces import load_trace, summarize
    d = summarize(load_trace(a.trace, limit=a.limit))
    if a.json:
        print_json(d)
        return
    print(f"{d['name']}: {d['requests']} requests over {d['duration_s']:.0f} s ({d['rate_req_s']:.2f} req/s)")
    print(f"input tokens: mean {d['input_mean']:.0f}, p50/p90/p99 {d['input']['p50']:.0f} / {d['input']['p90']:.0f} / "
          f"{d['input']['p99']:.0f}; {100 * d['share_input_above_topk']:.1f}% longer than top-k 2048")
    print(f"output tokens: mean {d['output_mean']:.0f}, p50/p90/p99 {d['output']['p50']:.0f} / "
          f"{d['output']['p90']:.0f} / {d['output']['p99']:.0f}")
    if d["cached_token_ratio"] is not None:
        print(f"prompt tokens in an earlier request's prefix (unbounded cache): {100 * d['cached_token_ratio']:.1f}%")


# ---- command-line options -----------------------------------------------------------------------
def register(sub) -> None:
    """Add ``validate``, ``calibrate`` and ``trace-stats``."""
    _register_validate(sub)
    _register_calibrate(sub)
    _register_trace_stats(sub)


def _register_validate(sub) -> None:
    p = _parser(sub, "validate", "predicted vs measured for run files (testbed or SGLang bench_serving format)",
                ["sacmodel validate ../shared/data/sac-testbed/runs",
                 "sacmodel validate ../shared/data/sac-testbed/runs/dc_0417-p3_04_cxl2_ctx32k_conc64_r2fix2k_n256.json "
                 "--system cxl "
                 "--csv errors.csv"])
    add_scenario(p)
    p.add_argument("paths", nargs="+", metavar="PATH", help="run JSON files or folders of them")
    p.add_argument("--system", choices=SYSTEMS, default=None, help="system of the runs, when file names do not say it")
    p.add_argument("--round", type=int, choices=(1, 2), default=2,
                   help="testbed files: 2 = measured round (cached prompt, default), 1 = cache-filling round "
                        "(cold prefill)")
    add_plot(p, "also draw predicted against measured per metric")
    add_json(p)
    p.set_defaults(func=cmd_validate)


def _register_calibrate(sub) -> None:
    p = _parser(sub, "calibrate", "fit the free parameters to measured runs and write them into a scenario",
                ["sacmodel calibrate --dry-run", "sacmodel calibrate --microbench --out mine.yaml",
                 "sacmodel calibrate examples/bench_serving_h200.jsonl --gpu h200 --gpus 8 --tp 8 --model deepseek-r1 --out mine.yaml",
                 "sacmodel calibrate ../shared/data/sac-testbed/runs/ --params t_graph_kernel,compute_eff "
                 "--out mine.yaml"],
                "Fit constants to measured runs. A folder of runs is read with its manifest.csv (in the folder or "
                "its parent, also through a symbolic link) and each run's SGLang server log (the manifest's "
                "log column): the decode-step constants are fitted to the logs' step times, so runs without "
                "their logs can fit only the front-end and admission constants (--round 2 with --params naming "
                "those) or be validated (`sacmodel validate`). SGLang bench_serving result files (--output-file "
                "JSONL, with or without --output-details) and vLLM bench serve --save-result JSON are recognised "
                "by content: give the machine with --gpu ... (or --server-log FILE and --gpu), and the constants "
                "the runs identify (request path, small-kernel floor, MoE, prefill and decode efficiencies) are "
                "fitted and written with --out into a scenario of that machine, each with the runs that fixed it, "
                "its uncertainty and the calibration's leave-one-run-out error; the rest stay transferred, named "
                "with the run that would pin them. `--scenario mine.yaml --gpu b200` carries it to another GPU.")
    add_scenario(p)
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="run files or folders (default: the shared calibration runs, ../shared/data)")
    p.add_argument("--microbench", action="store_true",
                   help="fit the fetch-path parameters to the fetch micro-benchmarks instead of serving runs")
    p.add_argument("--round", type=int, choices=(1, 2), default=2,
                   help="2: fit the decode-step constants to the server logs' step times, then the front-end, "
                        "admission and copy constants to the measured rounds (default); 1: fit prefill_eff to "
                        "the cold rounds")
    p.add_argument("--params", type=arg(names_list), default=None, metavar="LIST",
                   help="comma-separated parameters to fit (default: every constant of the chosen stage(s))")
    p.add_argument("--out", default=None, type=arg(out_file), metavar="YAML",
                   help="write a new scenario file instead of updating the given one")
    p.add_argument("--source", default=None, help="provenance text recorded with the fitted values")
    p.add_argument("--server-log", default=None, type=arg(in_file), metavar="LOG",
                   help="benchmark result files: take the server's launch arguments (tp, dp, ep, model, "
                        "mem_fraction_static, chunked_prefill_size, ...) from this SGLang server log's server_args "
                        "line; flags given override them")
    p.add_argument("--dry-run", action="store_true", help="fit and print the values; write no file")
    p.add_argument("--from-prior", action="store_true",
                   help="start every constant it fits from its a-priori value (the middle of its plausible "
                        "range), as the validation's cross-validation does, instead of the scenario's value")
    p.add_argument("--force", action="store_true",
                   help="allow overwriting a built-in scenario or an existing --out file")
    add_json(p)
    p.set_defaults(func=cmd_calibrate)



def _register_trace_stats(sub) -> None:
    trace_help = ("request trace: Mooncake JSONL (timestamp, input_length, output_length, hash_ids) or Azure LLM "
                  "inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens)")
    p = _parser(sub, "trace-stats", "summary of a request trace (Mooncake JSONL or Azure CSV)",
                ["sacmodel trace-stats ../shared/data/traces/mooncake_conversation_trace.jsonl --limit 1000"])
    p.add_argument("trace", type=arg(in_file), help=trace_help)
    p.add_argument("--limit", type=arg(count, hi=LIMITS["trace_requests"]), default=None, metavar="N",
                   help=f"read the first N requests only (at most {LIMITS['trace_requests']:,})")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_trace_stats)
