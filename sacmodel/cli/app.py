"""Command-line interface: ``sacmodel <command> ...``. Bad input exits with status 2 and a one-line message.

Start-up is kept fast: this module imports only the standard library and the light :mod:`sacmodel.util.names`
and :mod:`sacmodel.cli.types`; each command imports what it needs (sympy, pint, scipy, rich) when it runs.
"""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..util.names import MAIN_SYSTEMS, SYSTEMS
from .common import (
    DEFAULT_CONTEXTS,
    LIMITS_TEXT,
    Parser,
    _fmt,
    _formatter,
    _model_name,
    _parser,
    _scenario,
    _workload,
    add_json,
    add_model_options,
    add_plot,
    add_scenario,
    add_systems,
    add_workload,
    console,
    print_json,
    table,
    write_csv,
)
from .types import LIMITS, arg, byte_size, count, in_file, names_list, out_file, token_list


# ---- commands -------------------------------------------------------------------------------------
def cmd_microbench(a):
    from ..serving.systems import fetch_latency_us
    us = fetch_latency_us(a.scenario, a.backend, topk=a.topk, entry_bytes=a.entry_bytes)
    if a.json:
        print_json({"scenario": a.scenario, "backend": a.backend, "topk": a.topk, "entry_bytes": a.entry_bytes,
                    "latency_us": us})
    else:
        print(f"{a.backend} gather of top-{a.topk} x {a.entry_bytes:g} B entries (one layer): {us:.1f} us")



METRIC_ROWS = (("ttft_mean_ms", "TTFT mean", "ms"), ("ttft_p50_ms", "TTFT p50", "ms"),
               ("ttft_p99_ms", "TTFT p99", "ms"), ("tbt_mean_ms", "TBT mean", "ms"), ("tbt_p99_ms", "TBT p99", "ms"),
               ("e2e_mean_ms", "E2E latency mean", "ms"), ("output_throughput_tok_s", "output throughput", "tok/s"),
               ("request_throughput_req_s", "request throughput", "req/s"), ("duration_s", "run duration", "s"))
USAGE_LABELS = {"hbm": "HBM per GPU for KV (after weights)", "max_total_tokens": "token slots per rank",
                "device_pool": "GPU KV slots per rank", "host_pool": "HiSparse host pool per rank",
                "host_dram": "host DRAM", "cxl_pool": "CXL pool (devices in use)",
                "remote_pool": "remote RDMA pool"}


def _unit_of(key: str) -> tuple[str, str, float]:
    """(label, unit, scale) of a breakdown entry from its name: step_swap_ms -> ('step_swap', 'ms', 1)."""
    for suffix, unit in (("_tok_s", "tok/s"), ("_req_s", "req/s"), ("_GBps", "GB/s"), ("_ms", "ms"), ("_s", "s")):
        if key.endswith(suffix):
            return key[: -len(suffix)], unit, 1.0
    if key.startswith("share"):
        return key, "%", 100.0
    if "tokens" in key:
        return key, "tokens", 1.0
    return key, "", 1.0


def _usage_unit(key: str, u: dict) -> str:
    """'tokens' or 'bytes' for a capacity row: its own 'unit' when the engine gives one, else by name and size
    (token budgets are at most millions; memories are gigabytes)."""
    if u.get("unit") in ("tokens", "bytes"):
        return u["unit"]
    return "tokens" if "tokens" in key or u["capacity"] < 1e8 else "bytes"


def _describe(p, a) -> str:
    cold = "cold prompts (prefilled)" if not p.config.get("prefix_cached", not a.cold) else "cached prompt"
    prompts = f", {a.prompts} prompts" if getattr(a, "prompts", None) else ""
    rate = f", Poisson {p.config['rate']:g} req/s" if p.config.get("rate") else ""
    tok = lambda n: f"{n // 1024}K" if n % 1024 == 0 else f"{n:,}"  # noqa: E731
    return (f"{p.system} on {p.scenario} ({_model_name(a)}): context {tok(p.context)}, output {tok(p.output)}, "
            f"concurrency {p.concurrency}, {p.requests:,} requests{rate}, {cold}{prompts}")


