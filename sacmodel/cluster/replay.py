"""Cluster replay: a trace through routers, prefix caches, transfers and one engine per instance, all on one
clock (:mod:`~sacmodel.cluster.cosim`).

This module takes the arguments (a cluster or a single-host scenario, the system, the trace, the router, the
caches' capacities, the prefill/decode split), builds the replay's set-up (:class:`Setup`), runs the
co-simulation and turns its per-request times into a :class:`ClusterPrediction`: TTFT = first token seen by the
client - arrival (routing, far-hit loads, queueing, the handoff and the serving path included), TBT = (last
token - first token) / (output - 1), E2E = last token - arrival; percentiles over the completed requests and
``success_fraction`` over all of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from ..data.records import DataError
from ..hardware.cluster import (
    HOME,
    USABLE,
    ClusterSpec,
    InstanceSpec,
    instance_topology,
    kv_bytes_per_token,
    parse_capacity,
)
from ..hardware.scenarios import cluster_of
from ..hardware.units import UnitError, parse_quantity
from ..serving.config import as_engine, resolve
from ..serving.predict import ConfigError, Prediction
from ..util.names import LIMITS, ROUTERS, TIME_SCALE_RANGE
from .caches import KIND_ORDER, ClusterCaches
from .cosim import CoSim
from .network import Network
from .prefix_cache import RadixCache, chain, check_block_tokens, page_keys
from .routers import RouterError, make_router
from .workload import load_workload

DEFAULT_SLO = {"ttft": 2.0, "tbt": 0.1}    # s: the example (SGLang PD deployments quote TTFT < 2 s)


@dataclass
class ClusterPrediction(Prediction):
    """A :class:`~sacmodel.serving.predict.Prediction` of a cluster replay, plus per-request arrays and a summary."""
    per_request: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(Prediction)}
        d = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}
        d["summary"] = self.summary
        d["per_request_fields"] = list(self.per_request)
        return d

    def per_request_rows(self):
        """Rows (dicts) of the per-request results, for CSV."""
        keys = list(self.per_request)
        cols = [self.per_request[k] for k in keys]
        for vals in zip(*cols):
            yield dict(zip(keys, (v.item() if hasattr(v, "item") else v for v in vals)))


# ---- arguments ------------------------------------------------------------------------------------
def parse_pd(pd, n: int | None):
    """'2:6' or (2, 6) -> (prefill, decode) instance counts; must add up to ``n`` when given."""
    if pd is None:
        return None
    if isinstance(pd, str):
        parts = pd.split(":")
        try:
            p, d = (int(x) for x in parts)
        except ValueError:
            raise ConfigError(f"pd: write PREFILL:DECODE instance counts such as 2:6, not {pd!r}") from None
    else:
        try:
            p, d = (int(x) for x in pd)
        except (TypeError, ValueError):
            raise ConfigError(f"pd: expected (prefill, decode) counts, got {pd!r}") from None
    if p < 1 or d < 1:
        raise ConfigError(f"pd: need at least one prefill and one decode instance, got {p}:{d}")
    if n is not None and p + d != n:
        raise ConfigError(f"pd {p}:{d} does not match the {n} instances ({p} + {d} = {p + d})")
    return p, d


def parse_slo(slo) -> dict:
    """{'ttft': s, 'tbt': s} from a dict or 'ttft=2s,tbt=100ms'."""
    if slo is None:
        return dict(DEFAULT_SLO)
    items = slo.items() if isinstance(slo, dict) else (x.split("=", 1) for x in str(slo).split(",") if x.strip())
    out = {}
    for kv in items:
        if len(kv) != 2:
            raise UnitError(f"slo: write NAME=TIME pairs such as ttft=2s,tbt=100ms, not {slo!r}")
        k, v = kv[0].strip(), kv[1]
        if k not in ("ttft", "tbt", "e2e"):
            raise UnitError(f"slo: unknown metric {k!r} (ttft, tbt, e2e)")
        out[k] = float(v) if isinstance(v, (int, float)) else parse_quantity(str(v).strip(), "time", field=f"slo {k}")
        if not out[k] > 0:
            raise UnitError(f"slo {k}: must be positive")
    return out



# ---- the cluster as configured for one replay -----------------------------------------------------
def _instances(cl: ClusterSpec, n: int | None) -> list[InstanceSpec]:
    if n is None or n == len(cl.instances):
        return list(cl.instances)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"instances must be a positive integer, got {n!r}")
    # n instances like the cluster's, each on hosts of its own (as many as its model spans; hosts added as
    # needed); shared tiers reach them all
    like = [cl.instances[k % len(cl.instances)] for k in range(n)]
    need = sum(i.spans for i in like)
    hosts = list(cl.hosts[:need])
    j = len(hosts)
    while len(hosts) < need:
        if f"host{j}" not in hosts:
            hosts.append(f"host{j}")
        j += 1
    out, at = [], 0
    for k, i in enumerate(like):
        span = tuple(hosts[at:at + i.spans])
        at += i.spans
        out.append(InstanceSpec(f"i{k}", span[0], i.role, i.tiers, i.engine, span if len(span) > 1 else (),
                                dict(i.settings)))
    return out


def _chain(cl: ClusterSpec, inst: InstanceSpec, system: str, only=None) -> list[str]:
    if cl.implicit:
        return [HOME[system]]
    chain = [t for t in inst.tiers if cl.tiers[t].kind in USABLE[system]
             and (only is None or t in only or cl.tiers[t].kind in only)]
    if not chain:
        limit = f"; asked for {', '.join(only)}" if only is not None else ""
        raise ConfigError(f"{cl.name}: instance {inst.id!r} reaches no KV tier that system {system!r} can use "
                          f"(its tiers: {', '.join(inst.tiers)}; {system} uses {', '.join(USABLE[system])}{limit})")
    return chain


def _capacities(cl: ClusterSpec, used: list, system: str, cache_capacity, bpt: float) -> dict[str, float]:
    caps = {t: cl.tiers[t].capacity_tokens for t in used}
    if cache_capacity is None:
        return caps
    if isinstance(cache_capacity, dict):
        for k, v in cache_capacity.items():
            names = [t for t in used if t == k or cl.tiers[t].kind == k]
            if not names:
                raise ConfigError(f"cache_capacity: no tier {k!r} in use (tiers: {', '.join(sorted(used))})")
            for t in names:
                caps[t] = parse_capacity(v, f"cache_capacity.{k}", bpt)
        return caps
    home = [t for t in used if cl.tiers[t].kind == HOME[system]]
    if not home:
        raise ConfigError(f"cache_capacity: system {system!r} keeps its prefix cache in a {HOME[system]} tier and "
                          f"this cluster uses none (tiers: {', '.join(sorted(used))}); give a dict per tier")
    for t in home:
        caps[t] = parse_capacity(cache_capacity, "cache_capacity", bpt)
    return caps


def _percentiles(x: np.ndarray) -> dict:
    """Mean over the finite values (the requests that finished); percentiles over every value, an unfinished
    request counting as +inf (so a p99 that falls among them is inf: "unfinished")."""
    fin = x[np.isfinite(x)]
    x = x[~np.isnan(x)]
    if not len(x):
        return {k: math.nan for k in ("mean", "p50", "p90", "p99")}
    big = np.where(np.isinf(x), 1e300, x)               # linear interpolation next to inf would give nan
    pct = {f"p{q}": float(np.percentile(big, q)) for q in (50, 90, 99)}
    return {"mean": float(fin.mean()) if len(fin) else math.nan,
            **{k: (math.inf if v >= 1e299 else v) for k, v in pct.items()}}


OVERLOAD_GROWTH = 0.05   # s of extra queueing per s of arrivals: served below ~95% of offered
OVERLOAD_MIN_QUEUE_S = 1.0
OVERLOAD_SLOW_GROWTH = 0.01   # a slower growth is overload once it has added OVERLOAD_SLOW_S of queueing
OVERLOAD_SLOW_S = 5.0
OVERLOAD_BACKLOG = 0.05  # requests in the system grow by more than 5% of arrivals: served below 95% of offered
OVERLOAD_MIN_BACKLOG = 8
# arrivals after warm-up needed to see OVERLOAD_MIN_BACKLOG requests pile up at OVERLOAD_BACKLOG of them
OVERLOAD_MIN_ARRIVALS = int(OVERLOAD_MIN_BACKLOG / OVERLOAD_BACKLOG)


def load_report(arrival_s: np.ndarray, queue_s: np.ndarray, completed: np.ndarray, duration_s: float,
                closed_loop: bool, *, done_s: np.ndarray | None = None, life_s: np.ndarray | None = None) -> dict:
    """Offered vs served load, queue growth and whether the trace can tell, of an open-loop replay.

    Offered: requests / arrival span (req/s); served: completed requests / duration. ``queue_s``: each
    request's wait in its rank's waiting queue, from the first iteration that could have admitted it to its
    admission (the front end's intake and the wait for the scheduler's loop to come round are bounded, not a
    queue). Overloaded (``overload``: why) when any of:

    - ``queue``: the median wait of the last quarter of arrivals exceeds the first quarter's by
      ``OVERLOAD_GROWTH`` s per s between them (an M/G/c queue with arrivals above capacity: wait(t) grows as
      t (offered/served - 1)) and is over ``OVERLOAD_MIN_QUEUE_S``;
    - ``slow queue``: it grows by more than ``OVERLOAD_SLOW_GROWTH`` s per s and has added over
      ``OVERLOAD_SLOW_S`` s of waiting;
    - ``backlog``: (with ``done_s``, each request's last token, s, and ``life_s``, its time from admission to
      its last token) the requests in the system (arrived, not done) grow from the end of warm-up to the last
      arrival by more than ``OVERLOAD_BACKLOG`` of the arrivals between (served below 95% of offered: Little's
      law), at least ``OVERLOAD_MIN_BACKLOG`` requests. Warm-up: the first quarter of arrivals, or longer, the
      median time their requests were served (the server fills in about one such lifetime). This catches a
      queue outside the server's ranks (a per-instance client cap) and one that grows slowly.

    A trace is ``too_short`` to tell a steady state from warm-up when fewer than ``OVERLOAD_MIN_ARRIVALS``
    requests arrive after warm-up, or when, not found overloaded, the requests still in the system at its last
    arrival are more than ``OVERLOAD_BACKLOG`` of all (``answer_could_change``, that share): they may be a
    steady load or a queue, so the served rate could be as low as ``served_floor_req_s`` = offered x
    (1 - share). ``served_window_req_s``: completions between warm-up and the last arrival per s. A request never admitted
    waits forever. Closed loop: never overloaded (the client waits for a free slot).
    """
    n = len(arrival_s)
    span = float(arrival_s.max() - arrival_s.min()) if n > 1 else 0.0
    served = float(completed.sum() / duration_s) if duration_s and math.isfinite(duration_s) else 0.0
    out = {"offered_req_s": n / span if span > 0 and not closed_loop else None, "served_req_s": served,
           "queue_growth_s_per_s": 0.0, "overloaded": False, "overload": None, "backlog_growth": 0.0,
           "span_s": span, "warmup_s": None, "too_short": False, "answer_could_change": 0.0,
           "served_floor_req_s": None}
    if closed_loop or n < 8 or span <= 0:
        return out
    seen = np.isfinite(queue_s)          # requests a failed instance never admitted are counted as failures
    order = np.argsort(arrival_s[seen], kind="stable")
    t, q = arrival_s[seen][order], queue_s[seen][order]
    k = len(t) // 4
    if k >= 2:
        first, last = np.median(q[:k]), np.median(q[-k:])
        dt = float(np.median(t[-k:]) - np.median(t[:k]))
        growth = (last - first) / dt if dt > 0 else 0.0
        out["queue_growth_s_per_s"] = float(growth) if math.isfinite(growth) else math.inf
        if growth > OVERLOAD_GROWTH and last > OVERLOAD_MIN_QUEUE_S:
            out["overload"] = "queue"
        elif growth > OVERLOAD_SLOW_GROWTH and last - first > OVERLOAD_SLOW_S:
            out["overload"] = "slow queue"
    if done_s is not None:
        _backlog(out, arrival_s, done_s, life_s)
    out["overloaded"] = out["overload"] is not None
    return out


def _backlog(out: dict, arrival_s: np.ndarray, done_s: np.ndarray, life_s) -> None:
    """Requests in the system over the trace (see :func:`load_report`)."""
    a = np.sort(arrival_s)
    d = np.sort(np.where(np.isnan(done_s), math.inf, done_s))
    n = len(a)
    first = arrival_s <= a[n // 4]
    life = life_s[first & np.isfinite(life_s)] if life_s is not None else np.array([])
    warm = float(np.median(life)) if len(life) else math.inf
    ta, tb = max(a[n // 4], a[0] + warm), a[-1]
    out["warmup_s"] = warm

    def in_system(x):
        return int(np.searchsorted(a, x, side="right") - np.searchsorted(d, x, side="right"))
    ba, bb = in_system(ta), in_system(tb)
    arrived = n - int(np.searchsorted(a, ta, side="right")) if ta <= tb else 0
    growth = (bb - ba) / arrived if arrived > 0 else 0.0
    out["backlog_growth"] = float(growth)
    if out["overload"] is None and arrived >= OVERLOAD_MIN_ARRIVALS and growth > OVERLOAD_BACKLOG and \
            bb - ba >= OVERLOAD_MIN_BACKLOG:
        out["overload"] = "backlog"
    if arrived > 0 and tb > ta:               # completions while arrivals still came: the rate it kept up
        out["served_window_req_s"] = float((np.searchsorted(d, tb, side="right") -
                                            np.searchsorted(d, ta, side="right")) / (tb - ta))
    share = bb / n
    out["answer_could_change"] = float(share)
    if arrived < OVERLOAD_MIN_ARRIVALS or (out["overload"] is None and share > OVERLOAD_BACKLOG):
        out["too_short"] = True
        if out["offered_req_s"]:
            out["served_floor_req_s"] = out["offered_req_s"] * (1.0 - share)


# ---- replay ---------------------------------------------------------------------------------------
def replay(scenario, system: str, trace, *, router: str = "round_robin", instances: int | None = None,
           cache_capacity=None, pd=None, time_scale: float = 1.0, concurrency: int | None = None,
           cache: str = "trace", slo=None, router_params: dict | None = None,
           block_tokens: int | None = None, limit: int | None = None, progress: bool = False, tiers=None,
           engine: str | None = None, decode=None, stage_barrier: float | None = None,
           **resources) -> ClusterPrediction:
    """Replay ``trace`` through a cluster running ``system`` on every instance.

    ``scenario``: a cluster (``sac-cluster-4x``, a schema-2 YAML, a :class:`ClusterSpec`) or a single-host
    scenario (a name, a YAML file, ``sacmodel.scenario(...)``: ``instances`` copies of its host, each caching in
    the system's home tier). ``trace``: a Mooncake JSONL or Azure CSV path, a loaded or generated Trace
    (:mod:`sacmodel.workloads`), or a testbed run (.json: its measured round, closed loop). ``router``:
    round_robin | least_load | prefix_affinity | kv | cache_aware (``router_params``: see
    :mod:`~sacmodel.cluster.routers`). ``cache_capacity``: tokens ('3M', 'inf') for the system's home tier, or a
    dict per tier name or kind. ``pd``: 'P:D' prefill and decode instance counts (disaggregation: over the
    shared CXL pool for CXL systems, else RDMA). ``time_scale`` 2 replays twice as fast. ``concurrency``:
    requests in flight per instance (default: as many as the server admits). ``cache``: 'trace' (prefix
    caches), 'none', 'all' (every prompt cached). ``slo``: {'ttft': s, 'tbt': s} or 'ttft=2s,tbt=100ms'.
    ``tiers``: only these tiers (names or kinds) of each instance's chain. ``engine``: "sglang" or "vllm" on
    every instance (default: each instance's ``engine:`` in the cluster file, else the host scenario's).
    ``decode``: with ``pd``, the scenario of the decode instances (their GPUs and parallelism; the same model),
    where the two roles run different configurations. ``stage_barrier``: a ladder trace's client holds each
    stage until every request of the previous one has finished, and starts it that many seconds later
    (inference-perf's load generator; 2 s: its ``interval`` 1 s and 1 s lead, :data:`INFERENCE_PERF_BARRIER`);
    None: stages run back to back. A request the server would refuse
    (longer than the model's positions, larger than an instance's pool) fails alone; an instance whose engine
    fails leaves its requests incomplete and the prediction infeasible.
    """
    _check(cache, instances, router, router_params, tiers, cache_capacity, time_scale, concurrency)
    if stage_barrier is not None and (isinstance(stage_barrier, bool) or not isinstance(
            stage_barrier, (int, float)) or not 0 <= stage_barrier < 1e6):
        raise ConfigError(f"stage_barrier must be seconds from 0 to 1e6, got {str(stage_barrier)[:40]!r}")
    setup = Setup(scenario, system, trace, router=router, instances=instances, pd=pd, time_scale=time_scale,
                  concurrency=concurrency, cache=cache, slo=slo, router_params=router_params, limit=limit,
                  resources=resources, engine=engine, decode=decode)
    setup.build(cache_capacity, block_tokens, tiers)
    setup.stage_barrier = stage_barrier
    sim = CoSim(setup)
    bar = _progress(progress, len(setup.tr))
    try:
        sim.run(bar.update if bar else None)
    finally:
        if bar:
            bar.stop()
    return prediction(setup, sim)


def _check(cache, instances, router, router_params, tiers, cache_capacity, time_scale, concurrency) -> None:
    if cache not in ("trace", "none", "all"):
        raise ConfigError(f"cache must be 'trace', 'none' or 'all', not {cache!r}")
    if instances is not None and (isinstance(instances, bool) or not isinstance(instances, int)
                                  or not 1 <= instances <= LIMITS["instances"]):
        raise ConfigError(f"instances must be a whole number in 1..{LIMITS['instances']:,} (limit), got "
                          f"{str(instances)[:40]!r}")
    if not isinstance(router, str) or router not in ROUTERS:
        raise ConfigError(f"unknown router {str(router)[:40]!r}; known: {', '.join(ROUTERS)}")
    if router_params is not None and not isinstance(router_params, dict):
        raise ConfigError(f"router_params must be a dict, not {type(router_params).__name__}")
    if tiers is not None and not isinstance(tiers, str) and not (
            isinstance(tiers, (list, tuple)) and tiers and all(isinstance(t, str) for t in tiers)):
        raise ConfigError(f"tiers must be a tier name or kind, or a list of them, got {str(tiers)[:40]!r}")
    if cache_capacity is not None and (isinstance(cache_capacity, bool) or
                                       not isinstance(cache_capacity, (str, int, float, dict))):
        raise ConfigError(f"cache_capacity must be tokens ('3M', 'inf', a number) or a dict per tier, got "
                          f"{str(cache_capacity)[:40]!r}")
    lo, hi = TIME_SCALE_RANGE
    if isinstance(time_scale, bool) or not (isinstance(time_scale, (int, float, np.integer, np.floating))
                                            and lo <= time_scale <= hi):
        raise ConfigError(f"time_scale must be a number from {lo:g} to {hi:g} (arrivals that many times "
                          f"faster), got {time_scale!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ConfigError(f"concurrency must be a positive integer, got {concurrency!r}")


# inference-perf's stage barrier (kubernetes-sigs/inference-perf at d4215cec, loadgen/load_generator.py
# LoadGenerator.mp_run): after a stage's duration the generator waits until every request of the stage has
# finished, sleeps LoadConfig.interval (1.0 s, config.py), and starts the next stage's timer 1 s ahead
# ("Allow generation a second to begin populating the queue")
INFERENCE_PERF_BARRIER = 2.0


class Setup:
    """A replay as configured: the cluster and its instances, the systems' configurations, the trace, the
    caches, the routers and the network; :class:`~sacmodel.cluster.cosim.CoSim` runs it."""

    def __init__(self, scenario, system, trace, *, router, instances, pd, time_scale, concurrency, cache, slo,
                 router_params, limit, resources, engine=None, decode=None):
        self.system, self.router_name, self.time_scale, self.concurrency, self.cache = (
            system, router, time_scale, concurrency, cache)
        self.slo_s = parse_slo(slo)
        self.cl = cl = cluster_of(scenario, instances)
        insts = _instances(cl, instances)
        split = parse_pd(pd, len(insts))
        if split is None and any(i.role != "both" for i in insts):
            roles = [i.role for i in insts]
            if "both" in roles:
                raise ConfigError(f"{cl.name}: mixes co-located and disaggregated instances; give pd")
            split = parse_pd((roles.count("prefill"), roles.count("decode")), None)   # one of each at least
            insts = [i for i in insts if i.role == "prefill"] + [i for i in insts if i.role == "decode"]
        self.insts, self.split = insts, split
        self.router_params = dict(router_params or {})
        self.tr, self.meta = load_workload(trace, limit)
        if cache == "trace" and not self.tr.has_prefix_info:
            raise DataError(f"{self.tr.name}: the trace has no prefix information; choose cache='none' or 'all'")
        cfg = resolve(cl.host, system, **resources)
        dec_system = "dram" if (split and system in ("rdma", "rdma-topk")) else system
        if decode is not None and not split:
            raise ConfigError("decode: a decode instances' scenario needs a prefill/decode split (pd)")
        dec_host = cl.host if decode is None else cluster_of(decode).host
        if dec_host.model_name != cl.host.model_name:
            raise ConfigError(f"decode: its model {dec_host.model_name!r} differs from the prefill instances' "
                              f"{cl.host.model_name!r}")
        cfg_dec = resolve(dec_host, dec_system, **resources) if split else cfg
        carried: dict = {}                 # (base config, engine) -> the config that engine runs

        def served(base, eng):
            eng = eng or base.engine
            if (id(base), eng) not in carried:
                carried[id(base), eng] = as_engine(base, eng)
            return carried[id(base), eng]
        own: dict = {}                     # (machine, system) -> the config of instances with their own settings

        def base(k, inst):
            dec = bool(split) and k >= split[0]
            if not inst.settings:
                return cfg_dec if dec else cfg
            topo, sys_k = instance_topology(cl, inst), dec_system if dec else system
            if (id(topo), sys_k) not in own:
                own[id(topo), sys_k] = resolve(topo, sys_k, **resources)
            return own[id(topo), sys_k]
        self._cfgs = [served(base(k, inst), engine or inst.engine) for k, inst in enumerate(insts)]
        self.cfg = self._cfgs[0]
        self.cfg_dec = self._cfgs[split[0]] if split else self.cfg
        self.bpt = kv_bytes_per_token(cl.host)
        self.max_ctx = cl.max_context or self.cfg.model.extra.get("max_context")
        n = len(insts)
        self.pre = list(range(split[0])) if split else list(range(n))
        self.dec = list(range(split[0], n)) if split else []
        self.pre_set = set(self.pre)
        self.closed_loop = self.meta.get("concurrency") or 0
        self.via_cxl = bool(split) and HOME[system] == "cxl"
        m = self.cfg.model
        self.lanes_split = m.kind != "mla"        # a handoff's per-GPU shares divide the KV (MLA: each has it all)
        self._alone = _alone_limits(self.cfg, self.cfg_dec if split else None, self.tr)

    def host_of(self, k: int, rank: int) -> str:
        """The host of instance ``k``'s data-parallel rank ``rank`` (its first GPU's, where its tp rank 0 runs)."""
        return self.gpus_of(k, rank)[0][0]

    def gpus_of(self, k: int, rank: int) -> list[tuple[str, int]]:
        """(host, GPU index on that host) of each GPU of instance ``k``'s data-parallel rank ``rank``, in tp rank
        order: the rank's ``attn_tp`` GPUs are GPUs ``rank x attn_tp ...`` of the server, which fills its hosts
        in order (``per host GPUs`` each); a rank of more GPUs than a host has spans hosts."""
        inst, atp = self.insts[k], self.cfg_of(k).attn_tp
        per_host = max(1, len(self.cl.host.gpus))
        hosts = inst.hosts or (inst.host,)
        return [(hosts[min(len(hosts) - 1, g // per_host)], g % per_host)
                for g in range(rank * atp, (rank + 1) * atp)]

    def host_shares(self, k: int, rank: int) -> dict[str, float]:
        """Host -> the share of a rank's KV traffic that crosses that host's own links (NICs, CXL adapters):
        each GPU moves the KV its attention reads, MLA's latent whole (replicated over the attention group),
        other models' heads split; one host's share is 1 whatever the model."""
        gpus = self.gpus_of(k, rank)
        hosts = list(dict.fromkeys(h for h, _ in gpus))
        if len(hosts) == 1:
            return {hosts[0]: 1.0}
        if self.cfg_of(k).model.kind == "mla":
            return dict.fromkeys(hosts, 1.0)
        return {h: sum(1 for x, _ in gpus if x == h) / len(gpus) for h in hosts}

    def readers(self, k: int, rank: int) -> dict[str, tuple[int, float]]:
        """Host -> (its first GPU of the rank, share of the bytes) of a rank reading a prefix from a shared tier:
        SGLang's every tp rank loads the pages its attention reads (HiCache prefetches into each rank's host
        pool), so each host of the rank brings in its GPUs' share (:meth:`host_shares`)."""
        first = {}
        for h, g in self.gpus_of(k, rank):
            first.setdefault(h, g)
        return {h: (first[h], x) for h, x in self.host_shares(k, rank).items()}

    def writers(self, k: int, rank: int) -> dict[str, tuple[int, float]]:
        """Host -> (GPU, share of the bytes) of a rank writing new KV to a shared tier: for MLA only tp rank 0
        (its latent is the same on every GPU: SGLang HiCache's ``backup_skip`` for tp_rank != 0 of an MLA model,
        sgl-project/sglang ``cache_controller.py``), else every host its heads' share."""
        if self.cfg_of(k).model.kind == "mla":
            h, g = self.gpus_of(k, rank)[0]
            return {h: (g, 1.0)}
        return self.readers(k, rank)

    def cfg_of(self, k: int):
        """The configuration instance ``k`` runs (its role's system, its engine)."""
        return self._cfgs[k]

    def reject(self, n_in: int, n_out: int) -> str | None:
        """Why the server would refuse a request of this size (None: it would take it)."""
        if self.max_ctx and n_in > self.max_ctx:
            return f"input_length {n_in} exceeds the model's maximum context {int(self.max_ctx)}"
        lim = self._alone
        if lim is not None and n_in + n_out > lim[0]:
            return lim[1]
        return None

    def build(self, cache_capacity, block_tokens, tiers) -> None:
        """The caches every instance reaches, the routers and the network."""
        cl, system, tr = self.cl, self.system, self.tr
        self.bt = bt = check_block_tokens(tr.block_tokens if block_tokens is None else block_tokens, tr.block_tokens)
        if tiers is not None:
            tiers = [tiers] if isinstance(tiers, str) else list(tiers)
            unknown = [t for t in tiers if t not in cl.tiers and t not in KIND_ORDER]
            if unknown:
                raise ConfigError(f"tiers: unknown tier {unknown[0]!r} (tiers: {', '.join(cl.tiers)}; kinds: "
                                  f"{', '.join(KIND_ORDER)})")
        n = len(self.insts)
        chains = {k: _chain(cl, self.insts[k], system, tiers) for k in range(n)}
        used = sorted({t for k in range(n) for t in chains[k]}, key=lambda t: (KIND_ORDER[cl.tiers[t].kind], t))
        self.caps = _capacities(cl, used, system, cache_capacity, self.bpt)    # in tier order: same output
        self.tier_names = used                                                   # whatever PYTHONHASHSEED is
        self.kind_of = {t: cl.tiers[t].kind for t in cl.tiers}
        pools = {k: self.cfg_of(k).max_total_tokens for k in range(n)}
        self.caches = ClusterCaches(cl, self.insts, chains, system, self.caps, bt,
                                    {k: self.cfg_of(k).dp for k in range(n)}, pools,
                                    per_rank=any(c.dp > 1 for c in self._cfgs),
                                    hosts_of={k: i.hosts or (i.host,) for k, i in enumerate(self.insts)})
        self.far_tiers = [t for t in self.tier_names if self.caches.is_far(t)]
        self.net = Network(cl, sorted({h for i in self.insts for h in (i.hosts or (i.host,))}), cl.host)
        self.pool_tier = next((t for t in self.tier_names if cl.tiers[t].kind == "cxl"), None)
        if self.meta.get("warm"):              # a testbed run: its first round cached the prompt everywhere
            keys = chain(page_keys(tr.blocks[tr.offsets[0]:tr.offsets[1]], tr.input_len[0], tr.block_tokens, bt))
            for c in [*(c for c, _ in self.caches.private.values()), *self.caches.shared.values()]:
                if isinstance(c, RadixCache):
                    c.touch(keys)
        try:
            self.router = make_router(self.router_name, block_tokens=bt, **self.router_params)
            self.router_dec = make_router(self.router_name if self.router_name in ("kv", "cache_aware")
                                          else "round_robin", block_tokens=bt,
                                          **(self.router_params if self.router_name in ("kv", "cache_aware") else {}))
        except RouterError as exc:
            raise ConfigError(str(exc)) from None

    def pool_res(self, host: str) -> tuple:
        """Resources a host's decode steps load from the shared CXL pool."""
        return (f"{self.pool_tier}.devices", f"{host}.cxl_read") if self.pool_tier else ()


