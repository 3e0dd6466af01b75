"""Cluster replay: a trace through routers, tiered prefix caches, transfers and one engine per instance.

One streaming pass over the requests in arrival order routes each request, looks its prefix up in the caches
its instance reaches (private tiers, then shared ones), pins the blocks it uses until its estimated end,
promotes and inserts its blocks, and writes new blocks through to the shared tiers. Then:

1. transfers that must precede a request (a hit in a tier farther than where the instance's system reads in
   place, e.g. an RDMA-store hit for a host-DRAM system) share NICs and links max-min fairly over time;
2. every instance runs the single-instance engine on the requests it was given (the cached prefix as it was
   found); with prefill/decode disaggregation the prefill instances run the prompts (output 1), the KV is
   handed to a decode instance (RDMA Transfer Engine, or written once to the shared CXL pool and read there in
   place), and the decode instances run the rest of each request with its whole prompt cached.

Times: TTFT = first token - arrival (queueing, transfers and the engine's request latency included), TBT =
(last token - first token) / (output - 1), E2E = last token - arrival.
"""
from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass, field, fields

import numpy as np

from ..data.records import DataError
from ..hardware.cluster import (
    HOME,
    USABLE,
    ClusterSpec,
    InstanceSpec,
    TierSpec,
    kv_bytes_per_token,
    parse_capacity,
)
from ..hardware.scenarios import cluster_of
from ..hardware.units import UnitError, parse_quantity
from ..serving.config import resolve
from sacmodel.serving.engine.stepmodel import TRACE_CONTEXT_GRID, Model
from sacmodel.serving.engine.workload import Requests
from ..serving.predict import ConfigError, Prediction, simulate
from ..serving.replay import memory_concurrency
from .load import InstanceLoad, estimate
from .prefix_cache import RadixCache, check_block_tokens, page_keys
from .routers import RouterError, make_router
from .network import Network
from .transfer import FlowSet, link_bytes, share_links
from ..util.names import LIMITS, ROUTERS
from .workload import load_workload

KIND_ORDER = {"hbm": 0, "host": 1, "cxl": 2, "rdma": 3}
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
    # n instances like the cluster's, one per host (hosts added as needed); shared tiers reach them all
    hosts = list(cl.hosts[:n])
    while len(hosts) < n:
        hosts.append(next(f"host{j}" for j in range(len(hosts), 10 * n) if f"host{j}" not in hosts))
    return [InstanceSpec(f"i{k}", hosts[k], cl.instances[k % len(cl.instances)].role,
                         cl.instances[k % len(cl.instances)].tiers) for k in range(n)]


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


def _capacities(cl: ClusterSpec, used: set, system: str, cache_capacity, bpt: float) -> dict[str, float]:
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


def _blocks(tokens: float, bt: int) -> float:
    return tokens if math.isinf(tokens) else max(1.0, math.floor(tokens / bt))


def _split(path_tiers: list[int], shared: list[int], n_in: int, bt: int, ntiers: int) -> list[float]:
    """Cached tokens by tier: private path blocks by their tier, then shared tiers beyond them (nearest
    first); the last token is always computed."""
    out = [0.0] * ntiers
    for t in path_tiers:
        out[t] += bt
    covered = len(path_tiers)
    for j, m in shared:
        if m > covered:
            out[j] += (m - covered) * bt
            covered = m
    excess = sum(out) - min(sum(out), n_in - 1)
    for t in reversed(range(ntiers)):       # take the clamp off the deepest tier served
        cut = min(out[t], excess)
        out[t] -= cut
        excess -= cut
    return out


