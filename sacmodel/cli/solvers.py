"""CLI commands of the solvers: expr, breakeven, winner-map, plan, sensitivity, sweep (registered by :mod:`sacmodel.cli`).

``breakeven``, ``winner-map`` and ``sensitivity`` answer with the loaded model by default (the serving engine
via ``predict`` at ``--concurrency``, default 64), because that is what a deployment sees; ``--unloaded`` asks
the closed form with one request alone, faster and symbolic, and every unloaded answer says so.
"""
from __future__ import annotations

import sys

from ..util.names import CLUSTER_SLO, HIGHER_IS_BETTER, LOADED, SHORT_METRICS, SYSTEMS, UNLOADED, fmt_value, kind_of
from .common import (
    DEFAULT_CONCURRENCY,
    add_cache_flags,
    cache_flag,
    LIMITS_TEXT,
    _scenario,
    _workload,
    add_json,
    add_output,
    add_plot,
    add_resources,
    add_scenario,
    add_server_limits,
    add_systems,
    add_prompts,
    add_workload,
    console,
    plain,
    print_json,
    prompts_of,
    closed_start,
    default_start,
    server_limits,
    table,
    workload_text,
    write_csv,
)
from .types import (
    LIMITS,
    RATE_RANGE,
    arg,
    count,
    grid_axis,
    in_file,
    metric,
    number,
    out_file,
    positive_value,
    slo,
    tokens,
    vary_name,
)

MAX_LOAD_DEFAULT = {"concurrency": 1024, "context": 1024 ** 2, "output": 64 * 1024}
UNLOADED_NOTE = "unloaded closed form: one request alone on the system (drop --unloaded for the loaded engine)"


def _metric_for(a) -> str:
    """The metric to solve for: loaded Prediction field by default, closed-form name with --unloaded."""
    m = a.metric
    if a.unloaded:
        m = {v: k for k, v in SHORT_METRICS.items()}.get(m, m)     # tbt_mean_ms -> tbt
        if m not in UNLOADED:
            raise ValueError(f"--metric {a.metric}: no unloaded closed form; unloaded metrics: {', '.join(UNLOADED)}")
        return m
    m = SHORT_METRICS.get(m, m)                                      # tbt -> tbt_mean_ms
    if m in UNLOADED:
        hint = "use --metric ttft --cold" if m == "ttft_cold" else "add --unloaded"
        raise ValueError(f"--metric {m} has only an unloaded closed form: {hint}")
    if m not in LOADED:
        raise ValueError(f"unknown --metric {m!r}; loaded: ttft, tbt, e2e, throughput or {', '.join(LOADED)}; "
                         f"with --unloaded: {', '.join(UNLOADED)}")
    return m


def _loaded_workload(a) -> dict:
    """Fixed workload of a loaded solver (concurrency defaults to 64) or of an unloaded one (context, output)."""
    res = {k: v for k, v in dict(cxl_devices=a.cxl_devices, rdma_nics=a.rdma_nics,
                                 device_buffer=a.device_buffer).items() if v is not None}
    if a.unloaded:
        given = [f"--{k.replace('_', '-')}" for k in ("concurrency", "requests", "rate", "max_total_tokens",
                                                      "max_running_requests") if getattr(a, k, None) is not None]
        if isinstance(a.output, tuple):
            given.append("--output MIN:MAX")
        if getattr(a, "prompts", None):
            given.append("--prompts")
        if getattr(a, "start", None):
            given.append("--start")
        if getattr(a, "cached", False):
            given.append("--cached")
        if given or getattr(a, "cold", False):
            raise ValueError(f"{', '.join(given) or '--cold'}: no effect with --unloaded (one request alone, cached "
                             "prompt); drop --unloaded for the loaded engine")
        return {**{k: v for k, v in dict(context=a.context, output=a.output).items() if v is not None}, **res}
    kw = dict(context=a.context, output=a.output, concurrency=a.concurrency or DEFAULT_CONCURRENCY,
              requests=a.requests, rate=a.rate, **res, **server_limits(a))
    if cache_flag(a) is not None:
        kw["prefix_cached"] = cache_flag(a)
    if getattr(a, "prompts", None):
        kw["prompts"] = a.prompts
    if getattr(a, "start", None):
        kw["start"] = a.start
    return {k: v for k, v in kw.items() if v is not None}


def _model_line(a, wl: dict) -> str:
    if a.unloaded:
        return UNLOADED_NOTE
    c = wl.get("concurrency")          # absent when the concurrency is what varies
    n = wl.get("requests") or (f"{8 * c:,}" if c else "8 x concurrency")
    how = f"Poisson {wl['rate']:g} req/s" if wl.get("rate") else f"{n if isinstance(n, str) else f'{n:,}'} requests"
    prompts = wl.get("prompts") or prompts_of(a)
    prompt = workload_text(prompts, wl.get("prefix_cached") is not False,
                           None if wl.get("rate") else wl.get("start") or default_start(prompts))
    at = f"at concurrency {c}" if c else "over concurrency"
    return f"loaded: serving engine {at} ({how}, {prompt}); --unloaded for the closed form"


