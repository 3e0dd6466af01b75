"""Solvers and planning: symbolic forms, break-even, capacity planning, sensitivity, sweeps.

The *unloaded* metrics (one request alone on the system) have closed forms built from the same sympy
expressions the serving engine evaluates (:func:`symbolic`); bound to a scenario they equal
``predict(..., concurrency=1, requests=1, cold_staging=False)``. Loaded questions (throughput at concurrency
c, percentiles) go through :func:`sacmodel.predict`.
"""
from __future__ import annotations

import copy
import functools
import itertools
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import sympy as sp
import yaml
from scipy.optimize import brentq

from ..hardware.params import get_param, set_param
from ..hardware.scenarios import as_topology
from ..hardware.topology import Topology, TopologyError
from ..serving.config import ConfigError, PositionError, resolve, static_values, swap_route
from ..serving.costs import SYMBOLS, sym
from ..serving.predict import predict
from ..serving.step import fetch_terms, front_end_terms, prefill_terms, rank_terms, shared_terms
from ..serving.systems import check_system

# shared names, limits and progress (kept below the serving imports, whose binding changes separately)
from ..util.names import HIGHER_IS_BETTER, LIMITS, LOADED, PRICE_FILE, UNLOADED, fmt_value, kind_of
from ..util.progress import status, track

METRIC_ALIASES = {"ttft": "ttft", "ttft_mean_ms": "ttft", "tbt": "tbt", "tbt_mean_ms": "tbt", "e2e": "e2e",
                  "e2e_mean_ms": "e2e", "bytes_per_step": "bytes_per_step", "bytes": "bytes_per_step",
                  "ttft_cold": "ttft_cold"}
WORKLOAD_SYMBOLS = {"context": "L", "output": "O"}


class SolverError(ValueError):
    """A question the solvers cannot answer as asked (bad metric, parameter or range)."""


# ---- argument checks (the public functions validate here; the engine then trusts its inputs) -----------
def _topology(scenario) -> Topology:
    """The loaded scenario, or a clear error for something that is not a scenario (None, a number...)."""
    if scenario is None or isinstance(scenario, (bool, int, float)):
        raise SolverError(f"scenario must be a built-in name, a YAML path or a Topology, got {scenario!r}")
    try:
        return as_topology(scenario)
    except TypeError:
        raise SolverError(f"scenario must be a built-in name, a YAML path or a Topology, "
                          f"got a {type(scenario).__name__}") from None


def _positive_tokens(name: str, v, required: bool = True):
    """A workload length: a positive whole number of tokens (at most LIMITS['tokens'])."""
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
            or v < 1 or v > LIMITS["tokens"]:
        raise SolverError(f"{name} must be a positive number of tokens up to {LIMITS['tokens']:,}, got {v!r}"
                          + (" (put several values in the grid instead)" if isinstance(v, (list, tuple,
                                                                                          np.ndarray)) else ""))
    return v


def _finite_array(name: str, values, positive: bool) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        raise SolverError(f"grid {name}: not an array of numbers") from None
    if arr.size == 0 or not np.isfinite(arr).all():
        raise SolverError(f"grid {name}: give finite numbers (got {arr.size} values)")
    if positive and (arr <= 0).any():
        raise SolverError(f"grid {name}: values must be positive, got {arr.min():g}")
    return arr


def _check_vary(topo: Topology, vary: str, kind: str = "loaded", systems=(), metric: str = "tbt") -> None:
    """``vary`` must name something that exists: a workload argument, a scenario parameter, a hardware number,
    or (unloaded metrics only) a symbol of the closed form of ``metric`` for ``systems``."""
    if not isinstance(vary, str) or not vary:
        raise SolverError(f"vary must be a name, got {vary!r}")
    if vary in ("context", "output", "concurrency", "requests", "rate", "cxl_devices", "rdma_nics",
                "device_buffer", "topk", "dp"):
        return
    if vary.startswith(("node:", "link:")):
        try:
            v = get_param(topo, vary)
        except (KeyError, IndexError, ValueError, StopIteration, TopologyError):
            v = None
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            known = ", ".join(hardware_parameters(topo))
            raise SolverError(f"{vary}: no such hardware number in {topo.name}; known: {known}") from None
        return
    if topo.has_param(vary):
        return
    from ..util.names import SYSTEMS as ALL_SYSTEMS  # every system's form: the symbol may be another's
    closed = {x.name for s in (*(systems or ()), *ALL_SYSTEMS) for x in      # building them registers every symbol
              unloaded_expression(s, metric if metric in METRIC_ALIASES else "tbt").free_symbols}
    if (vary in closed or vary in SYMBOLS) and kind == "unloaded":
        return
    if vary in closed or vary in SYMBOLS:
        raise SolverError(f"{vary} is a symbol of the unloaded closed form; the loaded model varies workload "
                          "arguments, scenario parameters and hardware numbers (node:KIND.FIELD): ask the unloaded "
                          "metric (--unloaded) or vary the hardware number behind it")
    raise SolverError(f"{vary}: not a workload argument, scenario parameter or hardware number "
                      "(e.g. context, cxl_devices, t_layer, node:cxl_device.bandwidth)")


# ---- symbolic forms -------------------------------------------------------------------------------
def _workload_symbols():
    L = sym("L", "dimensionless", "context length (tokens)")
    O = sym("O", "dimensionless", "output tokens per request")
    return L, O