def cmd_predict(a):
    from ..serving.predict import predict
    scenario = _scenario(a)
    from ..util.progress import status
    with status(f"predict {a.system}"):
        p = predict(scenario, a.system, **_workload(a))
    load = _load_report(scenario, a, p) if p.feasible and a.rate else None
    if a.json:
        print_json({**p.to_dict(), **({"load": load} if load else {})})
        return
    con = console()
    if not p.feasible:
        con.print(f"[bold red]infeasible[/]: {_describe(p, a)}: binding limit [bold]{p.limit}[/]")
        _usage_table(con, p)
        return
    con.print(_describe(p, a), highlight=False)
    t = table("predicted metrics", ("metric", "value", "unit"), right=("value",))
    for k, label, unit in METRIC_ROWS:
        t.add_row(label, _fmt(getattr(p, k), 2 if unit != "s" else 1), unit)
    con.print(t)
    _usage_table(con, p)
    b = table("where the time goes", ("component", "value", "unit"), right=("value",))
    for k, v in p.breakdown.items():
        label, unit, scale = _unit_of(k)
        b.add_row(label, _fmt(v * scale, 3), unit)
    con.print(b)
    con.print("step_*: one decode step of the busiest rank; admit and prefix_*: once per request", highlight=False)
    if a.method == "analytic":
        con.print("method: analytic steady state (requests out of phase; no first-wave transient, no "
                  "percentiles). The engine (default) reproduces benchmark waves; the two differ most in TTFT "
                  "at long contexts.")
    if load:
        _print_load(con, load)


def _load_report(scenario, a, p) -> dict:
    """Offered vs served load of an open-loop run; overloaded when arrivals outpace what the system serves.

    Uses the engine's ``offered_req_s``/``served_req_s`` when it reports them; otherwise compares the offered
    rate with the closed-loop throughput at the same concurrency (the most the system can serve).
    """
    b = p.breakdown
    offered = b.get("offered_req_s", a.rate)
    if "served_req_s" in b:
        served = b["served_req_s"]
        over = bool(b.get("overloaded", served < 0.95 * offered))
    else:
        from ..serving.predict import predict
        cap = predict(scenario, a.system, **{**_workload(a), "rate": None}).request_throughput_req_s
        served, over = min(offered, cap), offered > cap
    return {"offered_req_s": offered, "served_req_s": served, "overloaded": over}


def _print_load(con, load):
    if load["overloaded"]:
        con.print(f"[bold yellow]overloaded[/]: offered {load['offered_req_s']:.3g} req/s, served "
                  f"{load['served_req_s']:.3g} req/s; queues grow without bound, so latencies grow with the "
                  "number of requests (lower --rate or raise capacity)")
    else:
        con.print(f"load: offered {load['offered_req_s']:.3g} req/s, served {load['served_req_s']:.3g} req/s")


def _usage_table(con, p):
    usage = p.capacity.get("usage", {})
    if not usage:
        return
    t = table("memory use vs capacity", ("limit", "used", "capacity", "use"), right=("used", "capacity", "use"))
    for k, u in usage.items():
        f = (lambda x: f"{x:,.0f} tok") if _usage_unit(k, u) == "tokens" else (lambda x: f"{x / 1e9:,.1f} GB")
        t.add_row(USAGE_LABELS.get(k, k), f(u["used"]), f(u["capacity"]), f"{u['used'] / u['capacity']:.0%}")
    con.print(t)


COMPARE_METRICS = (("output_throughput_tok_s", "tok/s", 0), ("ttft_mean_ms", "TTFT ms", 0), ("tbt_mean_ms", "TBT ms", 1))
CSV_METRICS = ("ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "tbt_mean_ms", "tbt_p99_ms", "e2e_mean_ms",
               "output_throughput_tok_s", "request_throughput_req_s")


