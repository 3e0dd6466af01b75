"""Capacity planning: the smallest resource that meets an SLO (:func:`plan`), the largest load within it
(:func:`max_load`), and what a configuration costs (the price table).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..serving.config import resolve
from ..serving.predict import predict
from ..serving.systems import check_system
from ..util.names import HIGHER_IS_BETTER, LIMITS, LOADED
from ..util.progress import status, track
from .closed_forms import _check_vary
from .common import RefusedValue, SolverError, _positive_tokens, _topology, _with_value, latency_slo, queues, with_pool_size
from .pricing import GB, check_parts, gpu_part, per_gb_or_device, prices, usd  # noqa: F401  (prices re-exported)
from .search import Tally


def configuration_cost(scenario, system: str, *, cxl_devices=None, rdma_nics=None, dp=None,
                       price_table=None) -> dict[str, float]:
    """USD per hour of the parts a configuration uses, by price-table row (:mod:`.pricing`): its GPUs
    (``gpu_<model>`` or ``gpu``); the ``dram`` system's host KV pool (``dram_gb``); the CXL memory of the devices
    used (``cxl_gb``), adapters and switch; the ``rdma`` system's NICs and remote pool (``rdma_nic``,
    ``dram_gb``); ``total`` their sum. A table without a part this needs is refused naming every one missing."""
    cfg = resolve(scenario, system)   # counts above the scenario's pool size are priced as planned additions
    table = prices(price_table)
    counts = parts_used(cfg, table, system, cxl_devices=cxl_devices, rdma_nics=rdma_nics, dp=dp)
    check_parts(table, list(counts), price_table)
    cost = {k: n * usd(table, k) for k, n in counts.items()}
    cost["total"] = sum(cost.values())
    return cost


def parts_used(cfg, table: dict, system: str, *, cxl_devices=None, rdma_nics=None, dp=None) -> dict[str, float]:
    """Price-table row -> how many of it (GPUs, GB, devices) the configuration uses."""
    t = cfg.topo
    counts: dict[str, float] = {gpu_part(t, table): int(dp or cfg.tp)}     # tp = the server's GPUs
    if system == "dram":
        counts["dram_gb"] = sum(t.node(m)["capacity"] for m in t.pools.get("dram", [])) / GB
    if system in ("cxl", "cxl-prefetch"):
        n = int(cxl_devices or cfg.cxl_devices)
        members = t.pools["cxl"]
        gb = sum(t.node(members[min(i, len(members) - 1)])["capacity"] for i in range(n)) / GB
        row, amount = per_gb_or_device(table, gb, n)
        counts.update({row: amount, "cxl_adapter": len(t.nodes_of("cxl_adapter")),
                       "cxl_switch": len(t.nodes_of("cxl_switch"))})
    if system in ("rdma", "rdma-topk"):
        counts["rdma_nic"] = int(rdma_nics or cfg.rdma_nics)
        counts["dram_gb"] = sum(t.node(m)["capacity"] for m in t.nodes_of("remote_memory")) / GB
    return counts


def plan_parts(scenario, system: str, price_table=None) -> dict:
    """The price table, checked for every part a plan of ``system`` on ``scenario`` prices (before any
    prediction runs)."""
    table = prices(price_table)
    check_parts(table, list(parts_used(resolve(scenario, system), table, system)), price_table)
    return table


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
    cost_usd_per_million_tokens: float | None = None   # total cost per hour / output tokens per hour x 1e6
    prices: dict | None = None                         # part -> {usd_per_hour, source} of the parts priced
    message: str = ""
    tried: list = field(default_factory=list)
    predictions: dict = field(default_factory=dict)    # predictions run, by method (engine, analytic)

    def to_dict(self) -> dict:
        return asdict(self)


def _meets(pred, slo: dict) -> bool:
    """Every request completes within the SLO, and the server holds all of them at once unless the SLO bounds
    the TTFT or E2E that the queue's wait would be part of (:func:`~sacmodel.planning.common.queues`)."""
    if not pred.feasible or pred.success_fraction < 1.0:
        return False
    if not latency_slo(slo) and queues(pred):
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


DEFAULT_VARY = {"cxl": "cxl_devices", "cxl-prefetch": "cxl_devices", "rdma": "rdma_nics", "rdma-topk": "rdma_nics",
                "gpu": "dp", "dram": "dp"}
