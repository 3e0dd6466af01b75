"""Sensitivity: elasticities of a metric to every hardware number and constant of a scenario.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from ..hardware.params import get_param, link_of, set_param
from ..hardware.topology import TopologyError
from ..serving.config import resolve
from ..serving.costs import SYMBOLS
from ..serving.predict import predict
from ..serving.systems import check_system
from ..util.lazy import lazy_module
from ..util.names import LOADED
from ..util.progress import track
from .closed_forms import mean_misses, scenario_values, symbolic, unloaded_expression
from .common import SolverError, _positive_tokens, _topology, hardware_parameters
from .search import Tally

sp = lazy_module("sympy")      # loads when an expression is first built (a loaded search needs none)

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
                counts: Tally | None = None, **resources) -> list[tuple[str, float, float, str]]:
    """Elasticities d ln(metric) / d ln(p) at a point for every bound symbol p, ranked by |elasticity|.

    Returns (symbol, elasticity, value, meaning). Symbols are the topology, model and calibration numbers
    the unloaded metric depends on (e.g. ``sw_bw`` = the pool-route bandwidth the GPU sees); every constant of the
    scenario's ``calibration:`` that enters the metric only through the misses of the score process
    (``score_correlation``, ``drift_settling``, ``settling_steps``) is ranked too, by central differences of 1%.
    ``counts``: a :class:`~sacmodel.planning.search.Tally` the closed-form evaluations are added to.
    """
    counts = counts if counts is not None else Tally()
    _positive_tokens("context", context)
    _positive_tokens("output", output)
    _unloaded_resources(resources)
    check_system(system)
    scenario = _topology(scenario)
    expr = symbolic(system, metric, scenario, free=_all_free(system, metric, scenario, resources),
                    context=context, output=output, **resources)
    vals = scenario_values(scenario, system, **resources)
    vals.update(L=float(context), O=float(output),
                m_mean=mean_misses(scenario, system, context=context, output=output, **resources))
    f = float(expr.xreplace({s: vals[s.name] for s in expr.free_symbols}))
    counts.add("closed_form")
    out, smooth = [], _smooth(expr)
    for s in sorted(expr.free_symbols, key=lambda s: s.name):
        if s.name in ("L", "O"):
            continue
        d = sp.diff(smooth, s)
        dv = float(d.xreplace({x: vals[x.name] for x in d.free_symbols}))
        el = dv * vals[s.name] / f if f else 0.0
        if el != 0.0:
            out.append((s.name, el, vals[s.name], SYMBOLS[s.name][2]))
    seen = {r[0] for r in out}
    for name in scenario.calibration:
        if name in seen or name in SYMBOLS:       # a symbol of the form: its derivative above is exact
            continue
        el = _numeric_elasticity(scenario, system, metric, name, context, output, resources)
        counts.add("closed_form", 2)
        if el:
            out.append((name, el, get_param(scenario, name), "calibration constant (numeric, 1% steps)"))
    return sorted(out, key=lambda r: -abs(r[1]))


UNLOADED_RESOURCES = ("cxl_devices", "rdma_nics", "device_buffer", "max_total_tokens", "max_running_requests")


def _unloaded_resources(resources: dict) -> None:
    """The closed form takes the server's resources only; a loaded-workload argument (draws, concurrency,
    ...) is refused by name, pointing to the loaded elasticities."""
    bad = sorted(set(resources) - set(UNLOADED_RESOURCES))
    if bad:
        raise SolverError(f"sensitivity: {bad[0]}={resources[bad[0]]!r} is not an argument of the unloaded closed "
                          f"form (it takes context, output, {', '.join(UNLOADED_RESOURCES)}); the loaded "
                          "elasticities, which take a workload, are sensitivity_loaded (sacmodel.planning.sensitivity)")


def _smooth(expr):
    """``expr`` with floor(x) as x - 1/2 and ceiling(x) as x + 1/2: their means over a step, so that the
    derivative of a whole number of pages or waves is that of its average, not 0 or the sawtooth's slope."""
    half = sp.Rational(1, 2)
    return expr.replace(sp.floor, lambda x: x - half).replace(sp.ceiling, lambda x: x + half)


def moved(name: str, v0: float, fac: float) -> float:
    """``v0`` scaled by ``fac``; a correlation is scaled through its complement 1 - v (its decorrelation per step),
    so its elasticity is with respect to 1 - v."""
    return 1 - (1 - v0) * fac if name == "score_correlation" else v0 * fac