@functools.lru_cache(maxsize=64)
def unloaded_expression(system: str, metric: str, sparse: bool = True) -> sp.Expr:
    """Closed form of an unloaded metric of ``system`` over named symbols (seconds; bytes for bytes_per_step).

    One request alone (``predict(..., concurrency=1, requests=1, cold_staging=False)``): ``ttft`` = the
    client's serial work on the prompt + the request latency + one prefill iteration extending the cached
    prompt by its uncached page; ``tbt`` = one decode step at the mean context ``L + O/2`` loading ``m_mean`` entries per
    layer (the request's mean misses over its output, from the score process), plus, for the pools that copy
    the prompt first (rdma, cxl-prefetch), that copy spread over the ``O - 1`` gaps; ``e2e`` = ttft +
    (O - 1) tbt; ``bytes_per_step`` = the entries a decode step loads; ``ttft_cold`` = an uncached prompt
    prefilled in chunks.
    """
    check_system(system)
    m = METRIC_ALIASES.get(metric)
    if m is None:
        raise SolverError(f"unknown unloaded metric {metric!r}; known: {', '.join(UNLOADED)}")
    L, O = _workload_symbols()
    S = lambda n, u="dimensionless": sym(n, u)  # noqa: E731
    rank, shared, pre, fetch, front = rank_terms(), shared_terms(), prefill_terms(), fetch_terms(), front_end_terms()
    k_attn = sp.Min(sym("topk", "dimensionless", "top-k entries selected per layer"), L) if sparse else L
    m_mean = sym("m_mean", "dimensionless", "entries one request loads per layer per step, mean over its output")
    L_dec = L + O / 2
    buf = sym("buffer_slots", "dimensionless", "GPU buffer slots per request and layer")
    swap_on = sp.Piecewise((1, L_dec > buf), (0, True)) if system not in ("gpu", "rdma-topk") else 0
    decode = (sum(rank.values()).xreplace({S("b"): 1, S("M"): m_mean, S("L"): L_dec, S("k_attn"): k_attn,
                                          S("swap_on"): swap_on})
              + shared["fixed"] + shared["mlp"].xreplace({S("N"): 1, S("N_d"): 1, S("mlp_eff"): S("compute_eff")}))
    # a prefix hit is matched page-aligned: the last 1..page tokens are prefilled
    page = sym("E", "dimensionless", "KV page (tokens): the uncached tail of a prefix hit is 1..page tokens")
    E = L - page * sp.floor((L - 1) / page)
    extend = (shared["fixed"] + shared["mlp"].xreplace({S("N"): E, S("N_d"): E, S("mlp_eff"): S("prefill_eff")})
              + sum(pre.values()).xreplace({S("P"): E, S("H"): L - E, S("k_attn"): k_attn})
              + sym("t_admit", "second", "scheduler work to admit one prefix-hit request"))
    ttft = front["tokenize"] + front["request"] + extend
    if system == "rdma":
        copy_ = sum(fetch.values()).xreplace({S("N_f"): L})
    elif system == "cxl-prefetch":
        copy_ = L * S("layers") * S("entry_bytes", "byte") / sym("pf_dma_bw", "byte/second", "bulk prefix copy bandwidth")
    else:
        copy_ = 0
    tbt = decode + copy_ / (O - 1)
    C = sym("prefill_chunk", "dimensionless", "prompt tokens prefilled per rank per iteration (chunk)")
    full, rest = sp.floor(L / C), L - C * sp.floor(L / C)        # whole chunks and the last part

    def per_chunk(P):
        return (shared["fixed"] + shared["mlp"].xreplace({S("N"): P, S("N_d"): P, S("mlp_eff"): S("prefill_eff")})
                + pre["prefill_proj"].xreplace({S("P"): P}))
    kk = k_attn
    entries = sp.Piecewise((L * (L + 1) / 2, L <= kk), (kk * (kk + 1) / 2 + (L - kk) * kk, True))
    cold = (front["tokenize"] + front["request"]
            + full * per_chunk(C) + sp.Piecewise((per_chunk(rest), rest > 0), (0, True))
            + S("layers") * S("f_index", "FLOP") * L * (L + 1) / 2 / (S("peak_fp8", "FLOP/second") * S("prefill_eff"))
            + S("layers") * S("f_attn", "FLOP") * entries / (S("peak_bf16", "FLOP/second") * S("prefill_eff")))
    nbytes = S("layers") * m_mean * S("entry_bytes", "byte") * (1 if system == "rdma-topk" else swap_on)
    return {"ttft": ttft, "tbt": tbt, "e2e": ttft + (O - 1) * tbt, "bytes_per_step": nbytes, "ttft_cold": cold}[m]


def mean_misses(scenario, system: str, *, context: int, output: int, **resources) -> float:
    """``m_mean``: entries one request alone loads per layer per decode step, averaged over its output."""
    return float(mean_misses_grid(scenario, system, context, output, **resources))


def mean_misses_grid(scenario, system: str, context, output, **resources) -> np.ndarray:
    """``m_mean`` at every (context, output) pair of two broadcastable arrays (same rule as the engine)."""
    from ..serving.engine import cumulative_misses_at
    cfg = resolve(scenario, system, **resources)
    L, O = np.broadcast_arrays(np.asarray(context, dtype=float), np.asarray(output, dtype=float))
    flat_l, flat_o = L.ravel(), np.round(O.ravel())
    out = np.zeros(flat_l.shape)
    # one miss curve per distinct context, evaluated at that context's distinct outputs (a grid repeats both)
    u, inv = np.unique(flat_l, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(u) + 1))
    for j, lv in enumerate(u):
        idx = order[bounds[j]:bounds[j + 1]]
        idx = idx[flat_o[idx] >= 2]
        if idx.size:
            o, back = np.unique(flat_o[idx], return_inverse=True)
            out[idx] = (cumulative_misses_at(cfg, int(round(lv)), o - 1) / (o - 1))[back]
    return out.reshape(L.shape)


def scenario_values(scenario, system: str, **resources) -> dict[str, float]:
    """Numbers for every non-workload symbol of ``system``'s closed forms on ``scenario`` (one request)."""
    cfg = resolve(scenario, system, **resources)
    v = static_values(cfg)
    bw, lat = swap_route(cfg, 1)
    v.update(sw_bw=bw, sw_lat=lat, topk=float(cfg.model.topk or 0), buffer_slots=float(cfg.device_buffer),
             prefill_chunk=float(cfg.prefill_chunk))
    if cfg.system == "rdma":
        from ..serving.config import fetch_bandwidth
        v["nic_bw"] = fetch_bandwidth(cfg, (0,))[0]
    if cfg.system == "cxl-prefetch":
        from ..serving.engine import Model
        v["pf_dma_bw"] = Model(cfg).pf_dma_bw()
    return v


def symbolic(system: str, metric: str, scenario=None, *, free=(), context=None, output=None, **resources):
    """The sympy expression of an unloaded metric (seconds, or bytes for ``bytes_per_step``).

    Without ``scenario``: over named symbols (see :func:`symbol_docs`). With it: every symbol bound except
    those named in ``free`` (and ``L``/``O`` unless ``context``/``output`` are given; ``m_mean`` is bound
    once both are); fully bound, it is a number equal to ``predict(..., concurrency=1, requests=1,
    cold_staging=False)`` (the steady state: the prompt's host-pool entry exists).
    """
    sparse = True
    if scenario is not None:
        sparse = resolve(scenario, system, **resources).model.sparse
    expr = unloaded_expression(system, metric, sparse)
    if scenario is None:
        return expr
    free = {WORKLOAD_SYMBOLS.get(f, f) for f in free}
    vals = scenario_values(scenario, system, **resources)
    if context is not None:
        vals["L"] = float(context)
    if output is not None:
        vals["O"] = float(output)
    if context is not None and output is not None and "m_mean" not in free:
        vals["m_mean"] = mean_misses(scenario, system, context=context, output=output, **resources)
    unknown = free - {s.name for s in expr.free_symbols} - {"L", "O"}
    if unknown:
        raise SolverError(f"{', '.join(sorted(unknown))}: not a symbol of {system} {metric} "
                          f"(symbols: {', '.join(sorted(s.name for s in expr.free_symbols))})")
    subs = {s: vals[s.name] for s in expr.free_symbols if s.name in vals and s.name not in free}
    return expr.xreplace({s: sp.Float(v, 17) for s, v in subs.items()})


