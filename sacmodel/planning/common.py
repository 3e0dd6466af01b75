"""What the planning tools share: argument checks, metric names, and evaluating an unloaded metric of a
scenario with one value changed.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from ..hardware.build import follow_parallelism
from ..hardware.params import set_param
from ..hardware.scenarios import as_topology
from ..hardware.topology import Topology, with_pool_size  # noqa: F401  (re-exported)
from ..util.names import LIMITS, LOADED, UNLOADED

METRIC_ALIASES = {"ttft": "ttft", "ttft_mean_ms": "ttft", "tbt": "tbt", "tbt_mean_ms": "tbt", "e2e": "e2e",
                  "e2e_mean_ms": "e2e", "bytes_per_step": "bytes_per_step", "bytes": "bytes_per_step",
                  "ttft_cold": "ttft_cold"}


WORKLOAD_SYMBOLS = {"context": "L", "output": "O"}


class SolverError(ValueError):
    """A question the solvers cannot answer as asked (bad metric, parameter or range)."""


def queues(pred) -> bool:
    """Whether the requests of a closed-loop prediction wait in the server's queue: some data-parallel rank
    never held as many requests at once as the client keeps in flight on it (``concurrency`` dealt
    round-robin over the ranks), because its memory or ``max_running_requests`` admits fewer. Such a
    configuration serves fewer users than asked, and their waits are in its TTFT, not in its TBT. The
    engine's peak when it ran (``breakdown``), else (analytic) the capacity check's ``fits_at_once``. Open
    loop (``rate``): False; ``plan.overloaded`` judges a rate."""
    config = getattr(pred, "config", None) or {}
    if not pred.feasible or config.get("rate"):
        return False
    peak = (getattr(pred, "breakdown", None) or {}).get("peak_requests_per_rank")
    if peak is None:
        return not (getattr(pred, "capacity", None) or {}).get("fits_at_once", True)
    return peak < math.ceil(min(pred.concurrency, pred.requests) / (config.get("dp") or 1))


def latency_slo(slo: dict) -> bool:
    """Whether an SLO bounds a latency a queue's wait is part of (TTFT or E2E): then a configuration that
    queues is judged by it; otherwise queueing itself misses the SLO (:func:`queues`)."""
    return any(m.startswith(("ttft", "e2e")) for m in slo)


def _topology(scenario) -> Topology:
    """The loaded scenario, or a clear error for something that is not a scenario (None, a number...)."""
    if scenario is None or isinstance(scenario, (bool, int, float)):
        raise SolverError(f"scenario must be a built-in name, a YAML path or a Topology, got {scenario!r}")
    try:
        return as_topology(scenario)
    except TypeError:
        raise SolverError(f"scenario must be a built-in name, a YAML path or a Topology, "
                          f"got a {type(scenario).__name__}") from None


def _positive_tokens(name: str, v, required: bool = True, allow_range: bool = False):
    """A workload length: a positive whole number of tokens (at most LIMITS['tokens']); with ``allow_range``
    an output may be a (min, max) pair drawn per request, as predict() takes it."""
    if v is None and not required:
        return None
    if allow_range and name == "output" and isinstance(v, tuple):
        from ..serving.predict import output_spec
        output_spec(v)
        return v
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



DISCRETE = {"cxl_devices", "rdma_nics", "concurrency", "device_buffer", "dp", "topk", "requests"}


def _metric_kind(metric: str) -> str:
    if metric in LOADED:
        return "loaded"
    if metric in METRIC_ALIASES:
        return "unloaded"
    raise SolverError(f"unknown metric {metric!r}; unloaded: {', '.join(UNLOADED)}; loaded: {', '.join(LOADED)}")


# two systems whose metric differs by no more than this (relative) are equal: breakeven finds no crossing where they
# are equal at every grid point, winner_map names them together
EQUAL_RTOL = 1e-12


class RefusedValue(SolverError):
    """A value of the varied quantity the server would not launch with; the message says why."""


def _refused(t: Topology, n: int) -> None:
    """Refuse dp = n GPUs where SGLang's FP8 weight loader does (experts split into shares of partial
    128-wide blocks), as a scenario built with --tp n is refused."""
    from ..hardware.models import model_of
    from ..hardware.sizing import fp8_block_refusal
    weights = t.serving["weights"].raw if "weights" in t.serving else None
    ep = int(t.param("ep")) if t.has_param("ep") else 1
    why = fp8_block_refusal(model_of(t), tp=n, ep=ep, weights=weights)
    if why:
        raise RefusedValue(f"dp={n} (GPUs): {why}")


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
        was = int(t.param("dp"))
        set_param(t, "dp", n)
        set_param(t, "tp", n)
        follow_parallelism(t, was)      # what SGLang derives from tp and dp follows them, as --dp builds it
        _refused(t, n)
    else:
        set_param(t, vary, value)
    return t, kw


# fields of a node or link the model reads as a rate or a time (sizes are capacities, not speeds; a link's
# granularity is read by no mechanism; bandwidth_reverse is the bandwidth of the link's other direction)
RATE_DIMENSIONS = ("bandwidth", "time", "flops", "count")
LINK_PARAMETERS = ("bandwidth", "per_flow_bandwidth", "latency")


def hardware_parameters(scenario) -> list[str]:
    """Every rate and latency of the scenario's nodes and links: ``node:gpu.FIELD`` for the GPUs (the step model
    takes one GPU for all ranks, so their numbers move together), ``node@ID.FIELD`` for each other node and
    ``link@FROM->TO.FIELD`` for each direction of each link; fields at zero (no latency given) are left out."""
    from ..hardware.topology import LINK_FIELDS, NODE_FIELDS
    t = as_topology(scenario)
    names = set()
    for n, d in t.graph.nodes(data=True):
        for fld, (dim, _) in NODE_FIELDS[d["kind"]].items():
            if dim in RATE_DIMENSIONS and d.get(fld):
                names.add(f"node:gpu.{fld}" if d["kind"] == "gpu" else f"node@{n}.{fld}")
    for u, v, d in t.graph.edges(data=True):
        for fld in LINK_PARAMETERS:
            if fld in LINK_FIELDS and d.get(fld):
                names.add(f"link@{u}->{v}.{fld}")
    return sorted(names)
