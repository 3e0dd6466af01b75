"""Commands of the serving model: ``predict`` (one system), ``compare`` (all systems over contexts) and
``microbench`` (the single-layer fetch model)."""
from __future__ import annotations

import sys

from ..util.names import MAIN_SYSTEMS, SYSTEMS
from .common import (DEFAULT_CONTEXTS, LIMITS_TEXT, _fmt, _model_name, _parser, _scenario, _workload, add_json,
                     add_model_options, add_plot, add_scenario, add_systems, add_workload, cache_flag, console,
                     print_json,
                     closed_start, prompts_of, table, workload_text, write_csv)
from .trust import print_band, print_binding, print_compare_bands
from .types import LIMITS, arg, byte_size, count, setting, token_list


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


USAGE_LABELS = {"hbm": "HBM per GPU: weights + KV pool", "max_total_tokens": "token slots per rank",
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
    kind = workload_text(p.config.get("prompts") or prompts_of(a), p.config.get("prefix_cached", cache_flag(a)),
                         p.config.get("start"))
    rate = f", Poisson {p.config['rate']:g} req/s" if p.config.get("rate") else ""
    tok = lambda n: f"{n // 1024}K" if n and n % 1024 == 0 else f"{n:,}"  # noqa: E731
    out = p.output if isinstance(p.output, int) else None
    out_text = tok(out) if out is not None else "{}:{} uniform".format(*map(tok, a.output))
    return (f"{p.system} on {p.scenario} ({_model_name(a)}): context {tok(p.context)}, output {out_text}, "
            f"concurrency {p.concurrency}, {p.requests:,} requests{rate}, {kind}" + _lockstep_note(p))


def _lockstep_note(p) -> str:
    """Fixed outputs in a closed loop of distinct uncached prompts: every wave ends on one decode step, so the
    next arrives as one burst of prefills (SGLang prefills before it decodes), not only the first wave."""
    if not isinstance(p.output, int) or p.config.get("rate") or p.requests <= p.concurrency or \
            p.config.get("prompts") != "distinct" or p.config.get("prefix_cached") or \
            p.config.get("start") != "together":
        return ""
    return ("; fixed outputs: each wave of requests ends together and the next is prefilled as one burst "
            "(bench_serving --random-range-ratio 1); a client drawing lengths, --output MIN:MAX, spreads them, as --start staggered does")


def cmd_predict(a):
    from ..serving.predict import predict
    scenario, wl = _with_settings(_scenario(a), a.set or [], _workload(a))
    from ..util.progress import status
    with status(f"predict {a.system}"):
        p = predict(scenario, a.system, **wl)
    load = _load_report(scenario, a, p, wl) if p.feasible and a.rate else None
    if a.json:
        print_json({**p.to_dict(), **({"load": load} if load else {})})
        return
    con = console()
    if not p.feasible:
        con.print(f"[bold red]infeasible[/]: {_describe(p, a)}: binding limit [bold]{p.limit}[/]")
        _usage_table(con, p)
        return
    con.print(_describe(p, a), highlight=False)
    if load:                                  # before the tables: an overloaded run's latencies mean little
        _print_load(con, load)
    spread = p.spread if p.spread.get("draws", 1) > 1 else {}
    cols = ("metric", "value", "unit") + (("range",) if spread else ())
    t = table("predicted metrics" + (f" (mean of {spread['draws']} draws; range over them)" if spread else ""),
              cols, right=("value", "range"))
    for k, label, unit in METRIC_ROWS:
        nd = 2 if unit != "s" else 1
        row = [label, _fmt(getattr(p, k), nd), unit]
        if spread:
            lo, hi = spread.get(k, (None, None))
            row.append(f"{_fmt(lo, nd)}-{_fmt(hi, nd)}" if lo is not None else "")
        t.add_row(*row)
    con.print(t)
    print_band(con, p)
    _usage_table(con, p)
    b = table("where the time goes", ("component", "value", "unit"), right=("value",))
    for k, v in p.breakdown.items():
        label, unit, scale = _unit_of(k)
        b.add_row(label, _fmt(v * scale, 3), unit)
    con.print(b)
    con.print("step_*: one decode step of the busiest rank (the first draw); prefix_*: once per request",
              highlight=False)
    print_binding(con, p)
    if a.method == "analytic":
        con.print("method: analytic steady state, the engine's long-run limit (no first wave or end of run, "
                  "no percentiles; TBT and throughput within 10% of the engine's steady state under steady "
                  "load). The engine (default) gives TTFT and the transients; see docs/model.md.")


def _with_settings(scenario, settings, wl: dict):
    """The scenario and workload with each ``--set NAME=VALUE`` applied as ``plan --vary NAME`` applies it."""
    if not settings:
        return scenario, wl
    from ..planning.closed_forms import _check_vary
    from ..planning.common import _topology, _with_value
    from .types import value_of
    topo = _topology(scenario)
    for name, text in settings:
        _check_vary(topo, name)
        topo, kw = _with_value(topo, name, value_of(text, name, f"--set {name}"))
        wl = {**wl, **kw}
    return topo, wl


def _load_report(scenario, a, p, wl: dict) -> dict:
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
        cap = predict(scenario, a.system, **{**wl, "rate": None}).request_throughput_req_s
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
    # what the engine held at most per rank: below the capacity, or the run stopped (host pool) or queued
    peaks = {"max_total_tokens": p.breakdown.get("peak_device_tokens_per_rank"),
             "host_pool": p.breakdown.get("peak_host_tokens_per_rank")}
    t = table("memory use vs capacity (used: every request in flight at once; engine peak: what the run held)",
              ("limit", "used", "capacity", "use", "engine peak"), right=("used", "capacity", "use", "engine peak"))
    for k, u in usage.items():
        f = (lambda x: f"{x:,.0f} tok") if _usage_unit(k, u) == "tokens" else (lambda x: f"{x / 1e9:,.1f} GB")
        share = f"{u['used'] / u['capacity']:.0%}" if u["capacity"] > 0 else "-"
        peak = peaks.get(k)
        t.add_row(USAGE_LABELS.get(k, k), f(u["used"]), f(u["capacity"]), share, "-" if peak is None else f(peak))
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
    n = a.requests or 8 * a.concurrency
    prompts = prompts_of(a, scenario)
    kind = f"{n:,} requests, " + workload_text(prompts, cache_flag(a), closed_start(a, prompts))
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
    ratios = [(x, y) for x, y in (("cxl", "rdma"), ("cxl", "dram")) if x in systems and y in systems]
    heads = ["context", "metric", *systems, *[f"{x}/{y}" for x, y in ratios]]
    body = []
    for L, res in rows:
        for j, (m, label, nd) in enumerate(COMPARE_METRICS):
            cells = [(f"{L // 1024}K" if L % 1024 == 0 else f"{L:,}") if j == 0 else "", label]
            for s in systems:
                p = res[s]
                cells.append(_fmt(getattr(p, m), nd) if p.feasible else (f"({p.limit})" if j == 0 else ""))
            for x, y in ratios:
                px, py = res[x], res[y]
                cells.append(f"{getattr(px, m) / getattr(py, m):.2f}x" if px.feasible and py.feasible else "-")
            body.append((cells, j == len(COMPARE_METRICS) - 1))
    con = console()
    con.print(title, highlight=False)
    for cols in column_groups(heads, [c for c, _ in body], 2, con.width):
        t = table(None, [heads[i] for i in cols], right=[heads[i] for i in cols if i != 1])
        for cells, end in body:
            t.add_row(*[cells[i] for i in cols], end_section=end)
        con.print(t)
    _explain_limits(con, rows)
    print_compare_bands(con, rows)
    if a.plot:
        print(f"plot written to {a.plot}", file=sys.stderr)


def column_groups(heads: list[str], rows: list[list[str]], keep: int, width: int) -> list[list[int]]:
    """Column indices of the tables a wide table is split into so that each fits ``width`` with every cell on
    one line (a number is never split across lines): the first ``keep`` columns in each, the others in order."""
    need = [max([len(h)] + [len(r[i]) for r in rows]) + 2 for i, h in enumerate(heads)]   # a cell and its gap
    base = sum(need[:keep])
    groups, cur, used = [], [], base
    for i in range(keep, len(heads)):
        if cur and used + need[i] > width:
            groups.append(cur)
            cur, used = [], base
        cur.append(i)
        used += need[i]
    groups.append(cur)
    return [list(range(keep)) + g for g in groups]


# ---- command-line options -----------------------------------------------------------------------
FIXES = {"host_pool": "fewer requests a rank (--max-running-requests, or --concurrency) or a larger HiSparse host "
                      "pool (--set host_to_device_ratio=R)",
         "cxl_pool": "more CXL devices (--cxl-devices N)", "remote_pool": "more remote memory or --prompts shared",
         "max_total_tokens": "--max-total-tokens, or fewer requests in flight (--concurrency)",
         "hbm": "more GPUs or fewer requests in flight (--concurrency)",
         "device_pool": "fewer requests in flight (--concurrency) or a smaller --device-buffer"}


def _explain_limits(con, rows) -> None:
    """Under a compare table: each limit that made a system infeasible, its use, and the setting that fixes it."""
    seen = {}
    for L, res in rows:
        for s, p in res.items():
            if not p.feasible and p.limit and (p.limit, s) not in seen:
                seen[(p.limit, s)] = (L, p)
    for (limit, s), (L, p) in seen.items():
        u = p.capacity.get("usage", {}).get(limit, {})
        use = f" ({u['used'] / u['capacity']:.0%} of capacity)" if u.get("capacity") else ""
        fix = next((v for k, v in FIXES.items() if k in limit), None)
        con.print(f"({limit}): {s} first at {L:,} tokens{use}" + (f"; try {fix}" if fix else ""), highlight=False)


def register(sub) -> None:
    """Add ``predict`` and ``compare`` (``microbench`` comes after the catalog commands: see
    :func:`register_microbench`)."""
    _register_predict(sub)
    _register_compare(sub)


def _register_predict(sub) -> None:
    p = _parser(sub, "predict", "TTFT, TBT, throughput, memory use and time breakdown of one system",
                ["sacmodel predict --system cxl --context 128K --concurrency 64",
                 "sacmodel predict --system rdma --context 32K --rate 0.5 --requests 400",
                 "sacmodel predict --system dram --context 64K --cold --json",
                 "sacmodel predict --system cxl --context 32K --model examples/deepseek-v3.2/config.json"],
                "Predict one system on one workload with the event-driven engine (or --method analytic). "
                + LIMITS_TEXT + ".")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True, metavar="SYSTEM",
                   help="where the KV cache lives: gpu (HBM), dram (host DRAM pool), cxl (CXL pool, SAC), rdma "
                        "(RDMA pool, prefix copied first), cxl-prefetch, rdma-topk")
    add_model_options(p)
    add_workload(p)
    p.add_argument("--set", action="append", type=arg(setting), default=None, metavar="NAME=VALUE",
                   help="size what `plan --vary` sizes: dp=4, topk=1024, t_graph_kernel='30 us', "
                        "node:cxl_device.bandwidth='36 GB/s' (repeat for more)")
    add_json(p, csv_=False)
    p.set_defaults(func=cmd_predict)


def _register_compare(sub) -> None:
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


def register_microbench(sub) -> None:
    """Add ``microbench``."""
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
