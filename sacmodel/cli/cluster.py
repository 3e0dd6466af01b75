"""CLI of the cluster model: ``replay`` (cluster replay), ``hitrate`` (fast path), and the cluster options of
``plan`` and ``sweep`` (``--trace``); registered by :mod:`sacmodel.cli`."""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys

from rich.console import Console
from rich.table import Table

from ..util.names import ROUTERS, SYSTEMS
from ..util.files import write_text
from .common import _scenario, console, plain, print_json, table


class ConfigError(ValueError):
    """A bad cluster option (exit 2 from the CLI, like every ValueError of the library)."""

MOONCAKE = "../shared/data/traces/mooncake_conversation_trace.jsonl"   # the help examples' shipped trace


def _list(s: str) -> list[str]:
    return [x.strip() for x in str(s).split(",") if x.strip()]


def _capacity_arg(s):
    """'3M' (the home tier) or 'hbm=200K,cxl=10M' (per tier)."""
    if s is None or "=" not in s:
        return s
    out = {}
    for kv in _list(s):
        k, eq, v = kv.partition("=")
        if not eq or not k.strip() or not v.strip():
            raise ConfigError(f"--cache-capacity: write TIER=TOKENS pairs, not {kv!r}")
        out[k.strip()] = v.strip()
    return out


def _router_params(a) -> dict:
    kw = {}
    if a.router_weight is not None:
        kw["weight"] = a.router_weight
    if a.router_temperature is not None:
        kw["temperature"] = a.router_temperature
    if a.router_seed is not None:
        kw["seed"] = a.router_seed
    if a.affinity_blocks is not None:
        kw["affinity_blocks"] = a.affinity_blocks
    for item in _list(a.router_param or ""):
        k, eq, v = item.partition("=")
        k, v = k.strip(), v.strip()
        if not eq or not k.isidentifier() or not v:
            raise ConfigError(f"--router-param: write NAME=VALUE pairs such as queue_threshold=2, not {item!r}")
        try:
            num = float(v)
        except ValueError:
            kw[k] = v                                  # a word (llm_d prefix=estimated); the router checks it
            continue
        if not math.isfinite(num):
            raise ConfigError(f"--router-param {k}: not a finite number: {v!r}")
        kw[k] = int(num) if num.is_integer() and k in ("seed", "affinity_blocks", "balance_abs") else num
    return kw


def _check_names(systems, routers, *, need_systems: bool = False):
    """Known system and router names, at least one router (and one system when ``need_systems``)."""
    if not routers:
        raise ConfigError(f"--router: give at least one of {', '.join(ROUTERS)}")
    if need_systems and not systems:
        raise ConfigError(f"--systems: give at least one of {', '.join(SYSTEMS)}")
    for s in systems:
        if s not in SYSTEMS:
            raise ConfigError(f"--systems: unknown system {s!r}; known: {', '.join(SYSTEMS)}")
    for r in routers:
        if r not in ROUTERS:
            raise ConfigError(f"--router: unknown router {r!r}; known: {', '.join(ROUTERS)}")