POOL_OF = {"cxl_devices": ("cxl", "cxl-prefetch"), "rdma_nics": ("rdma", "rdma-topk")}


def plan_axis(topo, system: str, vary: str | None, max_value) -> tuple[str, float]:
    """What a plan of ``system`` sizes (default: its pool's devices, or dp = GPUs for gpu and dram) and the
    largest value it tries (default 16, the scenario's GPUs for dp); a pool size of a system without that
    pool is refused (it would change nothing)."""
    vary = DEFAULT_VARY[system] if vary is None else vary
    if vary in POOL_OF and system not in POOL_OF[vary]:
        raise SolverError(f"plan: vary={vary!r} changes nothing for system {system!r} (it has no "
                          f"{'CXL' if vary == 'cxl_devices' else 'RDMA'} pool); vary dp (GPUs), device_buffer or "
                          "a hardware number")
    if max_value is None:
        max_value = len(topo.gpus) if vary == "dp" else 16
    return vary, max_value


def plan(scenario, system: str, *, workload: dict, slo: dict, vary: str | None = None, max_value: float | None = None,
         min_value: float = 1, step: float | None = None, price_table=None) -> PlanResult:
    """Smallest ``vary`` in [min, max] (in ``step``s) meeting the SLO.

    ``vary``: cxl_devices, rdma_nics (pools grow by cloning their first member), dp (GPUs), device_buffer,
    or a hardware number such as ``node:cxl_device.capacity`` / ``node:host_dram.capacity`` (give ``step``).
    ``workload``: :func:`predict` arguments (``prompts``: "distinct", "shared", or absent for the scenario's
    workload, else independent users). A configuration whose requests queue for memory misses an SLO that
    bounds no TTFT or E2E (:func:`~sacmodel.planning.common.queues`).
    Default ``vary``: the system's pool devices (cxl_devices, rdma_nics), dp for gpu and dram; ``max_value``
    default: 16, the scenario's GPUs for dp. The prediction at one step less is returned too (it misses the SLO),
    with the cost of the parts.
    """
    _check_slo(slo)
    check_system(system)
    _check_workload(workload)
    topo = _topology(scenario)
    vary, max_value = plan_axis(topo, system, vary, max_value)
    _check_vary(topo, vary)
    table = plan_parts(topo, system, price_table)        # a table that cannot price the answer: refused now
    res = PlanResult(system, vary, dict(slo), False, None)
    step = step or (512 if vary == "device_buffer" else 1)
    _check_range(vary, min_value, max_value, step)
    counts = Tally()
    try:
        return _scan_plan(res, topo, system, workload, slo, vary, (min_value, max_value, step), (price_table, table),
                          counts)
    finally:
        res.predictions = counts.to_dict()


def _counted(counts: Tally, topo, system: str, **kw):
    """``predict``, counted."""
    counts.add(kw.get("method", "engine"))
    return predict(topo, system, **kw)


def _scan_plan(res, topo, system, workload, slo, vary, span, pricing, counts):
    """:func:`plan`'s scan from ``min_value`` up (``span``: min, max, step): the first value meeting the SLO ends
    it; ``pricing``: (the price table's path, the table)."""
    min_value, max_value, step = span
    price_table, table = pricing
    prev = None
    for v in track(np.arange(min_value, max_value + step / 2, step), f"plan {system}: {vary}"):
        v = int(v) if float(v).is_integer() else float(v)
        try:
            t, kw = _with_value(topo, vary, v)
        except RefusedValue as exc:            # the server would not start: tried, not served
            res.tried.append({"value": v, "meets": False, "feasible": False, "limit": str(exc),
                              "success_fraction": 0.0, "overloaded": False, "queued": False, **{m: None for m in slo}})
            continue
        p = _counted(counts, t, system, **{**workload, **kw})
        over = overloaded(t, system, {**workload, **kw}, p, counts)
        ok = _meets(p, slo) and not over
        res.tried.append({"value": v, "meets": ok, "feasible": p.feasible, "limit": p.limit,
                          "success_fraction": p.success_fraction, "overloaded": over, "queued": queues(p),
                          **{m: getattr(p, m) for m in slo}})
        if ok:
            res.found, res.value, res.prediction = True, v, p.to_dict()
            res.prediction_one_less = prev.to_dict() if prev is not None else None
            kwc = {k: kw[k] for k in ("cxl_devices", "rdma_nics") if k in kw}
            if vary == "dp":
                kwc["dp"] = v
            res.cost_usd_per_hour = configuration_cost(t, system, price_table=price_table, **kwc)
            res.cost_usd_per_million_tokens = per_million_tokens(res.cost_usd_per_hour["total"],
                                                                 p.output_throughput_tok_s)
            res.prices = {k: dict(table[k]) for k in res.cost_usd_per_hour if k in table}
            res.message = (f"smallest {vary} meeting the SLO: {v}" +
                           ("" if prev is None else f" ({vary} = {v - step} misses it)"))
            return res
        prev = p
    last = res.tried[-1] if res.tried else {}
    res.message = f"no {vary} in [{min_value}, {max_value}] meets the SLO. " + (
        f"At the largest value Poisson arrivals at {workload['rate']:g} req/s outpace what it serves: the queue "
        "grows without bound (lower the rate or raise --max)." if last.get("overloaded")
        else why_not(topo, system, workload, slo, prev, counts)) + _flat(res.tried, slo, vary)
    return res


