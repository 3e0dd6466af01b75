"""Planning over clusters: sweep and plan instance counts, pool size, router and P:D split on a trace.

Every point is a full cluster replay (:func:`~sacmodel.cluster.replay.replay`); points run on the local
cores, or on a Dask cluster when a scheduler address is given. Pool sizes are first screened with the hit-rate
fast path (:func:`~sacmodel.cluster.hitrate.hit_rates`, one pass per size) so that a plan reports the hit rate
every size buys before it pays for replays. Cost: the price table of :func:`sacmodel.planning.pricing.prices` (GPUs of
every instance, the CXL pool's devices, adapters and switch, or the RDMA NICs of hosts and store).
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field

from ..hardware.cluster import HOME, kv_bytes_per_token, parse_capacity
from ..hardware.scenarios import cluster_of
from sacmodel.planning.pricing import GB, check_parts, gpu_part, per_gb_or_device, prices, usd
from ..serving.predict import ConfigError
from ..util.names import LIMITS
from .replay import _instances, parse_pd, replay

AXES = ("instances", "pool", "router", "pd")
# summary metrics where larger is better (every other one: smaller is better)
HIGHER_BETTER = ("goodput_req_s", "slo_attainment", "throughput_req_s", "output_throughput_tok_s", "hit_rate_total")
ROW_METRICS = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tbt_p50_ms", "tbt_p99_ms", "e2e_p50_ms",
               "queue_p50_s", "slo_attainment", "goodput_req_s", "throughput_req_s", "hit_rate_total")


def parse_axis(name: str, values) -> list:
    """Values of one cluster axis from a list or 'a,b,c' ('lo:hi' for instances)."""
    if name not in AXES:
        raise ConfigError(f"cluster axis {name!r} unknown; known: {', '.join(AXES)}")
    if isinstance(values, str):
        if name == "instances" and ":" in values:
            lo, hi = values.split(":", 1)
            try:
                lo, hi = int(lo), int(hi)
            except ValueError:
                raise ConfigError(f"instances: write LO:HI or a list, not {values!r}") from None
            if not 1 <= lo <= hi <= LIMITS["instances"]:
                raise ConfigError(f"instances {lo}:{hi}: need 1 <= LO <= HI <= {LIMITS['instances']:,} (limit)")
            values = list(range(lo, hi + 1))
        else:
            values = [v.strip() for v in values.split(",") if v.strip()]
    out = []
    for v in values:
        if name == "instances":
            try:
                v = int(v)
            except (TypeError, ValueError):
                raise ConfigError(f"instances: not a whole number: {v!r}") from None
            if not 1 <= v <= LIMITS["instances"]:
                raise ConfigError(f"instances must be in 1..{LIMITS['instances']:,} (limit), got {v}")
        elif name == "pd":
            v = None if v in (None, "none", "colocated", "co-located") else v
        out.append(v)
    if not out:
        raise ConfigError(f"cluster axis {name!r}: no values")
    return out


def cost_per_hour(scenario, system: str, instances: int, pool_tokens: float | None,
                  price_table=None) -> dict:
    """USD per hour by price-table row (:mod:`sacmodel.planning.pricing`): the GPUs of every instance plus the
    shared KV tier the system uses (CXL memory in whole 1 TB devices, two adapters per host and a switch per
    16 hosts; or the store's NICs, the hosts' two NICs each and its DRAM); a table without a part this needs
    is refused naming every one missing."""
    cl = cluster_of(scenario)
    table = prices(price_table)
    hosts = sum(i.spans for i in _instances(cl, instances))     # an instance across hosts takes all their GPUs
    counts = {gpu_part(cl.host, table): hosts * len(cl.host.gpus)}
    kind = HOME[system]
    tier = next((t for t in cl.tiers.values() if t.kind == kind), None)
    cap = pool_tokens if pool_tokens is not None else (tier.capacity_tokens if tier else math.inf)
    gb = cap * kv_bytes_per_token(cl.host) / GB if math.isfinite(cap) else 0.0
    if kind == "cxl":
        devs = max(1, math.ceil(gb / 1000)) if math.isfinite(cap) else 0     # 1 TB devices
        row, amount = per_gb_or_device(table, devs * 1000.0, devs)
        counts.update({row: amount, "cxl_adapter": 2 * hosts, "cxl_switch": math.ceil(hosts / 16)})
    elif kind == "rdma":
        te = tier.params.get("rdma") if tier else None
        counts["rdma_nic"] = 2 * hosts + (te.nics if te else 2)
        if gb:
            counts["dram_gb"] = gb
    check_parts(table, list(counts), price_table)
    out = {k: n * usd(table, k) for k, n in counts.items()}
    out["total"] = sum(out.values())
    return out


def _point(job) -> dict:
    scenario, system, trace, params, fixed, price_table = job
    kw = dict(fixed)
    if params.get("instances") is not None:
        kw["instances"] = params["instances"]
    if params.get("pool") is not None:
        kw["cache_capacity"] = params["pool"]
    if "router" in params:
        kw["router"] = params["router"]
    if "pd" in params:
        kw["pd"] = params["pd"]
    try:
        p = replay(scenario, system, trace, **kw)
    except ConfigError as exc:                 # e.g. a P:D split that does not fit this instance count
        return {**params, "feasible": False, "limit": str(exc)}
    s = p.summary
    pool = None if params.get("pool") is None else \
        parse_capacity(params["pool"], "pool", kv_bytes_per_token(cluster_of(scenario).host))
    load = s["load"]
    why = p.limit or (f"overloaded: offered {load['offered_req_s']:.3g} req/s, served {load['served_req_s']:.3g}"
                      if load["overloaded"] else None)
    tok_s = s["output_throughput_tok_s"]
    row = {**params, "feasible": why is None, "limit": why, **{m: s[m] for m in ROW_METRICS},
           "output_throughput_tok_s": tok_s,
           "success_fraction": s["success_fraction"], "overloaded": load["overloaded"],
           "overload": load.get("overload"), "too_short": load.get("too_short", False),
           "answer_could_change": load.get("answer_could_change", 0.0),
           "offered_req_s": load["offered_req_s"], "served_req_s": load["served_req_s"],
           "served_window_req_s": load.get("served_window_req_s"),
           "hit_rate": s["hit_rate"], "instances": s["instances"],
           "cost_usd_per_hour": cost_per_hour(scenario, system, s["instances"], pool, price_table)["total"]}
    row["cost_usd_per_million_tokens"] = (row["cost_usd_per_hour"] / (tok_s * 3600) * 1e6
                                          if tok_s and math.isfinite(tok_s) and tok_s > 0 else None)
    return row


def cluster_sweep(scenario, system: str, trace, grid: dict, *, fixed: dict | None = None,
                  scheduler: str | None = None, workers: int | None = None, progress: bool = False,
                  price_table=None) -> list[dict]:
    """A replay at every point of the product of ``grid`` (axes: instances, pool, router, pd); one row each,
    its cost from ``price_table`` (a path; None: the built-in table), checked before any replay runs."""
    cost_per_hour(scenario, system, 1, None, price_table)      # a table that cannot price the rows: refused now
    names = list(grid)
    axes = [parse_axis(n, grid[n]) for n in names]
    if "pd" in names and "instances" not in names:
        n0 = len(cluster_of(scenario).instances)
        for v in axes[names.index("pd")]:
            parse_pd(v, n0)
    combos = [dict(zip(names, vals)) for vals in itertools.product(*axes)]
    fixed = _with_cache(trace, fixed)
    jobs = [(scenario, system, trace, c, dict(fixed), price_table) for c in combos]
    if scheduler:
        try:
            from dask.distributed import Client
        except ImportError:
            raise ConfigError("--scheduler needs dask.distributed: pip install 'sacmodel[dask]'") from None
        with Client(scheduler, timeout="10s") as client:
            return client.gather(client.map(_point, jobs, pure=False))
    from ..util.progress import counter
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    bar = counter(len(jobs), f"cluster replays ({system})", on=progress)
    out = [None] * len(jobs)
    try:
        if workers <= 1 or len(jobs) < 2:
            for i, j in enumerate(jobs):
                out[i] = _point(j)
                bar.update(i + 1)
            return out
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(workers) as ex:
            for i, r in enumerate(ex.map(_point, jobs)):
                out[i] = r
                bar.update(i + 1)
        return out
    finally:
        bar.stop()


def meets(row: dict, slo: dict) -> bool:
    if not row.get("feasible"):
        return False
    for m, lim in slo.items():
        v = row.get(m)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return False
        if (v < lim) if m in HIGHER_BETTER else (v > lim):
            return False
    return True


def _none_meets(scenario, system, trace, slo, vary, vals, rows, fixed) -> str:
    """The message of a plan that found nothing: what fails at every size, or which requests no size helps."""
    from .why import why_not
    from .workload import load_workload
    msg = f"no {vary} among {', '.join(map(str, vals))} meets the SLO"
    failing = [r for r in rows if r.get("success_fraction", 1.0) < 1.0]
    if rows and len(failing) == len(rows):
        msg += f"; requests fail in every one (largest: {rows[-1].get('limit')})"
    elif rows and all(r.get("overloaded") or r in failing for r in rows):
        msg += "; each one fails requests or is overloaded (arrivals outpace what it serves)"
    tr, _ = load_workload(trace, (fixed or {}).get("limit"))
    why = why_not(cluster_of(scenario).host, system, tr, slo)
    return f"{msg}. {why}" if why else msg


@dataclass
class ClusterPlan:
    vary: str
    best: object
    message: str
    tried: list = field(default_factory=list)
    hit_rates: list = field(default_factory=list)
    unused: int = 0                # replays run alongside the one that settled the search, then not needed

    @property
    def replays(self) -> int:
        """Cluster replays the plan ran (rows a bound ruled out, or above the answer, were not replayed; replays
        run at once with the one that settled the search count in ``unused``, not here)."""
        return sum(1 for r in self.tried if not r.get("skipped"))

    def to_dict(self) -> dict:
        return {"vary": self.vary, "best": self.best, "message": self.message, "tried": self.tried,
                "hit_rates": self.hit_rates, "replays": self.replays, "unused_replays": self.unused}


def cluster_plan(scenario, system: str, trace, slo: dict, *, vary: str = "instances", values=None,
                 fixed: dict | None = None, scheduler: str | None = None, workers: int | None = None,
                 progress: bool = False, price_table=None, roles: str | None = None, parallel=None,
                 max_replays: int = 12):
    """The cheapest value of ``vary`` whose replay meets every SLO bound.

    ``slo``: summary metric -> bound (upper bound for latencies, lower bound for goodput_req_s,
    slo_attainment, throughput and hit_rate_total). Instance counts are tried in increasing order (each a
    replay); pool sizes are screened with the hit-rate fast path first.

    ``roles="search"`` instead searches the prefill/decode split: how many prefill and decode instances, with
    which parallelism each (``parallel``: (tp, dp) pairs to try), cheapest first, bracketed by each role's
    capacity against the trace's token rates, at most ``max_replays`` co-simulations
    (:func:`sacmodel.cluster.roles.role_search`; returns its :class:`~sacmodel.cluster.roles.RolePlan`).
    """
    for m in slo:
        if m not in ROW_METRICS:
            raise ConfigError(f"slo metric {m!r} unknown for cluster plans; known: {', '.join(ROW_METRICS)}")
    if roles is not None:
        return _role_plan(scenario, system, trace, slo, roles, parallel, max_replays, fixed, price_table)
    vals = parse_axis(vary, values if values is not None else ("1:8" if vary == "instances" else None))
    hit = []
    if vary == "pool":
        from .hitrate import hit_rates
        from sacmodel.cluster.workload import load_workload
        tr, _ = load_workload(trace, (fixed or {}).get("limit"))
        if tr.has_prefix_info:        # a shared pool is one cache, whichever instance a request went to
            bpt = kv_bytes_per_token(cluster_of(scenario).host)          # pool sizes may be bytes ('1 TB')
            hit = [{"pool": v, "hit_rate_fast_path": h["hit_rate"]}
                   for v, h in zip(vals, hit_rates(tr, vals, bytes_per_token=bpt))]
    if vary == "instances" and not scheduler:
        rows, unused = _search_instances(scenario, system, trace, vals, slo, _with_cache(trace, fixed), progress,
                                         price_table, workers)
    else:
        rows, unused = cluster_sweep(scenario, system, trace, {vary: vals}, fixed=fixed, scheduler=scheduler,
                                     workers=workers, progress=progress, price_table=price_table), 0
    ok = [r for r in rows if meets(r, slo)]
    if not ok:
        return ClusterPlan(vary, None, _none_meets(scenario, system, trace, slo, vary, vals, rows, fixed), rows, hit,
                           unused)
    best = min(ok, key=lambda r: (r["cost_usd_per_hour"], rows.index(r)))
    msg = (f"cheapest {vary} meeting the SLO: {best[vary]} "
           f"({best['cost_usd_per_hour']:.2f} USD/hour, goodput {best['goodput_req_s']:.3g} req/s)")
    return ClusterPlan(vary, best[vary], msg + _short_note(vary, best), rows, hit, unused)


def _role_plan(scenario, system, trace, slo, roles, parallel, max_replays, fixed, price_table):
    """``roles="search"``: the prefill/decode role search, each candidate co-simulated by :func:`_point`."""
    from .roles import role_search
    if roles != "search":
        raise ConfigError(f"roles: 'search' (the prefill/decode split searched), not {roles!r}")
    if isinstance(max_replays, bool) or not isinstance(max_replays, int) or not 1 <= max_replays <= 1000:
        raise ConfigError(f"max_replays must be a whole number in 1..1000, got {max_replays!r}")
    cost_per_hour(scenario, system, 1, None, price_table)      # a table that cannot price the rows: refused now
    fixed = _with_cache(trace, fixed)

    def replay_row(sp, sd, n_p, n_d):
        row = _point((sp, system, trace, {"instances": n_p + n_d, "pd": f"{n_p}:{n_d}"}, {**fixed, "decode": sd},
                      price_table))
        row["meets"] = meets(row, slo)
        return row
    return role_search(scenario, system, trace, slo, parallel=parallel, max_replays=max_replays, fixed=fixed,
                       price_table=price_table, replay_row=replay_row)


def _with_cache(trace, fixed) -> dict:
    """``fixed`` with ``cache="none"`` for a trace without prefix information (Azure's), as replay does."""
    fixed = dict(fixed or {})
    if "cache" not in fixed:
        from sacmodel.cluster.workload import load_workload
        if not load_workload(trace, fixed.get("limit"))[0].has_prefix_info:
            fixed["cache"] = "none"
    return fixed


def _search_instances(scenario, system, trace, vals, slo, fixed, progress, price_table=None,
                      workers: int | None = None) -> list[dict]:
    """Instance counts in increasing order (each a replay), skipping what a cheaper bound rules out.

    - The first count that meets the SLO ends the search: every larger count costs more (GPUs, adapters, NICs
      grow with the count), so none can be the answer.
    - An overloaded replay (all its requests finished, the trace long enough to tell: ``too_short`` false)
      teaches a capacity bound: its n instances, saturated, kept up with ``c`` req/s (the
      completions while arrivals still came, or over the whole run if more). An instance never serves more
      when there are more of them (a private cache's hits spread thinner, a shared pool's devices are shared
      by more hosts), so any count n' >= n with n' c below 95% of the offered rate is overloaded too: it is
      listed as ruled out by that bound, not replayed.
    - Once a replay kept up (not overloaded: the answer is near), the next ``workers`` counts (default: up to
      two, the cores) are replayed at once; a count a row before it settles (an answer, a new bound) is then
      listed as not replayed, as the search one count at a time lists it, so the rows are the same.

    The rows are those of :func:`cluster_sweep`, in the order of ``vals``; skipped ones say why. Returns
    (rows, replays run and not needed)."""
    cost_per_hour(scenario, system, 1, None, price_table)      # a table that cannot price the rows: refused now
    from ..util.progress import counter
    order = sorted(set(vals))
    workers = max(1, workers if workers is not None else min(2, os.cpu_count() or 1))
    st = _Search()
    bar = counter(len(order), f"cluster replays ({system})", on=progress)
    ex = None
    try:
        j = 0
        while j < len(order):
            n = order[j]
            if st.best is not None or n < st.floor:
                st.settle(n, None)
                j += 1
                continue
            batch = order[j:j + (workers if st.near else 1)]
            jobs = [(scenario, system, trace, {"instances": m}, dict(fixed or {}), price_table) for m in batch]
            if len(jobs) > 1 and ex is None:
                from concurrent.futures import ProcessPoolExecutor
                ex = ProcessPoolExecutor(workers)
            rows = list(ex.map(_point, jobs)) if len(jobs) > 1 else [_point(jobs[0])]
            for m, row in zip(batch, rows):
                st.settle(m, row, slo)
            j += len(batch)
            bar.update(j)
    finally:
        bar.stop()
        if ex is not None:
            ex.shutdown()
    return [st.rows[n] for n in vals], st.unused


class _Search:
    """The instance search's state: rows so far, the answer, and the floor that overloaded replays taught."""

    def __init__(self):
        self.rows: dict = {}
        self.floor, self.why_floor, self.best = 0, None, None
        self.near = False                 # a replay kept up: replay the next counts at once
        self.unused = 0                   # replays run at once with a count that settled the search

    def settle(self, n: int, row: dict | None, slo: dict | None = None) -> None:
        """Count ``n`` with its replay's ``row`` (None: not replayed), in increasing order."""
        if self.best is not None or n < self.floor:
            self.unused += row is not None
            self.rows[n] = ({"instances": n, "feasible": None, "skipped": True,
                             "limit": f"not replayed: {self.best} instances meet the SLO at a lower cost"}
                            if self.best is not None else
                            {"instances": n, "feasible": False, "overloaded": True, "skipped": True,
                             "limit": f"not replayed: overloaded by the bound of {self.why_floor}"})
            return
        self.rows[n] = row
        if meets(row, slo):
            self.best = n
        elif row.get("overloaded") and row.get("offered_req_s") and not row.get("too_short") and \
                row.get("success_fraction") == 1.0:
            per = max(row.get("served_req_s") or 0.0, row.get("served_window_req_s") or 0.0) / n
            if per > 0:
                need = math.ceil(0.95 * row["offered_req_s"] / per)
                if need > self.floor:
                    self.floor = need
                    self.why_floor = (f"the {n}-instance replay: saturated, {per:.3g} req/s per instance, "
                                      f"so fewer than {need} serve under 95% of the offered "
                                      f"{row['offered_req_s']:.3g} req/s")
        self.near = self.near or not row.get("overloaded")


def _short_note(vary: str, best: dict) -> str:
    """What a trace too short to tell steady state from warm-up leaves open about the answer: the requests
    still in the system at its last arrival may be a queue, so the served rate could be lower by their share and
    an instance count higher by 1 / (1 - share)."""
    if not best.get("too_short"):
        return ""
    share = best.get("answer_could_change", 0.0)
    note = (f"; but the trace is too short to tell steady state from warm-up ({100 * share:.0f}% of its requests "
            f"were still in the system at its last arrival): the answer could change by up to {100 * share:.0f}%")
    if vary == "instances" and share < 1:
        note += f", up to {math.ceil(best['instances'] / (1 - share))} instances"
    return note + "; replay a longer trace to settle it"