# ---- commands -------------------------------------------------------------------------------------
def cmd_expr(a):
    import sympy as sp

    from sacmodel.planning.closed_forms import symbol_docs, symbolic
    e = symbolic(a.system, a.metric, _scenario(a) if a.bind else None,
                 **(dict(context=a.context, output=a.output) if a.bind else {}))
    unit = "bytes" if a.metric.startswith("bytes") else "s"
    loaded = None
    if a.bind and a.concurrency and a.metric in SHORT_METRICS:
        from ..serving.predict import predict
        p = predict(_scenario(a), a.system, context=a.context, output=a.output, concurrency=a.concurrency)
        loaded = getattr(p, SHORT_METRICS[a.metric]) if p.feasible else None
    if a.json:
        print_json({"metric": a.metric, "unit": unit, "model": "unloaded", "plain": str(e), "latex": sp.latex(e),
                    "symbols": symbol_docs(e) if not e.is_Number else [],
                    "value": float(e) if e.is_Number else None,
                    **({"loaded_ms": loaded, "concurrency": a.concurrency} if a.concurrency and a.bind else {})})
        return
    print(f"{a.metric} of {a.system}, unloaded (one request alone on the system), in {unit}:\n")
    if e.is_Number:
        v = float(e)
        print(f"{a.metric} = {fmt_value(v, 'time' if unit == 's' else 'bytes')}  (context {a.context:,}, "
              f"output {a.output:,} tokens, {a.scenario})")
        if a.concurrency:
            print(f"loaded at concurrency {a.concurrency} (serving engine): "
                  + (f"{loaded:,.1f} ms" if loaded is not None else "infeasible"))
        else:
            print("(the loaded value at concurrency C: add --concurrency C, or run `sacmodel predict`)")
        return
    print(sp.pretty(e, use_unicode=False, wrap_line=True) if len(str(e)) < 400 else str(e))
    print("\nLaTeX:\n" + sp.latex(e))
    t = table("symbols", ("name", "unit", "meaning"))
    for row in symbol_docs(e):
        t.add_row(*row)
    console().print(t)


def _sides(be) -> str:
    """Who is better on each side of the first crossing, exact about the ratio."""
    if be.ratio == 1:
        return f"{be.winner_below} is better below, {be.winner_above} above"
    hib = be.metric in HIGHER_IS_BETTER

    def rel(w):
        below = (w == be.a) != hib            # a's metric < ratio x b's
        return f"{be.metric} of {be.a} {'<' if below else '>'} {be.ratio:g} x {be.b}'s"
    return f"below: {rel(be.winner_below)}; above: {rel(be.winner_above)}"


def cmd_breakeven(a):
    from sacmodel.planning.breakeven import breakeven
    m = _metric_for(a)
    lo, hi = _value(a.lo, a.vary, "--lo"), _value(a.hi, a.vary, "--hi")
    wl = _loaded_workload(a)
    wl.pop(a.vary, None)
    if "context" not in wl and a.vary != "context":
        raise ValueError("give --context (or --vary context)")
    be = breakeven(_scenario(a), a.a, a.b, metric=m, vary=a.vary, lo=lo, hi=hi, ratio=a.ratio, points=a.points,
                   curve=bool(a.csv), **wl)
    model = _model_line(a, wl)
    if a.plot:
        from ..plots.serving import plot_breakeven
        plot_breakeven(be, a.plot, subtitle=model.split(";")[0])
    if a.csv:
        write_csv(a.csv, [a.vary, f"{m}_{a.a}", f"{m}_{a.b}"], zip(be.curve["x"], be.curve[a.a], be.curve[a.b]))
    if a.json:
        print_json({**be.to_dict(), "model": "unloaded" if a.unloaded else "loaded", "workload": wl})
        return
    if a.csv == "-":
        return
    print(be.message)
    if be.range_note:
        print(be.range_note)
    print(model)
    if be.found:
        res = "-" if be.residual is None else f"{be.residual:.1e}"
        print(f"method: {be.method}; relative residual {res}; {_sides(be)}")
    print(_tally(be.predictions))
    if a.plot:
        print(f"plot written to {a.plot}", file=sys.stderr)


def _tally(counts: dict) -> str:
    """'predictions: 14 engine, 30 analytic': what a search ran."""
    from sacmodel.planning.search import tally_line
    return tally_line(counts)


def _value(s: str, name: str, what: str) -> float:
    return positive_value(s, name, f"{what} ({name})")