def symbol_docs(expr: sp.Expr) -> list[tuple[str, str, str]]:
    """(name, unit, meaning) of the symbols in ``expr``."""
    return [(s.name, SYMBOLS[s.name][1], SYMBOLS[s.name][2]) for s in sorted(expr.free_symbols, key=lambda s: s.name)]


# ---- evaluation helpers ---------------------------------------------------------------------------
DISCRETE = {"cxl_devices", "rdma_nics", "concurrency", "device_buffer", "dp", "topk", "requests"}


def _metric_kind(metric: str) -> str:
    if metric in LOADED:
        return "loaded"
    if metric in METRIC_ALIASES:
        return "unloaded"
    raise SolverError(f"unknown metric {metric!r}; unloaded: {', '.join(UNLOADED)}; loaded: {', '.join(LOADED)}")


def _with_value(topo: Topology, vary: str, value: float) -> tuple[Topology, dict]:
    """Scenario and predict kwargs for one value of the varied quantity."""
    kw = {}
    if vary in ("context", "output", "concurrency", "requests", "cxl_devices", "rdma_nics", "device_buffer", "rate"):
        kw[vary] = int(round(value)) if vary != "rate" else float(value)
        if vary in ("cxl_devices", "rdma_nics"):
            pool = {"cxl_devices": "cxl", "rdma_nics": "rdma"}[vary]
            if kw[vary] > len(topo.pools.get(pool, [])):
                topo = with_pool_size(topo, pool, kw[vary])
        return topo, kw
    t = copy.deepcopy(topo)
    if vary == "topk":
        t.model_overrides = {**t.model_overrides, "index_topk": int(round(value))}
    elif vary == "dp":
        n = int(round(value))
        if n > len(t.gpus):
            raise SolverError(f"dp={n} but the scenario has {len(t.gpus)} GPUs")
        set_param(t, "dp", n)
        set_param(t, "tp", n)
    else:
        set_param(t, vary, value)
    return t, kw


def with_pool_size(topo: Topology, pool: str, n: int) -> Topology:
    """A copy of ``topo`` whose ``pool`` has ``n`` members (extra ones cloned from the first, same links)."""
    t = copy.deepcopy(topo)
    members = t.pools.get(pool)
    if not members:
        raise SolverError(f"{t.name}: no {pool} pool to grow")
    proto = members[0]
    base = proto.split("[")[0]
    while len(t.pools[pool]) < n:
        new = f"{base}[+{len(t.pools[pool])}]"
        t.graph.add_node(new, **copy.deepcopy(t.graph.nodes[proto]))
        for u, _, d in list(t.graph.in_edges(proto, data=True)):
            t.graph.add_edge(u, new, **copy.deepcopy(d))
        for _, v, d in list(t.graph.out_edges(proto, data=True)):
            t.graph.add_edge(new, v, **copy.deepcopy(d))
        t.pools[pool].append(new)
    t._routes.clear()
    return t


def evaluate(scenario, system: str, metric: str, vary: str | None = None, value: float | None = None,
             **fixed) -> float:
    """One number: ``metric`` of ``system`` with ``vary`` = ``value`` and the ``fixed`` workload.

    Unloaded metrics in seconds (bytes for bytes_per_step); loaded ones in the Prediction's units.
    Returns nan when the configuration is infeasible.
    """
    topo = as_topology(scenario)
    kw = dict(fixed)
    if vary is not None:
        topo, extra = _with_value(topo, vary, value)
        kw.update(extra)
    if _metric_kind(metric) == "unloaded":
        res = {k: kw.pop(k) for k in ("cxl_devices", "rdma_nics", "device_buffer") if k in kw}
        ctx, out = kw.pop("context", None), kw.pop("output", None)
        for k in ("concurrency", "requests", "rate"):
            kw.pop(k, None)
        if ctx is None or out is None:
            raise SolverError("unloaded metrics need context and output")
        e = symbolic(system, metric, topo, context=ctx, output=out, **res)
        return float(e)
    kw.setdefault("concurrency", 1)
    try:
        p = predict(topo, system, **kw)
    except PositionError:          # longer than the model's positions: infeasible on any hardware
        return math.nan
    return getattr(p, metric) if p.feasible else math.nan


# ---- break-even -----------------------------------------------------------------------------------
@dataclass
class BreakEven:
    """Where systems ``a`` and ``b`` give the same metric as ``vary`` goes from lo to hi."""
    a: str
    b: str
    metric: str
    vary: str
    lo: float
    hi: float
    found: bool
    value: float | None                       # the first crossing
    values: list[float] = field(default_factory=list)
    method: str = "numeric"
    residual: float | None = None             # |f_a - ratio f_b| / |f_b| at the crossing
    winner_below: str | None = None           # winner just below the first crossing
    winner_above: str | None = None           # winner just above it
    winner: str | None = None                 # winner throughout, when nothing crosses
    ratio: float = 1.0
    curve: dict = field(default_factory=dict, repr=False)
    message: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _better(metric: str, fa: float, fb: float, ratio: float, a: str, b: str) -> str:
    hib = metric in HIGHER_IS_BETTER
    return a if ((fa > ratio * fb) if hib else (fa < ratio * fb)) else b


