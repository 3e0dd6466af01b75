"""Hardware scenarios: a versioned YAML schema loaded into a networkx graph.

A scenario file names the model, lists nodes (GPU, CPU root complex, host DRAM, PCIe switch, CXL adapter,
CXL switch, CXL device, RDMA NIC, remote memory) and links, and binds the serving and fitted parameters.
Every number is ``{value: "<quantity with unit>", source: "<provenance>"}``. Inside, numbers are SI floats.

Routes carry data from ``src`` to ``dst``; :func:`max_min_share` gives the bandwidth each of several
concurrent flows gets when they share links and devices.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .units import UnitError, parse_quantity

SCHEMA_VERSION = 1
TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"
PACKAGE_TOPOLOGY_DIR = Path(__file__).resolve().parent / "data"


class TopologyError(ValueError):
    """A scenario file or topology that cannot be used; the message names file and field."""


class Num(BaseModel):
    """A number with its unit and provenance."""
    model_config = ConfigDict(extra="forbid")
    value: str | float | int
    source: str

    @field_validator("source")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("source must not be empty")
        return v


# Which fields each node kind has: name -> (dimension, required)
NODE_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "gpu": {"hbm_capacity": ("bytes", True), "hbm_bandwidth": ("bandwidth", True),
            "flops_bf16": ("flops", True), "flops_fp8": ("flops", True), "flops_fp4": ("flops", False)},
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
PROTOCOLS = ("pcie4", "pcie5", "pcie6", "cxl2", "cxl3", "ddr4", "ddr5", "rdma", "nvlink", "upi", "internal")


class NodeSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    kind: str
    count: int = 1
    description: str = ""


class LinkSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    from_: str
    to: str
    protocol: str


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int
    name: str
    description: str = ""
    model: str
    nodes: list[dict[str, Any]]
    links: list[dict[str, Any]]
    pools: dict[str, list[str]] = {}
    serving: dict[str, Any] = {}
    calibration: dict[str, Any] = {}


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
    cluster: Any = None     # schema version 2: the cluster (sacmodel.cluster.schema.ClusterSpec)
    _routes: dict = field(default_factory=dict, repr=False)

    # ---- lookup ----------------------------------------------------------------------------------
    def node(self, nid: str) -> dict:
        if nid not in self.graph:
            raise TopologyError(f"{self.name}: no node {nid!r}")
        return self.graph.nodes[nid]

    def nodes_of(self, kind: str) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d["kind"] == kind]

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

    def _forwardable(self, path: list[str]) -> bool:
        """A CXL switch connects hosts to devices; it does not carry host-to-host traffic."""
        kind = lambda n: self.graph.nodes[n]["kind"]  # noqa: E731
        return not any(kind(b) == "cxl_switch" and kind(a) == kind(c) == "cxl_adapter"
                       for a, b, c in zip(path, path[1:], path[2:]))

    def route_latency(self, path: list[str]) -> float:
        """One-way latency of a path (s): its links plus the latency of every node after the first."""
        lat = sum(self.graph.edges[u, v]["latency"] for u, v in zip(path, path[1:]))
        return lat + sum(self.graph.nodes[n].get("latency", 0.0) for n in path[1:])

    def round_trip_latency(self, path: list[str]) -> float:
        """Load latency (s) for a reader at ``path[-1]`` of memory at ``path[0]``: links both ways + devices."""
        links = sum(self.graph.edges[u, v]["latency"] for u, v in zip(path, path[1:]))
        return 2 * links + sum(self.graph.nodes[n].get("latency", 0.0) for n in path)

    def resources(self, path: list[str]) -> list[tuple]:
        """Shared capacities a flow along ``path`` uses: directed links and nodes with a bandwidth."""
        res = [("link", u, v) for u, v in zip(path, path[1:])]
        res += [("node", n) for n in path if "bandwidth" in self.graph.nodes[n]]
        return res

    def capacity(self, res: tuple) -> float:
        if res[0] == "link":
            return self.graph.edges[res[1], res[2]]["bandwidth"]
        return self.graph.nodes[res[1]]["bandwidth"]

    def flow_cap(self, path: list[str]) -> float:
        """Per-flow cap of a path (s^-1 B): the smallest ``per_flow_bandwidth`` of its links, else inf."""
        caps = [self.graph.edges[u, v].get("per_flow_bandwidth", math.inf) for u, v in zip(path, path[1:])]
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
        if pool == "dram":
            reach = [m for m in members if nx.has_path(self.graph, m, gpu)]
            return min(reach, key=lambda m: self.route_latency(self.route(m, gpu)))
        n = len(members) if n_devices is None else n_devices
        if not 1 <= n <= len(members):
            raise TopologyError(f"{self.name}: {pool} pool has {len(members)} devices, asked for {n}")
        return members[gpu_rank % n]


# ---- loading --------------------------------------------------------------------------------------
def _num(raw: Any, dimension: str, where: str) -> tuple[float, str, str]:
    if not isinstance(raw, dict):
        raise TopologyError(f"{where}: expected {{value: <quantity>, source: <provenance>}}, got {raw!r}")
    try:
        n = Num(**raw)
    except ValidationError as exc:
        raise TopologyError(f"{where}: {_first_error(exc)}") from None
    try:
        v = parse_quantity(n.value, dimension, field=where)
    except UnitError as exc:
        raise TopologyError(str(exc)) from None
    if not math.isfinite(v) or v < 0:
        raise TopologyError(f"{where}: must be a finite non-negative number, got {n.value!r}")
    return v, n.source, str(n.value)


def _fields(raw: dict, spec: dict[str, tuple[str, bool]], loc: str, what: str) -> dict:
    """Parse the numeric fields ``spec`` (name -> (dimension, required)) of a node or link entry."""
    extra = dict(raw)
    out: dict[str, Any] = {"sources": {}}
    for fname, (dim, required) in spec.items():
        if fname not in extra:
            if required:
                raise TopologyError(f"{loc}: missing field {fname!r} ({what} needs it)")
            continue
        v, src, _ = _num(extra.pop(fname), dim, f"{loc}.{fname}")
        if dim in ("bandwidth", "flops", "bytes") and v <= 0:
            raise TopologyError(f"{loc}.{fname}: must be positive")
        out[fname] = v
        out["sources"][fname] = src
    if extra:
        raise TopologyError(f"{loc}: unknown field(s) {', '.join(sorted(extra))} for {what}")
    return out


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    return f"{loc + ': ' if loc else ''}{e['msg']}"


# Dimensions of known serving / calibration parameters (others: dimensionless)
PARAM_DIMENSIONS = {
    "max_total_tokens": "tokens", "prefill_chunk": "tokens", "device_buffer": "tokens", "page_tokens": "tokens",
    "activation_reserve": "bytes", "host_pool_capacity": "bytes",
    "t_kernel": "time", "t_layer": "time", "t_step": "time", "t_admit": "time", "t_request": "time", "prefetch_poll": "time", "t_admit_per_token": "time",
    "copy_bandwidth": "bandwidth", "admit_bandwidth": "bandwidth", "outstanding_lines": "dimensionless", "cacheline": "bytes",
    "dma_setup": "time", "t_rdma_post": "time", "rdma_ops_per_token": "dimensionless",
    "kv_dtype": "string", "attn_dtype": "string", "rdma_topk_granularity": "string",
}


def _params(table: dict, where: str) -> dict[str, Param]:
    out = {}
    if not isinstance(table, dict):
        raise TopologyError(f"{where}: expected a mapping of parameters")
    for k, raw in table.items():
        dim = PARAM_DIMENSIONS.get(k, "dimensionless")
        if dim == "string":  # e.g. a dtype name: kept as text in Param.raw
            try:
                n = Num(**raw) if isinstance(raw, dict) else None
            except ValidationError as exc:
                raise TopologyError(f"{where}.{k}: {_first_error(exc)}") from None
            if n is None:
                raise TopologyError(f"{where}.{k}: expected {{value: ..., source: ...}}")
            out[k] = Param(float("nan"), n.source, str(n.value))
            continue
        v, src, r = _num(raw, dim, f"{where}.{k}")
        out[k] = Param(v, src, r)
    return out


def load_topology(spec: str | Path | dict) -> Topology:
    """Load a scenario: a built-in name (``sac-testbed``), a YAML path, or a parsed mapping."""
    path: Path | None = None
    if isinstance(spec, dict):
        data, where = spec, "<scenario>"
    else:
        path = resolve_scenario_path(spec)
        where = str(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise TopologyError(f"{where}: cannot read ({exc.strerror})") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise TopologyError(f"{where}:{at}: malformed YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: expected a mapping at the top level")
    if data.get("schema_version") == 2:     # a cluster: its host scenario plus a 'cluster:' section
        from .cluster.schema import load_v2
        return load_v2(data, where, path)
    try:
        sf = ScenarioFile(**data)
    except ValidationError as exc:
        raise TopologyError(f"{where}: {_first_error(exc)}") from None
    if sf.schema_version != SCHEMA_VERSION:
        raise TopologyError(f"{where}: schema_version {sf.schema_version} is not supported "
                            f"(this is {SCHEMA_VERSION}, or 2 with a 'cluster:' section)")

    g = nx.DiGraph()
    groups: dict[str, list[str]] = {}
    gpus: list[str] = []
    for i, raw in enumerate(sf.nodes):
        loc = f"{where}: nodes[{i}]"
        try:
            ns = NodeSpec(**raw)
        except ValidationError as exc:
            raise TopologyError(f"{loc}: {_first_error(exc)}") from None
        loc = f"{where}: node {ns.id!r}"
        if ns.kind not in NODE_FIELDS:
            raise TopologyError(f"{loc}: unknown kind {ns.kind!r} (known: {', '.join(NODE_FIELDS)})")
        if ns.count < 1:
            raise TopologyError(f"{loc}: count must be >= 1")
        if ns.id in groups:
            raise TopologyError(f"{loc}: duplicate id")
        extra = {k: v for k, v in raw.items() if k not in ("id", "kind", "count", "description")}
        attrs: dict[str, Any] = {"kind": ns.kind, **_fields(extra, NODE_FIELDS[ns.kind], loc, f"a {ns.kind}")}
        ids = [ns.id] if ns.count == 1 else [f"{ns.id}[{j}]" for j in range(ns.count)]
        groups[ns.id] = ids
        for nid in ids:
            g.add_node(nid, **attrs)
        if ns.kind == "gpu":
            gpus += ids

    def members(ref: str, loc: str) -> list[str]:
        if ref in groups:
            return groups[ref]
        if ref in g:
            return [ref]
        raise TopologyError(f"{loc}: unknown node {ref!r}")

    for i, raw in enumerate(sf.links):
        loc = f"{where}: links[{i}]"
        raw = dict(raw)
        if "from" in raw:
            raw["from_"] = raw.pop("from")
        try:
            ls = LinkSpec(**raw)
        except ValidationError as exc:
            raise TopologyError(f"{loc}: {_first_error(exc)}") from None
        loc = f"{where}: link {ls.from_} -> {ls.to}"
        if ls.protocol not in PROTOCOLS:
            raise TopologyError(f"{loc}: unknown protocol {ls.protocol!r} (known: {', '.join(PROTOCOLS)})")
        extra = {k: v for k, v in raw.items() if k not in ("from_", "to", "protocol")}
        attrs = {"protocol": ls.protocol, "latency": 0.0, "granularity": 64.0,
                 **_fields(extra, LINK_FIELDS, loc, "a link")}
        a, b = members(ls.from_, loc), members(ls.to, loc)
        if len(a) > 1 and len(b) > 1:
            if len(a) != len(b):
                raise TopologyError(f"{loc}: groups of different sizes ({len(a)} vs {len(b)})")
            pairs = list(zip(a, b))
        else:
            pairs = [(x, y) for x in a for y in b]
        fwd = {k: v for k, v in attrs.items() if k != "bandwidth_reverse"}
        rev = dict(fwd, bandwidth=attrs.get("bandwidth_reverse", attrs["bandwidth"]))
        for x, y in pairs:
            w = attrs["latency"] + 1e-9  # hop penalty: prefer fewer hops at equal latency
            g.add_edge(x, y, **fwd, hop_weight=w)
            g.add_edge(y, x, **rev, hop_weight=w)

    pools: dict[str, list[str]] = {}
    pool_kinds = {"dram": "host_dram", "cxl": "cxl_device", "rdma": "rdma_nic"}
    for pname, refs in sf.pools.items():
        if pname not in pool_kinds:
            raise TopologyError(f"{where}: pools.{pname}: unknown pool (known: {', '.join(pool_kinds)})")
        ms = [m for r in refs for m in members(r, f"{where}: pools.{pname}")]
        for m in ms:
            if g.nodes[m]["kind"] != pool_kinds[pname]:
                raise TopologyError(f"{where}: pools.{pname}: {m} is a {g.nodes[m]['kind']}, "
                                    f"not a {pool_kinds[pname]}")
        pools[pname] = ms

    topo = Topology(name=sf.name, graph=g, gpus=gpus, pools=pools, model_name=sf.model,
                    serving=_params(sf.serving, f"{where}: serving"),
                    calibration=_params(sf.calibration, f"{where}: calibration"),
                    path=path, description=sf.description)
    if not gpus:
        raise TopologyError(f"{where}: the scenario has no GPU")
    # Every GPU must reach every pool member it may be configured to use.
    for pname, ms in pools.items():
        for r, gpu in enumerate(gpus):
            targets = ms if pname != "dram" else ms[:0] or ms
            reached = []
            for m in targets:
                try:
                    topo.route(m, gpu)
                    reached.append(m)
                except TopologyError:
                    if pname != "dram":
                        raise TopologyError(f"{where}: GPU {gpu} has no route to {pname} pool member {m}") from None
            if not reached:
                raise TopologyError(f"{where}: GPU {gpu} has no route to any member of the dram pool")
    return topo


def builtin_scenarios() -> list[str]:
    dirs = [d for d in (TOPOLOGY_DIR, PACKAGE_TOPOLOGY_DIR) if d.is_dir()]
    return sorted({p.stem for d in dirs for p in d.glob("*.yaml")})


def resolve_scenario_path(spec: str | Path) -> Path:
    """A path to a YAML file, or a built-in scenario name looked up in ``topologies/``."""
    p = Path(spec)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise TopologyError(f"{p}: no such scenario file")
        return p
    for d in (TOPOLOGY_DIR, PACKAGE_TOPOLOGY_DIR):
        cand = d / f"{spec}.yaml"
        if cand.exists():
            return cand
    raise TopologyError(f"unknown scenario {str(spec)!r}; built-in: {', '.join(builtin_scenarios())} "
                        "(or give a path to a YAML file)")


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
    n = len(uses)
    rate = [0.0] * n
    active = {i for i in range(n) if demand[i] > 0}
    remaining = {r: capacity(r) for u in uses for r in u}
    while active:
        users: dict = {}
        for i in active:
            for r in set(uses[i]):
                users.setdefault(r, []).append(i)
        inc = min([remaining[r] / len(us) for r, us in users.items()] +
                  [demand[i] - rate[i] for i in active])
        if not math.isfinite(inc):
            raise TopologyError("a flow crosses no finite capacity: its bandwidth is unbounded")
        for i in active:
            rate[i] += inc
        for r, us in users.items():
            remaining[r] -= inc * len(us)
        saturated = {r for r, us in users.items() if remaining[r] <= 1e-9 * capacity(r)}
        active = {i for i in active if (math.isinf(demand[i]) or demand[i] - rate[i] > 1e-12 * max(1.0, demand[i]))
                  and not (set(uses[i]) & saturated)}
    return rate
