"""Command-line interface: ``sacmodel <command> ...``. Bad input exits with status 2 and a one-line message."""
from __future__ import annotations

import argparse
import json
import math
import sys

from rich.console import Console
from rich.table import Table

from .measured import DataError
from .models import ModelError
from .serving import ConfigError
from .systems import MAIN_SYSTEMS, SYSTEMS, SystemError_
from .topology import TopologyError
from .units import UnitError, parse_quantity, parse_tokens

USER_ERRORS = (TopologyError, ModelError, UnitError, DataError, ConfigError, SystemError_, KeyError, ValueError,
               FileNotFoundError)
DEFAULT_CONTEXTS = "16K,32K,64K,128K"


def tokens(s: str) -> int:
    """argparse type: '32768', '32K' (x1024) or '1M' (x1024^2) -> int tokens."""
    try:
        return parse_tokens(s)
    except UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def token_list(s: str) -> list[int]:
    return [tokens(x) for x in s.split(",") if x.strip()]


def pos_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {s!r}")
    return v


def pos_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {s!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a positive number: {s!r}")
    return v


def byte_size(s: str) -> float:
    """argparse type: a positive number of bytes, plain ('656') or with a unit ('1.125 KiB')."""
    try:
        v = float(s)
    except ValueError:
        try:
            v = parse_quantity(s, "bytes", field="--entry-bytes")
        except UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a positive size: {s!r}")
    return v


def system_list(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    for x in out:
        if x not in SYSTEMS:
            raise argparse.ArgumentTypeError(f"unknown system {x!r}; known: {', '.join(SYSTEMS)}")
    return out


def _fmt(v, nd=1):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{nd}f}"


def _print_json(obj):
    print(json.dumps(obj, indent=2, default=lambda o: None if isinstance(o, float) and math.isnan(o) else str(o)))


# ---- commands -------------------------------------------------------------------------------------
def cmd_microbench(a):
    from .systems import fetch_latency_us
    us = fetch_latency_us(a.scenario, a.backend, topk=a.topk, entry_bytes=a.entry_bytes)
    if a.json:
        _print_json({"scenario": a.scenario, "backend": a.backend, "topk": a.topk, "entry_bytes": a.entry_bytes,
                     "latency_us": us})
    else:
        print(f"{a.backend} gather of top-{a.topk} x {a.entry_bytes:g} B entries (one layer): {us:.1f} us")


def _workload(a):
    return dict(context=getattr(a, "context", None), output=a.output, concurrency=a.concurrency, requests=a.requests,
                cxl_devices=a.cxl_devices, device_buffer=a.device_buffer, rdma_nics=a.rdma_nics, rate=a.rate,
                prefix_cached=not a.cold, method=a.method)


def cmd_predict(a):
    from .serving import predict
    p = predict(a.scenario, a.system, **_workload(a))
    if a.json:
        _print_json(p.to_dict())
        return
    con = Console()
    if not p.feasible:
        con.print(f"[bold red]infeasible[/]: {p.system} on {p.scenario}, context {p.context}, concurrency "
                  f"{p.concurrency}: binding limit [bold]{p.limit}[/]")
        _usage_table(con, p)
        return
    t = Table(title=f"{p.system} on {p.scenario}: context {p.context}, output {p.output}, concurrency "
                    f"{p.concurrency}, {p.requests} requests")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k in ("ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "tbt_mean_ms", "tbt_p99_ms", "e2e_mean_ms",
              "output_throughput_tok_s", "request_throughput_req_s", "duration_s"):
        t.add_row(k, _fmt(getattr(p, k), 2))
    con.print(t)
    b = Table(title="where the time goes (per decode step, ms; admission and prefix fetch per request)")
    b.add_column("component")
    b.add_column("ms", justify="right")
    for k, v in p.breakdown.items():
        share = k.startswith("share")
        b.add_row(k, _fmt(v * (100 if share else 1), 3) + (" %" if share else ""))
    con.print(b)


def _usage_table(con, p):
    t = Table(title="memory use vs capacity")
    for c in ("limit", "used", "capacity", "use"):
        t.add_column(c, justify="right" if c != "limit" else "left")
    for k, u in p.capacity.get("usage", {}).items():
        f = (lambda x: f"{x:,.0f} tokens") if k == "max_total_tokens" else (lambda x: f"{x / 1e9:,.1f} GB")
        t.add_row(k, f(u["used"]), f(u["capacity"]), f"{u['used'] / u['capacity']:.0%}")
    con.print(t)


def cmd_compare(a):
    from .serving import compare
    systems = a.systems
    rows = []
    for L in a.contexts:
        res = compare(a.scenario, systems, **{**_workload(a), "context": L})
        rows.append((L, res))
    if a.plot:
        from .plots import plot_compare
        plot_compare(rows, a.plot, title=f"{a.scenario}, concurrency {a.concurrency}, output {a.output}")
    if a.json:
        _print_json([{"context": L, **{s: p.to_dict() for s, p in res.items()}} for L, res in rows])
        return
    con = Console()
    t = Table(title=f"{a.scenario}: output {a.output} tokens, concurrency {a.concurrency}")
    t.add_column("context", justify="right")
    t.add_column("metric")
    for s in systems:
        t.add_column(s, justify="right")
    ratios = [(x, y) for x, y in (("cxl", "rdma"), ("cxl", "dram")) if x in systems and y in systems]
    for x, y in ratios:
        t.add_column(f"{x}/{y}", justify="right")
    metrics = (("output_throughput_tok_s", "tok/s", 0), ("ttft_mean_ms", "TTFT ms", 0), ("tbt_mean_ms", "TBT ms", 1))
    for L, res in rows:
        for j, (m, label, nd) in enumerate(metrics):
            cells = [f"{L // 1024}K" if j == 0 else "", label]
            for s in systems:
                p = res[s]
                cells.append(_fmt(getattr(p, m), nd) if p.feasible else (f"({p.limit})" if j == 0 else ""))
            for x, y in ratios:
                px, py = res[x], res[y]
                cells.append(f"{getattr(px, m) / getattr(py, m):.2f}x" if px.feasible and py.feasible else "-")
            t.add_row(*cells, end_section=j == len(metrics) - 1)
    con.print(t)
    if a.plot:
        con.print(f"plot written to {a.plot}")


def cmd_validate(a):
    from .measured import compare_runs, load_runs, mape_table
    runs = load_runs(a.paths, system=a.system, round_=a.round)
    comps = compare_runs(a.scenario, runs)
    table = mape_table(comps)
    if a.json:
        _print_json({"runs": [{"file": c.run.file, "system": c.run.system, "context": c.run.context,
                               "concurrency": c.run.concurrency, "output": c.run.output,
                               "measured": c.run.metrics, "predicted": c.predicted, "feasible": c.feasible,
                               "limit": c.limit, "measured_failed": c.run.failed,
                               "error_pct": {m: (None if (e := c.error(m)) is None else 100 * e)
                                             for m in c.run.metrics}} for c in comps],
                     "mape_pct": table})
        return
    con = Console()
    t = Table(title=f"predicted vs measured on {a.scenario} ({len(runs)} runs)")
    for c in ("run", "TTFT ms meas/pred", "TBT ms meas/pred", "tok/s meas/pred", "feasible"):
        t.add_column(c, justify="right" if c != "run" else "left")
    for c in sorted(comps, key=lambda c: (c.run.system, c.run.context, c.run.concurrency)):
        r = c.run
        cell = lambda m: (f"{_fmt(r.metrics.get(m), 1)} / {_fmt(c.predicted.get(m), 1)} "  # noqa: E731
                          f"({100 * c.error(m):+.1f}%)" if c.error(m) is not None else "-")
        t.add_row(r.key(), cell("ttft_mean_ms"), cell("tbt_mean_ms"), cell("output_throughput_tok_s"),
                  ("ok" if c.feasible == (not r.failed) else "WRONG") + f" ({'yes' if c.feasible else c.limit})")
    con.print(t)
    m = Table(title="MAPE % per system")
    cols = ["ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s", "e2e_mean_ms", "feasibility_right"]
    m.add_column("system")
    for c in cols:
        m.add_column(c, justify="right")
    for s, row in table.items():
        m.add_row(s, *[_fmt(row.get(c), 1) for c in cols])
    con.print(m)


def cmd_calibrate(a):
    from .calibrate import (MICROBENCH_PARAMS, PREFILL_PARAMS, SERVING_METRICS, SERVING_PARAMS, fit_microbench,
                            fit_serving, write_params)
    from .measured import latest_per_backend, load_microbench, load_runs
    from .topology import resolve_scenario_path
    if a.microbench:
        pts = latest_per_backend(load_microbench(a.paths or None))
        fit = fit_microbench(a.scenario, pts, a.params or MICROBENCH_PARAMS)
        what = "sac-testbed microbench (newest file per backend)"
    else:
        runs = load_runs(a.paths or None, round_=a.round)
        default = SERVING_PARAMS if a.round == 2 else PREFILL_PARAMS
        fit = fit_serving(a.scenario, runs, a.params or default,
                          SERVING_METRICS if a.round == 2 else ("ttft_mean_ms",))
        what = f"{len(runs)} serving runs ({', '.join(sorted({r.file.split('_ctx')[0] for r in runs})[:3])}...)"
    out = a.out or resolve_scenario_path(a.scenario)
    if a.out:
        import shutil
        shutil.copyfile(resolve_scenario_path(a.scenario), out)
    if not a.dry_run:
        write_params(out, fit, a.source or what)
    if a.json:
        _print_json({"params": fit.params, "display": fit.display, "residual_rms": fit.residual_rms,
                     "points": fit.n_points, "written_to": None if a.dry_run else str(out)})
        return
    con = Console()
    t = Table(title=f"fitted to {fit.what} (rms residual {fit.residual_rms:.3f})")
    t.add_column("parameter")
    t.add_column("value", justify="right")
    for k, v in fit.display.items():
        t.add_row(k, v)
    con.print(t)
    con.print("dry run: nothing written" if a.dry_run else f"written to {out}")


def cmd_trace_stats(a):
    from .traces import load_trace, summarize
    d = summarize(load_trace(a.trace, limit=a.limit))
    if a.json:
        _print_json(d)
        return
    print(f"{d['name']}: {d['requests']} requests over {d['duration_s']:.0f} s ({d['rate_req_s']:.2f} req/s)")
    print(f"input tokens: mean {d['input_mean']:.0f}, p50/p90/p99 {d['input']['p50']:.0f} / {d['input']['p90']:.0f} / "
          f"{d['input']['p99']:.0f}; {100 * d['share_input_above_topk']:.1f}% longer than top-k 2048")
    print(f"output tokens: mean {d['output_mean']:.0f}, p50/p90/p99 {d['output']['p50']:.0f} / "
          f"{d['output']['p90']:.0f} / {d['output']['p99']:.0f}")
    if d["cached_token_ratio"] is not None:
        print(f"prompt tokens in an earlier request's prefix (unbounded cache): {100 * d['cached_token_ratio']:.1f}%")


def cmd_scenarios(a):
    from .topology import builtin_scenarios, load_topology
    for n in builtin_scenarios():
        print(f"{n}: {load_topology(n).description}")


def cmd_models(a):
    from .models import catalog, get_model
    t = Table(title="model catalog")
    for c in ("name", "attention", "layers", "params (B)", "active (B)", "KV B/token/layer fp8|bf16", "top-k"):
        t.add_column(c)
    for n in catalog():
        m = get_model(n)
        t.add_row(n, m.kind + (" + DSA" if m.sparse else ""), str(m.layers), f"{m.params_total() / 1e9:.0f}",
                  f"{m.params_active() / 1e9:.1f}", f"{m.kv_bytes('fp8'):g} | {m.kv_bytes('bf16'):g}",
                  str(m.topk or "-"))
    Console().print(t)


# ---- parser ---------------------------------------------------------------------------------------
def _add_scenario(p):
    p.add_argument("--scenario", default="sac-testbed", help="built-in name or YAML path (default sac-testbed)")


def _add_workload(p, context_default=None):
    if context_default is None:
        p.add_argument("--context", type=tokens, required=True, help="prompt tokens (e.g. 32768 or 32K)")
    p.add_argument("--output", type=tokens, default=1024, help="output tokens per request (default 1024)")
    p.add_argument("--concurrency", type=pos_int, default=64, help="requests in flight (default 64)")
    p.add_argument("--requests", type=pos_int, default=None, help="requests in total (default 8 x concurrency)")
    p.add_argument("--rate", type=pos_float, default=None, help="open loop: Poisson arrivals per second")
    p.add_argument("--cxl-devices", type=pos_int, default=None)
    p.add_argument("--device-buffer", type=tokens, default=None, help="GPU buffer slots per request and layer")
    p.add_argument("--rdma-nics", type=pos_int, default=None)
    p.add_argument("--cold", action="store_true", help="uncached prompts: every request is prefilled")
    p.add_argument("--method", choices=("engine", "analytic"), default="engine",
                   help="engine: event-driven (benchmark waves, percentiles); analytic: steady-state fixed point")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sacmodel", description="Predict LLM serving with the KV cache in "
                                 "CXL / DRAM / RDMA memory pools (SAC and its baselines).")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("microbench", help="single-layer top-k gather latency (fetch micro-benchmark model)")
    _add_scenario(p)
    p.add_argument("--backend", choices=("dram", "cxl", "rdma"), required=True)
    p.add_argument("--topk", type=pos_int, required=True)
    p.add_argument("--entry-bytes", type=byte_size, default=656.0, help="bytes per entry (656 or '1152 B')")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_microbench)

    p = sub.add_parser("predict", help="TTFT, TBT, throughput of one system")
    _add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True)
    _add_workload(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("compare", help="all systems side by side over context lengths (the main job)")
    _add_scenario(p)
    p.add_argument("--contexts", type=token_list, default=token_list(DEFAULT_CONTEXTS),
                   help=f"comma-separated contexts (default {DEFAULT_CONTEXTS})")
    p.add_argument("--systems", type=system_list, default=list(MAIN_SYSTEMS))
    _add_workload(p, context_default=True)
    p.add_argument("--plot", default=None, help="write metric-vs-context curves to this image file")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("validate", help="predicted vs measured for run files (testbed or bench_serving format)")
    _add_scenario(p)
    p.add_argument("paths", nargs="+", help="run JSON files or folders")
    p.add_argument("--system", choices=SYSTEMS, default=None, help="system, when file names do not say it")
    p.add_argument("--round", type=int, choices=(1, 2), default=2,
                   help="testbed files: 2 = measured round (cached prompt), 1 = cache-filling round (cold prefill)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("calibrate", help="fit the free parameters to measured runs and write them to a scenario")
    _add_scenario(p)
    p.add_argument("paths", nargs="*", help="run files/folders (default: shared calibration runs)")
    p.add_argument("--microbench", action="store_true", help="fit fetch-path parameters to micro-benchmarks")
    p.add_argument("--round", type=int, choices=(1, 2), default=2,
                   help="2: fit the serving constants to the measured rounds; 1: fit prefill_eff to cold rounds")
    p.add_argument("--params", type=lambda s: [x for x in s.split(",") if x], default=None)
    p.add_argument("--out", default=None, help="write a new scenario file instead of updating the given one")
    p.add_argument("--source", default=None, help="provenance text for the fitted values")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("trace-stats", help="summary of a request trace (Mooncake JSONL or Azure CSV)")
    p.add_argument("trace")
    p.add_argument("--limit", type=pos_int, default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_trace_stats)

    p = sub.add_parser("scenarios", help="list built-in scenarios")
    p.set_defaults(func=cmd_scenarios)
    p = sub.add_parser("models", help="list the model catalog")
    p.set_defaults(func=cmd_models)
    from . import solvers_cli
    solvers_cli.register(sub, _add_scenario, _add_workload)
    from .cluster import cli as cluster_cli      # replay, hitrate, and the cluster options of plan/sweep
    cluster_cli.register(sub, _add_scenario)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        a.func(a)
    except USER_ERRORS as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"sacmodel: error: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