def _whole(v):
    """A grid value as written: 16384, not 16384.0."""
    return int(v) if float(v).is_integer() else float(v)


def _at_concurrency(wl: dict, *axes) -> str:
    return "concurrency varied" if "concurrency" in axes else f"concurrency {wl['concurrency']}"


def cmd_winner_map(a):
    from collections import Counter

    import numpy as np
    from sacmodel.planning.sweep import winner_map
    m = _metric_for(a)
    (xn, xv), (yn, yv) = grid_axis(a.x, "--x"), grid_axis(a.y, "--y")
    wl = _loaded_workload(a)
    for k in (xn, yn):
        wl.pop(k, None)
    if "context" not in (xn, yn) and "context" not in wl:
        raise ValueError("give --context or vary context on --x/--y")
    wm = winner_map(_scenario(a), a.systems, m, (xn, xv), (yn, yv), values=bool(a.csv), **wl)
    systems = a.systems
    equal = wm["tied"].sum(axis=0) > 1                   # points where two or more systems share the best value

    def name(i, j):
        """The best system at grid point (i, j); 'cxl=rdma' where they are equal; None where none is feasible."""
        if wm["winner"][i, j] < 0:
            return None
        return "=".join(s for k, s in enumerate(systems) if wm["tied"][k, i, j]) if equal[i, j] \
            else systems[wm["winner"][i, j]]
    counts = {s: int(((wm["winner"] == k) & ~equal).sum()) for k, s in enumerate(systems)}
    none = int((wm["winner"] < 0).sum())
    model = _model_line(a, wl)
    from ..plots.serving import metric_axis
    label = metric_axis(m)[0].split(" (")[0].replace("unloaded ", "")
    title = (f"{'highest' if m in HIGHER_IS_BETTER else 'lowest'} {label} on {a.scenario}, " +
             ("unloaded (closed form, one request alone)" if a.unloaded else
              f"loaded (engine, {_at_concurrency(wl, xn, yn)})"))
    if a.plot:
        from ..plots.serving import plot_winner_map
        plot_winner_map(wm["x"], wm["y"], wm["winner"], systems, a.plot, xn, yn, title=title)
    if a.csv:
        write_csv(a.csv, [xn, yn, "best", *[f"{m}_{s}" for s in systems]],
                  [[_whole(x), _whole(y), name(i, j), *wm["values"][:, i, j]]
                   for i, x in enumerate(wm["x"]) for j, y in enumerate(wm["y"])])
    if a.json:
        print_json({"metric": m, "model": "unloaded" if a.unloaded else "loaded", "workload": wl, "x_name": xn,
                    "y_name": yn, "x": wm["x"], "y": wm["y"],
                    "winner": [[name(i, j) for j in range(len(wm["y"]))] for i in range(len(wm["x"]))],
                    "counts": counts, "equal": int(equal.sum()), "none_feasible": none,
                    "predictions": wm["predictions"]})
        return
    if a.csv == "-":
        return
    print(f"{title}: {xn} x {yn}, {wm['winner'].size} points")
    print(model)
    print("best system: " + ", ".join(f"{s} at {n} points" for s, n in counts.items())
          + "".join(f", {g} equal at {n} points" for g, n in Counter(
              name(i, j) for i, j in zip(*np.nonzero(equal))).items())
          + (f", none feasible at {none}" if none else ""))
    print(_tally(wm["predictions"]))
    if a.plot:
        print(f"plot written to {a.plot}", file=sys.stderr)


