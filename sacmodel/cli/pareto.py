"""CLI of the frontier view and the launch commands: ``pareto`` (throughput per GPU vs interactivity across
systems, concurrency, CXL devices and attention parallelism) and ``--emit sglang`` (here for ``pareto``, and
:func:`emit_plan` for ``plan``). Registered by :func:`sacmodel.cli.solvers.register`.
"""
from __future__ import annotations

import sys

from ..util.names import LIMITS, SYSTEMS
from .common import (_scenario, default_start, add_json, add_output, add_plot, add_prompts, add_scenario, add_server_limits,
                     console, print_json, prompts_of, server_limits, table, workload_text, write_csv)
from .types import Bad, arg, count, system_list, tokens

CSV_COLUMNS = ("system", "concurrency", "dp", "tp", "cxl_devices", "rdma_nics", "tok_s_per_user", "tok_s_per_gpu",
               "ttft_mean_ms", "ttft_p99_ms", "tbt_mean_ms", "e2e_mean_ms", "output_throughput_tok_s", "feasible",
               "success_fraction", "queued", "on_frontier", "on_system_frontier", "limit")


def count_list(s: str, what: str | None = None, hi: int = LIMITS["concurrency"]) -> list[int]:
    """'4,8,16': whole numbers from 1 to ``hi``, at most 64 of them."""
    items = [x for x in str(s).split(",") if x.strip()]
    if not items:
        raise Bad("give at least one whole number, e.g. 8,32,128")
    if len(items) > 64:
        raise Bad(f"at most 64 values, got {len(items)}")
    return sorted({count(x, what, hi=hi) for x in items})


def add_emit(p, what: str = "the answer's configuration") -> None:
    p.add_argument("--emit", choices=("sglang",), default=None,
                   help=f"also print the SGLang launch command (flags and HiSparse/CXL/RDMA settings) of {what}, "
                        "from the settings the model used")


def emit_plan(a, r, workload: dict) -> str:
    """``plan --emit sglang``: the launch command of the answer ('' without --emit or without an answer)."""
    if not getattr(a, "emit", None):
        return ""
    if not r.found:
        print("sacmodel: no configuration met the SLO: no launch command to print", file=sys.stderr)
        return ""
    from sacmodel.planning.emit import plan_command
    return plan_command(_scenario(a), r, workload)


def _commands(res) -> list[dict]:
    """The launch command of every point on the frontier across systems (what-if systems have none)."""
    from sacmodel.planning.common import SolverError
    from sacmodel.planning.emit import point_command
    out = []
    for p in res.frontier:
        head = (f"# {p.label}: {p.tok_s_per_gpu:,.1f} tok/s/GPU at {p.tok_s_per_user:,.1f} tok/s/user; client: "
                f"at most {p.concurrency} requests in flight (bench_serving --max-concurrency {p.concurrency})")
        try:
            text = point_command(res, p)
        except SolverError as exc:
            text = f"# no launch command: {exc}"
        out.append({"point": res.points.index(p), "label": p.label, "command": head + "\n" + text})
    return out


def _rows(res, every: bool):
    pts = res.points if every else [p for s in dict.fromkeys(q.system for q in res.points)
                                    for p in res.system_frontier(s)]
    return pts


def _table(res, pts, every: bool, prompts: str) -> None:
    cols = ("system", "conc", "dp", "cxl", "tok/s/user", "tok/s/GPU", "TTFT ms", "TBT ms", "across")
    t = table(None, cols, right=cols[1:8])
    n = lambda v, nd=1: "-" if v is None or v != v else f"{v:,.{nd}f}"  # noqa: E731
    for p in pts:
        t.add_row(p.system, str(p.concurrency), str(p.dp), "-" if p.cxl_devices is None else str(p.cxl_devices),
                  n(p.tok_s_per_user), n(p.tok_s_per_gpu), n(p.ttft_mean_ms, 0), n(p.tbt_mean_ms),
                  ("queues" if p.queued else "yes" if p.on_frontier else "") if p.feasible else "infeasible")
    con = console()
    bad = sum(not p.feasible for p in res.points)
    gpus = "/".join(str(g) for g in sorted({p.gpus for p in res.points}))
    tok = lambda v: f"{v // 1024}K" if v % 1024 == 0 else f"{v:,}"  # noqa: E731
    queued = sum(p.queued for p in res.points)
    wl = res.points[0].workload if res.points else {}
    who = workload_text(prompts, wl.get("prefix_cached"), wl.get("start") or default_start(prompts))
    con.print(f"{res.scenario}, context {tok(res.context)}, output {_out(res.output, tok)} ({who}): "
              f"{len(res.points)} configurations, {bad} infeasible" + (f", {queued} queue" if queued else ""),
              highlight=False)
    con.print(f"x: tok/s/user = 1000 / mean TBT (1 / TPOT); y: output tok/s per GPU ({gpus} GPUs)", highlight=False)
    con.print(t)
    con.print(("rows: every configuration" if every else "rows: each system's frontier (--all: every configuration)")
              + f"\nacross: on the frontier across systems ({len(res.frontier)} "
              + ("point)" if len(res.frontier) == 1 else "points)")
              + ("; queues: its memory holds fewer requests than the client keeps in flight (they wait; off the "
                 "frontier)" if queued else ""), highlight=False)
    from sacmodel.planning.search import tally_line
    con.print(tally_line(res.predictions), highlight=False)