def cmd_replay(a):
    from sacmodel.cluster.workload import load_workload
    from sacmodel.cluster.replay import parse_pd, parse_slo, replay
    systems = _list(a.systems) if a.systems is not None else ([a.system] if a.system else ["dram", "cxl", "rdma"])
    routers = _list(a.router)
    _check_names(systems, routers, need_systems=True)
    slo = parse_slo(a.slo)
    pd = a.pd
    if pd is not None:
        parse_pd(pd, None)
    cap = _capacity_arg(a.cache_capacity)
    decode = _decode_role(a)
    tr, meta = load_workload(a.trace, a.limit)
    cache = a.cache or ("trace" if tr.has_prefix_info else "none")
    res = {"cxl_devices": a.cxl_devices, "rdma_nics": a.rdma_nics, "device_buffer": a.device_buffer}
    runs = {}
    for s in systems:
        for r in routers:
            label = s if len(routers) == 1 else f"{s} / {r}"
            runs[label] = replay(_scenario(a), s, tr, router=r, instances=a.instances, cache_capacity=cap, pd=pd,
                                 time_scale=a.time_scale, concurrency=a.concurrency, cache=cache, slo=slo,
                                 router_params=_router_params(a), block_tokens=a.block_tokens,
                                 tiers=_list(a.tiers) if a.tiers else None, decode=decode,
                                 progress=not a.quiet,
                                 **{k: v for k, v in res.items() if v is not None})
    if a.csv:
        buf = io.StringIO()
        w = None
        for label, p in runs.items():
            for row in p.per_request_rows():
                row = {"configuration": label, **row}
                if w is None:
                    w = csv.DictWriter(buf, fieldnames=list(row), extrasaction="ignore")
                    w.writeheader()
                w.writerow(row)
        write_text(a.csv, buf.getvalue())
    if a.plot:
        from ..plots.cluster import plot_ttft_cdf
        plot_ttft_cdf(runs, a.plot, title=f"{tr.name} on {a.scenario}, arrivals x {a.time_scale:g}")
    if a.json:
        print_json({k: p.to_dict() for k, p in runs.items()}, inf_as_text=True)
        return
    con = Console(width=max(Console().width, 110))
    _print_health(con, runs)
    p0 = next(iter(runs.values()))
    t = Table(title=f"replay of {tr.name} ({len(tr)} requests, arrivals x {a.time_scale:g}) on {p0.scenario}: "
                    f"{p0.summary['instances']} instances" + (f", P:D {p0.summary['pd']}" if p0.summary["pd"] else "")
                    + f"; SLO {', '.join(f'{k} {v * 1e3:g} ms' for k, v in slo.items())}")
    for c in ("configuration", "hit %", "TTFT p50/p90/p99 s", "TBT p50/p99 ms", "queue p50 s", "SLO met",
              "goodput req/s"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    for label, p in runs.items():
        s = p.summary
        t.add_row(label, f"{100 * s['hit_rate_total']:.1f}",
                  "/".join(_sec(s[f"ttft_{q}_ms"] / 1e3) for q in ("p50", "p90", "p99")),
                  f"{_ms(s['tbt_p50_ms'])}/{_ms(s['tbt_p99_ms'])}", _sec(s["queue_p50_s"]),
                  f"{100 * s['slo_attainment']:.1f}%", f"{s['goodput_req_s']:.3f}")
    con.print(t)
    for label, p in runs.items():
        s = p.summary
        tiers = ", ".join(f"{k} {100 * v:.1f}%" for k, v in s["hit_rate"].items())
        links = ", ".join(f"{k} {v / 1e9:,.1f} GB" for k, v in s["bytes_by_link"].items()) or "none"
        con.print(f"[bold]{label}[/]: hits by tier: {tiers}; bytes moved: {links}")
    if a.csv:
        con.print(f"per-request results written to {a.csv}")
    if a.plot:
        con.print(f"TTFT CDF written to {a.plot}")


def _cell(col: str, v) -> str:
    """A cluster plan cell: shares in %, unfinished percentiles as 'unfin.', costs in USD to the cent."""
    if col in ("success_fraction", "hit_rate_total") and isinstance(v, float):
        return f"{100 * v:.1f}"
    if isinstance(v, float) and v == math.inf:
        return "unfin."
    if col.startswith("cost_usd") and isinstance(v, (int, float)) and math.isfinite(v):
        return f"{v:,.2f}"
    return plain(v)


def _sec(v: float) -> str:
    return "unfin." if v == math.inf else f"{v:,.1f}"


def _ms(v: float) -> str:
    return "unfin." if v == math.inf else f"{v:,.0f}"


def _print_health(con, runs: dict) -> None:
    """Before any table: requests that did not finish, and load the configuration does not keep up with."""
    for label, p in runs.items():
        s, load = p.summary, p.summary["load"]
        if not p.feasible:
            con.print(f"[bold red]{label}: incomplete[/]: {100 * s['success_fraction']:.1f}% of "
                      f"{s['requests']:,} requests finished ({p.limit}); {s['unfinished_note']}")
        if load["overloaded"]:
            con.print(f"[bold yellow]{label}: overloaded[/]: {overload_text(load)}"
                      + ("" if s.get("crash_advice") else " (add instances, or slow the arrivals with --time-scale)"))
        elif load.get("too_short"):
            con.print(f"[bold yellow]{label}: trace too short to tell[/]: {too_short_text(load)}")


def overload_text(load: dict) -> str:
    """Why a replay is overloaded, in a sentence (see :func:`sacmodel.cluster.replay.load_report`)."""
    head = f"offered {load['offered_req_s']:.3g} req/s, served {load['served_req_s']:.3g} req/s; "
    kind = load.get("overload")
    if kind == "backlog":
        return head + (f"requests in the system grow by {100 * load['backlog_growth']:.0f}% of arrivals after "
                       "warm-up (queued outside the ranks: a per-instance --concurrency cap, or a slow drain)")
    if kind == "slow queue":
        return head + (f"queueing grows slowly, {load['queue_growth_s_per_s']:.3f} s per s of arrivals, "
                       "without bound")
    return head + f"queueing grows {load['queue_growth_s_per_s']:.2f} s per s of arrivals"


def too_short_text(load: dict) -> str:
    """How much a replay on a short trace could be wrong (see :func:`sacmodel.cluster.replay.load_report`)."""
    share = load["answer_could_change"]
    floor = load.get("served_floor_req_s")
    return (f"its arrivals span {load['span_s']:,.0f} s and at the last one {100 * share:.0f}% of its requests "
            "were still in the system (steady load or a queue: it cannot tell warm-up from steady state)"
            + (f"; the served rate could be as low as {floor:.3g} req/s of {load['offered_req_s']:.3g} offered"
               if floor is not None else "")
            + f", so the answer could change by up to {100 * share:.0f}% (replay a longer trace)")


def _decode_role(a):
    """``--decode-tp N [--decode-dp M]``: the decode instances' scenario, the same GPU and model at that
    parallelism (None without the flags)."""
    if a.decode_tp is None:
        if a.decode_dp is not None:
            raise ConfigError("--decode-dp needs --decode-tp")
        return None
    if a.pd is None:
        raise ConfigError("--decode-tp sizes the decode instances of a prefill/decode split: give --pd too")
    from ..cluster.roles import role_configs
    rc = role_configs(_scenario(a), [(a.decode_tp, a.decode_dp or 1)])[0]
    if rc.why:
        raise ConfigError(f"--decode-tp {a.decode_tp}: {rc.why}")
    return rc.scenario


def cmd_hitrate(a):
    import time

    from ..cluster.hitrate import hit_rates
    from sacmodel.cluster.workload import load_workload
    routers = _list(a.router)
    _check_names([], routers)
    tr, _ = load_workload(a.trace, a.limit)
    caps = _list(a.capacity)
    rows = {}
    for r in routers:
        t0 = time.perf_counter()
        rows[r] = hit_rates(tr, caps, block_tokens=a.block_tokens, instances=a.instances, router=r,
                            ranks=a.ranks, **_router_params(a))
        for row in rows[r]:
            row["seconds"] = (time.perf_counter() - t0) / len(caps)
    if a.plot:
        from ..plots.cluster import plot_hit_rate
        plot_hit_rate({f"{r} ({a.instances} instance{'s' if a.instances > 1 else ''})": [
            (x["capacity_tokens"], x["hit_rate"]) for x in rs] for r, rs in rows.items()}, a.plot,
            title=f"{tr.name}: LRU prefix cache of {a.block_tokens}-token blocks per instance")
    if a.json:
        print_json(rows, inf_as_text=True)
        return
    t = Table(title=f"{tr.name}: prefix hit rate, {a.instances} instance(s)"
                    + (f" x {a.ranks} ranks" if a.ranks > 1 else "") + f", {a.block_tokens}-token blocks")
    for c in ("router", "capacity (tokens)", "hit rate", "evicted blocks", "seconds"):
        t.add_column(c, justify="right" if c != "router" else "left")
    for r, rs in rows.items():
        for x in rs:
            cap = "inf" if not math.isfinite(x["capacity_tokens"]) else f"{x['capacity_tokens']:,.0f}"
            t.add_row(r, cap, f"{100 * x['hit_rate']:.1f}%", f"{x['evicted_blocks']:,}", f"{x['seconds']:.2f}")
    Console().print(t)
    if a.plot:
        print(f"plot written to {a.plot}")


def _cluster_workload(a) -> dict:
    if getattr(a, "prompts", None):
        raise ConfigError("--prompts: a trace's requests carry their own prompts (drop --prompts with --trace)")
    if getattr(a, "start", None):
        raise ConfigError("--start: a trace's requests carry their own arrival times (drop --start with --trace)")
    fixed = {"time_scale": a.time_scale, "limit": a.limit}
    if a.slo_window:
        fixed["slo"] = a.slo_window
    for k in ("cxl_devices", "rdma_nics", "device_buffer"):
        if getattr(a, k, None) is not None:
            fixed[k] = getattr(a, k)
    return fixed


def cmd_cluster_plan(a, fallback):
    if not a.trace:
        return fallback(a)
    if getattr(a, "emit", None):
        raise ConfigError("--emit sglang prints one server's launch command; a cluster plan (--trace) has none yet")
    from ..cluster.plan import cluster_plan
    slo = dict(a.slo)                     # (metric, target) pairs, parsed by the plan command's --slo
    if getattr(a, "roles", None):
        return _print_role_plan(a, cluster_plan(_scenario(a), a.system, a.trace, slo, roles=a.roles,
                                                parallel=a.parallel, max_replays=a.max_replays,
                                                fixed=_cluster_workload(a), price_table=getattr(a, "prices", None)))
    vary = a.vary if a.vary in ("instances", "pool", "router", "pd") else "instances"
    values = a.values or (f"{a.min or 1}:{a.max or 8}" if vary == "instances" else None)
    if values is None:
        raise ConfigError(f"--values: list the {vary} values to try")
    r = cluster_plan(_scenario(a), a.system, a.trace, slo, vary=vary, values=values, fixed=_cluster_workload(a),
                     scheduler=getattr(a, "scheduler", None), progress=True, price_table=getattr(a, "prices", None))
    if a.json:
        print_json(r.to_dict(), inf_as_text=True)
        return
    con = console()
    con.print(r.message, highlight=False)
    names = {"success_fraction": "finished %", "overloaded": "overloaded", "goodput_req_s": "goodput req/s",
             "hit_rate_total": "hit %", "cost_usd_per_hour": "USD/h", "cost_usd_per_million_tokens": "USD/M tok"}
    cols = list(dict.fromkeys([vary, "success_fraction", "overloaded", *slo, "goodput_req_s", "hit_rate_total",
                               "cost_usd_per_hour", "cost_usd_per_million_tokens"]))
    t = table("tried (one cluster replay each)", [names.get(c, c) for c in cols],
              right=[names.get(c, c) for c in cols[1:]])
    for row in r.tried:
        t.add_row(*[_cell(c, row.get(c)) for c in cols])
    con.print(t)
    con.print((f"{r.replays} cluster replay(s) for {len(r.tried)} {vary} value(s); the others were ruled out "
               "without one" if r.replays < len(r.tried) else f"{r.replays} cluster replay(s)")
              + (f" ({r.unused} more run at once with the last and not needed)" if r.unused else ""), highlight=False)
    for row in r.tried:
        if row.get("limit"):
            con.print(f"{vary} {row[vary]}: {row['limit']}", highlight=False)
    for h in r.hit_rates:
        con.print(f"pool {h['pool']}: fast-path hit rate {100 * h['hit_rate_fast_path']:.1f}%")
    if r.best is not None:
        con.print("check it: " + replay_command(a, vary, r.best), highlight=False, soft_wrap=True)


def _print_role_plan(a, r) -> None:
    """The role search's answer: the split, its check, the replays tried, the runners-up and the capacities."""
    if a.json:
        print_json(r.to_dict(), inf_as_text=True)
        return
    from sacmodel.planning.search import tally_line
    con = console()
    con.print(r.message, highlight=False)
    rt = r.rates
    con.print(f"trace: {rt['requests']:,} requests over {rt['span_s']:.0f} s, {rt['input_tok_s']:,.0f} uncached prompt "
              f"tok/s at best (unbounded-cache hit rate {100 * rt['hit_rate_bound']:.0f}%), {rt['output_tok_s']:,.0f} "
              f"output tok/s", highlight=False)
    t = table("each configuration alone (trace's mean request)", ["config", "GPUs", "prefill tok/s", "decode tok/s",
                                                                   "why not"], right=["GPUs", "prefill tok/s",
                                                                                      "decode tok/s"])
    for c in r.configs:
        t.add_row(c["config"], str(c["gpus"]), _tok(c["prefill_tok_s"]), _tok(c["decode_tok_s"]),
                  (c["why"] or "")[:80])
    con.print(t)
    cols = ["prefill", "decode", "pd", "meets", "ttft_p90_ms", "tbt_p99_ms", "goodput_req_s", "cost_usd_per_hour"]
    t = table("replayed, cheapest first", cols, right=cols[3:])
    for row in r.tried:
        t.add_row(*[_cell(c, row.get(c)) for c in cols])
    con.print(t)
    for row in r.runners_up:
        con.print(f"runner-up (not replayed, costs at least the answer): {row['pd']} of {row['prefill']} / "
                  f"{row['decode']}, {row['cost_usd_per_hour']:.2f} USD/hour", highlight=False)
    con.print(f"{tally_line(r.predictions)}; {r.replays} cluster replays", highlight=False)
    if r.best is not None:
        con.print("check it: " + role_check_command(a, r.best), highlight=False, soft_wrap=True)
        n_p, n_d = r.best["pd"].split(":")
        for role, n in (("prefill", n_p), ("decode", n_d)):
            con.print(f"launch the {role} role ({n} instance(s) of {r.best[role]}):", highlight=False)
            con.print(r.launch.get(role, ""), highlight=False, soft_wrap=True, markup=False)


def _tok(v) -> str:
    return "-" if not v else f"{v:,.0f}"


def role_check_command(a, best: dict) -> str:
    """The `sacmodel replay` command that reproduces a role search's answer: the prefill role's machine, the
    split and the decode role's parallelism."""
    import shlex
    n_p, n_d = (int(x) for x in best["pd"].split(":"))
    words = ["sacmodel", "replay", a.trace]
    words += _role_words(a, best["prefill"])
    words += ["--system", a.system, "--instances", str(n_p + n_d), "--pd", best["pd"]]
    tp, dp = _parse_role(best["decode"])
    if best["decode"] != best["prefill"]:
        words += ["--decode-tp", str(tp)] + (["--decode-dp", str(dp)] if dp > 1 else [])
    for f, v in (("--time-scale", a.time_scale if a.time_scale != 1.0 else None), ("--limit", a.limit),
                 ("--slo", a.slo_window)):
        if v is not None:
            words += [f, f"{v:g}" if isinstance(v, float) else str(v)]
    return shlex.join(words)


def _parse_role(name: str) -> tuple[int, int]:
    parts = dict((p[:2], int(p[2:])) for p in name.split("-"))
    return parts["tp"], parts.get("dp", 1)


def _role_words(a, name: str) -> list[str]:
    """The machine flags of the prefill role ``name`` (tp2, tp8-dp8): the scenario's GPU, model, weights and
    engine at that parallelism (the scenario itself when it already is that machine)."""
    from ..cluster.roles import role_configs
    from ..fit.machine import machine_of
    from ..hardware.scenarios import cluster_of
    from ..planning.pricing import gpu_model
    from ..serving.config import engine_of
    tp, dp = _parse_role(name)
    rc = role_configs(_scenario(a), [(tp, dp)])[0]
    host = cluster_of(_scenario(a)).host
    if rc.scenario is host and not getattr(a, "gpu", None):
        return ["--scenario", a.scenario]
    m = machine_of(host)
    words = ["--gpu", gpu_model(host), "--gpus", str(tp), "--tp", str(tp), "--model", m["model"],
             "--weights", m["weights"]]
    words += (["--dp", str(dp)] if dp > 1 else []) + (["--engine", "vllm"] if engine_of(host) == "vllm" else [])
    return words


def replay_command(a, vary: str, value) -> str:
    """The `sacmodel replay` command that reproduces a cluster plan's answer (the plan's trace, scenario,
    system and fixed settings, and the chosen value of what it varied)."""
    import shlex
    flag = {"instances": "--instances", "pool": "--cache-capacity", "router": "--router", "pd": "--pd"}[vary]
    words = ["sacmodel", "replay", a.trace]
    if getattr(a, "gpu", None):           # a machine built from flags: the same flags, not its in-memory name
        from .machine import machine_words
        words += machine_words(a)
    else:
        words += ["--scenario", a.scenario]
        if getattr(a, "model", None):
            words += ["--model", a.model]
    words += ["--system", a.system, flag, str(value)]
    for f, v in (("--time-scale", a.time_scale if a.time_scale != 1.0 else None), ("--limit", a.limit),
                 ("--slo", a.slo_window), ("--cxl-devices", getattr(a, "cxl_devices", None)),
                 ("--rdma-nics", getattr(a, "rdma_nics", None)), ("--device-buffer", getattr(a, "device_buffer", None))):
        if v is not None:
            words += [f, f"{v:g}" if isinstance(v, float) else str(v)]
    return shlex.join(words)


def cmd_cluster_sweep(a, fallback):
    if not a.trace:
        return fallback(a)
    from ..cluster.plan import cluster_sweep
    grid = {}
    for g in a.grid:
        name, eq, vals = g.partition("=")
        if not eq:
            raise ConfigError(f"--grid {g!r}: write AXIS=V1,V2 (axes: instances, pool, router, pd)")
        grid[name.strip()] = vals
    rows = cluster_sweep(_scenario(a), a.system, a.trace, grid, fixed=_cluster_workload(a), scheduler=a.scheduler,
                         workers=a.workers, progress=True)
    keys = list(dict.fromkeys(k for r in rows for k in r if k != "hit_rate"))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    if a.csv:
        write_text(a.csv, buf.getvalue())
        print(f"wrote {a.csv}")
    else:
        sys.stdout.write(buf.getvalue())


def _router_options(p) -> None:
    """The router choice and its parameters (read back by :func:`_router_params`), for replay and hitrate."""
    from .types import arg, count, number
    p.add_argument("--router", default="round_robin", metavar="LIST",
                   help=f"one or more of {', '.join(ROUTERS)} (comma-separated)")
    p.add_argument("--router-weight", type=arg(number, lo=0, lo_open=False), default=None, metavar="W",
                   help="kv router: weight of the prefill blocks")
    p.add_argument("--router-temperature", type=arg(number, lo=0, lo_open=False), default=None, metavar="T",
                   help="kv router: softmax temperature (0 = argmin)")
    p.add_argument("--router-seed", type=arg(count, lo=0), default=None, metavar="N",
                   help="kv router: seed of its softmax draws (deterministic)")
    p.add_argument("--affinity-blocks", type=arg(count), default=None, metavar="N",
                   help="prefix_affinity: leading blocks hashed")
    p.add_argument("--router-param", default=None, metavar="LIST",
                   help="any router parameter as NAME=VALUE pairs, e.g. queue_threshold=2 (kv), cache_threshold=0.5 "
                        "(cache_aware), prefix=estimated,prefix_weight=1 (llm_d)")


def register(sub, add_scenario):
    """Add ``replay`` and ``hitrate`` and the cluster options of ``plan``/``sweep`` (call after the solvers)."""
    _register_replay(sub, add_scenario)
    _register_hitrate(sub, add_scenario)
    _register_trace_options(sub)


def _register_replay(sub, add_scenario) -> None:
    from .common import _parser, add_resources
    from .types import LIMITS, TIME_SCALE_RANGE, arg, count, in_file, number, out_file, plot_file, tokens
    trace_help = "Mooncake JSONL, Azure CSV or a testbed run JSON"
    p = _parser(sub, "replay", "replay a request trace through an instance or a cluster (routers, prefix "
                               "caches, P/D disaggregation)",
                [f"sacmodel replay {MOONCAKE} --limit 2000",
                 f"sacmodel replay {MOONCAKE} --limit 1000 --scenario sac-cluster-4x --router kv,round_robin "
                 "--csv out.csv",
                 "sacmodel replay ../shared/data/traces/azure_llm_2023_conv.csv --limit 1000 --cache none "
                 "--time-scale 0.5 --systems cxl,rdma",
                 f"sacmodel replay {MOONCAKE} --limit 1000 --scenario sac-cluster-4x --system gpu --instances 8 "
                 "--router kv --router-param queue_threshold=2"])
    add_scenario(p)
    p.add_argument("trace", type=arg(in_file), help=trace_help)
    p.add_argument("--systems", default=None, metavar="LIST", help="comma-separated systems (default dram,cxl,rdma)")
    p.add_argument("--system", default=None, help="one system (same as --systems with one name)")
    _router_options(p)
    p.add_argument("--instances", type=arg(count, hi=LIMITS["instances"]), default=None, metavar="N",
                   help="instances (default: the cluster's, or 1)")
    p.add_argument("--pd", default=None, metavar="P:D", help="prefill:decode instance split, e.g. 2:6 (disaggregation)")
    p.add_argument("--decode-tp", type=arg(count, hi=256), default=None, metavar="N",
                   help="with --pd: the decode instances run N-GPU tensor parallelism on the same GPU and model "
                        "(default: as the prefill instances)")
    p.add_argument("--decode-dp", type=arg(count, hi=256), default=None, metavar="N",
                   help="with --decode-tp: data-parallel attention groups of a decode instance (default 1)")
    p.add_argument("--cache-capacity", default=None, metavar="TOKENS",
                   help="prefix-cache tokens of the system's home tier ('3M', 'inf') or per tier ('hbm=200K,cxl=10M')")
    p.add_argument("--tiers", default=None, metavar="LIST", help="only these KV tiers (names or kinds), e.g. host "
                                                                 "for private host-DRAM caches")
    p.add_argument("--block-tokens", type=arg(tokens), default=None, metavar="TOKENS",
                   help="cache granularity (default: the trace's blocks)")
    p.add_argument("--limit", type=arg(count, hi=LIMITS["trace_requests"]), default=None, metavar="N",
                   help="first N requests")
    p.add_argument("--time-scale", type=arg(number, lo=TIME_SCALE_RANGE[0], hi=TIME_SCALE_RANGE[1]), default=1.0,
                   metavar="X", help="arrival times are divided by X: 2 = requests arrive twice as fast, 0.5 = at "
                                     "half the trace's rate (default 1)")
    p.add_argument("--cache", choices=("trace", "none", "all"), default=None,
                   help="cached prefixes: the prefix caches (Mooncake hash_ids; default when present), none, or "
                        "every prompt")
    p.add_argument("--concurrency", type=arg(count, hi=LIMITS["concurrency"]), default=None, metavar="N",
                   help="in flight per instance (default: as many as the server admits)")
    p.add_argument("--slo", default=None, metavar="SPEC", help="e.g. ttft=2s,tbt=100ms (default) for attainment "
                                                               "and goodput")
    add_resources(p)
    p.add_argument("--csv", type=arg(out_file), default=None, metavar="FILE", help="write the per-request results here")
    p.add_argument("--plot", type=plot_file, default=None, metavar="FILE",
                   help="TTFT CDF per configuration (PNG/SVG/PDF)")
    p.add_argument("--quiet", action="store_true", help="no progress bar on the terminal")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_replay)