def _alone_limits(cfg, cfg_dec, tr) -> tuple[float, str] | None:
    """(largest prompt + output one instance can hold alone, the limit's reason), None if the trace's largest
    request fits."""
    from ..serving.capacity import static_check
    worst = None
    for c in (cfg, cfg_dec):
        if c is None:
            continue
        big = int((tr.input_len + tr.output_len).max())
        chk = static_check(c, context=int(tr.input_len.max()), output=int(tr.output_len.max()), concurrency=1,
                           prompts="distinct")
        if chk["feasible"]:
            continue
        lo, hi = 1, big                       # the largest size that fits, by bisection on the prompt
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if static_check(c, context=max(1, mid - 1), output=1, concurrency=1, prompts="distinct")["feasible"]:
                lo = mid
            else:
                hi = mid - 1
        cand = (float(lo), f"larger than one instance can hold ({chk['limit']})")
        worst = cand if worst is None or cand[0] < worst[0] else worst
    return worst


def prediction(setup: Setup, sim: CoSim) -> ClusterPrediction:
    """Per-request times and the summary (a testbed run is closed loop: its client sends a request when a slot
    frees, and times it from there)."""
    tr = setup.tr
    arrival = np.array(sim.arrival)
    first, done = np.array(sim.first), np.array(sim.done)
    ttft, e2e = (first - arrival) * 1e3, (done - arrival) * 1e3
    out = tr.output_len
    tbt = np.where(out > 1, (done - first) / np.maximum(out - 1, 1) * 1e3, math.nan)
    queue = np.array(sim.admit_t) - np.array(sim.submit_t)
    waited = np.array(sim.admit_t) - np.array(sim.taken_in_t)
    completed = np.isfinite(done)
    # unfinished requests count as +inf in the percentiles (never nan: a nan is "not applicable")
    ttft = np.where(np.isnan(ttft) & ~completed, math.inf, ttft)
    e2e = np.where(completed, e2e, math.inf)
    tbt = np.where(completed, tbt, math.inf)
    queue = np.where(np.isnan(queue) & ~completed, math.inf, queue)
    ok = completed.copy()
    for k, arr in (("ttft", ttft), ("e2e", e2e)):
        if k in setup.slo_s:
            ok &= arr <= setup.slo_s[k] * 1e3
    if "tbt" in setup.slo_s:
        ok &= ~(tbt > setup.slo_s["tbt"] * 1e3)
    cached = np.array(sim.cached)
    per = {"arrival": arrival, "instance": np.array(sim.inst), "decode_instance": np.array(sim.dec),
           "input_tokens": tr.input_len, "output_tokens": out, "cached_tokens": cached,
           **{f"cached_{t}": np.array(sim.by_tier[t]) for t in setup.tier_names},
           "load_s": np.array(sim.load_s), "handoff_s": np.array(sim.handoff_s), "queue_s": queue,
           "waited_s": np.where(np.isnan(waited) & ~completed, math.inf, waited),   # in its rank's waiting queue
           "ttft_ms": ttft, "tbt_ms": tbt, "e2e_ms": e2e, "completed": completed, "slo_met": ok}
    duration = float(np.nanmax(done) - arrival.min()) if completed.any() else math.nan
    failed = [f"{sim.servers[k].id}: {sim.servers[k].engine.memory.crash.reason}" for k in range(len(sim.servers))
              if sim.servers[k].failed]
    advice = crash_advice(setup, [srv for srv in sim.servers if srv.failed]) if failed else None
    summary = _summary(setup, sim, per, duration, failed)
    summary["crash_advice"] = advice
    limits = failed + ([advice] if advice else []) + [
        f"{sum(1 for v in sim.rejected.values() if v == why)} request(s) refused: {why}"
        for why in summary["rejected_reasons"]]
    if not completed.all() and not limits:
        limits = [f"{int((~completed).sum())} request(s) unfinished"]
    pred = ClusterPrediction(setup.system, setup.cl.name, int(tr.input_len.mean()), int(out.mean()),
                             setup.concurrency or 0, len(tr), not limits, "; ".join(limits) if limits else None,
                             config={"trace": tr.name, "time_scale": setup.time_scale, "cache": setup.cache,
                                     "router": setup.router_name, "instances": len(setup.insts),
                                     "pd": summary["pd"], "cache_capacity": setup.caps, "block_tokens": setup.bt,
                                     "handoff": summary["handoff"]},
                             per_request=per, summary=summary)
    pred.ttft_mean_ms, pred.ttft_p50_ms, pred.ttft_p99_ms = (summary["ttft_mean_ms"], summary["ttft_p50_ms"],
                                                             summary["ttft_p99_ms"])
    pred.tbt_mean_ms, pred.tbt_p99_ms = summary["tbt_mean_ms"], summary["tbt_p99_ms"]
    pred.e2e_mean_ms = summary["e2e_mean_ms"]
    pred.output_throughput_tok_s = summary["output_throughput_tok_s"]
    pred.request_throughput_req_s = summary["throughput_req_s"]
    pred.success_fraction = float(completed.mean()) if len(completed) else 1.0
    pred.duration_s = duration
    return pred