def cmd_plan(a):
    from sacmodel.planning.plan import max_load, plan
    slos = dict(a.slo)
    cluster_only = [m for m in slos if m in CLUSTER_SLO]
    if cluster_only:
        raise ValueError(f"--slo {cluster_only[0]}: a percentile over a trace's requests; give --trace TRACE (a "
                         "cluster plan), or use " + ", ".join(LOADED))
    wl = {k: v for k, v in _workload(a).items() if v is not None}
    if a.max_load:
        wl.pop(a.max_load, None)
        r = max_load(_scenario(a), a.system, workload=wl, slo=slos, vary=a.max_load,
                     max_value=a.max or MAX_LOAD_DEFAULT[a.max_load], min_value=a.min or 1)
    else:
        from sacmodel.planning.plan import DEFAULT_VARY
        a.vary = a.vary or DEFAULT_VARY[a.system]
        wl.pop(a.vary, None)
        r = plan(_scenario(a), a.system, workload=wl, slo=slos, vary=a.vary, max_value=a.max,
                 min_value=a.min or 1, price_table=a.prices)
    from .pareto import emit_plan
    sglang = emit_plan(a, r, wl)          # --emit sglang: the answer's launch command ("" without it)
    if a.csv:
        cols = ["value", "meets", "feasible", "limit", *slos]
        write_csv(a.csv, cols, [[row.get(c) for c in cols] for row in r.tried])
    if a.json:
        print_json({**r.to_dict(), **({"sglang_command": sglang} if sglang else {})})
        return
    if a.csv == "-":
        return
    con = console()
    con.print(r.message)
    con.print("workload: " + workload_text(prompts_of(a), cache_flag(a), closed_start(a, prompts_of(a))),
              highlight=False)
    if r.tried:
        cols = ["value", "meets", "feasible", *slos]
        t = table(f"tried {r.vary}", cols, right=cols)
        for row in r.tried:
            t.add_row(*[plain(row[c]) for c in cols])
        con.print(t)
    if r.cost_usd_per_hour:
        per_m = r.cost_usd_per_million_tokens
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r.cost_usd_per_hour.items() if k != "total")
        con.print(f"cost: {r.cost_usd_per_hour['total']:.2f} USD/hour ({parts})"
                  + (f", {per_m:.2f} USD per million output tokens" if per_m else ""), highlight=False)
        con.print("prices from " + (a.prices if a.prices else "the built-in table (sacmodel/data/prices.yaml; "
                                    "--prices FILE for yours)") + ":", highlight=False)
        for k, v in (r.prices or {}).items():
            per = "USD/GB/h" if k.endswith("_gb") else "USD/h"
            con.print(f"  {k:<12} {v['usd_per_hour']:8.6g} {per:<8}  {v.get('source', 'no source given')}",
                      highlight=False, markup=False, soft_wrap=True)
    con.print(_tally(r.predictions), highlight=False)
    if r.found:
        con.print("check it: " + predict_command(a, {a.max_load or a.vary: r.value}), highlight=False,
                  soft_wrap=True)
    if sglang:
        print("\n" + sglang)


def predict_command(a, settings: dict) -> str:
    """The `sacmodel predict` command that reproduces a plan's answer: the plan's scenario (or machine flags),
    system and workload options, and the sized setting (--cxl-devices N, --rdma-nics N, --device-buffer N or
    --set NAME=VALUE)."""
    import shlex

    from .machine import machine_words
    words = ["sacmodel", "predict", "--system", a.system]
    if getattr(a, "gpu", None):      # predict's own flags (pool sizes, limits) are written below
        words += machine_words(a, skip=("--cxl-devices", "--rdma-nics", "--max-total-tokens",
                                        "--max-running-requests"))
    elif a.scenario != "sac-testbed":
        words += ["--scenario", a.scenario]
    opts = {"--context": a.context, "--concurrency": a.concurrency, "--requests": a.requests, "--rate": a.rate,
            "--output": "{}:{}".format(*a.output) if isinstance(a.output, tuple) else a.output,
            "--cxl-devices": a.cxl_devices, "--rdma-nics": a.rdma_nics, "--device-buffer": a.device_buffer,
            "--max-total-tokens": a.max_total_tokens, "--max-running-requests": a.max_running_requests,
            "--draws": getattr(a, "draws", None), "--prompts": getattr(a, "prompts", None),
            "--start": getattr(a, "start", None),
            "--model": getattr(a, "model", None), "--method": None if a.method == "engine" else a.method}
    for name, v in settings.items():
        flag = "--" + name.replace("_", "-")
        if flag in opts:                     # a workload or resource flag of predict's own
            opts[flag] = v
        else:
            words += ["--set", f"{name}={v}"]
    words += [x for f, v in opts.items() if v is not None for x in (f, str(v))]
    words += ["--cold"] * bool(a.cold) + ["--cached"] * bool(getattr(a, "cached", False)) + ["--no-cold-staging"] * (not getattr(a, "cold_staging", True))
    return shlex.join(words)


