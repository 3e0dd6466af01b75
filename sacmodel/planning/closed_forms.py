"""Closed forms of the *unloaded* metrics (one request alone on the system), built from the same sympy
expressions the serving engine evaluates; bound to a scenario they equal ``predict(..., concurrency=1,
requests=1, cold_staging=False)``.
"""
from __future__ import annotations

import functools
import math
import pickle
from pathlib import Path

import numpy as np

from ..hardware.params import get_param
from ..hardware.scenarios import as_topology
from ..hardware.topology import Topology, TopologyError
from ..serving.config import PositionError, resolve, static_values, swap_route
from ..serving.costs import SYMBOLS, sym
from ..serving.predict import predict
from ..serving.engine.stepmodel import MLA_CHUNKED_PREFIX
from ..serving.step import eager_iteration, fetch_terms, front_end_terms, prefill_terms, rank_terms, shared_terms
from ..serving.systems import check_system
from ..util import cache
from ..util.lazy import lazy_module
from ..util.names import UNLOADED
from .common import METRIC_ALIASES, WORKLOAD_SYMBOLS, SolverError, _metric_kind, _with_value, hardware_parameters

sp = lazy_module("sympy")      # loads when an expression is first built (a loaded search needs none)


def _workload_symbols():
    L = sym("L", "dimensionless", "context length (tokens)")
    O = sym("O", "dimensionless", "output tokens per request")
    return L, O


def unloaded_expression(system: str, metric: str, sparse: bool = True, kind: str = "mla") -> sp.Expr:
    """Closed form of an unloaded metric of ``system`` over named symbols (see :func:`_build`): built once per
    process and kept in the on-disk cache (:mod:`sacmodel.util.cache`), since sympy takes seconds to build it."""
    check_system(system)
    if METRIC_ALIASES.get(metric) is None:
        raise SolverError(f"unknown unloaded metric {metric!r}; known: {', '.join(UNLOADED)}")
    return _cached(system, metric, bool(sparse), str(kind))


def _code() -> tuple[str, ...]:
    """The modules an expression is built from (an edit to any of them rebuilds it)."""
    pkg = Path(__file__).resolve().parents[1]
    return tuple(sorted(str(f.relative_to(pkg)) for d in ("serving", "planning", "util")
                        for f in (pkg / d).rglob("*.py")))


@functools.lru_cache(maxsize=64)
def _cached(system: str, metric: str, sparse: bool, kind: str) -> sp.Expr:
    """One metric of the system's forms. The on-disk entry holds all five metrics of ``system``: they are built
    together (each is made of the same parts), and a process building them holds the entry's lock, so that the
    test suite's workers and CLI subprocesses build each system's forms once between them."""
    k = cache.key(system, str(sparse), kind, sp.__version__, code=_code())
    entry = cache.load("closed-form", k, _load_forms)
    if entry is None:
        with cache.lock("closed-form", k):
            entry = cache.load("closed-form", k, _load_forms)     # built by another process while this waited
            if entry is None:
                forms = _build_all(system, sparse, kind)
                units = {s.name: SYMBOLS[s.name][1:] for e in forms.values() for s in e.free_symbols
                         if s.name in SYMBOLS}
                cache.store("closed-form", k, (forms, units))
                return forms[METRIC_ALIASES[metric]]
    forms, units = entry
    for name, (unit, desc) in units.items():      # the symbols' units, as building them registers
        sym(name, unit, desc)
    return forms[METRIC_ALIASES[metric]]


def _load_forms(fh):
    """Stored forms as they were built. A plain unpickling rebuilds each node through its class's constructor,
    which simplifies again (the Max and Min of the launch overlap: seconds a system, as long as building them);
    the stored nodes are already in canonical form, so they are rebuilt without evaluation, and a Sum (whose
    constructor multiplies its summand by its orientation) from its stored arguments as they are."""
    from sympy.core.parameters import evaluate

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("sympy.concrete.summations", "Sum"):
                return _StoredSum
            return super().find_class(module, name)
    with evaluate(False):
        return Unpickler(fh).load()


class _StoredSum:
    """A sympy Sum rebuilt from its stored arguments (summand and limits), as ``AddWithLimits.__new__`` leaves it."""

    def __new__(cls, function, *limits):
        obj = sp.Expr.__new__(sp.Sum)
        obj._args = (function, *limits)
        obj.is_commutative = function.is_commutative
        return obj


def _build(system: str, metric: str, sparse: bool = True, kind: str = "mla") -> sp.Expr:
    """Closed form of an unloaded metric of ``system`` over named symbols (seconds; bytes for bytes_per_step),
    built anew: see :func:`_build_all`."""
    check_system(system)
    m = METRIC_ALIASES.get(metric)
    if m is None:
        raise SolverError(f"unknown unloaded metric {metric!r}; known: {', '.join(UNLOADED)}")
    return _build_all(system, sparse, kind)[m]


