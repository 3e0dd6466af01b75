"""CLI commands of the solvers: expr, breakeven, plan, sensitivity, sweep (registered by :mod:`sacmodel.cli`)."""
from __future__ import annotations

import csv
import json
import sys

import numpy as np
from rich.console import Console
from rich.table import Table

from .cli import tokens
from .systems import SYSTEMS
from .units import UnitError, parse_quantity, parse_tokens


def parse_value(s: str, vary: str) -> float:
    """A number for ``vary``: tokens ('32K'), a plain number, or a quantity with a unit ('26 GB/s')."""
    s = str(s).strip()
    if vary in ("context", "output", "topk", "device_buffer"):
        return float(parse_tokens(s))
    try:
        return float(s)
    except ValueError:
        pass
    name = vary.split(".")[-1]
    dim = "bandwidth" if ("bandwidth" in name or name.endswith("bw") or name == "rate") else \
        "time" if ("latency" in name or name.startswith("t_") or "cost" in name or "poll" in name) else "bytes"
    return parse_quantity(s, dim, field=vary)


def _kv_list(items, what):
    out = {}
    for it in items or []:
        if "=" not in it:
            raise UnitError(f"{what} {it!r}: write NAME=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _workload(a):
    kw = dict(context=a.context, output=a.output, concurrency=a.concurrency, requests=a.requests, rate=a.rate,
              cxl_devices=a.cxl_devices, device_buffer=a.device_buffer, rdma_nics=a.rdma_nics)
    if getattr(a, "cold", False):
        kw["prefix_cached"] = False
    return {k: v for k, v in kw.items() if v is not None}


def _dump(obj):
    print(json.dumps(obj, indent=2, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def cmd_expr(a):
    import sympy as sp
    from .solvers import symbol_docs, symbolic
    kw = {}
    if a.bind:
        kw = dict(context=a.context, output=a.output)
    e = symbolic(a.system, a.metric, a.scenario if a.bind else None, **kw)
    if a.json:
        _dump({"plain": str(e), "latex": sp.latex(e), "symbols": symbol_docs(e) if not e.is_Number else [],
               "value": float(e) if e.is_Number else None})
        return
    unit = "bytes" if a.metric.startswith("bytes") else "s"
    print(f"{a.metric} of {a.system} ({unit}):\n")
    print(sp.pretty(e, use_unicode=False, wrap_line=True) if len(str(e)) < 400 else str(e))
    print("\nLaTeX:\n" + sp.latex(e))
    if not e.is_Number:
        t = Table(title="symbols")
        for c in ("name", "unit", "meaning"):
            t.add_column(c)
        for row in symbol_docs(e):
            t.add_row(*row)
        Console().print(t)


def cmd_breakeven(a):
    from .solvers import breakeven
    lo, hi = parse_value(a.lo, a.vary), parse_value(a.hi, a.vary)
    be = breakeven(a.scenario, a.a, a.b, metric=a.metric, vary=a.vary, lo=lo, hi=hi, ratio=a.ratio,
                   points=a.points, **_workload(a))
    if a.plot:
        from .plots import plot_breakeven
        plot_breakeven(be, a.plot)
    if a.json:
        _dump(be.to_dict())
        return
    print(be.message)
    if be.found:
        print(f"method: {be.method}; residual {be.residual if be.residual is not None else '-'}; "
              f"{be.winner_below} wins below, {be.winner_above} above")
    if a.plot:
        print(f"plot written to {a.plot}")


def cmd_plan(a):
    from .solvers import max_load, plan
    slo = {k: float(v) for k, v in _kv_list(a.slo, "--slo").items()}
    wl = _workload(a)
    if a.max_load:
        wl.pop(a.max_load, None)
        r = max_load(a.scenario, a.system, workload=wl, slo=slo, vary=a.max_load, max_value=a.max or 1024,
                     min_value=a.min or 1)
    else:
        for k in ("cxl_devices", "rdma_nics", "device_buffer"):
            if k == a.vary:
                wl.pop(k, None)
        r = plan(a.scenario, a.system, workload=wl, slo=slo, vary=a.vary, max_value=a.max or 16,
                 min_value=a.min or 1, price_table=a.prices)
    if a.json:
        _dump(r.to_dict())
        return
    con = Console()
    con.print(r.message)
    t = Table(title="tried")
    cols = ["value", "meets", "feasible"] + list(slo)
    for c in cols:
        t.add_column(c, justify="right")
    for row in r.tried:
        t.add_row(*[f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in cols])
    if r.tried:
        con.print(t)
    if r.cost_usd_per_hour:
        con.print("cost (USD/hour): " + ", ".join(f"{k} {v:.2f}" for k, v in r.cost_usd_per_hour.items()))


def cmd_sensitivity(a):
    from .solvers import sensitivity, sensitivity_loaded, symbol_kind
    res = {k: v for k, v in dict(cxl_devices=a.cxl_devices, rdma_nics=a.rdma_nics,
                                 device_buffer=a.device_buffer).items() if v}
    if a.concurrency:
        metric = {"ttft": "ttft_mean_ms", "tbt": "tbt_mean_ms", "e2e": "e2e_mean_ms"}.get(a.metric, a.metric)
        rows = sensitivity_loaded(a.scenario, a.system, metric, context=a.context, output=a.output,
                                  concurrency=a.concurrency, **res)
        if a.hardware:
            rows = [r for r in rows if r[0].startswith(("node:", "link:"))]
        a.metric = f"{metric} at concurrency {a.concurrency}"
        symbol_kind_ = lambda n: "hardware" if n.startswith(("node:", "link:")) else "software"  # noqa: E731
    else:
        rows = sensitivity(a.scenario, a.system, a.metric, context=a.context, output=a.output, **res)
        symbol_kind_ = symbol_kind
    symbol_kind = symbol_kind_  # noqa: F811
    if a.hardware and not a.concurrency:
        rows = [r for r in rows if symbol_kind(r[0]) == "hardware"]
    if a.plot:
        from .plots import plot_tornado
        plot_tornado(rows, a.plot, title=f"{a.metric} of {a.system}, context {a.context}")
    if a.json:
        _dump([{"symbol": n, "kind": symbol_kind(n), "elasticity": e, "value": v, "meaning": m}
               for n, e, v, m in rows])
        return
    t = Table(title=f"elasticity of {'' if a.concurrency else 'unloaded '}{a.metric} ({a.system}, context {a.context}): "
                    "d ln(metric) / d ln(parameter)")
    for c in ("parameter", "kind", "elasticity", "value", "meaning"):
        t.add_column(c, justify="right" if c in ("elasticity", "value") else "left")
    for n, e, v, m in rows[:a.top]:
        t.add_row(n, symbol_kind(n), f"{e:+.3f}", f"{v:.4g}", m)
    Console().print(t)


def _grid_axis(spec: str):
    name, eq, rng = spec.partition("=")
    parts = rng.split(":")
    if not name or not eq or not rng or len(parts) not in (1, 3):
        raise UnitError(f"--grid {spec!r}: write NAME=LO:HI:N or NAME=V1,V2,...")
    if len(parts) == 3:
        lo, hi, n = parse_value(parts[0], name), parse_value(parts[1], name), int(parts[2])
        vals = np.geomspace(lo, hi, n) if lo > 0 and hi / lo > 20 else np.linspace(lo, hi, n)
    else:
        vals = np.array([parse_value(x, name) for x in parts[0].split(",")])
    return name.strip(), vals


def cmd_sweep(a):
    from .solvers import sweep, sweep_predict
    grid = dict(_grid_axis(g) for g in a.grid)
    out = open(a.csv, "w", newline="") if a.csv else sys.stdout
    try:
        if a.full:
            fixed = {k: v for k, v in _workload(a).items() if k not in grid}
            grid = {k: np.round(v).astype(int) if k != "rate" else v for k, v in grid.items()}
            rows = sweep_predict(a.scenario, a.system, grid, fixed=fixed, scheduler=a.scheduler,
                                 workers=a.workers, progress=out is not sys.stdout)
            keys = ["system", "context", "output", "concurrency", "requests", "feasible", "limit",
                    "ttft_mean_ms", "ttft_p99_ms", "tbt_mean_ms", "e2e_mean_ms", "output_throughput_tok_s"]
            w = csv.writer(out)
            w.writerow(keys + ["cxl_devices", "rdma_nics", "device_buffer"])
            for r in rows:
                w.writerow([r[k] for k in keys] + [r["config"][k] for k in ("cxl_devices", "rdma_nics",
                                                                             "device_buffer")])
        else:
            cols = sweep(a.scenario, a.system, grid, a.metric, context=a.context, output=a.output)
            w = csv.writer(out)
            w.writerow(list(cols))
            for row in zip(*cols.values()):
                w.writerow([f"{x:.9g}" for x in row])
    finally:
        if out is not sys.stdout:
            out.close()
    if a.plot and not a.full and len(grid) >= 1:
        from .plots import plt
        name = next(iter(grid))
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(cols[name], cols[a.metric], ".", ms=2)
        ax.set_xlabel(name)
        ax.set_ylabel(a.metric)
        fig.savefig(a.plot, dpi=110)
        plt.close(fig)
    if a.csv:
        print(f"wrote {a.csv}")


def _optional_workload(p):
    """Workload and resource options that default to the scenario's values."""
    p.add_argument("--context", type=tokens, default=None)
    p.add_argument("--output", type=tokens, default=1024)
    for name, typ in (("--concurrency", int), ("--requests", int), ("--rate", float)):
        p.add_argument(name, type=typ, default=None)
    _resource_options(p)


def _resource_options(p):
    """CXL devices, RDMA NICs and GPU buffer slots, defaulting to the scenario's values."""
    for name in ("--cxl-devices", "--rdma-nics", "--device-buffer"):
        p.add_argument(name, type=int, default=None)


def cmd_winner_map(a):
    from .cli import system_list
    from .plots import plot_winner_map
    from .solvers import winner_map
    (xn, xv), (yn, yv) = _grid_axis(a.x), _grid_axis(a.y)
    fixed = {k: v for k, v in dict(context=a.context, output=a.output).items() if v is not None and
             k not in (xn, yn)}
    systems = system_list(a.systems)
    wm = winner_map(a.scenario, systems, a.metric, (xn, xv), (yn, yv), **fixed)
    plot_winner_map(wm["x"], wm["y"], wm["winner"], systems, a.plot, xn, yn,
                    title=f"best unloaded {a.metric} on {a.scenario}")
    counts = {s: int((wm["winner"] == i).sum()) for i, s in enumerate(systems)}
    if a.json:
        _dump({"x": wm["x"], "y": wm["y"], "winner": [[systems[i] for i in row] for row in wm["winner"]],
               "counts": counts})
        return
    print(f"winner counts over {wm['winner'].size} points: " + ", ".join(f"{s} {n}" for s, n in counts.items()))
    print(f"plot written to {a.plot}")


def register(sub, add_scenario, add_workload):
    p = sub.add_parser("winner-map", help="break-even map: which system wins over two parameters (heatmap)")
    add_scenario(p)
    p.add_argument("--systems", default="dram,cxl,rdma")
    p.add_argument("--metric", default="tbt", choices=("ttft", "tbt", "e2e"))
    p.add_argument("--x", required=True, help="NAME=LO:HI:N, e.g. context=8K:256K:48")
    p.add_argument("--y", required=True, help="NAME=LO:HI:N, e.g. output=64:16K:48")
    p.add_argument("--context", type=tokens, default=None)
    p.add_argument("--output", type=tokens, default=1024)
    p.add_argument("--plot", default="winner_map.png")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_winner_map)

    p = sub.add_parser("expr", help="the closed form of an unloaded metric (plain and LaTeX)")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True)
    p.add_argument("--metric", choices=("ttft", "tbt", "e2e", "bytes_per_step", "ttft_cold"), default="tbt")
    p.add_argument("--bind", action="store_true", help="bind the scenario's numbers (needs --context)")
    p.add_argument("--context", default=32768, type=tokens)
    p.add_argument("--output", default=1024, type=tokens)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_expr)

    p = sub.add_parser("breakeven", help="where two systems give the same metric as one quantity varies")
    add_scenario(p)
    p.add_argument("--a", required=True, choices=SYSTEMS)
    p.add_argument("--b", required=True, choices=SYSTEMS)
    p.add_argument("--metric", required=True, help="ttft|tbt|e2e|bytes_per_step (unloaded) or a Prediction "
                                                   "field such as output_throughput_tok_s (loaded)")
    p.add_argument("--vary", required=True, help="context, output, topk, concurrency, cxl_devices, rdma_nics, "
                                                 "a scenario parameter or node:KIND.FIELD / link:gpu.latency")
    p.add_argument("--lo", required=True)
    p.add_argument("--hi", required=True)
    p.add_argument("--ratio", type=float, default=1.0, help="find metric(a) = ratio x metric(b)")
    p.add_argument("--points", type=int, default=48)
    _optional_workload(p)
    p.add_argument("--plot", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_breakeven)

    p = sub.add_parser("plan", help="smallest resource meeting an SLO, or the largest load within it")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True)
    p.add_argument("--slo", action="append", required=True, help="METRIC=VALUE, e.g. tbt_mean_ms=80 (repeat)")
    p.add_argument("--vary", default="cxl_devices", help="cxl_devices, rdma_nics, dp, device_buffer")
    p.add_argument("--max-load", choices=("concurrency", "context", "output"), default=None,
                   help="instead: the largest concurrency/context the configuration sustains")
    p.add_argument("--min", type=int, default=None)
    p.add_argument("--max", type=int, default=None)
    p.add_argument("--prices", default=None, help="price table YAML (default: the built-in one)")
    add_workload(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("sensitivity", help="elasticities of an unloaded metric to every parameter")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True)
    p.add_argument("--metric", default="tbt", help="ttft|tbt|e2e|bytes_per_step (unloaded, symbolic) or, with "
                   "--concurrency, a Prediction field such as output_throughput_tok_s")
    p.add_argument("--concurrency", type=int, default=None, help="loaded sensitivity through predict()")
    p.add_argument("--context", type=tokens, required=True)
    p.add_argument("--output", type=tokens, default=1024)
    _resource_options(p)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--hardware", action="store_true", help="only hardware numbers (bandwidths, latencies, FLOP/s)")
    p.add_argument("--plot", default=None, help="tornado plot file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sensitivity)

    p = sub.add_parser("sweep", help="evaluate over a grid; CSV out")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True)
    p.add_argument("--grid", action="append", required=True, help="NAME=LO:HI:N or NAME=V1,V2 (repeat)")
    p.add_argument("--metric", default="tbt", help="unloaded metric for the vectorised sweep")
    p.add_argument("--full", action="store_true", help="full predict() at every point (all cores or Dask)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address tcp://HOST:PORT (with --full)")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--csv", default=None, help="write columns here (default: standard output)")
    p.add_argument("--plot", default=None)
    _optional_workload(p)
    p.set_defaults(func=cmd_sweep)