def cmd_compare(a):
    from ..serving.predict import compare
    from ..util.progress import track
    scenario, systems = _scenario(a), a.systems
    rows = [(L, compare(scenario, systems, **{**_workload(a), "context": L}))
            for L in track(a.contexts, f"compare {len(systems)} systems")]
    kind = "cold prompts" if a.cold else "cached prompt"
    title = f"{a.scenario} ({_model_name(a)}): output {a.output} tokens, concurrency {a.concurrency}, {kind}"
    if a.plot:
        from ..plots.serving import plot_compare
        plot_compare(rows, a.plot, title=title)
    if a.csv:
        write_csv(a.csv, ["context", "system", "feasible", "limit", *CSV_METRICS],
                  [[L, s, p.feasible, p.limit, *[getattr(p, m) for m in CSV_METRICS]]
                   for L, res in rows for s, p in res.items()])
    if a.json:
        print_json([{"context": L, **{s: p.to_dict() for s, p in res.items()}} for L, res in rows])
        return
    if a.csv == "-":
        return
    t = table(None, ("context", "metric", *systems), right=("context", *systems))
    ratios = [(x, y) for x, y in (("cxl", "rdma"), ("cxl", "dram")) if x in systems and y in systems]
    for x, y in ratios:
        t.add_column(f"{x}/{y}", justify="right")
    for L, res in rows:
        for j, (m, label, nd) in enumerate(COMPARE_METRICS):
            cells = [(f"{L // 1024}K" if L % 1024 == 0 else f"{L:,}") if j == 0 else "", label]
            for s in systems:
                p = res[s]
                cells.append(_fmt(getattr(p, m), nd) if p.feasible else (f"({p.limit})" if j == 0 else ""))
            for x, y in ratios:
                px, py = res[x], res[y]
                cells.append(f"{getattr(px, m) / getattr(py, m):.2f}x" if px.feasible and py.feasible else "-")
            t.add_row(*cells, end_section=j == len(COMPARE_METRICS) - 1)
    con = console()
    con.print(title, highlight=False)
    con.print(t)
    if a.plot:
        print(f"plot written to {a.plot}", file=sys.stderr)


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


def cmd_calibrate(a):
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


def cmd_scenarios(a):
    if a.template:
        from ..hardware.template import TEMPLATE
        sys.stdout.write(TEMPLATE)
        return
    from ..hardware.scenarios import builtin_scenarios, load_topology, resolve_scenario_path
    from ..util.names import PRICE_FILE
    rows = []
    for n in builtin_scenarios():
        path = resolve_scenario_path(n)
        if path.resolve() == PRICE_FILE:          # the price table shares the package data folder
            continue
        t = load_topology(path)
        rows.append({"name": n, "model": t.model_name, "gpus": len(t.gpus), "path": str(path),
                     "description": t.description})
    if a.csv:
        write_csv(a.csv, list(rows[0]) if rows else ["name"], [list(r.values()) for r in rows])
    if a.json:
        print_json(rows)
    elif a.csv != "-":
        for r in rows:
            print(f"{r['name']}: {r['description']}")
        print("\nGive --scenario NAME or a YAML path; `sacmodel scenarios --template > mine.yaml` starts your own.")


def cmd_models(a):
    from ..hardware.models import catalog, get_model
    rows = []
    for n in catalog():
        m = get_model(n)
        rows.append({"name": n, "attention": m.kind + (" + DSA" if m.sparse else ""), "layers": m.layers,
                     "params_b": round(m.params_total() / 1e9, 1), "active_b": round(m.params_active() / 1e9, 1),
                     "kv_bytes_fp8": m.kv_bytes("fp8"), "kv_bytes_bf16": m.kv_bytes("bf16"), "topk": m.topk or None})
    if a.csv:
        write_csv(a.csv, list(rows[0]), [list(r.values()) for r in rows])
    if a.json:
        print_json(rows)
        return
    if a.csv == "-":
        return
    t = table("model catalog (KV: bytes per token per layer)",
              ("name", "attention", "layers", "params B", "active B", "KV fp8", "KV bf16", "top-k"),
              right=("layers", "params B", "active B", "KV fp8", "KV bf16", "top-k"))
    for r in rows:
        t.add_row(r["name"], r["attention"], str(r["layers"]), f"{r['params_b']:.0f}", f"{r['active_b']:.1f}",
                  f"{r['kv_bytes_fp8']:g}", f"{r['kv_bytes_bf16']:g}", str(r["topk"] or "-"))
    con = console()
    con.print(t)
    con.print("Any Hugging Face config.json works too: --model path/to/config.json")