def _build_all(system: str, sparse: bool = True, kind: str = "mla") -> dict[str, sp.Expr]:
    """Closed forms of the unloaded metrics of ``system`` over named symbols (seconds; bytes for bytes_per_step),
    by metric.

    One request alone (``predict(..., concurrency=1, requests=1, cold_staging=False, exact_prompt=True)``):
    ``ttft`` = the client's serial work on the prompt + the request latency + one eager prefill iteration
    extending the cached prompt by its uncached tail (what its exact length leaves beyond the last full page);
    ``tbt`` = one decode step at the mean context ``L + O/2`` loading ``m_mean`` entries per layer (the request's
    mean misses over its output, from the score process), plus, for the pools that copy the prompt first (rdma,
    cxl-prefetch), that copy spread over the ``O - 1`` gaps; ``e2e`` = ttft + (O - 1) tbt; ``bytes_per_step`` =
    the entries a decode step loads; ``ttft_cold`` = an uncached prompt prefilled in chunks. ``sparse``: a DSA
    model (top-k attention); ``kind``: its attention (mla or gqa), which sets SGLang's prefill paths.
    """
    check_system(system)
    L, O = _workload_symbols()
    S = lambda n, u="dimensionless": sym(n, u)  # noqa: E731
    rank, front = rank_terms(), front_end_terms()
    topk = sym("topk", "dimensionless", "top-k entries selected per layer")
    m_mean = sym("m_mean", "dimensionless", "entries one request loads per layer per step, mean over its output")
    L_dec = L + O / 2
    k_attn = sp.Min(topk, L_dec) if sparse else L_dec        # entries a decode step reads
    buf = sym("buffer_slots", "dimensionless", "GPU buffer slots per request and layer")
    swap_on = sp.Piecewise((1, L_dec > buf), (0, True)) if system not in ("gpu", "rdma-topk") else 0
    decode = (sum(rank.values()).xreplace({S("b"): 1, S("M"): m_mean, S("M_max"): m_mean, S("L"): L_dec,
                                          S("k_attn"): k_attn, S("swap_on"): swap_on}) + _shared(1, 1, S("compute_eff")))
    # a prefix hit is matched page-aligned: the last 1..page tokens are prefilled
    page = sym("E", "dimensionless", "KV page (tokens): the uncached tail of a prefix hit is 1..page tokens")
    E = L - page * sp.floor((L - 1) / page)
    admit = prefill_terms()["hisparse_admit"].xreplace({S("admit_on"): 1})     # once per request
    # eager launches overlap the iteration's GPU work (launch_overlap 1) or add to it (0), as in the engine
    extend = eager_iteration(_shared(E, 1, S("prefill_eff"), prefill=True, moe_eff=_moe_prefill_eff())
                             + _prefill(E, L - E, sparse, kind, system)
                             + admit)
    ttft = front["tokenize"] + front["request"] + extend
    if system == "rdma":
        copy_ = sum(fetch_terms().values()).xreplace({S("N_f"): L})
    elif system == "cxl-prefetch":
        copy_ = L * S("layers") * S("entry_bytes", "byte") / sym("pf_dma_bw", "byte/second", "bulk prefix copy bandwidth")
    else:
        copy_ = 0
    tbt = decode + copy_ / (O - 1)
    C = sym("prefill_chunk", "dimensionless", "prompt tokens prefilled per rank per iteration (chunk)")
    full, rest = sp.floor(L / C), L - C * sp.floor(L / C)        # whole chunks and the last part

    def chunk(P, H):
        return eager_iteration(_shared(P, 1, S("prefill_eff"), prefill=True, moe_eff=_moe_prefill_eff())
                               + _prefill(P, H, sparse, kind, system))
    i = sp.Symbol("i", integer=True, nonnegative=True)
    cold = (front["tokenize"] + front["request"] + admit + sp.Sum(chunk(C, i * C), (i, 0, full - 1))
            + sp.Piecewise((chunk(rest, full * C), rest > 0), (0, True)))
    nbytes = S("layers") * m_mean * S("entry_bytes", "byte") * (1 if system == "rdma-topk" else swap_on)
    return {"ttft": ttft, "tbt": tbt, "e2e": ttft + (O - 1) * tbt, "bytes_per_step": nbytes, "ttft_cold": cold}


def _moe_prefill_eff():
    return sym("moe_prefill_eff", "dimensionless", "achieved fraction of peak FLOP/s of the routed experts' GEMMs "
                                                   "in prefill (SGLang's fused MoE under TP)")


