"""Hardware scenarios: a versioned YAML schema, validated once at the edge, loaded into a networkx graph.

A scenario file names the model, lists nodes (GPU, CPU root complex, host DRAM, PCIe switch, CXL adapter,
CXL switch, CXL device, RDMA NIC, remote memory) and links, and binds the serving and fitted parameters.
Every number is ``{value: "<quantity with unit>", source: "<provenance>"}``. Inside, numbers are SI floats.

This module holds the loaded form (:class:`Topology`), the allowed ranges of every field (:data:`FIELD_RANGES`,
:data:`PARAM_RANGES`) and the size limits (:data:`LIMITS`); the file's schema, its validation and the build of
the graph are in :mod:`sacmodel.hardware.schema`. Errors are :class:`TopologyError` naming file and field.

Routes carry data from ``src`` to ``dst``; :func:`max_min_share` gives the bandwidth each of several
concurrent flows gets when they share links and devices.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..util.lazy import lazy_module
from ..util.names import FP8_GEMM_BACKENDS

nx = lazy_module("networkx")     # graph algorithms only; a cached scenario's lookups need none

SCHEMA_VERSION = 1

# Size limits of a scenario (documented in the README); beyond them loading refuses with a TopologyError.
LIMITS = {
    "file_bytes": 1 << 20,        # YAML file size
    "yaml_depth": 20,             # nesting levels of mappings and lists
    "yaml_items": 100_000,        # scalars, mappings and lists, aliases expanded
    "text_chars": 4096,           # a name, id, description or source
    "node_count": 1024,           # ``count`` of one node entry
    "gpus": 256,                  # GPUs in the scenario
    "nodes": 4096,                # nodes after expanding counts
    "edges": 65536,               # directed links after expanding groups
    "pool_members": 1024,         # members of one pool
}


class TopologyError(ValueError):
    """A scenario file or topology that cannot be used; the message names file and field."""


# ---- field specifications -------------------------------------------------------------------------
@dataclass(frozen=True)
class Range:
    """Allowed SI values of a field: ``lo`` (excluded when ``lo_open``) to ``hi``; ``integer``: whole numbers."""
    dimension: str
    lo: float
    hi: float
    lo_open: bool = False
    integer: bool = False
    choices: tuple[str, ...] = ()          # for text parameters (dimension 'string')

    def check(self, v: float, raw: Any) -> None:
        shown = repr(raw) if isinstance(raw, str) else raw
        if self.lo >= 0 and (v < 0 or (v == 0 and (self.lo_open or self.lo > 0))):
            raise ValueError(f"must be {'positive' if self.lo_open or self.lo > 0 else 'non-negative'}, "
                             f"got {shown}")
        if v < self.lo or (self.lo_open and v == self.lo) or v > self.hi:
            lo = f"({_si(self.lo, self.dimension)}" if self.lo_open else f"[{_si(self.lo, self.dimension)}"
            raise ValueError(f"must be in {lo}, {_si(self.hi, self.dimension)}], got {shown}")
        if self.integer and v != int(v):
            raise ValueError(f"must be a whole number, got {shown}")


_SI_UNIT = {"bandwidth": "B/s", "time": "s", "bytes": "B", "flops": "FLOP/s", "tokens": "tokens",
            "dimensionless": "", "rate": "1/s"}


def _si(x: float, dimension: str) -> str:
    return f"{x:g} {_SI_UNIT.get(dimension, '')}".strip()


def _bandwidth(lo=1e6, hi=1e15): return Range("bandwidth", lo, hi, lo_open=True)   # noqa: E704
def _time(hi=1.0): return Range("time", 0.0, hi)                                       # noqa: E704
def _bytes(lo=1e6, hi=1e18): return Range("bytes", lo, hi, lo_open=True)              # noqa: E704
def _fraction(lo_closed=False): return Range("dimensionless", 0.0, 1.0, lo_open=not lo_closed)  # noqa: E704
def _count(hi, dim="dimensionless"): return Range(dim, 1, hi, integer=True)           # noqa: E704


# Hardware fields: 1 MB/s .. 1 PB/s bandwidths, latencies 0 .. 1 s, capacities 1 MB .. 1 EB, 1 GFLOP/s .. 1 EFLOP/s
FIELD_RANGES = {"bandwidth": _bandwidth(), "time": _time(), "bytes": _bytes(),
                "flops": Range("flops", 1e9, 1e18, lo_open=True), "count": Range("dimensionless", 1, 1e9, integer=True)}

# Which fields each node kind has: name -> (dimension, required)
NODE_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "gpu": {"hbm_capacity": ("bytes", True), "hbm_bandwidth": ("bandwidth", True),
            "flops_bf16": ("flops", True), "flops_fp8": ("flops", True), "flops_fp4": ("flops", False),
            "nvlink_bandwidth": ("bandwidth", False), "memory_reported": ("bytes", False),
            "sms": ("count", False),
            # beyond one host: GPUs per NVLink domain, and the scale-out NICs collectives across hosts use
            "nvlink_domain": ("count", False), "nics_per_gpu": ("count", False),
            "nic_rate": ("bandwidth", False), "nic_latency": ("time", False),
            # nccl-tests' time of a small all-reduce over two full hosts of this fabric (hardware.sizing.fabric_scale)
            "net_allreduce_time": ("time", False)},
    "cpu_root_complex": {"bandwidth": ("bandwidth", False), "latency": ("time", False)},
    "host_dram": {"capacity": ("bytes", True), "bandwidth": ("bandwidth", True), "latency": ("time", True)},
    "pcie_switch": {"bandwidth": ("bandwidth", False), "latency": ("time", False)},
    "cxl_adapter": {"bandwidth": ("bandwidth", False), "latency": ("time", False)},
    "cxl_switch": {"bandwidth": ("bandwidth", False), "latency": ("time", False)},
    "cxl_device": {"capacity": ("bytes", True), "bandwidth": ("bandwidth", True), "latency": ("time", True)},
    "rdma_nic": {"rate": ("bandwidth", True), "op_cost": ("time", True), "latency": ("time", False)},
    "remote_memory": {"capacity": ("bytes", True), "bandwidth": ("bandwidth", False),
                      "latency": ("time", False)},
}
LINK_FIELDS: dict[str, tuple[str, bool]] = {
    "bandwidth": ("bandwidth", True), "bandwidth_reverse": ("bandwidth", False),
    "per_flow_bandwidth": ("bandwidth", False), "latency": ("time", False),
    "granularity": ("bytes", False),
}
FIELD_OVERRIDES = {"granularity": Range("bytes", 1, 1 << 20, lo_open=False),   # a transfer unit, 1 B .. 1 MiB
                   "sms": Range("dimensionless", 1, 4096, integer=True),         # streaming multiprocessors
                   "nvlink_domain": Range("dimensionless", 1, 1024, integer=True),
                   "nics_per_gpu": Range("dimensionless", 0.0, 64.0, lo_open=True)}
PROTOCOLS = ("pcie4", "pcie5", "pcie6", "cxl2", "cxl3", "ddr4", "ddr5", "rdma", "nvlink", "upi", "internal")
POOL_KINDS = {"dram": "host_dram", "cxl": "cxl_device", "rdma": "rdma_nic"}

# Dimensions of known serving / calibration parameters (others: see PARAM_RANGES)
PARAM_DIMENSIONS = {
    "max_total_tokens": "tokens", "prefill_chunk": "tokens", "device_buffer": "tokens", "page_tokens": "tokens",
    "activation_reserve": "bytes", "host_pool_capacity": "bytes",
    "t_kernel": "time", "t_step": "time", "t_request": "time", "prefetch_poll": "time",
    "t_graph_kernel": "time", "t_collective": "time", "t_launch": "time",
    "copy_bandwidth": "bandwidth", "admit_bandwidth": "bandwidth", "outstanding_lines": "dimensionless", "cacheline": "bytes",
    "dma_setup": "time", "t_rdma_post": "time", "rdma_ops_per_token": "dimensionless",
    "kv_dtype": "string", "attn_dtype": "string", "rdma_topk_granularity": "string",
    "t_hs": "time", "t_hs_req": "time", "t_hs_admit": "time", "t_token": "time", "stage_copy_bw": "bandwidth",
    "cxl_map_bytes": "bytes", "swap_load_bytes": "bytes", "buffer_extra_slots": "tokens",
    "load_balance": "string", "weights": "string", "max_prefill_tokens": "tokens", "engine": "string",
    "moe_a2a": "string", "deepep_mode": "string", "two_batch_overlap": "dimensionless",
    "ep_redundant": "dimensionless", "moe_dense_tp": "dimensionless", "ep_load_skew": "dimensionless", "ep_load_skew_prefill": "dimensionless",
    "vllm_tokenizer_wait": "time", "vllm_output_message": "time", "vllm_output_request": "time", "vllm_intake_request": "time",
    "vllm_stream_chunk": "time", "vllm_api_servers": "dimensionless",
    "fp8_gemm_backend": "string",
}
# Parameters of earlier versions, and what replaced them (a scenario naming one gets this in its error)
RETIRED_PARAMS = {
    "t_layer": "t_layer (a fixed time per layer) was replaced by t_graph_kernel (per kernel of a CUDA-graph step) "
               "and t_collective (per collective); see docs/model.md",
    "t_admit": "t_admit (a time per admitted request) was replaced by the eager prefill's launch time, t_launch "
               "per kernel; see docs/model.md",
}
# Ranges of serving / calibration parameters. A parameter listed only in PARAM_DIMENSIONS gets the default
# range of its dimension (DEFAULT_PARAM_RANGES); a name in neither table is refused as unknown.
PARAM_RANGES: dict[str, Range] = {
    "dp": _count(LIMITS["gpus"]), "tp": _count(LIMITS["gpus"]),
    "mem_fraction": _fraction(), "hbm_eff": _fraction(), "compute_eff": _fraction(), "prefill_eff": _fraction(),
    "moe_eff": _fraction(), "sparse_prefill_eff": _fraction(), "ep": _count(LIMITS["gpus"]), "cuda_graph_max_bs": _count(1 << 16),
    "weights": Range("string", 0, 0, choices=("fp8", "bf16", "awq-int4", "fp4")),
    "engine": Range("string", 0, 0, choices=("sglang", "vllm")),
    "topk_overlap": _fraction(lo_closed=True),
    "launch_overlap": _fraction(lo_closed=True), "prefill_attn_eff": _fraction(),
    "moe_prefill_eff": _fraction(), "gqa_decode_eff": _fraction(),
    "topk_churn_exponent": Range("dimensionless", -4.0, 4.0),
    "weight_bytes_per_param": Range("dimensionless", 0.0, 8.0, lo_open=True),
    "max_total_tokens": _count(1 << 31, "tokens"), "max_running_requests": _count(1 << 20),
    "scheduler_recv_interval": _count(1 << 16),
    "piecewise_cuda_graph_max_tokens": _count(1 << 24, "tokens"),
    "prefill_chunk": _count(1 << 24, "tokens"), "device_buffer": _count(1 << 24, "tokens"),
    "page_tokens": _count(1 << 16, "tokens"),
    "cxl_devices": _count(LIMITS["pool_members"]), "rdma_nics": _count(LIMITS["pool_members"]),
    "cacheline": Range("bytes", 1, 4096, integer=True),
    "outstanding_lines": Range("dimensionless", 1, 1e9),
    "rdma_ops_per_token": Range("dimensionless", 0, 1e6, lo_open=True),
    "activation_reserve": Range("bytes", 0, 1e18), "host_pool_capacity": _bytes(),
    "kv_dtype": Range("string", 0, 0, choices=("fp8", "bf16", "fp16")),
    "attn_dtype": Range("string", 0, 0, choices=("fp8", "bf16", "fp16")),
    "rdma_topk_granularity": Range("string", 0, 0, choices=("entry", "page")),
    "load_balance": Range("string", 0, 0, choices=("round_robin",)),
    "moe_a2a": Range("string", 0, 0, choices=("none", "deepep")),
    "deepep_mode": Range("string", 0, 0, choices=("auto", "normal", "low_latency")),
    "fp8_gemm_backend": Range("string", 0, 0, choices=FP8_GEMM_BACKENDS),
    "two_batch_overlap": Range("dimensionless", 0, 1, integer=True),
    "vllm_api_servers": Range("dimensionless", 1, 1024, integer=True),
    "ep_redundant": Range("dimensionless", 0, 1 << 16, integer=True),
    "moe_dense_tp": Range("dimensionless", 1, 1, integer=True),
    # the busiest GPU's routed-expert tokens over the mean: 1 (uniform) up to every token on one GPU of a large group
    "ep_load_skew": Range("dimensionless", 1.0, 1024.0), "ep_load_skew_prefill": Range("dimensionless", 1.0, 1024.0),
    "score_correlation": Range("dimensionless", 0.0, 0.999999),
    "drift_settling": Range("dimensionless", 0.0, 1e4),
    "settling_steps": Range("dimensionless", 0.0, 1e9, lo_open=True),
    "host_to_device_ratio": Range("dimensionless", 0.0, 1e3, lo_open=True),
    "swap_block_threads": _count(1 << 16),
    "swap_load_bytes": Range("bytes", 1, 1024, integer=True),
    "stage_passes": Range("dimensionless", 0.0, 100.0),
    "buffer_extra_slots": Range("tokens", 0, 1 << 20, integer=True),
}
DEFAULT_PARAM_RANGES = {"time": _time(hi=3600.0), "bandwidth": _bandwidth(), "bytes": Range("bytes", 0, 1e18),
                        "tokens": _count(1 << 31, "tokens"), "dimensionless": Range("dimensionless", 0, 1e9),
                        "flops": FIELD_RANGES["flops"], "string": Range("string", 0, 0)}


def param_range(name: str) -> Range | None:
    """The allowed range of serving / calibration parameter ``name`` (None: not a known parameter)."""
    if name in PARAM_RANGES:
        return PARAM_RANGES[name]
    dim = PARAM_DIMENSIONS.get(name)
    return DEFAULT_PARAM_RANGES[dim] if dim else None


@dataclass
class Param:
    """A bound number: SI value and where it came from."""
    value: float
    source: str
    raw: str = ""


@dataclass
class Topology:
    """A loaded scenario: hardware graph, pools, model name, serving and fitted parameters."""
    name: str
    graph: nx.DiGraph
    gpus: list[str]
    pools: dict[str, list[str]]
    model_name: str
    serving: dict[str, Param] = field(default_factory=dict)
    calibration: dict[str, Param] = field(default_factory=dict)
    path: Path | None = None
    description: str = ""
    model_overrides: dict = field(default_factory=dict)   # config.json fields replaced (e.g. index_topk)
    cluster: Any = None     # schema version 2: the cluster (sacmodel.hardware.cluster.ClusterSpec)
    workload: str | None = None   # the prompts of the workload it stands for ("shared"); None: independent users
    _routes: dict = field(default_factory=dict, repr=False)

    # ---- the graph, and its attributes without it --------------------------------------------------
    # A Topology read from the cache carries its nodes and links as plain dicts (``_plain``) and builds the
    # networkx graph only when a method needs a graph algorithm (a route not computed before): predictions
    # look up routes computed when the scenario was validated, so they never import networkx.
    def __getattr__(self, name: str):
        if name == "graph" and self.__dict__.get("_plain") is not None:
            nodes, edges = self.__dict__.pop("_plain")
            g = nx.DiGraph()
            g.add_nodes_from(nodes.items())
            g.add_edges_from((u, v, d) for (u, v), d in edges.items())
            self.graph = g
            return g
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        g = state.pop("graph", None)
        if g is not None:
            state["_plain"] = (dict(g.nodes(data=True)), {(u, v): d for u, v, d in g.edges(data=True)})
        return state

    @property
    def _nodes(self):
        """Attribute dict of each node (the graph's, or the plain copy while the graph is not built)."""
        plain = self.__dict__.get("_plain")
        return plain[0] if plain is not None else self.graph.nodes

    @property
    def _edges(self):
        """Attribute dict of each directed link, by ``(u, v)``."""
        plain = self.__dict__.get("_plain")
        return plain[1] if plain is not None else self.graph.edges

    # ---- lookup ----------------------------------------------------------------------------------
    def node(self, nid: str) -> dict:
        if nid not in self._nodes:
            raise TopologyError(f"{self.name}: no node {nid!r}")
        return self._nodes[nid]

    def nodes_of(self, kind: str) -> list[str]:
        return [n for n, d in self._nodes.items() if d["kind"] == kind]

    def param(self, name: str) -> float:
        """A serving or calibration parameter by name (SI float)."""
        for table in (self.calibration, self.serving):
            if name in table:
                return table[name].value
        raise TopologyError(f"{self.name}: scenario has no parameter {name!r} "
                            f"(add it under 'serving:' or 'calibration:')")

    def has_param(self, name: str) -> bool:
        return name in self.calibration or name in self.serving

    # ---- routes ----------------------------------------------------------------------------------
    def route(self, src: str, dst: str) -> list[str]:
        """Nodes on the lowest-latency path carrying data from ``src`` to ``dst``."""
        for n in (src, dst):
            self.node(n)
        key = (src, dst)
        if key not in self._routes:
            try:
                paths = nx.shortest_simple_paths(self.graph, src, dst, weight="hop_weight")
                self._routes[key] = next(p for p in paths if self._forwardable(p))
            except (nx.NetworkXNoPath, StopIteration):
                raise TopologyError(f"{self.name}: no route from {src} to {dst}") from None
        return self._routes[key]

    def precompute_routes(self) -> None:
        """Compute the routes predictions use (every pool member to every GPU and back, remote memory to the
        NICs, the NICs and CXL devices to host DRAM) and each GPU's DRAM, so that a cached copy answers them at
        once."""
        # a pool's first members only: each route is a graph search, so all 1,024 members of a large pool
        # would take minutes; the others are found when a prediction asks for them
        pools = {p: ms[:PRECOMPUTED_MEMBERS] for p, ms in self.pools.items()}
        dram = pools.get("dram", [])
        pairs = [(m, g) for ms in pools.values() for m in ms for g in self.gpus]
        pairs += [(g, m) for p in ("dram", "cxl") for m in pools.get(p, []) for g in self.gpus]   # backups
        pairs += [(r, n) for r in self.nodes_of("remote_memory") for n in pools.get("rdma", [])]
        pairs += [(m, d) for p in ("rdma", "cxl") for m in pools.get(p, []) for d in dram]
        for a, b in pairs:
            try:
                self.route(a, b)
            except TopologyError:      # no route: a prediction asking for it gets the same error then
                pass
        if dram:
            for r in range(len(self.gpus)):
                self.pool_for(r, "dram")

    def _forwardable(self, path: list[str]) -> bool:
        """A CXL switch connects hosts to devices; it does not carry host-to-host traffic."""
        kind = lambda n: self._nodes[n]["kind"]  # noqa: E731
        return not any(kind(b) == "cxl_switch" and kind(a) == kind(c) == "cxl_adapter"
                       for a, b, c in zip(path, path[1:], path[2:]))

    def route_latency(self, path: list[str]) -> float:
        """One-way latency of a path (s): its links plus the latency of every node after the first."""
        lat = sum(self._edges[u, v]["latency"] for u, v in zip(path, path[1:]))
        return lat + sum(self._nodes[n].get("latency", 0.0) for n in path[1:])

    def round_trip_latency(self, path: list[str]) -> float:
        """Load latency (s) for a reader at ``path[-1]`` of memory at ``path[0]``: links both ways + devices."""
        links = sum(self._edges[u, v]["latency"] for u, v in zip(path, path[1:]))
        return 2 * links + sum(self._nodes[n].get("latency", 0.0) for n in path)

    def resources(self, path: list[str]) -> list[tuple]:
        """Shared capacities a flow along ``path`` uses: directed links and nodes with a bandwidth."""
        res = [("link", u, v) for u, v in zip(path, path[1:])]
        res += [("node", n) for n in path if "bandwidth" in self._nodes[n]]
        return res

    def capacity(self, res: tuple) -> float:
        if res[0] == "link":
            return self._edges[res[1], res[2]]["bandwidth"]
        return self._nodes[res[1]]["bandwidth"]

    def flow_cap(self, path: list[str]) -> float:
        """Per-flow cap of a path (s^-1 B): the smallest ``per_flow_bandwidth`` of its links, else inf."""
        caps = [self._edges[u, v].get("per_flow_bandwidth", math.inf) for u, v in zip(path, path[1:])]
        return min(caps, default=math.inf)

    def bottleneck(self, path: list[str]) -> float:
        """Bandwidth of one flow alone on ``path`` (B/s)."""
        return min([self.capacity(r) for r in self.resources(path)] + [self.flow_cap(path)])

    # ---- pools -----------------------------------------------------------------------------------
    def pool_for(self, gpu_rank: int, pool: str, n_devices: int | None = None) -> str:
        """The pool node that GPU rank ``gpu_rank`` uses.

        'dram': the host DRAM nearest the GPU; 'cxl': device ``rank mod n``; 'rdma': NIC ``rank mod n``.
        """
        members = self.pools.get(pool)
        if not members:
            raise TopologyError(f"{self.name}: no '{pool}' pool in this scenario (pools: {sorted(self.pools)})")
        gpu = self.gpus[gpu_rank]
        copy_of = self.node(gpu).get("host_copy")   # a server over copies of one host (hardware.span): a rank
        if copy_of is not None:                    # uses its own host's members (a shared pool's, else)
            members = [m for m in members if self.node(m).get("host_copy") == copy_of] or members
        if pool == "dram":
            key = ("nearest", "dram", gpu)     # 3-tuple: never a (src, dst) route key
            if key not in self._routes:
                reach = [m for m in members if nx.has_path(self.graph, m, gpu)]
                self._routes[key] = min(reach, key=lambda m: self.route_latency(self.route(m, gpu)))
            return self._routes[key]
        n = len(members) if n_devices is None else min(n_devices, len(members)) if copy_of is not None else n_devices
        if not 1 <= n <= len(members):
            raise TopologyError(f"{self.name}: {pool} pool has {len(members)} devices, asked for {n}")
        return members[gpu_rank % n]


# ---- loading --------------------------------------------------------------------------------------



# ---- sharing --------------------------------------------------------------------------------------
def max_min_share(topo: Topology, flows: list[tuple[str, str]] | list[tuple[str, str, float]]) -> list[float]:
    """Max-min fair bandwidth (B/s) of concurrent flows ``(src, dst[, demand])`` sharing links and devices.

    Progressive filling: raise all unfrozen flows equally until a resource saturates or a flow reaches its
    demand (or its path's per-flow cap); freeze those flows; repeat.
    """
    paths, demand = [], []
    for f in flows:
        p = topo.route(f[0], f[1])
        paths.append(p)
        d = f[2] if len(f) > 2 else math.inf
        if d < 0:
            raise TopologyError(f"flow {f[0]}->{f[1]}: negative demand")
        demand.append(min(d, topo.flow_cap(p)))
    return water_fill([topo.resources(p) for p in paths], demand, topo.capacity)


def water_fill(uses: list[list], demand: list[float], capacity) -> list[float]:
    """Max-min fair rates for flows using the listed resources (``capacity(resource)`` -> B/s)."""
    return _fill(uses, demand, capacity, None)


def water_fill_binding(uses: list[list], demand: list[float], capacity) -> tuple[list[float], list]:
    """Max-min fair rates (B/s), and for each flow what froze it: the resource that saturated (the first one
    along its list when several saturate at once), or None when the flow reached its demand."""
    frozen: list = [None] * len(uses)
    return _fill(uses, demand, capacity, frozen), frozen


def _fill(uses: list[list], demand: list[float], capacity, frozen: list | None) -> list[float]:
    """Progressive filling; ``frozen`` (if given) receives the saturated resource that froze each flow.

    Each round raises every active flow by the same increment: the smallest of each resource's remaining
    capacity over its active users and each flow's remaining demand; flows on a saturated resource, or at
    their demand, stop. All active flows start at 0 and take the same increments, so they hold one rate
    ``level`` (the same float) until they stop: the rounds count users per resource and keep that level rather
    than each flow's (a cluster replay solves this at every transfer event; the arithmetic is the same)."""
    n = len(uses)
    rate = [0.0] * n
    sets = [frozenset(u) for u in uses]
    cap: dict = {}
    for s in sets:
        for r in s:
            if r not in cap:
                cap[r] = capacity(r)
    remaining = dict(cap)
    tiny = {r: 1e-9 * c for r, c in cap.items()}        # saturated at or below this much left (finite only)
    inf = math.inf
    count = dict.fromkeys(cap, 0)                      # active users of each resource
    active = [i for i in range(n) if demand[i] > 0]
    for i in active:
        for r in sets[i]:
            count[r] += 1
    level = 0.0
    while active:
        inc = min((remaining[r] / k for r, k in count.items() if k), default=inf)
        for i in active:
            x = demand[i] - level
            if x < inc:
                inc = x
        if not math.isfinite(inc):
            raise TopologyError("a flow crosses no finite capacity: its bandwidth is unbounded")
        level += inc
        saturated = set()
        for r, k in count.items():
            if k:
                left = remaining[r] = remaining[r] - inc * k
                if left <= tiny[r] < inf:
                    saturated.add(r)
        still = []
        for i in active:
            d = demand[i]
            if (d == inf or d - level > 1e-12 * max(1.0, d)) and (not saturated or saturated.isdisjoint(sets[i])):
                still.append(i)
                continue
            rate[i] = level
            for r in sets[i]:
                count[r] -= 1
            if frozen is not None:
                frozen[i] = next((r for r in uses[i] if r in saturated), None)
        active = still
    return rate


PRECOMPUTED_MEMBERS = 16        # routes of a pool's first members computed when a scenario is loaded


def with_pool_size(topo: Topology, pool: str, n: int) -> Topology:
    """A copy of ``topo`` whose ``pool`` has ``n`` members (extra ones cloned from the first, with the same links:
    planned additions to the pool, as `plan` and `predict --cxl-devices N` size it)."""
    import copy
    t = copy.deepcopy(topo)
    members = t.pools.get(pool)
    if not members:
        raise TopologyError(f"{t.name}: no {pool} pool to grow")
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


@dataclass(frozen=True)
class Share:
    """One flow's max-min share and what sets it.

    ``rate``: B/s; ``binding``: the resource that saturated (``("link", u, v)`` or ``("node", n)``), or
    ``("flow_cap", u, v)`` when the flow runs at the per-flow cap of link u->v; ``utilisation``: the share of the
    binding resource's capacity all flows through it use (0-1); ``next_binding`` and ``headroom``: what would bind
    if the binding resource were unbounded, and how much faster (relative) the flow would then run."""
    rate: float
    binding: tuple
    utilisation: float
    next_binding: tuple | None
    headroom: float


def max_min_binding(topo: Topology, flows: list[tuple[str, str]]) -> list[Share]:
    """:func:`max_min_share` of concurrent flows ``(src, dst)``, with the resource that binds each flow and what
    would bind next if every resource that binds a flow now were unbounded (symmetric resources, such as the
    devices of a pool, bind together and are lifted together)."""
    return paths_binding(topo, [topo.route(f[0], f[1]) for f in flows])


def paths_binding(topo: Topology, paths: list[list[str]]) -> list[Share]:
    """:func:`max_min_binding` of flows along the given paths (lists of nodes)."""
    uses = [topo.resources(p) for p in paths]
    rates, frozen = _binding_fill(topo, paths, uses, topo.capacity, set())
    lifted = {b for b in frozen if b[0] != "flow_cap"}
    capped = {i for i, b in enumerate(frozen) if b[0] == "flow_cap"}
    try:
        rates2, frozen2 = _binding_fill(topo, paths, uses, _lifted(topo.capacity, lifted), capped)
    except TopologyError:                         # nothing else bounds a flow
        rates2, frozen2 = [math.inf] * len(paths), [None] * len(paths)
    out = []
    for i, p in enumerate(paths):
        b = frozen[i]
        if b[0] == "flow_cap":
            use = 1.0
        else:
            use = sum(r for r, u in zip(rates, uses) if b in u) / topo.capacity(b)
        head = rates2[i] / rates[i] - 1.0 if rates[i] > 0 else math.inf
        out.append(Share(rates[i], b, use, frozen2[i], head))
    return out


def _lifted(capacity, lifted: set):
    """``capacity`` with the resources in ``lifted`` unbounded."""
    return lambda r: math.inf if r in lifted else capacity(r)


def _binding_fill(topo: Topology, paths: list, uses: list, capacity, uncapped: set) -> tuple[list, list]:
    """Water-fill with per-flow caps as demands (none for the flows in ``uncapped``); a flow frozen at its cap
    is bound by ``("flow_cap", u, v)``, the link with the smallest per-flow bandwidth on its path."""
    demand = [math.inf if i in uncapped else topo.flow_cap(p) for i, p in enumerate(paths)]
    frozen = [None] * len(uses)
    rates = _fill(uses, demand, capacity, frozen)
    for i, p in enumerate(paths):
        if frozen[i] is None:
            u, v = min(zip(p, p[1:]), key=lambda e: topo._edges[e].get("per_flow_bandwidth", math.inf))
            frozen[i] = ("flow_cap", u, v)
    return rates, frozen