def _csv_value(v):
    """Floats to 4 decimals (ms, tokens/s); everything else as it is."""
    return round(v, 4) if isinstance(v, float) and v == v else v


def _out(output, fmt) -> str:
    return "{}:{}".format(*map(fmt, output)) if isinstance(output, tuple) else fmt(output)


def cmd_pareto(a):
    from sacmodel.planning.pareto import pareto
    if a.emit and a.csv == "-":
        raise ValueError("--emit with --csv -: both write to standard output; write the CSV to a file")
    kw = {"requests": a.requests, **server_limits(a)} if a.requests else dict(server_limits(a))
    if a.draws:
        kw["draws"] = a.draws
    if a.prompts:
        kw["prompts"] = a.prompts
    if a.start:
        kw["start"] = a.start
    res = pareto(_scenario(a), a.systems, context=a.context, output=a.output, concurrencies=a.concurrencies,
                 cxl_devices=a.cxl_device_list, dp=a.dp_list, device_buffer=a.device_buffer, method=a.method, **kw)
    pts = _rows(res, a.all)
    if a.plot:
        from ..plots.pareto import plot_pareto
        plot_pareto(res.points, a.plot, title=f"{res.scenario}: context {res.context:,}, output {_out(res.output, '{:,}'.format)}")
    if a.csv:
        write_csv(a.csv, list(CSV_COLUMNS), [[_csv_value(getattr(p, c)) for c in CSV_COLUMNS] for p in pts])
    cmds = _commands(res) if a.emit else []
    if a.json:
        print_json({**res.to_dict(), **({"sglang": cmds} if a.emit else {})})
        return
    if a.csv != "-":
        _table(res, pts, a.all, prompts_of(a))
    for c in cmds:
        print("\n" + c["command"])
    if a.plot:
        print(f"plot written to {a.plot}", file=sys.stderr)


def register(sub) -> None:
    from .common import _parser
    p = _parser(sub, "pareto", "throughput per GPU vs tokens/s per user: the frontier across systems and settings",
                ["sacmodel pareto --system cxl,dram,rdma --context 64K --csv -",
                 "sacmodel pareto --system cxl --context 128K --concurrency 8,32,128 --cxl-devices 1,2,4 "
                 "--dp 4,8 --plot pareto.png",
                 "sacmodel pareto --system cxl,dram --context 32K --concurrency 16,64 --dp 8 --emit sglang"],
                "Predict every configuration of --system x --concurrency x --cxl-devices x --dp and mark the "
                "frontier of output throughput per GPU against interactivity (tokens/s per user = 1 / TPOT), "
                "the chart of serving benchmarks such as InferenceMAX. A configuration is on the frontier when "
                "every request completes without waiting in the server's queue (its memory holds every request "
                "in flight) and no other configuration is at least as good on both axes and better on one. The table lists each system's frontier and marks the frontier across systems.")
    add_scenario(p)
    p.add_argument("--system", "--systems", dest="systems", type=arg(system_list), default="gpu,dram,cxl,rdma",
                   metavar="LIST", help=f"comma-separated systems from {', '.join(SYSTEMS)} (default gpu,dram,cxl,rdma)")
    p.add_argument("--context", type=arg(tokens), required=True, metavar="TOKENS",
                   help="prompt tokens per request, e.g. 64K (K = 1024)")
    add_output(p)
    add_server_limits(p)
    p.add_argument("--concurrency", dest="concurrencies", type=arg(count_list), default=None, metavar="LIST",
                   help="client concurrencies (requests in flight), e.g. 8,32,128 (default 4,8,16,32,64,128,256)")
    p.add_argument("--cxl-devices", dest="cxl_device_list", type=arg(count_list, hi=1024), default=None,
                   metavar="LIST", help="CXL device counts for cxl and cxl-prefetch, e.g. 1,2,4 (default 1 to the "
                                        "scenario's pool size; more grow the pool as plan does)")
    p.add_argument("--dp", dest="dp_list", type=arg(count_list, hi=256), default=None, metavar="LIST",
                   help="data-parallel attention groups on the server's GPUs, each dividing tp, e.g. 1,8 "
                        "(default: every divisor of tp for MLA models, else the scenario's dp)")
    p.add_argument("--device-buffer", type=arg(tokens), default=None, metavar="SLOTS",
                   help="GPU buffer slots per request and layer for pool systems (default: the scenario's)")
    p.add_argument("--requests", type=arg(count, hi=LIMITS["requests"]), default=None, metavar="N",
                   help="requests per prediction (default 8 x concurrency, as the testbed benchmark)")
    add_prompts(p)
    p.add_argument("--draws", type=arg(count, hi=64), default=None, metavar="N",
                   help="draws of the requests' randomness each prediction averages (default 4)")
    p.add_argument("--method", choices=("engine", "analytic"), default="engine",
                   help="engine (default): the event-driven serving engine; analytic: its steady state, faster")
    p.add_argument("--all", action="store_true",
                   help="list every configuration, infeasible ones too (default: each system's frontier)")
    add_emit(p, "each point on the frontier across systems")
    add_plot(p, "draw the chart (every configuration, each system's frontier, the frontier across systems)")
    add_json(p)
    p.set_defaults(func=cmd_pareto)