def cmd_sensitivity(a):
    from sacmodel.planning.search import Tally
    from sacmodel.planning.sensitivity import sensitivity, sensitivity_loaded, symbol_kind
    m = _metric_for(a)
    counts = Tally()
    wl = _loaded_workload(a)
    if a.draws is not None:
        if a.unloaded:
            raise ValueError("--draws: no effect with --unloaded (the closed form has no randomness); drop "
                             "--unloaded for the loaded engine")
        wl["draws"] = a.draws
    if a.unloaded:
        rows = sensitivity(_scenario(a), a.system, m, counts=counts, **wl)
        kind = symbol_kind
    else:
        from sacmodel.planning.common import hardware_parameters
        rows = sensitivity_loaded(_scenario(a), a.system, m, params=hardware_parameters(_scenario(a)) if a.hardware
                                  else None, counts=counts, **wl)
        kind = lambda n: "hardware" if n.startswith(("node:", "link:", "node@", "link@")) else "software"  # noqa: E731
        rows = [(n, e, v, "") for n, e, v, _ in rows]
    if a.hardware:
        rows = [r for r in rows if kind(r[0]) == "hardware"]
    rows = rows[:a.top]
    from ..plots.serving import metric_axis
    what = f"{metric_axis(m)[0].split(' (')[0]} of {a.system}, context {a.context:,}" + (
        " (closed form, one request alone)" if a.unloaded else f", concurrency {wl['concurrency']} (engine)")
    if a.plot:
        from ..plots.serving import plot_tornado
        plot_tornado(rows, a.plot, title=f"elasticity of {what}", top=a.top)
    out = [{"parameter": n, "kind": kind(n), "elasticity": e, "value": v, "value_text": fmt_value(v, kind_of(n)),
            "meaning": mn} for n, e, v, mn in rows]
    if a.csv:
        write_csv(a.csv, list(out[0]) if out else ["parameter"], [list(r.values()) for r in out])
    if a.json:
        print_json({"metric": m, "model": "unloaded" if a.unloaded else "loaded", "workload": wl, "rows": out,
                    "predictions": counts.to_dict()})
        return
    if a.csv == "-":
        return
    cols = ("parameter", "kind", "elasticity", "value") + (("meaning",) if a.unloaded else ())
    t = table(None, cols, right=("elasticity", "value"))
    for r in out:
        t.add_row(r["parameter"], r["kind"], f"{r['elasticity']:+.3f}", r["value_text"],
                  *((r["meaning"],) if a.unloaded else ()))
    con = console()
    con.print(f"elasticity d ln(metric) / d ln(parameter) of {what}", highlight=False)
    con.print(t)
    con.print(_model_line(a, wl))
    con.print(counts.line(), highlight=False)


def cmd_sweep(a):
    from sacmodel.planning.sweep import sweep, sweep_predict
    grid = dict(grid_axis(g, "--grid") for g in a.grid)
    if a.full:
        fixed = {k: v for k, v in dict(context=a.context, output=a.output, concurrency=a.concurrency,
                                       requests=a.requests, rate=a.rate, cxl_devices=a.cxl_devices,
                                       rdma_nics=a.rdma_nics, device_buffer=a.device_buffer,
                                       **server_limits(a)).items()
                 if v is not None and k not in grid}
        fixed.setdefault("concurrency", DEFAULT_CONCURRENCY)
        if cache_flag(a) is not None:
            fixed["prefix_cached"] = cache_flag(a)
        if a.prompts:
            fixed["prompts"] = a.prompts
        if a.start:
            fixed["start"] = a.start
        if "context" not in grid and "context" not in fixed:
            raise ValueError("give --context or put context in a --grid")
        rows = sweep_predict(_scenario(a), a.system, grid, fixed=fixed, scheduler=a.scheduler, workers=a.workers)
        keys = ["system", "context", "output", "concurrency", "requests", "feasible", "limit", "ttft_mean_ms",
                "ttft_p99_ms", "tbt_mean_ms", "e2e_mean_ms", "output_throughput_tok_s"]
        res = ("cxl_devices", "rdma_nics", "device_buffer")
        header, body = keys + list(res), [[r[k] for k in keys] + [r["config"][k] for k in res] for r in rows]
        cols = {h: [row[i] for row in body] for i, h in enumerate(header)}
        model = "loaded: serving engine at every point, " + workload_text(prompts_of(a), cache_flag(a),
                                                                          closed_start(a, prompts_of(a)))
    else:
        if a.concurrency or a.requests or a.rate or a.cold or a.cached or a.prompts or a.start or server_limits(a) or \
                isinstance(a.output, tuple):
            raise ValueError("--concurrency/--requests/--rate/--cold/--prompts/--start/--max-total-tokens/"
                             "--max-running-requests and --output MIN:MAX need --full (the vectorised sweep is the "
                             "unloaded closed form)")
        out = sweep(_scenario(a), a.system, grid, a.metric, context=a.context, output=a.output,
                    **{k: v for k, v in dict(cxl_devices=a.cxl_devices, rdma_nics=a.rdma_nics,
                                             device_buffer=a.device_buffer).items() if v is not None})
        unit = "bytes" if a.metric.startswith("bytes") else "s"
        cols = {**{n: out[n] for n in grid}, f"{a.metric}_unloaded_{unit}": out[a.metric]}
        header = list(cols)
        body = ([f"{x:.9g}" for x in row] for row in zip(*cols.values()))
        model = UNLOADED_NOTE.replace("drop --unloaded", "--full")
    if a.json:
        print_json({"model": model, "columns": cols})
    else:
        write_csv(a.csv or "-", header, body)
    if a.plot:
        from ..plots.serving import metric_axis, plot_sweep
        if a.full:
            ycol = "tbt_mean_ms"
            label, f = metric_axis(ycol)
        else:
            ycol = header[-1]
            label, f = metric_axis(a.metric)
        how = "serving engine at every point" if a.full else "closed form, one request alone"
        plot_sweep(cols, list(grid), ycol, a.plot, ylabel=label, yfactor=f,
                   title=f"{label.split(' (')[0]} of {a.system} on {a.scenario} ({how})")
        print(f"plot written to {a.plot}", file=sys.stderr)
    print(model, file=sys.stderr)