def _flat(tried: list, slo: dict, vary: str) -> str:
    """A hint when every value tried gave the same prediction: the resource varied does not bind."""
    if len(tried) < 2 or any(any(r[m] != tried[0][m] for m in slo) for r in tried):
        return ""
    others = ", ".join(v for v in ("cxl_devices", "rdma_nics", "dp", "device_buffer") if v != vary)
    return (f" Every {vary} from {tried[0]['value']} to {tried[-1]['value']} gives the same prediction: {vary} does "
            f"not bind here; vary another resource ({others}, or a hardware number).")


def overloaded(topo, system: str, workload: dict, pred, counts: Tally | None = None) -> bool:
    """Open loop only: True when the Poisson rate exceeds what the configuration serves at the same concurrency
    (its closed-loop request throughput), so the queue grows without bound over a long run."""
    rate = workload.get("rate")
    if not rate or not pred.feasible:
        return False
    cap = _counted(counts or Tally(), topo, system, **{**workload, "rate": None}).request_throughput_req_s
    return bool(rate > cap)


def per_million_tokens(usd_per_hour: float, tok_s: float) -> float | None:
    """USD per million output tokens at ``tok_s`` output tokens/s."""
    return usd_per_hour / (tok_s * 3600) * 1e6 if tok_s and math.isfinite(tok_s) and tok_s > 0 else None


def why_not(topo, system: str, workload: dict, slo: dict, last, counts: Tally | None = None) -> str:
    """Why the largest configuration tried misses the SLO: the limit it hits, the metrics against their targets,
    and for TTFT/E2E targets whether one request alone on the machine already misses them (then no resource
    count helps)."""
    if last is None:
        return ""
    if not last.feasible:
        return f"At the largest value the workload does not fit: {last.limit}."
    miss = [f"{m} {getattr(last, m):,.1f} against {t:,g}" for m, t in slo.items()
            if not _meets_one(getattr(last, m, None), m, t)]
    if last.success_fraction < 1.0:
        miss.append(f"only {last.success_fraction:.0%} of the requests complete ({last.limit})")
    if not latency_slo(slo) and queues(last):
        miss.append(f"requests queue: a rank held at most {last.breakdown.get('peak_requests_per_rank', '?')} at "
                    f"once (its memory admits no more); bound ttft_mean_ms in the SLO to accept the wait")
    out = "At the largest value: " + ", ".join(miss) + "."
    lat = {m: t for m, t in slo.items() if m.startswith(("ttft", "e2e"))}
    if lat:
        alone = _counted(counts or Tally(), topo, system,
                         **{**workload, "concurrency": 1, "requests": 1, "rate": None, "draws": 1})
        worse = [f"{m.split('_')[0].upper()} {getattr(alone, m.replace('p50', 'mean').replace('p99', 'mean')):,.1f}"
                 for m, t in lat.items() if alone.feasible and
                 not _meets_one(getattr(alone, m.replace("p50", "mean").replace("p99", "mean")), m, t)]
        if worse:
            out += (f" One request alone already takes {', '.join(worse)} ms (its prompt's prefill and its "
                    "decode on an idle machine): no resource count reaches the target.")
    return out