def _numeric_elasticity(topo, system, metric, name, context, output, resources, rel=0.01) -> float:
    """d ln(metric) / d ln(constant) of the bound unloaded form by central differences."""
    from ..hardware.params import with_params
    v0 = get_param(topo, name)
    vals = []
    for fac in (1 + rel, 1 / (1 + rel)):
        t = with_params(topo, {name: moved(name, v0, fac)})
        vals.append(float(symbolic(system, metric, t, context=context, output=output, **resources)))
    return (math.log(vals[0]) - math.log(vals[1])) / (2 * math.log(1 + rel)) if min(vals) > 0 else 0.0


def _all_free(system, metric, scenario, resources):
    m = resolve(scenario, system, **resources).model
    names = {s.name for s in unloaded_expression(system, metric, m.sparse, m.kind).free_symbols} - {"L", "O"}
    flags = ("flop_unit", "b", "B", "swap_on", "pool_on", "rdma_topk_on", "m_mean", "hs_on", "mha_on", "dense_on",
             "index_on", "admit_on")
    return tuple(n for n in names if n not in flags)



# draws of the requests' randomness each prediction averages (the prediction's own, predict.DRAWS): the stepped and
# the base prediction draw the same phases and tails (common seeds), so a 1% step is resolved without more
SENSITIVITY_DRAWS = 4


def sensitivity_loaded(scenario, system: str, metric: str = "tbt_mean_ms", *, rel: float = 0.01,
                       params=None, counts: Tally | None = None, **workload) -> list[tuple[str, float, float, str]]:
    """Elasticities of a loaded metric (``predict`` at the given workload) by central log differences.

    ``params`` default: every hardware number (:func:`hardware_parameters`) and every constant of the scenario's
    ``calibration:`` (fitted and a priori). Each prediction averages ``draws`` (default 4) draws of the
    requests' randomness, the same seeds for the stepped and the base prediction. A parameter whose
    change makes the configuration infeasible gets elasticity nan. A parameter whose change moves none of the
    numbers the prediction reads (:func:`reads`: a link on no route it uses, a bandwidth that binds nowhere, a
    constant of another system) has elasticity 0 without running the engine. ``counts``: a
    :class:`~sacmodel.planning.search.Tally` the predictions run are added to.
    """
    if metric not in LOADED:
        raise SolverError(f"loaded sensitivity takes a Prediction metric ({', '.join(LOADED)})")
    check_system(system)
    if not (isinstance(rel, (int, float)) and 0 < rel < 1):
        raise SolverError(f"rel must be a relative step in (0, 1), got {rel!r}")
    topo = _topology(scenario)
    params = list(params or hardware_parameters(topo) + list(topo.calibration))
    workload.setdefault("draws", SENSITIVITY_DRAWS)
    counts = counts if counts is not None else Tally()
    method = workload.get("method", "engine")
    probe = copy.deepcopy(topo)        # routes start empty: what the prediction computes is left in them
    probe._routes.clear()
    base = predict(probe, system, **workload)
    counts.add(method)
    if not base.feasible:
        raise SolverError(f"the configuration is infeasible ({base.limit}): no sensitivity to report")
    used, keys = _links_of(probe), [k for k in probe._routes if k != ("miss curves",)]
    paths = {k: v for k, v in probe._routes.items() if _is_path(k)}
    before = reads(copy.deepcopy(topo), system, workload, keys, paths)
    out = []
    for name in track(params, f"sensitivity of {metric} ({system})"):
        try:
            v0 = get_param(topo, name)
        except (TopologyError, IndexError, StopIteration, KeyError):
            continue
        if not v0:
            continue
        if name.startswith("link@") and link_of(topo, name) not in used:
            out.append((name, 0.0, v0, "loaded: on no route the prediction uses"))
            continue
        moved_topos = []
        for fac in (1 + rel, 1 / (1 + rel)):
            t = copy.deepcopy(topo)
            set_param(t, name, moved(name, v0, fac))
            moved_topos.append(t)
        if before is not None and all(reads(t, system, workload, keys, paths) == before for t in moved_topos):
            out.append((name, 0.0, v0, "loaded: moves no number the prediction reads"))
            continue
        vals = []
        for t in moved_topos:
            p = predict(t, system, **workload)
            counts.add(method)
            vals.append(getattr(p, metric) if p.feasible else math.nan)
        el = (math.log(vals[0]) - math.log(vals[1])) / (2 * math.log(1 + rel)) if all(
            v > 0 for v in vals) else math.nan
        out.append((name, el, v0, "loaded, numeric"))
    return sorted(out, key=lambda r: -abs(r[1]) if math.isfinite(r[1]) else 0)