def _percentiles(x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    if not len(x):
        return {k: math.nan for k in ("mean", "p50", "p90", "p99")}
    return {"mean": float(x.mean()), **{f"p{q}": float(np.percentile(x, q)) for q in (50, 90, 99)}}


# ---- replay ---------------------------------------------------------------------------------------
def replay(scenario, system: str, trace, *, router: str = "round_robin", instances: int | None = None,
           cache_capacity=None, pd=None, time_scale: float = 1.0, concurrency: int | None = None,
           cache: str = "trace", slo=None, router_params: dict | None = None,
           block_tokens: int | None = None, limit: int | None = None, progress: bool = False, tiers=None,
           **resources) -> ClusterPrediction:
    """Replay ``trace`` through a cluster running ``system`` on every instance.

    ``scenario``: a cluster (``sac-cluster-4x``, a schema-2 YAML, a :class:`ClusterSpec`) or a version-1
    scenario (``instances`` copies of its host, each with one private unbounded prefix cache, as today's
    single-instance replay). ``router``: round_robin | least_load | prefix_affinity | kv (``router_params``:
    weight, temperature, seed; affinity_blocks). ``cache_capacity``: tokens ('3M', 'inf') for the prefix
    cache of the system's home tier, or a dict per tier name or kind. ``pd``: 'P:D' prefill and decode
    instance counts (disaggregation; the handoff goes through the shared CXL pool for CXL systems, else
    over RDMA). ``time_scale`` 2 replays twice as fast. ``concurrency``: requests in flight per instance
    (default: what its memory holds). ``cache``: 'trace' (prefix caches), 'none', 'all' (every prompt
    cached). ``slo``: {'ttft': s, 'tbt': s} or 'ttft=2s,tbt=100ms' for attainment and goodput. ``tiers``:
    only these tiers (names or kinds, e.g. ['host'] for private host-DRAM caches) of each instance's chain.
    An instance whose engine run fails leaves its requests incomplete and the prediction infeasible.
    Times count from each request's arrival (for a testbed run, closed loop, from when its client sends it).
    """
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
    if not (isinstance(time_scale, (int, float)) and time_scale > 0 and math.isfinite(time_scale)):
        raise ConfigError(f"time_scale must be a positive number, got {time_scale!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ConfigError(f"concurrency must be a positive integer, got {concurrency!r}")
    r = _Replay(scenario, system, trace, router=router, instances=instances, pd=pd, time_scale=time_scale,
                concurrency=concurrency, cache=cache, slo=slo, router_params=router_params, limit=limit,
                resources=resources)
    if r.too_big:                    # as the single-instance replay: say so instead of running
        tr = r.tr
        return ClusterPrediction(system, r.cl.name, int(tr.input_len.mean()), int(tr.output_len.mean()), 0, len(tr),
                                 False, f"{r.too_big} (largest request alone)", config={"trace": tr.name})
    r.build_caches(cache_capacity, block_tokens, tiers)
    r.prog = _progress(progress, len(r.tr), r.n_inst)
    r.route()
    r.load_transfers()
    r.run_prefill()
    r.handoffs()
    r.run_decode()
    if r.prog:
        r.prog.stop()
    return r.prediction()


class _Replay:
    """One cluster replay, phase by phase: the cluster as configured (:meth:`__init__`, :meth:`build_caches`),
    routing and cache lookups in arrival order (:meth:`route`), the loads of far cache hits before the engines
    (:meth:`load_transfers`), the prefill (or co-located) instances' engine runs (:meth:`run_prefill`), the
    write-through and prefill-to-decode handoff transfers (:meth:`handoffs`), the decode instances' runs
    (:meth:`run_decode`) and the metrics (:meth:`prediction`)."""

    def __init__(self, scenario, system, trace, *, router, instances, pd, time_scale, concurrency, cache, slo,
                 router_params, limit, resources):
        self.system, self.router, self.time_scale, self.concurrency, self.cache = (system, router, time_scale,
                                                                                  concurrency, cache)
        self.slo_s = parse_slo(slo)
        self.cl = cl = cluster_of(scenario, instances)
        insts = _instances(cl, instances)
        self.n_inst = len(insts)
        split = parse_pd(pd, self.n_inst)
        if split is None and any(i.role != "both" for i in insts):
            roles = [i.role for i in insts]
            if "both" in roles:
                raise ConfigError(f"{cl.name}: mixes co-located and disaggregated instances; give pd")
            split = (roles.count("prefill"), roles.count("decode"))
            insts = [i for i in insts if i.role == "prefill"] + [i for i in insts if i.role == "decode"]
        self.insts, self.split = insts, split
        self.router_params = dict(router_params or {})
        tr, self.meta = load_workload(trace, limit)
        self.tr = tr
        if cache == "trace" and not tr.has_prefix_info:
            raise DataError(f"{tr.name}: the trace has no prefix information; choose cache='none' or 'all'")
        self.cfg = resolve(cl.host, system, **resources)
        dec_system = "dram" if (split and system in ("rdma", "rdma-topk")) else system
        self.cfg_dec = resolve(cl.host, dec_system, **resources) if split else self.cfg
        self.bpt = kv_bytes_per_token(cl.host)
        self.max_ctx = cl.max_context or self.cfg.model.extra.get("max_context")
        if self.max_ctx:
            over = np.flatnonzero(tr.input_len > self.max_ctx)
            if len(over):
                i = int(over[0])
                line = int(tr.lines[i]) if tr.lines is not None else i + 1
                raise DataError(f"{tr.name}: line {line}: input_length {int(tr.input_len[i])} exceeds the model's "
                                f"maximum context {int(self.max_ctx)}")
        self.too_big = _largest_alone(self.cfg, tr) or (_largest_alone(self.cfg_dec, tr) if split else None)
        self.pre = list(range(split[0])) if split else list(range(self.n_inst))
        self.dec = list(range(split[0], self.n_inst)) if split else []
        self.prog = None

    def build_caches(self, cache_capacity, block_tokens, tiers) -> None:
        """The prefix caches the prefill instances reach (private tiers per instance, shared tiers once), the
        routers and the routers' load estimates."""
        cl, system, tr = self.cl, self.system, self.tr
        self.bt = bt = check_block_tokens(block_tokens or tr.block_tokens, tr.block_tokens)
        if tiers is not None:
            tiers = [tiers] if isinstance(tiers, str) else list(tiers)
            unknown = [t for t in tiers if t not in cl.tiers and t not in KIND_ORDER]
            if unknown:
                raise ConfigError(f"tiers: unknown tier {unknown[0]!r} (tiers: {', '.join(cl.tiers)}; kinds: "
                                  f"{', '.join(KIND_ORDER)})")
        self.chains = {k: _chain(cl, self.insts[k], system, tiers) for k in range(self.n_inst)}
        used = {t for k in self.pre for t in self.chains[k]}
        self.caps = caps = _capacities(cl, used, system, cache_capacity, self.bpt)
        self.tier_names = sorted(used, key=lambda t: (KIND_ORDER[cl.tiers[t].kind], t))
        self.tidx = {t: j for j, t in enumerate(self.tier_names)}
        self.shared: dict[str, RadixCache] = {}
        self.private: dict[int, tuple[RadixCache, list[str]]] = {}
        for k in self.pre:
            priv = [t for t in self.chains[k] if not cl.tiers[t].shared]
            if priv:
                self.private[k] = (RadixCache([_blocks(caps[t], bt) for t in priv], priv), priv)
            for t in self.chains[k]:
                ts: TierSpec = cl.tiers[t]
                if ts.shared and t not in self.shared:
                    self.shared[t] = RadixCache([_blocks(caps[t] / ts.replicas, bt)], [t], watermark=ts.watermark,
                                                evict_ratio=ts.evict_ratio)
        est = estimate(self.cfg, max_context=self.max_ctx or 131072)
        est_dec = estimate(self.cfg_dec, max_context=self.max_ctx or 131072) if self.split else est
        self.loads = [InstanceLoad(est_dec if k in self.dec else est, bt) for k in range(self.n_inst)]
        try:
            self.r_pre = make_router(self.router, block_tokens=bt, **self.router_params)
            self.r_dec = make_router("kv" if self.router == "kv" else "least_load", block_tokens=bt,
                                     **(self.router_params if self.router == "kv" else {}))
        except RouterError as exc:
            raise ConfigError(str(exc)) from None

    def route(self) -> None:
        """One pass in arrival order: route each request, look its prefix up in the caches its instance
        reaches, pin the blocks it uses until its estimated end, insert its blocks; note the far hits to load
        and the prompt tokens to write through to the shared tiers."""
        tr, n, ntier = self.tr, len(self.tr), len(self.tier_names)
        self.order = order = np.argsort(tr.arrival, kind="stable")
        self.arrival = arrival = tr.arrival / self.time_scale
        self.inst_of = np.zeros(n, int)
        self.dec_of = np.full(n, -1)
        self.by_tier = np.zeros((ntier, n))
        self.new_tok = np.zeros(n)             # prompt tokens not found in any shared tier (written through)
        self.load_bytes: list[tuple[int, str, float]] = []     # (request, tier, bytes) moved to the home tier first
        self.releases: list = []               # heap of (est. end, seq, cache, path)
        self.seq = 0
        if self.meta.get("warm"):              # a testbed run: its first round cached the prompt everywhere
            k0 = page_keys(tr.blocks[tr.offsets[0]:tr.offsets[1]], tr.input_len[0], tr.block_tokens, self.bt)
            for c in [*self.shared.values(), *(c for c, _ in self.private.values())]:
                c.touch(k0)
        home_rank = KIND_ORDER[HOME[self.system]]
        self.far = [KIND_ORDER[self.cl.tiers[t].kind] > home_rank for t in self.tier_names]
        self.shared_of = {k: [(self.tidx[t], self.shared[t]) for t in self.chains[k] if t in self.shared]
                          for k in self.pre}
        offsets = tr.offsets if tr.offsets is not None else np.zeros(n + 1, np.int64)
        prog = self.prog
        for step_i, row in enumerate(_in_chunks(order, arrival, tr.input_len, tr.output_len, offsets[:-1],
                                                offsets[1:])):
            self._route_one(*row)
            if prog and step_i % 256 == 0:
                prog.update(prog.task_ids[0], completed=step_i)
        if prog:
            prog.update(prog.task_ids[0], completed=n)

    def _route_one(self, i: int, now: float, n_in: int, n_out: int, o0: int, o1: int) -> None:
        """Route request ``i`` (arriving at ``now``), find its cached prefix, pin and insert its blocks."""
        releases, loads, tr, bt = self.releases, self.loads, self.tr, self.bt
        while releases and releases[0][0] <= now:
            _, _, c, path = heapq.heappop(releases)
            c.release(path)
        for ld in loads:
            ld.advance(now)
        keys = (page_keys(tr.blocks[o0:o1], n_in, tr.block_tokens, bt) if self.cache == "trace" else [])
        sh_match: dict = {}               # shared-tier matches, the same for every instance: once per request
        private, shared_of = self.private, self.shared_of

        def overlap(k, keys=keys, sh_match=sh_match):
            m = private[k][0].match_len(keys) if k in private else 0
            for j, c in shared_of[k]:
                if j not in sh_match:
                    sh_match[j] = c.match_len(keys)
                m = max(m, sh_match[j])
            return m
        pre, split, ntier, tidx = self.pre, self.split, len(self.tier_names), self.tidx
        k = self.r_pre.choose(pre, loads, overlap, n_in, keys) if len(pre) > 1 else pre[0]
        self.inst_of[i] = k
        cached = [0.0] * ntier
        pinned = []
        if self.cache == "all":
            cached[tidx[next(t for t in self.chains[k] if self.cl.tiers[t].kind == HOME[self.system])]] = n_in - 1.0
        elif self.cache == "trace":
            pc, priv = private.get(k, (None, []))
            ppath = pc.match(keys) if pc is not None else []
            ptiers = [tidx[priv[pc.tier[x]]] for x in ppath]
            sh = [(j, sh_match[j] if j in sh_match else c.match_len(keys)) for j, c in shared_of[k]]
            cached = _split(ptiers, sh, n_in, bt, ntier)
            if pc is not None:
                pinned.append((pc, pc.admit(keys, ppath)))
            for (j, m), (_, c) in zip(sh, shared_of[k]):
                self.new_tok[i] = max(self.new_tok[i], n_in - m * bt)
                pinned.append((c, c.admit(keys)))
        self.by_tier[:, i] = cached
        hit = float(sum(cached))
        for j in range(ntier):
            if cached[j] > 0 and self.far[j]:
                self.load_bytes.append((i, self.tier_names[j], cached[j] * self.bpt))
        first, end = loads[k].add(now, n_in - hit, hit, n_out, i, prefill_only=bool(split))
        if split and n_out > 1:
            d = self.r_dec.choose(self.dec, loads, lambda _: 0, n_in, keys) if len(self.dec) > 1 else self.dec[0]
            self.dec_of[i] = d
            _, end = loads[d].add(first, 0.0, n_in, n_out - 1, i, decode_only=True)
        for c, path in pinned:
            self.seq += 1
            heapq.heappush(releases, (end, self.seq, c, path))

    def load_transfers(self) -> None:
        """Hits in a tier farther than where the system reads in place move to the home tier before the
        request is served; the moves share NICs and links max-min fairly over time."""
        n = len(self.tr)
        self.net = net = Network(self.cl, self.insts, self.system, self.cl.host)
        self.early = early = FlowSet(net.load_flow(float(self.arrival[i]), self.insts[self.inst_of[i]].host,
                                                   self.cl.tiers[t].kind, b) for i, t, b in self.load_bytes)
        self.load_s = load_s = np.zeros(n)
        if len(early):
            fin = share_links(early, net.capacity)
            for j, (i, _, _) in enumerate(self.load_bytes):
                load_s[i] = max(load_s[i], fin[j] - early.start[j])
        self.cached_total = self.by_tier.sum(axis=0)

    def _run(self, k, arr, ctx, out, hit, c):
        """The single-instance engine of instance ``k`` on its requests; their per-request times."""
        if not len(arr):
            return None
        if self.concurrency:
            conc = self.concurrency
        elif self.meta.get("concurrency"):        # a testbed run's closed-loop cap, split over the instances
            conc = -(-self.meta["concurrency"] // len(self.pre))
        else:                                     # what the instance's memory holds at the trace's mean lengths
            conc = memory_concurrency(c, int(self.tr.input_len.mean()), int(self.tr.output_len.mean()))
        self.conc_used[self.insts[k].id] = conc
        # one model per configuration, shared by its instances; miss curves on the 64-token page grid
        if id(c) not in self.models:
            self.models[id(c)] = (c, Model(c, context_grid=TRACE_CONTEXT_GRID))
        p = simulate(c, Requests(arr, ctx, out, hit), conc, model=self.models[id(c)][1])
        if not p.feasible:                  # the instance overflowed: say so, keep what completed
            self.failed.append(f"{self.insts[k].id}: {p.limit} ({100 * p.success_fraction:.0f}% of its requests "
                               "completed)")
        if self.prog:
            self.prog.advance(self.prog.task_ids[1])
        return p.per_request

    def run_prefill(self) -> None:
        """Each prefill (or co-located) instance runs its requests, in the order they reach it."""
        n, tr, arrival, load_s, split = len(self.tr), self.tr, self.arrival, self.load_s, self.split
        self.first_s, self.done_s = np.full(n, math.nan), np.full(n, math.nan)
        self.release_s = np.full(n, math.nan)
        self.conc_used: dict = {}
        self.failed: list[str] = []
        self.models: dict = {}
        for k in self.pre:
            idx = np.flatnonzero(self.inst_of == k)
            idx = idx[np.argsort(arrival[idx] + load_s[idx], kind="stable")]
            out_k = np.ones(len(idx), int) if split else tr.output_len[idx]    # prefill instances: first token
            pr = self._run(k, arrival[idx] + load_s[idx], tr.input_len[idx], out_k,
                           np.minimum(self.cached_total[idx], tr.input_len[idx] - 1.0), self.cfg)
            if pr is None:
                continue
            self.first_s[idx] = pr["first_s"]
            self.release_s[idx] = pr["release_s"]
            self.done_s[idx] = pr["done_s"]

    def handoffs(self) -> None:
        """Write-through of new blocks to the shared tiers, and the prefill-to-decode handoff; the loads before
        the engines run again beside them (they share the same NICs and links)."""
        cl, insts, net, first_s, dec_of = self.cl, self.insts, self.net, self.first_s, self.dec_of
        self.flows = flows = FlowSet()
        handoff_of = array("q")           # flow -> request whose handoff it is (-1: none)
        self.via_cxl = via_cxl = self.split and HOME[self.system] == "cxl"
        for i in np.flatnonzero((self.new_tok > 0) & np.isfinite(first_s)).tolist():
            h = insts[self.inst_of[i]].host
            for t in self.chains[self.inst_of[i]]:
                if t in self.shared:
                    f = net.write_flow(first_s[i], h, cl.tiers[t], self.new_tok[i] * self.bpt)
                    flows.add(f.start, f.nbytes, f.latency, f.resources)
                    # with a CXL handoff, the write of the prompt's KV to the pool is the handoff
                    handoff_of.append(i if via_cxl and cl.tiers[t].kind == "cxl" and dec_of[i] >= 0 else -1)
        early = self.early
        for j in range(len(early)):
            flows.add(early.start[j], early.nbytes[j], early.latency[j], early.sets[early.res[j]])
            handoff_of.append(-1)
        self.handoff_s = handoff_s = np.zeros(len(self.tr))
        if self.split and not via_cxl:
            for i in np.flatnonzero((dec_of >= 0) & np.isfinite(first_s)).tolist():
                f = net.handoff_flow(first_s[i], insts[self.inst_of[i]].host, insts[dec_of[i]].host,
                                     self.tr.input_len[i] * self.bpt)
                flows.add(f.start, f.nbytes, f.latency, f.resources)
                handoff_of.append(i)
        if len(flows):
            fin = share_links(flows, net.capacity)
            hand = np.frombuffer(handoff_of, np.int64)
            sel = np.flatnonzero(hand >= 0)
            np.maximum.at(handoff_s, hand[sel], fin[sel] - np.frombuffer(flows.start, float)[sel])

    def run_decode(self) -> None:
        """Each decode instance runs the rest of its requests, whole prompt cached, from their handoff."""
        tr, first_s, handoff_s = self.tr, self.first_s, self.handoff_s
        self.dec_first = np.full(len(tr), math.nan)
        for k in self.dec:
            idx = np.flatnonzero((self.dec_of == k) & np.isfinite(first_s))
            arr = first_s[idx] + handoff_s[idx]
            idx = idx[np.argsort(arr, kind="stable")]
            arr = first_s[idx] + handoff_s[idx]
            pr = self._run(k, arr, tr.input_len[idx], tr.output_len[idx] - 1, tr.input_len[idx].astype(float),
                           self.cfg_dec)
            if pr is None:
                continue
            self.done_s[idx] = pr["done_s"]
            self.dec_first[idx] = pr["first_s"]

    def prediction(self) -> ClusterPrediction:
        """Per-request times and the summary (a testbed run is closed loop: its client sends a request when a
        slot frees, and times it from there)."""
        tr, arrival, first_s, done_s, release_s = self.tr, self.arrival, self.first_s, self.done_s, self.release_s
        start = np.where(np.isfinite(release_s), release_s, arrival) if self.meta.get("concurrency") else arrival
        ttft = (first_s - start) * 1e3
        e2e = (done_s - start) * 1e3
        out = tr.output_len
        tbt = np.where(out > 1, (done_s - first_s) / np.maximum(out - 1, 1) * 1e3, math.nan)
        queue = release_s - arrival - self.load_s
        completed = np.isfinite(done_s)
        ok = completed.copy()
        if "ttft" in self.slo_s:
            ok &= ttft <= self.slo_s["ttft"] * 1e3
        if "tbt" in self.slo_s:
            ok &= ~(tbt > self.slo_s["tbt"] * 1e3)
        if "e2e" in self.slo_s:
            ok &= e2e <= self.slo_s["e2e"] * 1e3
        per = {"arrival": arrival, "instance": self.inst_of, "decode_instance": self.dec_of,
               "input_tokens": tr.input_len, "output_tokens": out, "cached_tokens": self.cached_total,
               **{f"cached_{t}": self.by_tier[j] for j, t in enumerate(self.tier_names)},
               "load_s": self.load_s, "handoff_s": self.handoff_s, "queue_s": queue,
               "ttft_ms": ttft, "tbt_ms": tbt, "e2e_ms": e2e, "completed": completed, "slo_met": ok}
        t0 = float(arrival.min())
        duration = float(np.nanmax(done_s) - t0) if completed.any() else math.nan
        summary = self._summary(ttft, tbt, e2e, queue, completed, ok, duration)
        failed = self.failed
        pred = ClusterPrediction(self.system, self.cl.name, int(tr.input_len.mean()), int(out.mean()),
                                 max(self.conc_used.values(), default=0), len(tr), not failed,
                                 "; ".join(failed) if failed else None,
                                 config={"trace": tr.name, "time_scale": self.time_scale, "cache": self.cache,
                                         "router": self.router, "instances": self.n_inst, "pd": summary["pd"],
                                         "cache_capacity": self.caps, "block_tokens": self.bt,
                                         "handoff": summary["handoff"]},
                                 per_request=per, summary=summary)
        pred.ttft_mean_ms, pred.ttft_p50_ms, pred.ttft_p99_ms = (summary["ttft_mean_ms"], summary["ttft_p50_ms"],
                                                                 summary["ttft_p99_ms"])
        pred.tbt_mean_ms, pred.tbt_p99_ms = summary["tbt_mean_ms"], summary["tbt_p99_ms"]
        pred.e2e_mean_ms = summary["e2e_mean_ms"]
        pred.output_throughput_tok_s = summary["output_throughput_tok_s"]
        pred.request_throughput_req_s = summary["throughput_req_s"]
        pred.duration_s = duration
        return pred

    def _summary(self, ttft, tbt, e2e, queue, completed, ok, duration) -> dict:
        tr, split, out = self.tr, self.split, self.tr.output_len
        prompt = float(tr.input_len.sum())
        return {
            "requests": len(tr), "instances": self.n_inst, "system": self.system, "router": self.router,
            "pd": f"{split[0]}:{split[1]}" if split else None,
            "handoff": ("cxl" if self.via_cxl else "rdma") if split else None,
            "time_scale": self.time_scale, "duration_s": duration,
            **{f"ttft_{k}_ms": v for k, v in _percentiles(ttft).items()},
            **{f"tbt_{k}_ms": v for k, v in _percentiles(tbt).items()},
            # the mean pools every inter-token gap, as the single-instance prediction and the benchmark do
            "tbt_mean_ms": _pooled_tbt(self.first_s, self.done_s, out, completed),
            **{f"e2e_{k}_ms": v for k, v in _percentiles(e2e).items()},
            **{f"queue_{k}_s": v for k, v in _percentiles(queue).items()},
            "slo": dict(self.slo_s), "slo_attainment": float(ok.mean()),
            "goodput_req_s": float(ok.sum() / duration) if duration else math.nan,
            "throughput_req_s": float(completed.sum() / duration) if duration else math.nan,
            "output_throughput_tok_s": float(out[completed].sum() / duration) if duration else math.nan,
            "hit_rate": {t: float(self.by_tier[j].sum() / prompt) for j, t in enumerate(self.tier_names)},
            "hit_rate_total": float(self.cached_total.sum() / prompt),
            "bytes_by_link": {k: float(v) for k, v in sorted(link_bytes(self.flows).items())},
            "cache_capacity_tokens": {t: self.caps[t] for t in self.tier_names},
            "requests_by_instance": {self.insts[k].id: int((self.inst_of == k).sum()) for k in self.pre},
            "concurrency_by_instance": self.conc_used,
            "failed_instances": self.failed,
            "evicted_blocks": {t: int(c.evicted[0]) for t, c in self.shared.items()} | {
                f"{self.insts[k].id}.{name}": int(c.evicted[j]) for k, (c, names) in self.private.items()
                for j, name in enumerate(names)},
        }


def _pooled_tbt(first_s, done_s, out, completed) -> float:
    """Mean inter-token gap (ms) over every gap of the completed multi-token requests."""
    m = completed & (out > 1)
    return float((done_s - first_s)[m].sum() / (out[m] - 1).sum() * 1e3) if m.any() else math.nan


def _in_chunks(order: np.ndarray, *cols, size: int = 1 << 16):
    """(index, values of every column) in ``order``, converted to Python numbers a chunk at a time."""
    for c0 in range(0, len(order), size):
        idx = order[c0:c0 + size]
        yield from zip(idx.tolist(), *(np.asarray(c)[idx].tolist() for c in cols))


def _largest_alone(cfg, tr) -> str | None:
    """The binding memory limit if the trace's largest request does not fit an instance alone, else None."""
    from ..serving.capacity import static_check
    c = static_check(cfg, context=int(tr.input_len.max()), output=int(tr.output_len.max()), concurrency=1,
                     prompts="distinct")
    return None if c["feasible"] else c["limit"]



def _progress(on: bool, n: int, n_inst: int):
    if not on:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                 transient=True)
    p.add_task("routing and caching", total=n)
    p.add_task("engine runs", total=None)
    p.start()
    return p