# ---- parser ---------------------------------------------------------------------------------------



def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="sacmodel", formatter_class=_formatter,
        description="Predict LLM serving (TTFT, TBT, throughput, memory) with the KV cache in HBM or in DRAM / "
                    "CXL / RDMA memory pools (SAC and its baselines).",
        epilog="examples:\n"
               "  sacmodel compare                                   all systems, 16K-128K contexts\n"
               "  sacmodel predict --system cxl --context 128K       one system: metrics, memory, breakdown\n"
               "  sacmodel breakeven --a cxl --b dram --metric tbt --vary context --lo 8K --hi 256K\n"
               "  sacmodel plan --system cxl --context 128K --slo tbt_mean_ms=80\n"
               "  sacmodel <command> --help                          options and examples of a command\n\n"
               "Quantities take units (--lo '26 GB/s', --entry-bytes '1.125 KiB', contexts as 32K); arithmetic "
               "is never evaluated.\nBad input exits with status 2 and a one-line message. Every table "
               "command takes --json; those with one row per item take --csv.\n" + LIMITS_TEXT + ".")
    ap.add_argument("--version", action="version", version=f"sacmodel {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _parser(sub, "predict", "TTFT, TBT, throughput, memory use and time breakdown of one system",
                ["sacmodel predict --system cxl --context 128K --concurrency 64",
                 "sacmodel predict --system rdma --context 32K --rate 0.5 --requests 400",
                 "sacmodel predict --system dram --context 64K --cold --json",
                 "sacmodel predict --system cxl --context 32K --model path/to/config.json"],
                "Predict one system on one workload with the event-driven engine (or --method analytic). "
                + LIMITS_TEXT + ".")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True, metavar="SYSTEM",
                   help="where the KV cache lives: gpu (HBM), dram (host DRAM pool), cxl (CXL pool, SAC), rdma "
                        "(RDMA pool, prefix copied first), cxl-prefetch, rdma-topk")
    add_model_options(p)
    add_workload(p)
    add_json(p, csv_=False)
    p.set_defaults(func=cmd_predict)

    p = _parser(sub, "compare", "all systems side by side over context lengths (the main job)",
                ["sacmodel compare", "sacmodel compare --contexts 8K,32K,128K --concurrency 32 --plot curves.png",
                 "sacmodel compare --systems dram,cxl --cold --csv results.csv"])
    add_scenario(p)
    p.add_argument("--contexts", type=arg(token_list), default=DEFAULT_CONTEXTS, metavar="LIST",
                   help=f"comma-separated prompt lengths (default {DEFAULT_CONTEXTS}; at most {LIMITS['contexts']})")
    add_systems(p, ",".join(MAIN_SYSTEMS))
    add_model_options(p)
    add_workload(p, context=False)
    add_plot(p, "also draw metric-vs-context curves")
    add_json(p)
    p.set_defaults(func=cmd_compare)

    p = _parser(sub, "validate", "predicted vs measured for run files (testbed or SGLang bench_serving format)",
                ["sacmodel validate ../shared/data/sac-testbed/runs",
                 "sacmodel validate my_bench_cxl2_ctx32k.json --system cxl --csv errors.csv"])
    add_scenario(p)
    p.add_argument("paths", nargs="+", metavar="PATH", help="run JSON files or folders of them")
    p.add_argument("--system", choices=SYSTEMS, default=None, help="system of the runs, when file names do not say it")
    p.add_argument("--round", type=int, choices=(1, 2), default=2,
                   help="testbed files: 2 = measured round (cached prompt, default), 1 = cache-filling round "
                        "(cold prefill)")
    add_plot(p, "also draw predicted against measured per metric")
    add_json(p)
    p.set_defaults(func=cmd_validate)

    p = _parser(sub, "calibrate", "fit the free parameters to measured runs and write them into a scenario",
                ["sacmodel calibrate --dry-run", "sacmodel calibrate --microbench --out mine.yaml",
                 "sacmodel calibrate my_runs/ --params t_layer,compute_eff --out mine.yaml"])
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
    p.add_argument("--dry-run", action="store_true", help="fit and print the values; write no file")
    p.add_argument("--from-prior", action="store_true",
                   help="start every constant it fits from its a-priori value (the middle of its plausible "
                        "range), as the validation's cross-validation does, instead of the scenario's value")
    p.add_argument("--force", action="store_true",
                   help="allow overwriting a built-in scenario or an existing --out file")
    add_json(p)
    p.set_defaults(func=cmd_calibrate)

    trace_help = ("request trace: Mooncake JSONL (timestamp, input_length, output_length, hash_ids) or Azure LLM "
                  "inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens)")
    p = _parser(sub, "trace-stats", "summary of a request trace (Mooncake JSONL or Azure CSV)",
                ["sacmodel trace-stats ../shared/data/traces/conversation_trace.jsonl --limit 1000"])
    p.add_argument("trace", type=arg(in_file), help=trace_help)
    p.add_argument("--limit", type=arg(count, hi=LIMITS["trace_requests"]), default=None, metavar="N",
                   help=f"read the first N requests only (at most {LIMITS['trace_requests']:,})")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_trace_stats)

    p = _parser(sub, "scenarios", "list the built-in scenarios, or print a scenario template",
                ["sacmodel scenarios", "sacmodel scenarios --template > mine.yaml   # edit, then --scenario mine.yaml"])
    p.add_argument("--template", action="store_true",
                   help="print a documented scenario YAML (every field explained) to start your own hardware")
    add_json(p)
    p.set_defaults(func=cmd_scenarios)

    p = _parser(sub, "models", "list the model catalog", ["sacmodel models", "sacmodel models --json"])
    add_json(p)
    p.set_defaults(func=cmd_models)

    p = _parser(sub, "microbench", "single-layer top-k gather latency (fetch micro-benchmark model)",
                ["sacmodel microbench --backend cxl --topk 2048",
                 "sacmodel microbench --backend rdma --topk 512 --entry-bytes '1.125 KiB'"])
    add_scenario(p)
    p.add_argument("--backend", choices=("dram", "cxl", "rdma"), required=True, help="memory the entries are read from")
    p.add_argument("--topk", type=arg(count, hi=LIMITS["tokens"]), required=True, metavar="K",
                   help="entries gathered (one layer)")
    p.add_argument("--entry-bytes", type=arg(byte_size), default=656.0, metavar="SIZE",
                   help="bytes per entry: plain (656) or with a unit ('1.125 KiB'); default 656 (FP8 DSA entry)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_microbench)

    from . import solvers as solvers_cli
    solvers_cli.register(sub)
    from . import cluster as cluster_cli  # replay, hitrate, and the cluster options of plan/sweep
    cluster_cli.register(sub, add_scenario)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    try:
        a = ap.parse_args(argv)
    except SystemExit as exc:          # --help, --version (0) and bad options (2), as a return value
        return exc.code if isinstance(exc.code, int) else 2
    try:
        a.func(a)
    except BrokenPipeError:
        return 0
    except (ValueError, KeyError, OSError) as exc:
        # every user-facing error of the library is a ValueError subclass (TopologyError, UnitError, ...)
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"sacmodel: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sacmodel: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