# ---- parser ---------------------------------------------------------------------------------------
def _solver_workload(p, context_required=False, unloaded_flag=False):
    """Workload options of the solvers (concurrency, requests, rate and --cold apply to the serving engine),
    and --unloaded if asked."""
    p.add_argument("--context", type=arg(tokens), required=context_required, default=None, metavar="TOKENS",
                   help="prompt tokens per request, e.g. 32K" + ("" if context_required else " (unless varied)"))
    add_output(p)
    p.add_argument("--concurrency", type=arg(count, hi=LIMITS["concurrency"]), default=None, metavar="N",
                   help=f"requests in flight for the loaded model (default {DEFAULT_CONCURRENCY})")
    p.add_argument("--requests", type=arg(count, hi=LIMITS["requests"]), default=None, metavar="N",
                   help="requests per prediction (default 8 x concurrency)")
    p.add_argument("--rate", type=arg(number, lo=RATE_RANGE[0], hi=RATE_RANGE[1], lo_open=False), default=None,
                   metavar="REQ/S", help="open loop: Poisson arrivals per second (default: closed loop)")
    add_cache_flags(p)
    add_prompts(p)
    add_resources(p)
    add_server_limits(p)
    if unloaded_flag:
        p.add_argument("--unloaded", action="store_true",
                       help="use the closed form with one request alone on the system (fast, symbolic) instead of "
                            "the loaded serving engine (default); the two can point opposite ways")


METRIC_HELP = ("ttft, tbt, e2e, throughput or a Prediction field such as tbt_p99_ms (loaded, default tbt); "
               "with --unloaded: ttft, tbt, e2e, bytes_per_step, ttft_cold")


def register(sub):
    _register_expr(sub)
    _register_breakeven(sub)
    _register_winner_map(sub)
    _register_plan(sub)
    _register_sensitivity(sub)
    _register_sweep(sub)
    from . import pareto as pareto_cli          # pareto and its --emit sglang (plan's --emit too)
    pareto_cli.register(sub)


def _register_expr(sub) -> None:
    from .common import _parser
    p = _parser(sub, "expr", "the closed form of an unloaded metric (plain and LaTeX), optionally evaluated",
                ["sacmodel expr --system cxl --metric tbt",
                 "sacmodel expr --system rdma --metric ttft --bind --context 128K --concurrency 64"],
                "The closed form of a metric with one request alone on the system (unloaded), over named "
                "symbols; --bind puts in the scenario's numbers. Loaded metrics have no closed form: "
                "--concurrency C with --bind shows the engine's value next to it.")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True, help="system whose closed form to show")
    p.add_argument("--metric", choices=UNLOADED, default="tbt",
                   help="ttft, tbt, e2e (seconds), bytes_per_step (bytes) or ttft_cold (uncached prompt); default tbt")
    p.add_argument("--bind", action="store_true", help="bind the scenario's numbers and evaluate at --context/--output")
    p.add_argument("--context", default=32768, type=arg(tokens), metavar="TOKENS",
                   help="prompt tokens with --bind (default 32K)")
    p.add_argument("--output", default=1024, type=arg(tokens), metavar="TOKENS",
                   help="output tokens with --bind (default 1024)")
    p.add_argument("--concurrency", type=arg(count, hi=LIMITS["concurrency"]), default=None, metavar="N",
                   help="with --bind: also show the loaded engine's value at N requests in flight")
    p.add_argument("--json", action="store_true", help="print the expression, LaTeX, symbols and value as JSON")
    p.set_defaults(func=cmd_expr)