def crash_advice(setup: Setup, servers) -> str:
    """What made the instances' engines fail and the per-instance concurrency cap that avoids it.

    The testbed fork's HiSparse path gives every request longer than ``device_buffer`` tokens a device buffer of
    ``device_buffer`` + a page slots at admission, from the rank's ``max_total_tokens`` pool, without checking
    that it fits (SGLang's admission counts only the request's own tokens); a shorter request holds its prompt and
    output. A rank that never holds more than max_total_tokens // (the largest of these) requests cannot
    fail: ``concurrency`` = that per instance guarantees it; dp x that keeps the ranks below it only while
    round-robin spreads the requests evenly (on the conversation trace it does not: requests of different
    lengths pile up on some ranks)."""
    tr = setup.tr
    cfgs = {id(s.cfg): s.cfg for s in servers}.values()
    caps = []
    for cfg in cfgs:
        page = max(1, int(cfg.page))
        short = tr.input_len <= cfg.device_buffer if cfg.hisparse else np.ones(len(tr), bool)
        need = max([float(cfg.buffer_alloc)] if cfg.hisparse else [1.0])
        if short.any():
            need = max(need, float(((tr.input_len[short] + tr.output_len[short] + page - 1) // page * page).max()))
        per_rank = max(1, int(cfg.max_total_tokens // need))
        caps.append((per_rank, cfg.dp, cfg))
    per_rank, dp, cfg = min(caps, key=lambda x: x[0] * x[1])
    what = (f"each request longer than device_buffer {cfg.device_buffer} tokens takes {cfg.buffer_alloc} slots of "
            f"its rank's max_total_tokens {cfg.max_total_tokens} at admission (the fork's HiSparse device buffer, "
            "not checked against the pool)" if cfg.hisparse else
            f"requests outgrow the rank's max_total_tokens {cfg.max_total_tokens}")
    return (f"cause: {what}; at most {per_rank} requests per rank fit: cap requests in flight per instance at "
            f"--concurrency {per_rank} (concurrency={per_rank}: no rank can then hold more), or up to "
            f"{per_rank * dp} while the {dp} ranks share them evenly (round-robin over equal requests), or give a "
            "smaller device_buffer")


def _unfinished_note(completed: np.ndarray) -> str | None:
    n = int((~completed).sum())
    return None if not n else (f"{n:,} of {len(completed):,} requests unfinished: percentiles count them as "
                               "inf, means are over the finished ones")


def _summary(setup: Setup, sim: CoSim, per: dict, duration: float, failed: list) -> dict:
    tr, split, out = setup.tr, setup.split, setup.tr.output_len
    completed, ok = per["completed"], per["slo_met"]
    prompt = float(tr.input_len.sum())
    rejected = sorted(set(sim.rejected.values()))
    return {
        "requests": len(tr), "instances": len(setup.insts), "system": setup.system, "router": setup.router_name,
        "pd": f"{split[0]}:{split[1]}" if split else None,
        "handoff": ("cxl" if setup.via_cxl else "rdma") if split else None,
        "time_scale": setup.time_scale, "duration_s": duration,
        **{f"ttft_{k}_ms": v for k, v in _percentiles(per["ttft_ms"]).items()},
        **{f"tbt_{k}_ms": v for k, v in _percentiles(per["tbt_ms"]).items()},
        # the mean pools every inter-token gap, as the single-instance prediction and the benchmark do
        "tbt_mean_ms": _pooled_tbt(np.array(sim.first), np.array(sim.done), out, completed),
        **{f"e2e_{k}_ms": v for k, v in _percentiles(per["e2e_ms"]).items()},
        **{f"queue_{k}_s": v for k, v in _percentiles(per["queue_s"]).items()},
        "slo": dict(setup.slo_s), "slo_attainment": float(ok.mean()),
        "success_fraction": float(completed.mean()) if len(completed) else 1.0,
        "unfinished_requests": int((~completed).sum()), "unfinished_note": _unfinished_note(completed),
        "load": load_report(per["arrival"], per["waited_s"], completed, duration, bool(setup.closed_loop),
                            done_s=np.array(sim.done), life_s=np.array(sim.done) - np.array(sim.admit_t)),
        "rejected_requests": len(sim.rejected), "rejected_reasons": rejected,
        "closed_loop": setup.closed_loop or None,
        "goodput_req_s": float(ok.sum() / duration) if duration else math.nan,
        "throughput_req_s": float(completed.sum() / duration) if duration else math.nan,
        "output_throughput_tok_s": float(out[completed].sum() / duration) if duration else math.nan,
        "hit_rate": {t: float(per[f"cached_{t}"].sum() / prompt) for t in setup.tier_names},
        "hit_rate_total": float(per["cached_tokens"].sum() / prompt),
        "bytes_by_link": {k: float(v) for k, v in sorted(sim.fabric.bytes_by.items())},
        "cache_capacity_tokens": {t: setup.caps[t] for t in setup.tier_names},
        "requests_by_instance": {setup.insts[k].id: int((per["instance"] == k).sum()) for k in setup.pre},
        "failed_instances": failed,
        "evicted_blocks": setup.caches.evicted(),
        "store_dropped_writes": sum(getattr(c, "dropped", 0) for c in setup.caches.shared.values()),
        "pool": _pool_summary(sim),
    }


def _pool_summary(sim: CoSim) -> dict:
    """The decode steps' traffic to a shared CXL pool: bytes/s over the steps that loaded from it, and what one
    host asks alone (bytes / the steps' time without other hosts)."""
    st = list(sim.pool_stats.values())
    if not st:
        return {"traffic_Bps": 0.0, "demand_per_host_Bps": 0.0, "slowdown": 1.0}
    nbytes, alone, shared = (sum(x[j] for x in st) for j in range(3))
    busy = max(x[2] for x in st)
    return {"traffic_Bps": nbytes / busy if busy else 0.0,
            "demand_per_host_Bps": nbytes / alone if alone else 0.0,
            "slowdown": shared / alone if alone else 1.0}


def _pooled_tbt(first_s, done_s, out, completed) -> float:
    """Mean inter-token gap (ms) over every gap of the completed multi-token requests."""
    m = completed & (out > 1)
    return float((done_s - first_s)[m].sum() / (out[m] - 1).sum() * 1e3) if m.any() else math.nan


def _in_chunks(order: np.ndarray, *cols, size: int = 1 << 16):
    """(index, values of every column) in ``order``, converted to Python numbers a chunk at a time."""
    for c0 in range(0, len(order), size):
        idx = order[c0:c0 + size]
        yield from zip(idx.tolist(), *(np.asarray(c)[idx].tolist() for c in cols))


def _progress(on: bool, n: int):
    """Requests finished, every 64 (a bar on a terminal, a line every few seconds otherwise)."""
    if not on:
        return None
    from ..util.progress import counter
    c = counter(n, "replay")

    class _Every64:
        def update(self, finished: int) -> None:
            if finished % 64 == 0:
                c.update(finished)

        def stop(self) -> None:
            c.stop()
    return _Every64()