def _shared(N, S_, eff, prefill: bool = False, moe_eff=None) -> sp.Expr:
    """The shared part of an iteration over ``N`` distinct tokens and ``S_`` sequences at efficiency ``eff`` (the
    routed experts' GEMMs at ``moe_eff``, default ``eff``): one
    request alone, whose iteration two-batch overlap cannot split (``tbo`` 0, as the engine's ``Model.splits``).
    ``prefill``: an iteration that prefills runs its own collectives (DP attention's all-reduces, DeepEP's
    prefill kernels), as the engine's ``Model.shared`` does."""
    S = lambda n: sym(n)  # noqa: E731
    comm = {S(n): sym(f"{n}_prefill", unit, f"{n} of an iteration that prefills") for n, unit in
            (("coll_bytes", "byte"), ("t_collective", "second"), ("a2a_share", "dimensionless"))} if prefill else {}
    return sum(shared_terms().values()).xreplace({S("N"): N, S("N_d"): N, S("S"): S_, S("mlp_eff"): eff,
                                                  S("moe_mlp_eff"): eff if moe_eff is None else moe_eff,
                                                  S("tbo"): 0, **comm})


def _prefill(P, H, sparse: bool, kind: str, system: str) -> sp.Expr:
    """A rank's prefill of ``P`` tokens after ``H`` on SGLang's attention path for it (see
    :meth:`sacmodel.serving.engine.stepmodel.Model.prefill_values`)."""
    S = lambda n: sym(n)  # noqa: E731
    topk, Lt = sym("topk"), H + P
    if sparse:
        mha = sp.Piecewise((1, Lt <= topk), (0, True)) if system == "gpu" else 0
        flags = {S("mha_on"): mha, S("dense_on"): 0, S("index_on"): sp.Piecewise((1, Lt > topk), (0, True)),
                 S("k_attn"): sp.Min(topk, Lt)}
    else:
        mha = (sp.Piecewise((1, sp.Eq(H, 0)), (1, H >= MLA_CHUNKED_PREFIX), (0, True)) if kind == "mla" else 0)
        flags = {S("mha_on"): mha, S("dense_on"): 1, S("index_on"): 0, S("k_attn"): 1}
    return sum(prefill_terms().values()).xreplace({S("P"): P, S("H"): H, S("admit_on"): 0, **flags})


def mean_misses(scenario, system: str, *, context: int, output: int, **resources) -> float:
    """``m_mean``: entries one request alone loads per layer per decode step, averaged over its output."""
    return float(mean_misses_grid(scenario, system, context, output, **resources))


def mean_misses_grid(scenario, system: str, context, output, **resources) -> np.ndarray:
    """``m_mean`` at every (context, output) pair of two broadcastable arrays (same rule as the engine)."""
    from sacmodel.serving.engine.misses import cumulative_misses_at
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
             prefill_chunk=float(cfg.prefill_chunk), E=float(cfg.page))
    if cfg.system == "rdma":
        from ..serving.config import fetch_bandwidth
        v["nic_bw"] = fetch_bandwidth(cfg, (0,))[0]
    if cfg.system == "cxl-prefetch":
        from sacmodel.serving.engine.stepmodel import Model
        v["pf_dma_bw"] = Model(cfg).pf_dma_bw()
    return v


def symbolic(system: str, metric: str, scenario=None, *, free=(), context=None, output=None, **resources):
    """The sympy expression of an unloaded metric (seconds, or bytes for ``bytes_per_step``).

    Without ``scenario``: over named symbols (see :func:`symbol_docs`). With it: every symbol bound except
    those named in ``free`` (and ``L``/``O`` unless ``context``/``output`` are given; ``m_mean`` is bound
    once both are); fully bound, it is a number equal to ``predict(..., concurrency=1, requests=1,
    cold_staging=False)`` (the steady state: the prompt's host-pool entry exists).
    """
    sparse, kind = True, "mla"
    if scenario is not None:
        m = resolve(scenario, system, **resources).model
        sparse, kind = m.sparse, m.kind
    expr = unloaded_expression(system, metric, sparse, kind)
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


def _check_vary(topo: Topology, vary: str, kind: str = "loaded", systems=(), metric: str = "tbt") -> None:
    """``vary`` must name something that exists: a workload argument, a scenario parameter, a hardware number,
    or (unloaded metrics only) a symbol of the closed form of ``metric`` for ``systems``."""
    if not isinstance(vary, str) or not vary:
        raise SolverError(f"vary must be a name, got {vary!r}")
    if vary in ("context", "output", "concurrency", "requests", "rate", "cxl_devices", "rdma_nics",
                "device_buffer", "topk", "dp"):
        return
    if vary.startswith(("node:", "link:", "node@", "link@")):
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
                      "(e.g. context, cxl_devices, t_graph_kernel, node:cxl_device.bandwidth)")


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
    missing = [k for k in ("context", "output") if k not in kw]
    if missing:
        raise SolverError(f"loaded metrics need {' and '.join(missing)} (fixed, or varied on an axis)")
    try:
        p = predict(topo, system, **kw)
    except PositionError:          # longer than the model's positions: infeasible on any hardware
        return math.nan
    return getattr(p, metric) if p.feasible else math.nan