RESOURCES = ("cxl_devices", "rdma_nics", "device_buffer", "max_total_tokens", "max_running_requests")
_AGES = np.unique(np.geomspace(1, 1 << 20, 64).round())     # ages at which the score process is compared


def reads(topo, system: str, workload: dict, keys, paths: dict | None = None) -> tuple | None:
    """Every number of ``topo`` a prediction of ``system`` at ``workload`` reads, given the route-cache ``keys``
    the prediction computed: the resolved configuration, the step model's static values, the score process,
    the capacity check, and each route's share (swap-in routes, prefix-copy and backup bandwidths, nearest
    DRAM). Two scenarios with equal ``reads`` give the same prediction (the engine is deterministic and reads
    the scenario through nothing else). ``topo``'s route cache is emptied and refilled (starting from
    ``paths``: the routes' node paths, which the scenario's numbers do not choose). None when a key is of a
    kind this does not know (then nothing can be concluded)."""
    from dataclasses import fields

    from ..serving.capacity import static_check
    from ..serving.config import backup_bandwidth, fetch_bandwidth, score_correlation, static_values, swap_route
    from ..serving.predict import output_spec
    if any(workload.get(k) is None for k in ("context", "output", "concurrency")):
        return None
    import inspect
    prompts = workload.get("prompts", inspect.signature(predict).parameters["prompts"].default)
    topo._routes.clear()
    topo._routes.update(paths or {})
    cfg = resolve(topo, system, **{k: workload[k] for k in RESOURCES if workload.get(k) is not None})
    out = [tuple((f.name, getattr(cfg, f.name)) for f in fields(cfg) if f.name != "topo"), cfg.buffer_alloc,
           cfg.entry_bytes, tuple(sorted(static_values(cfg).items())), tuple(score_correlation(cfg, _AGES)),
           repr(static_check(cfg, context=workload["context"], output=output_spec(workload["output"])[1],
                             concurrency=workload["concurrency"], prompts=prompts))]
    if system == "cxl-prefetch":
        from ..serving.engine.stepmodel import Model
        out.append(Model(cfg).pf_dma_bw())
    for k in sorted(keys, key=repr):
        if _is_path(k):
            continue                    # a path: chosen by the weights set when the scenario was loaded
        if k[0] == "binding routes":
            continue                    # what binds each term: computed after the metrics, from them
        if k[0] == "swap" and k[1:3] == (cfg.system, cfg.cxl_devices):
            out.append(swap_route(cfg, k[3]))
        elif k[0] == "fetch" and k[1] == cfg.rdma_nics:
            out.append(tuple(fetch_bandwidth(cfg, k[2]).items()))
        elif k[0] == "backup" and k[1:3] == (cfg.system, cfg.cxl_devices):
            out.append(tuple(backup_bandwidth(cfg, k[3]).items()))
        elif k[0] == "nearest" and k[1] == "dram":
            out.append(topo.pool_for(topo.gpus.index(k[2]), "dram"))
        else:
            return None
    return tuple(out)


def _is_path(key) -> bool:
    """A route-cache key of a node path (source, destination)."""
    return len(key) == 2 and all(isinstance(x, str) for x in key)


def _links_of(probe) -> set[tuple[str, str]]:
    """The directed links on the routes left in ``probe``'s route cache (its routes started empty)."""
    return {(u, v) for k, path in probe._routes.items() if _is_path(k) and isinstance(path, list)
            for u, v in zip(path, path[1:])}


def links_used(topo, system: str, workload: dict) -> set[tuple[str, str]]:
    """The directed links on the routes a prediction of ``system`` at ``workload`` computes (one draw, on a copy
    whose routes start empty). A link on none of them cannot change the prediction: routes are chosen by the
    weights set when the scenario was loaded, and a link's numbers are read only along routes."""
    probe = copy.deepcopy(topo)
    probe._routes.clear()
    predict(probe, system, **{**workload, "draws": 1})
    return _links_of(probe)