def _register_breakeven(sub) -> None:
    from .common import _parser
    p = _parser(sub, "breakeven", "where two systems give the same metric as one quantity varies",
                ["sacmodel breakeven --a cxl --b dram --metric tbt --vary context --lo 8K --hi 256K",
                 "sacmodel breakeven --a cxl --b dram --metric tbt --ratio 1.05 --vary context --lo 8K --hi 256K",
                 "sacmodel breakeven --a cxl --b cxl-prefetch --metric e2e --vary pf_dma_bw --lo '1 GB/s' "
                 "--hi '1 TB/s' --context 128K --output 16K --unloaded",
                 "sacmodel breakeven --a cxl --b rdma --metric throughput --vary concurrency --lo 8 --hi 256 "
                 "--context 64K --plot be.png"],
                "Find where metric(a) = ratio x metric(b) as --vary goes from --lo to --hi. Loaded by default "
                "(serving engine at --concurrency, 64 unless given); --unloaded solves the closed form "
                "(symbolically where it can). " + LIMITS_TEXT + f"; --points up to {LIMITS['points']:,}.")
    add_scenario(p)
    p.add_argument("--a", required=True, choices=SYSTEMS, help="first system")
    p.add_argument("--b", required=True, choices=SYSTEMS, help="second system")
    p.add_argument("--metric", required=True, type=arg(metric, loaded=False), help=METRIC_HELP)
    p.add_argument("--vary", required=True, type=arg(vary_name), metavar="NAME",
                   help="context, output, topk, concurrency, cxl_devices, rdma_nics, device_buffer, a scenario "
                        "parameter (t_graph_kernel), a closed-form symbol with --unloaded (pf_dma_bw), or a hardware "
                        "number node:KIND.FIELD / link:KIND.FIELD (node:cxl_device.bandwidth, link:gpu.latency)")
    p.add_argument("--lo", required=True, metavar="VALUE",
                   help="low end of --vary with its unit: 8K tokens, '10 GB/s', '500 ns', 4 devices")
    p.add_argument("--hi", required=True, metavar="VALUE", help="high end of --vary, same form as --lo")
    p.add_argument("--ratio", type=arg(number, lo=0), default=1.0, metavar="R",
                   help="find metric(a) = R x metric(b); 1.05 = where a becomes 5%% worse than b (default 1)")
    p.add_argument("--points", type=arg(count, lo=2, hi=LIMITS["points"]), default=48, metavar="N",
                   help=f"grid points scanned for crossings (default 48, 2 to {LIMITS['points']:,}); counts "
                        "are bisected exactly between them")
    _solver_workload(p, unloaded_flag=True)
    add_plot(p, "draw both curves (at the points the search ran; with --csv at every grid point) and the crossings")
    add_json(p)
    p.set_defaults(func=cmd_breakeven)


def _register_winner_map(sub) -> None:
    from .common import _parser
    p = _parser(sub, "winner-map", "which system is best over two parameters (a map; --plot draws it)",
                ["sacmodel winner-map --x context=8K:128K:5 --y output=256:8K:6 --plot map.png",
                 "sacmodel winner-map --systems cxl,cxl-prefetch --metric e2e --unloaded "
                 "--x context=8K:256K:48 --y output=64:32K:48 --plot map.png",
                 "sacmodel winner-map --x context=16K:128K:8 --y concurrency=8:128:8 --csv map.csv"],
                "Best system at every point of a grid over two quantities. Loaded by default (serving engine "
                f"at every point, at most {LIMITS['predictions']:,} predictions in all); --unloaded uses the "
                f"vectorised closed form (at most {LIMITS['map_cells']:,} cells). Writes a file only with "
                "--plot or --csv.")
    add_scenario(p)
    add_systems(p, "dram,cxl,rdma")
    p.add_argument("--metric", default="tbt", type=arg(metric, loaded=False), help=METRIC_HELP)
    p.add_argument("--x", required=True, metavar="NAME=LO:HI:N",
                   help="x axis: NAME=LO:HI:N (geometric when HI/LO > 20) or NAME=V1,V2,..., e.g. context=8K:256K:12")
    p.add_argument("--y", required=True, metavar="NAME=LO:HI:N", help="y axis, same form, e.g. output=256:16K:8")
    _solver_workload(p, unloaded_flag=True)
    add_plot(p, "draw the map")
    add_json(p)
    p.set_defaults(func=cmd_winner_map)


def _register_plan(sub) -> None:
    from .common import _parser
    p = _parser(sub, "plan", "smallest resource meeting an SLO, or the largest load within it",
                ["sacmodel plan --system cxl --context 128K --slo tbt_mean_ms=80 --slo output_throughput_tok_s=750",
                 "sacmodel plan --system rdma --vary rdma_nics --max 8 --context 64K --slo ttft_mean_ms=5000",
                 "sacmodel plan --system cxl --context 128K --slo tbt_mean_ms=80 --max-load concurrency",
                 "sacmodel plan --system cxl --context 32K --slo tbt_mean_ms=80 --emit sglang"])
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True, help="system to plan")
    p.add_argument("--slo", action="append", required=True, type=slo, metavar="METRIC=VALUE",
                   help="a target, e.g. tbt_mean_ms=80 (at most) or output_throughput_tok_s=750 (at least); repeat")
    p.add_argument("--vary", default=None, type=arg(vary_name), metavar="NAME",
                   help="resource to size: cxl_devices, rdma_nics, dp (GPUs), device_buffer, or node:KIND.FIELD "
                        "(default: the system's pool devices, cxl_devices or rdma_nics; dp for gpu and dram)")
    p.add_argument("--max-load", choices=("concurrency", "context", "output"), default=None,
                   help="instead: the largest concurrency, context or output the configuration sustains within the SLO")
    p.add_argument("--min", type=arg(count, hi=LIMITS["tokens"]), default=None, metavar="N",
                   help="smallest value tried (default 1)")
    p.add_argument("--max", type=arg(count, hi=LIMITS["tokens"]), default=None, metavar="N",
                   help="largest value tried (default 16 for --vary; with --max-load: 1,024 for concurrency, "
                        "1M tokens for context, 64K for output)")
    p.add_argument("--prices", type=arg(in_file), default=None, metavar="YAML",
                   help="price table: 'parts: {gpu: {usd_per_hour: 2.0}}' prices every GPU; rows gpu_h20 ... gpu_b200, "
                        "dram_gb, cxl_gb (per GB), cxl_adapter, cxl_switch, rdma_nic; a part the plan needs and the "
                        "table lacks is named (default: the built-in table, sacmodel/data/prices.yaml)")
    add_workload(p)
    add_prompts(p)
    add_json(p)
    from .pareto import add_emit
    add_emit(p)
    p.set_defaults(func=cmd_plan)