def _meets_one(v, m: str, target: float) -> bool:
    if v is None or not math.isfinite(v):
        return False
    return v >= target if m in HIGHER_IS_BETTER else v <= target


def max_load(scenario, system: str, *, workload: dict, slo: dict, vary: str = "concurrency",
             max_value: int = 1024, min_value: int = 1) -> PlanResult:
    """Largest ``vary`` (concurrency or context) in [min, max] that a configuration sustains within the SLO.

    Bisection assumes the metrics worsen monotonically in ``vary``; the neighbours of the answer are checked.
    The analytic steady state brackets the answer first, and the engine searches from its guess outward.
    ``predictions`` counts the predictions run.
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

    counts, seen = Tally(), {}

    def meets(v, method="engine"):
        if (v, method) not in seen:
            p = _counted(counts, topo, system, **{**workload, vary: v, **({"method": method} if method != "engine"
                                                                         else {})})
            seen[v, method] = (_meets(p, slo), p)
        return seen[v, method]
    res = PlanResult(system, vary, dict(slo), False, None)
    with status(f"max_load {system}: bisection on {vary}"):
        guess = _analytic_edge(meets, slo, min_value, max_value) if vary != "rate" else None
        _max_load(res, meets, vary, min_value, max_value, guess)
    res.predictions = counts.to_dict()
    return res


def _analytic_edge(meets, slo: dict, lo: int, hi: int) -> int | None:
    """The largest value in [lo, hi] meeting the SLO by the analytic steady state (bisection), or None when it
    gives no value for an SLO metric (percentiles) or raises."""
    try:
        ok, p = meets(lo, "analytic")
        if not all(math.isfinite(getattr(p, m, math.nan)) for m in slo) and p.feasible:
            return None
        if not ok:
            return lo
        if meets(hi, "analytic")[0]:
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if meets(mid, "analytic")[0] else (lo, mid)
        return lo
    except (ValueError, ArithmeticError):
        return None


def _gallop(meets, g: int, lo: int, hi: int) -> tuple[int | None, int | None]:
    """From the guess ``g``, steps of 1, 2, 4... away from it until the engine's answer changes: (last value
    meeting, first missing) with nothing between them left to try (None: every value up to that end meets, or
    misses)."""
    step = 1
    if meets(g)[0]:
        a = g
        while a < hi:
            b = min(a + step, hi)
            if not meets(b)[0]:
                return a, b
            a, step = b, 2 * step
        return a, None
    b = g
    while b > lo:
        a = max(b - step, lo)
        if meets(a)[0]:
            return a, b
        b, step = a, 2 * step
    return None, b


def _check_workload(workload) -> None:
    if not isinstance(workload, dict):
        raise SolverError(f"workload must be a dict of predict() arguments, got {type(workload).__name__}")
    for k in ("context", "output"):
        _positive_tokens(k, workload.get(k), required=False, allow_range=True)


def _check_range(vary: str, lo, hi, step) -> None:
    for name, v in (("min", lo), ("max", hi), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise SolverError(f"{vary}: {name} must be a finite number, got {v!r}")
    if not (0 < lo <= hi and step > 0):
        raise SolverError(f"{vary}: need 0 < min <= max and step > 0, got min {lo:g}, max {hi:g}, step {step:g}")
    if (hi - lo) / step + 1 > LIMITS["points"]:
        raise SolverError(f"{vary}: at most {LIMITS['points']:,} values from min to max (a documented limit)")


def _max_load(res, meets, vary, min_value, max_value, guess=None):
    """Bisection for the largest value meeting the SLO; with the analytic ``guess`` of it, the engine first
    gallops from there (:func:`_gallop`) so that the bisection starts from a narrow bracket."""
    if guess is None:
        ok_lo, p_lo = meets(min_value)
        ok_hi = ok_lo and meets(max_value)[0]
        lo, hi = (min_value if ok_lo else None), (None if ok_hi else max_value)
    else:
        lo, hi = _gallop(meets, guess, min_value, max_value)
    if lo is None:
        res.message = f"even {vary} = {min_value} misses the SLO"
        res.prediction = meets(min_value)[1].to_dict()
        return res
    if hi is None:
        res.found, res.value, res.prediction = True, max_value, meets(max_value)[1].to_dict()
        res.message = f"{vary} = {max_value} (the upper end) still meets the SLO"
        return res
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