def breakeven(scenario, a: str, b: str, *, metric: str, vary: str, lo: float, hi: float, ratio: float = 1.0,
              points: int = 48, **fixed) -> BreakEven:
    """Find where ``metric(a) = ratio x metric(b)`` as ``vary`` goes from ``lo`` to ``hi``.

    ``vary``: context, output, topk, concurrency, cxl_devices, rdma_nics, device_buffer, a scenario parameter
    (``t_layer``), or a hardware number (``node:cxl_device.bandwidth``, ``link:gpu.latency``). ``ratio``
    = 1.1 asks where ``a`` becomes 10% worse than ``b`` (for latency metrics). Unloaded metrics are solved
    in closed form by sympy when it can, else numerically (scipy ``brentq`` between sign changes on a
    grid of ``points``); every crossing in the range is reported.
    """
    check_system(a)
    check_system(b)
    for name, v in (("lo", lo), ("hi", hi), ("ratio", ratio)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise SolverError(f"{name} must be a finite number, got {v!r}")
    if lo >= hi:
        raise SolverError(f"need lo < hi, got lo={lo:g}, hi={hi:g}")
    if not ratio > 0:
        raise SolverError(f"ratio must be positive, got {ratio:g}")
    if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or not 2 <= points <= LIMITS["points"]:
        raise SolverError(f"points must be a whole number from 2 to {LIMITS['points']:,}, got {points!r}")
    if lo < 0 or (lo == 0 and kind_of(vary) not in ("time", "number")):
        raise SolverError(f"{vary} must stay positive: lo = {fmt_value(lo, kind_of(vary))}")
    for k in ("context", "output"):
        _positive_tokens(k, fixed.get(k), required=False)
    kind = _metric_kind(metric)
    for k in ("context", "output"):
        if k not in fixed and vary != k:
            raise SolverError(f"breakeven needs {k}= (or vary={k!r})")
    topo = _topology(scenario)
    _check_vary(topo, vary, kind, (a, b), metric)
    discrete = vary in DISCRETE
    fast = {s: _unloaded_fn(topo, s, metric, vary, fixed) for s in (a, b)} if kind == "unloaded" else {}

    def f(s, x):
        with np.errstate(divide="ignore", invalid="ignore"):      # e.g. TBT at output 1: nan, not a warning
            if fast.get(s):
                return float(fast[s](x))
            return evaluate(topo, s, metric, vary, x, **fixed)
    d = lambda x: f(a, x) - ratio * f(b, x)  # noqa: E731
    res = BreakEven(a, b, metric, vary, lo, hi, False, None, ratio=ratio)

    sym_roots = _symbolic_roots(topo, a, b, metric, vary, lo, hi, ratio, fixed) if kind == "unloaded" else None
    if discrete:
        xs = np.unique(np.round(np.linspace(lo, hi, min(points, int(hi - lo) + 1))).astype(int)).astype(float)
    elif lo > 0 and hi / lo > 20:
        xs = np.geomspace(lo, hi, points)
    else:
        xs = np.linspace(lo, hi, points)
    pairs = [(s_, x) for s_ in (a, b) for x in xs]
    if kind == "loaded" or not all(fast.values()):
        pairs = track(pairs, f"breakeven {a} vs {b} over {vary}")
    vals = np.array([f(s_, x) for s_, x in pairs])
    fa, fb = vals[:len(xs)], vals[len(xs):]
    res.curve = {"x": xs.tolist(), a: fa.tolist(), b: fb.tolist()}
    diff = fa - ratio * fb
    ok = np.isfinite(diff)
    if not ok.any():
        res.message = "both systems are infeasible over the whole range"
        return res
    if sym_roots is not None:
        roots, res.method = sym_roots, "symbolic"
    else:
        roots = []
        for i in range(len(xs) - 1):
            if not (ok[i] and ok[i + 1]) or diff[i] * diff[i + 1] > 0:
                continue
            if diff[i] == 0:
                roots.append(float(xs[i]))
            elif discrete:                          # bisect on integers: first value on the other side
                lo_i, hi_i = int(xs[i]), int(xs[i + 1])
                while hi_i - lo_i > 1:
                    mid = (lo_i + hi_i) // 2
                    dm = d(mid)
                    if math.isfinite(dm) and dm * diff[i] > 0:
                        lo_i = mid
                    else:
                        hi_i = mid
                roots.append(float(hi_i))
            elif diff[i + 1] != 0:
                roots.append(float(brentq(d, xs[i], xs[i + 1], xtol=1e-9 * max(1.0, abs(xs[i])), rtol=1e-12)))
        roots = sorted(set(roots))
    at = lambda x: fmt_value(x, kind_of(vary))  # noqa: E731
    if not roots:
        w = {_better(metric, x, y, ratio, a, b) for x, y in zip(fa[ok], fb[ok])}
        res.winner = w.pop() if len(w) == 1 else None
        res.message = (f"no crossing for {vary} in [{at(lo)}, {at(hi)}]: "
                       f"{_throughout(metric, a, b, ratio, res.winner)}" if res.winner
                       else "no crossing found, but the winner changes where a system becomes infeasible")
        return res
    res.found, res.values, res.value = True, roots, roots[0]
    fa0, fb0 = f(a, roots[0]), f(b, roots[0])
    res.residual = abs(fa0 - ratio * fb0) / max(abs(fb0), 1e-300)   # for a discrete vary: the gap there
    below = xs[xs < roots[0]]
    above = xs[xs > roots[0]]
    if len(below):
        res.winner_below = _better(metric, f(a, below[-1]), f(b, below[-1]), ratio, a, b)
    if len(above):
        res.winner_above = _better(metric, f(a, above[0]), f(b, above[0]), ratio, a, b)
    where = f"{vary} = {at(roots[0])}" + (f" (and at {', '.join(at(r) for r in roots[1:])})" if len(roots) > 1
                                          else "")
    res.message = (f"{a} and {b} cross at {where}" if ratio == 1 else
                   f"{metric} of {a} reaches {ratio:g} x that of {b} at {where}")
    return res


def _throughout(metric: str, a: str, b: str, ratio: float, winner: str) -> str:
    """Words for a side that holds over the whole range; with a ratio, 'stays within 1.05x', not 'wins'."""
    if ratio == 1:
        return f"{winner} is better throughout"
    below = (winner == a) != (metric in HIGHER_IS_BETTER)     # a's metric stays below ratio x b's
    if below and ratio > 1 and metric not in HIGHER_IS_BETTER:
        return f"{metric} of {a} stays within {ratio:g}x that of {b} throughout"
    return f"{metric} of {a} stays {'below' if below else 'above'} {ratio:g} x that of {b} throughout"


def _free_form(system, metric, topo, name, fx, res):
    """Closed form with ``name`` left free; a system whose metric does not depend on it gets a constant."""
    try:
        return symbolic(system, metric, topo, free=(name,), **fx, **res)
    except SolverError:
        if name not in SYMBOLS:
            raise
        return symbolic(system, metric, topo, **fx, **res)


def _unloaded_fn(topo, system, metric, vary, fixed):
    """A compiled f(x) of an unloaded metric when ``vary`` is a symbol of its closed form, else None."""
    name = WORKLOAD_SYMBOLS.get(vary, vary)
    if ":" in vary or vary in ("cxl_devices", "rdma_nics", "device_buffer", "topk", "dp", "concurrency"):
        return None
    fx = {k: v for k, v in fixed.items() if k in ("context", "output") and WORKLOAD_SYMBOLS[k] != name}
    res = {k: v for k, v in fixed.items() if k in ("cxl_devices", "rdma_nics", "device_buffer")}
    try:
        e = _free_form(system, metric, topo, name, fx, res)
    except SolverError:
        return None
    x = sp.Symbol(name, positive=True)
    mm = sp.Symbol("m_mean", positive=True)
    if e.free_symbols - {x, mm}:
        return None
    if mm in e.free_symbols:               # the mean misses follow the varied context or output numerically
        g = _lambdify(e, (name, "m_mean"))
        L0, O0 = fixed.get("context"), fixed.get("output")
        res_ = {k: v for k, v in fixed.items() if k in ("cxl_devices", "rdma_nics", "device_buffer")}

        def f_m(v):
            L_ = v if name == "L" else L0
            O_ = v if name == "O" else O0
            return g(v, mean_misses_grid(topo, system, L_, O_, **res_))
        return f_m
    f = _lambdify(e, (name,))
    return f if e.free_symbols else (lambda x_, c=float(e): c)


def _symbolic_roots(topo, a, b, metric, vary, lo, hi, ratio, fixed):
    """Closed-form roots when ``vary`` is a symbol and the difference is polynomial in it; else None."""
    name = {"context": "L", "output": "O"}.get(vary, vary)
    if vary in ("cxl_devices", "rdma_nics", "concurrency", "device_buffer", "topk", "dp") or ":" in vary:
        return None
    if "context" not in fixed and vary != "context" or "output" not in fixed and vary != "output":
        return None
    fx = {k: v for k, v in fixed.items() if k in ("context", "output")}
    res = {k: v for k, v in fixed.items() if k in ("cxl_devices", "rdma_nics", "device_buffer")}
    try:
        ea = _free_form(a, metric, topo, name, fx, res)
        eb = _free_form(b, metric, topo, name, fx, res)
    except SolverError:
        return None
    x = sp.Symbol(name, positive=True)
    if sp.Symbol("m_mean", positive=True) in (ea.free_symbols | eb.free_symbols):
        return None                 # the mean misses depend on the varied context/output numerically
    diff = ea - ratio * eb          # like terms of a and b already combine here, without simplify
    if any(x in f.free_symbols for f in diff.atoms(sp.Min, sp.Max, sp.Piecewise)):
        return None                 # piecewise in x: the numeric root finder handles it (simplify would be slow)
    diff = sp.simplify(diff)
    if diff.has(sp.Min, sp.Max, sp.Piecewise) or x not in diff.free_symbols:
        return None
    num, _ = sp.fraction(sp.together(diff))
    try:
        poly = sp.Poly(sp.expand(num), x)
    except sp.PolynomialError:
        return None
    if poly.degree() > 4:
        return None
    roots = [float(sp.re(r)) for r in sp.solve(poly.as_expr(), x)
             if abs(complex(r).imag) < 1e-12 * max(1.0, abs(complex(r).real)) and lo <= float(sp.re(r)) <= hi]
    return sorted(roots)


# ---- planning -------------------------------------------------------------------------------------


def prices(path: str | Path | None = None) -> dict[str, dict]:
    """The price table (USD per hour of each part); see ``sacmodel/data/prices.yaml`` for sources."""
    p = Path(path) if path else PRICE_FILE
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SolverError(f"{p}: cannot read price table ({exc})") from None
    parts = data.get("parts") if isinstance(data, dict) else None
    if not isinstance(parts, dict) or not parts:
        raise SolverError(f"{p}: a price table maps 'parts:' to entries like 'gpu: {{usd_per_hour: 2.0}}'")
    for k, v in parts.items():
        usd = v.get("usd_per_hour") if isinstance(v, dict) else None
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not (math.isfinite(usd) and usd >= 0):
            raise SolverError(f"{p}: parts.{k}.usd_per_hour must be a non-negative number, got {usd!r}")
    return parts


def configuration_cost(scenario, system: str, *, cxl_devices=None, rdma_nics=None, dp=None,
                       price_table=None) -> dict[str, float]:
    """USD per hour of the parts a configuration uses (GPUs; CXL devices, adapters, switch; NICs)."""
    cfg = resolve(scenario, system)   # counts above the scenario's pool size are priced as planned additions
    pt = prices(price_table)
    t = cfg.topo
    n_gpu = int(dp or cfg.dp)
    parts = {"gpu": n_gpu}
    if system in ("cxl", "cxl-prefetch"):
        parts.update(cxl_device=cxl_devices or cfg.cxl_devices, cxl_adapter=len(t.nodes_of("cxl_adapter")),
                     cxl_switch=len(t.nodes_of("cxl_switch")))
    if system in ("rdma", "rdma-topk"):
        parts["rdma_nic"] = rdma_nics or cfg.rdma_nics
    cost = {k: n * float(pt[k]["usd_per_hour"]) for k, n in parts.items()}
    cost["total"] = sum(cost.values())
    return cost


@dataclass
class PlanResult:
    system: str
    vary: str
    slo: dict
    found: bool
    value: float | None
    prediction: dict | None = None           # at the chosen value
    prediction_one_less: dict | None = None  # at one step less (misses the SLO)
    cost_usd_per_hour: dict | None = None
    message: str = ""
    tried: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _meets(pred, slo: dict) -> bool:
    if not pred.feasible:
        return False
    for m, target in slo.items():
        v = getattr(pred, m, None)
        if v is None or not math.isfinite(v):
            return False
        if (m in HIGHER_IS_BETTER and v < target) or (m not in HIGHER_IS_BETTER and v > target):
            return False
    return True


def _check_slo(slo: dict):
    if not slo:
        raise SolverError("give at least one SLO, e.g. {'tbt_mean_ms': 80}")
    for m, v in slo.items():
        if m not in LOADED:
            raise SolverError(f"unknown SLO metric {m!r}; known: {', '.join(LOADED)}")
        if not (isinstance(v, (int, float)) and v > 0):
            raise SolverError(f"SLO {m} must be a positive number")


def plan(scenario, system: str, *, workload: dict, slo: dict, vary: str = "cxl_devices", max_value: float = 16,
         min_value: float = 1, step: float | None = None, price_table=None) -> PlanResult:
    """Smallest ``vary`` in [min, max] (in ``step``s) meeting the SLO.

    ``vary``: cxl_devices, rdma_nics (pools grow by cloning their first member), dp (GPUs), device_buffer,
    or a hardware number such as ``node:cxl_device.capacity`` / ``node:host_dram.capacity`` (give ``step``).
    The prediction at one step less is returned too (it misses the SLO), with the cost of the parts.
    """
    _check_slo(slo)
    check_system(system)
    _check_workload(workload)
    topo = _topology(scenario)
    _check_vary(topo, vary)
    res = PlanResult(system, vary, dict(slo), False, None)
    step = step or (512 if vary == "device_buffer" else 1)
    _check_range(vary, min_value, max_value, step)
    prev = None
    for v in track(np.arange(min_value, max_value + step / 2, step), f"plan {system}: {vary}"):
        v = int(v) if float(v).is_integer() else float(v)
        t, kw = _with_value(topo, vary, v)
        p = predict(t, system, **{**workload, **kw})
        ok = _meets(p, slo)
        res.tried.append({"value": v, "meets": ok, "feasible": p.feasible, "limit": p.limit,
                          **{m: getattr(p, m) for m in slo}})
        if ok:
            res.found, res.value, res.prediction = True, v, p.to_dict()
            res.prediction_one_less = prev.to_dict() if prev is not None else None
            kwc = {k: kw[k] for k in ("cxl_devices", "rdma_nics") if k in kw}
            if vary == "dp":
                kwc["dp"] = v
            res.cost_usd_per_hour = configuration_cost(t, system, price_table=price_table, **kwc)
            res.message = (f"smallest {vary} meeting the SLO: {v}" +
                           ("" if prev is None else f" ({vary} = {v - step} misses it)"))
            return res
        prev = p
    res.message = f"no {vary} in [{min_value}, {max_value}] meets the SLO"
    return res


def max_load(scenario, system: str, *, workload: dict, slo: dict, vary: str = "concurrency",
             max_value: int = 1024, min_value: int = 1) -> PlanResult:
    """Largest ``vary`` (concurrency or context) in [min, max] that a configuration sustains within the SLO.

    Bisection assumes the metrics worsen monotonically in ``vary``; the neighbours of the answer are checked.
    """
    _check_slo(slo)
    check_system(system)
    _check_workload(workload)
    if vary not in ("concurrency", "context", "output", "rate"):
        raise SolverError(f"max_load varies concurrency, context, output or rate, not {vary!r}")
    _check_range(vary, min_value, max_value, 1)
    if vary != "rate" and not (float(min_value).is_integer() and float(max_value).is_integer()):
        raise SolverError(f"max_load over {vary}: min and max must be whole numbers")
    top = {"concurrency": LIMITS["concurrency"], "rate": math.inf}.get(vary, LIMITS["tokens"])
    if max_value > top:
        raise SolverError(f"max_load over {vary}: max at most {top:,} (a documented limit)")
    topo = _topology(scenario)
    for key, pool in (("cxl_devices", "cxl"), ("rdma_nics", "rdma")):
        if workload.get(key) and workload[key] > len(topo.pools.get(pool, [])):
            topo = with_pool_size(topo, pool, workload[key])

    def meets(v):
        p = predict(topo, system, **{**workload, vary: v})
        return _meets(p, slo), p
    res = PlanResult(system, vary, dict(slo), False, None)
    with status(f"max_load {system}: bisection on {vary}"):
        return _max_load(res, meets, vary, min_value, max_value)


def _check_workload(workload) -> None:
    if not isinstance(workload, dict):
        raise SolverError(f"workload must be a dict of predict() arguments, got {type(workload).__name__}")
    for k in ("context", "output"):
        _positive_tokens(k, workload.get(k), required=False)


def _check_range(vary: str, lo, hi, step) -> None:
    for name, v in (("min", lo), ("max", hi), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise SolverError(f"{vary}: {name} must be a finite number, got {v!r}")
    if not (0 < lo <= hi and step > 0):
        raise SolverError(f"{vary}: need 0 < min <= max and step > 0, got min {lo:g}, max {hi:g}, step {step:g}")
    if (hi - lo) / step + 1 > LIMITS["points"]:
        raise SolverError(f"{vary}: at most {LIMITS['points']:,} values from min to max (a documented limit)")


def _max_load(res, meets, vary, min_value, max_value):
    ok_lo, p_lo = meets(min_value)
    if not ok_lo:
        res.message = f"even {vary} = {min_value} misses the SLO"
        res.prediction = p_lo.to_dict()
        return res
    ok_hi, p_hi = meets(max_value)
    if ok_hi:
        res.found, res.value, res.prediction = True, max_value, p_hi.to_dict()
        res.message = f"{vary} = {max_value} (the upper end) still meets the SLO"
        return res
    lo, hi = min_value, max_value
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid)[0]:
            lo = mid
        else:
            hi = mid
    res.found, res.value = True, lo
    res.prediction = meets(lo)[1].to_dict()
    res.prediction_one_less = meets(hi)[1].to_dict()   # one step more: misses
    res.message = f"largest {vary} within the SLO: {lo} ({vary} = {hi} misses it)"
    return res


# ---- sensitivity ----------------------------------------------------------------------------------
HARDWARE_SYMBOLS = {"sw_bw": "pool-route bandwidth the GPU gets", "sw_lat": "pool-route load latency",
                    "hbm_bw": "GPU HBM bandwidth", "peak_bf16": "GPU BF16 FLOP/s", "peak_fp8": "GPU FP8 FLOP/s",
                    "pf_rate": "RDMA NIC rate", "rdma_op_cost": "RDMA per-operation cost",
                    "ikey_bw": "indexer-key scan bandwidth", "pf_dma_bw": "bulk CXL copy bandwidth",
                    "cacheline": "cache-line size", "outstanding_lines": "loads in flight per gather kernel",
                    "t_kernel": "gather kernel fixed cost", "copy_bandwidth": "staging copy bandwidth",
                    "admit_bandwidth": "prefix indexer-key load bandwidth"}


def symbol_kind(name: str) -> str:
    """'hardware', 'model' or 'software' (fitted serving constants) for a symbol of the closed forms."""
    if name in HARDWARE_SYMBOLS:
        return "hardware"
    if name in ("layers", "p_attn", "p_expert", "p_dense_mlp", "moe_layers", "dense_layers", "n_experts",
                "e_active", "n_shared", "f_index", "f_attn", "index_key_bytes", "entry_bytes", "topk",
                "lines_per_entry", "w_bytes"):
        return "model"
    return "software"


def sensitivity(scenario, system: str, metric: str = "tbt", *, context: int, output: int = 1024,
                **resources) -> list[tuple[str, float, float, str]]:
    """Elasticities d ln(metric) / d ln(p) at a point for every bound symbol p, ranked by |elasticity|.

    Returns (symbol, elasticity, value, meaning). Symbols are the topology, model and calibration numbers
    the unloaded metric depends on (e.g. ``sw_bw`` = the pool-route bandwidth the GPU sees).
    """
    _positive_tokens("context", context)
    _positive_tokens("output", output)
    scenario = _topology(scenario)
    expr = symbolic(system, metric, scenario, free=_all_free(system, metric, scenario, resources),
                    context=context, output=output, **resources)
    vals = scenario_values(scenario, system, **resources)
    vals.update(L=float(context), O=float(output),
                m_mean=mean_misses(scenario, system, context=context, output=output, **resources))
    f = float(expr.xreplace({s: vals[s.name] for s in expr.free_symbols}))
    out = []
    for s in sorted(expr.free_symbols, key=lambda s: s.name):
        if s.name in ("L", "O"):
            continue
        d = sp.diff(expr, s)
        dv = float(d.xreplace({x: vals[x.name] for x in d.free_symbols}))
        el = dv * vals[s.name] / f if f else 0.0
        if el != 0.0:
            out.append((s.name, el, vals[s.name], SYMBOLS[s.name][2]))
    return sorted(out, key=lambda r: -abs(r[1]))


def _all_free(system, metric, scenario, resources):
    sparse = resolve(scenario, system, **resources).model.sparse
    names = {s.name for s in unloaded_expression(system, metric, sparse).free_symbols} - {"L", "O"}
    return tuple(n for n in names if n not in ("flop_unit", "b", "B", "swap_on", "pool_on", "rdma_topk_on", "m_mean"))


# ---- sweeps ---------------------------------------------------------------------------------------
def sweep(scenario, system: str, grid: dict, metric: str = "tbt", *, context=None, output=1024,
          **resources) -> dict[str, np.ndarray]:
    """Vectorised unloaded ``metric`` over the Cartesian product of ``grid`` (name -> array of values).

    Grid names are symbols of the closed form (``context``/``L``, ``output``/``O``, ``sw_bw``, ``hbm_bw``,
    ``t_layer``, ...); ``output`` (default 1024) matters through the context a decode step sees. Returns
    columns: one per grid name plus ``metric`` (seconds or bytes).
    """
    if not isinstance(grid, dict) or not grid:
        raise SolverError("grid must be a non-empty dict of name -> values")
    names = list(grid)
    syms = [WORKLOAD_SYMBOLS.get(n, n) for n in names]
    ctx = None if "L" in syms else _positive_tokens("context", context, required=False)
    out_ = None if "O" in syms else _positive_tokens("output", output)
    if ctx is None and "L" not in syms:
        raise SolverError("give context= or put 'context' in the grid")
    axes = [_finite_array(n, grid[n], positive=kind_of(n) not in ("time", "number")) for n in names]
    size = math.prod(len(x) for x in axes)
    if size > LIMITS["sweep_points"]:
        raise SolverError(f"the grid has {size:,} points; at most {LIMITS['sweep_points']:,} per sweep "
                          "(a documented limit: split it)")
    topo = _topology(scenario)
    expr = symbolic(system, metric, topo, free=tuple(syms), context=ctx, output=out_, **resources)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = {n: m.ravel() for n, m in zip(names, mesh)}
    args = [cols[n] for n in names]
    if sp.Symbol("m_mean", positive=True) in expr.free_symbols:     # context or output in the grid
        L_ = cols[names[syms.index("L")]] if "L" in syms else ctx
        O_ = cols[names[syms.index("O")]] if "O" in syms else out_
        f = _lambdify(expr, tuple(syms) + ("m_mean",))
        val = f(*args, mean_misses_grid(topo, system, L_, O_, **resources))
    else:
        f = _lambdify(expr, tuple(syms))
        val = f(*args)
    cols[metric] = np.broadcast_to(np.asarray(val, dtype=float), (mesh[0].size,)).copy()
    return cols


_LAMBDAS: dict = {}


def _lambdify(expr, names):
    key = (sp.srepr(expr), names)
    if key not in _LAMBDAS:
        _LAMBDAS[key] = sp.lambdify([sp.Symbol(n, positive=True) for n in names], expr, modules="numpy")
    return _LAMBDAS[key]


def _predict_point(args):
    """One point of a full sweep; a point the configuration cannot take (a context beyond the model's
    positions, more CXL devices than the scenario has...) is an infeasible row with the reason, not an abort."""
    scenario, system, kw = args
    try:
        p = predict(scenario, system, **kw)
    except ConfigError as exc:
        from ..serving.predict import Prediction, output_spec
        lo, hi = output_spec(kw.get("output", 1024))
        n = kw.get("requests") or 8 * kw.get("concurrency", 1)
        p = Prediction(system, getattr(scenario, "name", str(scenario)), kw.get("context", 0),
                       hi if lo == hi else (lo, hi), kw.get("concurrency", 1), n, False, str(exc),
                       success_fraction=0.0, config={k: v for k, v in kw.items() if k not in ("context", "output")})
    return p.to_dict()


def sweep_predict(scenario, system: str, grid: dict, *, fixed: dict | None = None, workers: int | None = None,
                  scheduler: str | None = None, progress: bool = True) -> list[dict]:
    """Full ``predict`` over the Cartesian product of ``grid`` (workload/resource arguments).

    Runs on all local cores (processes) with a progress bar, or on a Dask cluster when ``scheduler``
    (``tcp://host:port``) is given. Returns one Prediction dict per point, in grid order.
    """
    names = list(grid)
    bad = [n for n in names if n not in ("context", "output", "concurrency", "requests", "rate", "cxl_devices",
                                         "rdma_nics", "device_buffer")]
    if bad:
        raise SolverError(f"a full sweep varies predict() arguments (context, output, concurrency, requests, "
                          f"rate, cxl_devices, rdma_nics, device_buffer), not {', '.join(bad)}; vary hardware "
                          "numbers with the vectorised sweep or breakeven")
    size = math.prod(len(grid[n]) for n in names)
    if size > LIMITS["predictions"]:
        raise SolverError(f"the grid has {size:,} points; at most {LIMITS['predictions']:,} predictions per full "
                          "sweep (a documented limit)")
    combos = [dict(zip(names, vals)) for vals in itertools.product(*[list(grid[n]) for n in names])]
    topo = _topology(scenario)
    jobs = [(topo, system, {**(fixed or {}), **{k: (int(v) if k != "rate" else float(v)) for k, v in c.items()}})
            for c in combos]
    if scheduler:
        try:
            from dask.distributed import Client
        except ImportError:
            raise SolverError("--scheduler needs dask.distributed: pip install 'sacmodel[dask]'") from None
        with Client(scheduler, timeout="10s") as client:
            futures = client.map(_predict_point, jobs, pure=False)
            return client.gather(futures)
    workers = workers or os.cpu_count() or 1
    label = f"predict {system}"
    if workers == 1 or len(jobs) < 8:
        return [_predict_point(j) for j in (track(jobs, label) if progress else jobs)]
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(workers) as ex:
        results = ex.map(_predict_point, jobs, chunksize=max(1, len(jobs) // (8 * workers)))
        return list(track(results, label, total=len(jobs)) if progress else results)


def winner_map(scenario, systems, metric: str, x: tuple[str, np.ndarray], y: tuple[str, np.ndarray],
               **fixed) -> dict:
    """Which system has the best ``metric`` at every (x, y) grid point.

    An unloaded metric (``tbt``, ``ttft``, ``e2e``...: one request alone) is evaluated by vectorised sweeps of
    its closed form; a loaded one (``tbt_mean_ms``...: a Prediction field) by ``predict`` at every point with
    the ``fixed`` workload (give ``concurrency``). ``winner`` holds indices into ``systems``, -1 where no
    system is feasible; ``values`` the metric per system (nan where infeasible).
    """
    if isinstance(systems, str) or not systems:
        raise SolverError("systems must be a non-empty list of system names")
    for s in systems:
        check_system(s)
    kind = _metric_kind(metric)
    (xn, xv), (yn, yv) = x, y
    xv = _finite_array(xn, xv, positive=kind_of(xn) not in ("time", "number"))
    yv = _finite_array(yn, yv, positive=kind_of(yn) not in ("time", "number"))
    cells = len(xv) * len(yv)
    limit = LIMITS["map_cells"] if kind == "unloaded" else LIMITS["predictions"] // len(systems)
    if cells > limit:
        raise SolverError(f"the map has {cells:,} cells; at most {limit:,} for {len(systems)} {kind} systems "
                          "(a documented limit)")
    topo = _topology(scenario)
    vals = []
    for s in systems:
        if kind == "unloaded":
            v = sweep(topo, s, {xn: xv, yn: yv}, metric, **fixed)[metric]
        else:
            v = _loaded_grid(topo, s, metric, (xn, xv), (yn, yv), fixed)
        vals.append(np.asarray(v, dtype=float).reshape(len(xv), len(yv)))
    arr = np.stack(vals)
    ok = np.isfinite(arr)
    pick = np.where(ok, arr, -np.inf if metric in HIGHER_IS_BETTER else np.inf)
    best = np.argmax(pick, axis=0) if metric in HIGHER_IS_BETTER else np.argmin(pick, axis=0)
    best = np.where(ok.any(axis=0), best, -1)
    return {"x": xv, "y": yv, "winner": best, "systems": list(systems), "values": arr, "kind": kind}


def _loaded_grid(topo, system, metric, x, y, fixed) -> list[float]:
    """``predict`` at every (x, y) point (x-major), nan where infeasible."""
    (xn, xv), (yn, yv) = x, y
    _check_vary(topo, xn)
    _check_vary(topo, yn)
    out = []
    for xi, yi in track(list(itertools.product(xv, yv)), f"winner map: {system}"):
        t, kw = _with_value(topo, xn, xi)
        t, kw2 = _with_value(t, yn, yi)
        out.append(evaluate(t, system, metric, **{**fixed, **kw, **kw2}))
    return out


def hardware_parameters(scenario) -> list[str]:
    """Every rate/latency number of the scenario's nodes and GPU links, as ``node:KIND.FIELD`` names."""
    t = as_topology(scenario)
    names = set()
    for _, d in t.graph.nodes(data=True):
        for fld in d.get("sources", {}):
            if "capacity" not in fld:
                names.add(f"node:{d['kind']}.{fld}")
    for fld in ("latency", "bandwidth"):
        names.add(f"link:gpu.{fld}")
    return sorted(names)


def sensitivity_loaded(scenario, system: str, metric: str = "tbt_mean_ms", *, rel: float = 0.01,
                       params=None, **workload) -> list[tuple[str, float, float, str]]:
    """Elasticities of a loaded metric (``predict`` at the given workload) by central log differences.

    ``params`` default: every hardware number (:func:`hardware_parameters`) and the fitted serving constants.
    A parameter whose change makes the configuration infeasible gets elasticity nan.
    """
    from ..fit.calibrate import SERVING_PARAMS
    if metric not in LOADED:
        raise SolverError(f"loaded sensitivity takes a Prediction metric ({', '.join(LOADED)})")
    check_system(system)
    if not (isinstance(rel, (int, float)) and 0 < rel < 1):
        raise SolverError(f"rel must be a relative step in (0, 1), got {rel!r}")
    topo = _topology(scenario)
    params = list(params or hardware_parameters(topo) + [p for p in SERVING_PARAMS if topo.has_param(p)])
    base = predict(topo, system, **workload)
    if not base.feasible:
        raise SolverError(f"the configuration is infeasible ({base.limit}): no sensitivity to report")
    out = []
    for name in track(params, f"sensitivity of {metric} ({system})"):
        try:
            v0 = get_param(topo, name)
        except (TopologyError, IndexError, StopIteration, KeyError):
            continue
        if not v0:
            continue
        vals = []
        for fac in (1 + rel, 1 / (1 + rel)):
            t = copy.deepcopy(topo)
            set_param(t, name, v0 * fac)
            p = predict(t, system, **workload)
            vals.append(getattr(p, metric) if p.feasible else math.nan)
        el = (math.log(vals[0]) - math.log(vals[1])) / (2 * math.log(1 + rel)) if all(
            v > 0 for v in vals) else math.nan
        out.append((name, el, v0, "loaded, numeric"))
    return sorted(out, key=lambda r: -abs(r[1]) if math.isfinite(r[1]) else 0)