def _register_hitrate(sub, add_scenario) -> None:
    from .common import _parser
    from .types import LIMITS, arg, count, in_file, plot_file, tokens
    trace_help = "Mooncake JSONL, Azure CSV or a testbed run JSON"
    p = _parser(sub, "hitrate", "prefix-cache hit rate of a trace vs capacity (fast path, no timing)",
                [f"sacmodel hitrate {MOONCAKE} --capacity 1M,3M,10M,inf",
                 f"sacmodel hitrate {MOONCAKE} --instances 4 --router prefix_affinity,round_robin "
                 "--plot hit.png",
                 f"sacmodel hitrate {MOONCAKE} --capacity inf --ranks 8 --router round_robin,kv"])
    p.add_argument("trace", type=arg(in_file), help=trace_help)
    p.add_argument("--capacity", default="1M,3M,10M,inf", metavar="LIST", help="tokens per instance, comma-separated")
    p.add_argument("--block-tokens", type=arg(tokens), default=512, metavar="TOKENS",
                   help="cache block/page size in tokens (default 512, the trace's; 64: SGLang pages)")
    p.add_argument("--instances", type=arg(count, hi=LIMITS["instances"]), default=1, metavar="N",
                   help="instances, each with its own cache of --capacity tokens (default 1)")
    p.add_argument("--ranks", type=arg(count, hi=64), default=1, metavar="N",
                   help="data-parallel ranks per instance, each with its own share of the cache, taken in turn "
                        "(SGLang DP attention; default 1)")
    _router_options(p)
    p.add_argument("--limit", type=arg(count, hi=LIMITS["trace_requests"]), default=None, metavar="N",
                   help="read the first N requests only")
    p.add_argument("--plot", type=plot_file, default=None, metavar="FILE", help="plot of hit rate vs capacity into FILE (.png, .pdf, .svg)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_hitrate)


def _register_trace_options(sub) -> None:
    from .types import LIMITS, TIME_SCALE_RANGE, arg, count, in_file, number
    for name, cmd in (("plan", cmd_cluster_plan), ("sweep", cmd_cluster_sweep)):
        p = sub.choices.get(name)
        if p is None:
            continue
        g = p.add_argument_group("cluster (with --trace: replays of the trace through the cluster)")
        g.add_argument("--trace", type=arg(in_file), default=None, metavar="TRACE",
                       help="plan/sweep a cluster on this trace (Mooncake JSONL, Azure CSV, testbed run JSON)")
        g.add_argument("--time-scale", type=arg(number, lo=TIME_SCALE_RANGE[0], hi=TIME_SCALE_RANGE[1]), default=1.0,
                       metavar="X", help="trace arrival times are divided by X: 2 = requests arrive twice as fast")
        g.add_argument("--limit", type=arg(count, hi=LIMITS["trace_requests"]), default=None, metavar="N",
                       help="first N requests of the trace")
        g.add_argument("--slo-window", default=None, metavar="SPEC",
                       help="per-request SLO for attainment/goodput (ttft=2s,tbt=100ms)")
        if name == "plan":
            g.add_argument("--values", default=None, metavar="LIST",
                           help="values of --vary (instances, pool, router, pd) to try")
            g.add_argument("--roles", choices=("search",), default=None,
                           help="search the prefill/decode split: how many prefill and decode instances, with which "
                                "parallelism each (tp/dp), for the trace and --slo, cheapest first")
            g.add_argument("--parallel", type=arg(_parallel), default=None, metavar="LIST",
                           help="with --roles search: the parallelism to try per role, TP or TP/DP, comma-separated "
                                "(default 1,2,4,8 up to the host's GPUs, and TP/TP for an MLA model)")
            g.add_argument("--max-replays", type=arg(count, hi=1000), default=12, metavar="N",
                           help="with --roles search: cluster replays at most (default 12)")
            if not any(a_.dest == "scheduler" for a_ in p._actions):
                g.add_argument("--scheduler", default=None, metavar="URL",
                               help="run the replays on Dask (tcp://HOST:PORT)")
        fallback = p.get_default("func")
        for act in p._actions:            # --context is needed by single-instance plans only
            if act.dest == "context" and act.required:
                act.required = False
                fallback = _needs_context(fallback)
        p.set_defaults(func=lambda a, cmd=cmd, fb=fallback: cmd(a, fb))


def _parallel(text: str) -> list[tuple[int, int]]:
    """'1,2,4/4' -> [(1, 1), (2, 1), (4, 4)]: tensor-parallel sizes, each with its data-parallel attention."""
    out = []
    for part in str(text).split(","):
        tp, _, dp = part.strip().partition("/")
        try:
            pair = (int(tp), int(dp or 1))
        except ValueError:
            raise argparse.ArgumentTypeError(f"write TP or TP/DP, comma-separated (2,4,8/8), not "
                                             f"{part.strip()!r}") from None
        if not (1 <= pair[0] <= 256 and 1 <= pair[1] <= pair[0] and pair[0] % pair[1] == 0):
            raise argparse.ArgumentTypeError(f"{part.strip()!r}: need 1 <= DP <= TP <= 256 with DP dividing TP")
        out.append(pair)
    return out


def _needs_context(fallback):
    def run(a):
        if a.context is None:
            raise ConfigError("--context is required (or --trace TRACE for a cluster plan)")
        return fallback(a)
    return run