def _register_sensitivity(sub) -> None:
    from .common import _parser
    p = _parser(sub, "sensitivity", "elasticities of a metric to every hardware number and fitted constant",
                ["sacmodel sensitivity --system cxl --context 128K --concurrency 16 --top 8 --plot tornado.png",
                 "sacmodel sensitivity --system rdma --context 32K --metric ttft --hardware",
                 "sacmodel sensitivity --system gpu --context 8K --concurrency 8 --metric ttft --hardware --draws 64 --top 5",
                 "sacmodel sensitivity --system cxl --context 128K --unloaded --metric tbt"],
                "d ln(metric) / d ln(parameter) at one point, largest first. Loaded by default (serving engine "
                "at --concurrency, 64 unless given, by central differences); --unloaded differentiates the "
                "closed form symbolically.")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True, help="system to analyse")
    p.add_argument("--metric", default="tbt", type=arg(metric, loaded=False), help=METRIC_HELP)
    _solver_workload(p, context_required=True, unloaded_flag=True)
    p.add_argument("--top", type=arg(count, hi=1000), default=15, metavar="N",
                   help="show (and plot) the N largest elasticities (default 15)")
    p.add_argument("--hardware", action="store_true", help="only hardware numbers (bandwidths, latencies, FLOP/s)")
    p.add_argument("--draws", type=arg(count, hi=64), default=None, metavar="N",
                   help="draws of the requests' randomness each loaded prediction averages (default 16; 64 "
                        "resolves a 1%% step more finely, in 4x the time)")
    add_plot(p, "draw a tornado chart of the --top rows")
    add_json(p)
    p.set_defaults(func=cmd_sensitivity)


def _register_sweep(sub) -> None:
    from .common import _parser
    p = _parser(sub, "sweep", "evaluate a metric over a grid; CSV out",
                ["sacmodel sweep --system cxl --grid context=8K:1M:200 --grid sw_bw=2GB/s:64GB/s:50 > tbt.csv",
                 "sacmodel sweep --system cxl --grid context=8K:256K:24 --plot tbt.png --csv tbt.csv",
                 "sacmodel sweep --system cxl --full --grid context=16K,32K,64K --grid concurrency=8,32,128"],
                "Vectorised unloaded closed form over the Cartesian product of the --grid axes (millions of "
                f"points per second, at most {LIMITS['sweep_points']:,}), or with --full the serving engine at "
                f"every point (at most {LIMITS['predictions']:,}; processes on all cores or a Dask cluster).")
    add_scenario(p)
    p.add_argument("--system", choices=SYSTEMS, required=True, help="system to evaluate")
    p.add_argument("--grid", action="append", required=True, metavar="NAME=LO:HI:N",
                   help="an axis: NAME=LO:HI:N or NAME=V1,V2,...; names: context, output, or closed-form symbols "
                        "(sw_bw, hbm_bw, t_graph_kernel...); with --full: context, output, concurrency, requests, rate, "
                        "cxl_devices, rdma_nics, device_buffer (repeat for more axes)")
    p.add_argument("--metric", default="tbt", choices=UNLOADED,
                   help="unloaded metric of the vectorised sweep (default tbt; seconds, bytes for bytes_per_step)")
    p.add_argument("--full", action="store_true", help="run the serving engine (predict) at every point instead")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT", help="Dask scheduler for --full")
    p.add_argument("--workers", type=arg(count, hi=LIMITS["workers"]), default=None, metavar="N",
                   help="local processes for --full (default: all cores)")
    p.add_argument("--csv", type=arg(out_file), default=None, metavar="FILE",
                   help="write the CSV to FILE (default: standard output)")
    p.add_argument("--json", action="store_true", help="print the columns as JSON instead of CSV")
    add_plot(p, "draw the metric against the first grid axis")
    _solver_workload(p)
    p.set_defaults(func=cmd_sweep)
