"""Hardware scenarios: a versioned YAML schema, validated once at the edge, loaded into a networkx graph.

A scenario file names the model, lists nodes (GPU, CPU root complex, host DRAM, PCIe switch, CXL adapter,
CXL switch, CXL device, RDMA NIC, remote memory) and links, and binds the serving and fitted parameters.
Every number is ``{value: "<quantity with unit>", source: "<provenance>"}``. Inside, numbers are SI floats.

Validation (pydantic, :func:`validate_scenario`) checks the YAML's size and shape, every field's dimension
and range (:data:`FIELD_RANGES`, :data:`PARAM_RANGES`) and the size limits (:data:`LIMITS`); the engine then
trusts what it gets. Errors are :class:`TopologyError` with the file and field in the message.

Routes carry data from ``src`` to ``dst``; :func:`max_min_share` gives the bandwidth each of several
concurrent flows gets when they share links and devices.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Union

import networkx as nx
import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr,
                      ValidationError, create_model, field_validator)

from .models import ModelError, get_model
from .schemas import check_tree as _check_tree
from .units import UnitError, parse_quantity

SCHEMA_VERSION = 1
_PKG = Path(__file__).resolve().parent
# Built-in scenarios: ``topologies/`` of the repository, installed as the package ``sacmodel.topologies``.
TOPOLOGY_DIR = next((d for d in (_PKG / "topologies", _PKG.parent / "topologies") if d.is_dir()),
                    _PKG.parent / "topologies")

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
                "flops": Range("flops", 1e9, 1e18, lo_open=True)}

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
FIELD_OVERRIDES = {"granularity": Range("bytes", 1, 1 << 20, lo_open=False)}   # a transfer unit, 1 B .. 1 MiB
PROTOCOLS = ("pcie4", "pcie5", "pcie6", "cxl2", "cxl3", "ddr4", "ddr5", "rdma", "nvlink", "upi", "internal")
POOL_KINDS = {"dram": "host_dram", "cxl": "cxl_device", "rdma": "rdma_nic"}

# Dimensions of known serving / calibration parameters (others: see PARAM_RANGES)
PARAM_DIMENSIONS = {
    "max_total_tokens": "tokens", "prefill_chunk": "tokens", "device_buffer": "tokens", "page_tokens": "tokens",
    "activation_reserve": "bytes", "host_pool_capacity": "bytes",
    "t_kernel": "time", "t_layer": "time", "t_step": "time", "t_admit": "time", "t_request": "time", "prefetch_poll": "time", "t_admit_per_token": "time",
    "copy_bandwidth": "bandwidth", "admit_bandwidth": "bandwidth", "outstanding_lines": "dimensionless", "cacheline": "bytes",
    "dma_setup": "time", "t_rdma_post": "time", "rdma_ops_per_token": "dimensionless",
    "kv_dtype": "string", "attn_dtype": "string", "rdma_topk_granularity": "string",
    "t_hs": "time", "t_hs_req": "time", "t_token": "time", "stage_copy_bw": "bandwidth",
    "cxl_map_bytes": "bytes", "swap_load_bytes": "bytes", "buffer_extra_slots": "tokens",
    "load_balance": "string",
}
# Ranges of serving / calibration parameters. A parameter listed only in PARAM_DIMENSIONS gets the default
# range of its dimension (DEFAULT_PARAM_RANGES); a name in neither table is refused as unknown.
PARAM_RANGES: dict[str, Range] = {
    "dp": _count(LIMITS["gpus"]), "tp": _count(LIMITS["gpus"]),
    "mem_fraction": _fraction(), "hbm_eff": _fraction(), "compute_eff": _fraction(), "prefill_eff": _fraction(),
    "topk_overlap": _fraction(lo_closed=True),
    "topk_churn_exponent": Range("dimensionless", -4.0, 4.0),
    "weight_bytes_per_param": Range("dimensionless", 0.0, 8.0, lo_open=True),
    "max_total_tokens": _count(1 << 31, "tokens"), "max_running_requests": _count(1 << 20),
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


# ---- schema (pydantic) ----------------------------------------------------------------------------
Text = Annotated[StrictStr, Field(max_length=LIMITS["text_chars"])]
Name = Annotated[StrictStr, Field(min_length=1, max_length=200)]


class Num(BaseModel):
    """A number with its unit and provenance."""
    model_config = ConfigDict(extra="forbid")
    value: Union[StrictStr, StrictInt, StrictFloat]
    source: Text

    @field_validator("source")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("source must not be empty")
        return v


@dataclass
class Param:
    """A bound number: SI value and where it came from."""
    value: float
    source: str
    raw: str = ""


def _quantity(num: Num, rng: Range) -> Param:
    if rng.dimension == "string":
        if rng.choices and num.value not in rng.choices:
            raise ValueError(f"must be one of {', '.join(rng.choices)}, got {num.value!r}")
        return Param(float("nan"), num.source, str(num.value))
    try:
        v = parse_quantity(num.value, rng.dimension, field="value")
    except UnitError as exc:
        raise ValueError(str(exc).removeprefix("value: ")) from None
    rng.check(v, num.value)
    return Param(v, num.source, str(num.value))


def Quantity(rng: Range):  # noqa: N802 - a type factory
    """Annotated type: a ``{value, source}`` mapping validated to a :class:`Param` within ``rng``."""
    return Annotated[Num, AfterValidator(partial(_quantity, rng=rng))]


def _field_range(name: str, dim: str) -> Range:
    return FIELD_OVERRIDES.get(name, FIELD_RANGES[dim])


class NodeSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: Name
    kind: Name
    count: StrictInt = Field(1, ge=1, le=LIMITS["node_count"])
    description: Text = ""


def _fields_model(name: str, spec: dict[str, tuple[str, bool]]) -> type[BaseModel]:
    fields = {f: (Quantity(_field_range(f, dim)), ... if required else None) for f, (dim, required) in spec.items()}
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


NODE_MODELS = {kind: _fields_model(f"{kind}_fields", spec) for kind, spec in NODE_FIELDS.items()}
LINK_MODEL = _fields_model("link_fields", LINK_FIELDS)


class LinkSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    from_: Name
    to: Name
    protocol: Name


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: StrictInt
    name: Name
    description: Text = ""
    model: Name
    nodes: list[dict[str, Any]] = Field(max_length=LIMITS["nodes"])
    links: list[dict[str, Any]] = Field(max_length=LIMITS["edges"])
    pools: dict[str, list[Name]] = {}
    serving: dict[str, Any] = {}
    calibration: dict[str, Any] = {}


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
def _pyd(exc: ValidationError, where: str, what: str = "") -> str:
    """One line from a pydantic error: ``where``, the field path and the message."""
    e = exc.errors()[0]
    path = [x for x in e["loc"] if x not in ("str", "int", "float") and not str(x).startswith("function-")]
    loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in path).lstrip(".").replace("from_", "from")
    if e["type"] == "missing":
        return f"{where}: missing field {loc!r}" + (f" ({what} needs it)" if what else "")
    if e["type"] == "extra_forbidden":
        return f"{where}: unknown field {loc!r}" + (f" for {what}" if what else "")
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] in ("model_type", "dict_type"):
        quantity = path and isinstance(path[-1], str) and path[-1] not in ScenarioFile.model_fields
        msg = (f"expected {{value: <quantity>, source: <provenance>}}" if quantity else "expected a mapping") + \
            f", got {_short(e.get('input'))}"
    elif path and path[-1] == "value" and e["type"].endswith("_type"):
        msg = f"expected a quantity such as '26 GB/s' or a number, got {_short(e.get('input'))}"
    return f"{where}: {loc}: {msg}" if loc else f"{where}: {msg}"


def _short(v: Any, n: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= n else text[:n] + "..."


def check_tree(data: Any, where: str) -> None:
    """Refuse a parsed scenario nested too deeply, too large (aliases expanded) or with non-string keys."""
    _check_tree(data, where, depth=LIMITS["yaml_depth"], items=LIMITS["yaml_items"], err=TopologyError)


def _check_yaml_depth(text: str, where: str, err) -> None:
    """Walk the YAML events (no recursion) and stop at a nesting deeper than the limit, before composing."""
    depth = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > LIMITS["yaml_depth"]:
                line = ev.start_mark.line + 1 if ev.start_mark else "?"
                raise err(f"{where}: line {line}: nested deeper than {LIMITS['yaml_depth']} levels")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def read_yaml(path: Path, err=TopologyError) -> Any:
    """``yaml.safe_load`` of a file within the size limits; errors name the file and line."""
    where = str(path)
    if path.is_dir():
        raise err(f"{where}: is a directory, not a scenario file")
    try:
        size = path.stat().st_size
        if size > LIMITS["file_bytes"]:
            raise err(f"{where}: file of {size} bytes is over the {LIMITS['file_bytes']}-byte limit")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise err(f"{where}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise err(f"{where}: line {line}: not UTF-8 text") from None
    try:
        _check_yaml_depth(text, where, err)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f": line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        if isinstance(exc, yaml.reader.ReaderError):
            c = chr(exc.character) if isinstance(exc.character, int) else exc.character
            at = f": line {text[:exc.position].count(chr(10)) + 1}"
            what = f"unacceptable character {c!r}"
        else:
            what = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise err(f"{where}{at}: malformed YAML ({what[:200]})") from None
    except RecursionError:
        raise err(f"{where}: nested deeper than {LIMITS['yaml_depth']} levels") from None
    except err:
        raise
    except ValueError as exc:       # e.g. an integer of more than 4300 digits
        raise err(f"{where}: malformed YAML ({exc})") from None
    _check_tree(data, where, depth=LIMITS["yaml_depth"], items=LIMITS["yaml_items"], err=err)
    return data


def _params(table: Any, where: str) -> dict[str, Param]:
    if not isinstance(table, dict):
        raise TopologyError(f"{where}: expected a mapping of parameters")
    out = {}
    for k, raw in table.items():
        rng = param_range(k)
        if rng is None:
            known = sorted(set(PARAM_RANGES) | set(PARAM_DIMENSIONS))
            raise TopologyError(f"{where}.{k}: unknown parameter {k!r} (known: {', '.join(known)})")
        if not isinstance(raw, dict):
            raise TopologyError(f"{where}.{k}: expected {{value: <quantity>, source: <provenance>}}, got {_short(raw)}")
        try:
            out[k] = _quantity(Num(**raw), rng)
        except ValidationError as exc:
            raise TopologyError(_pyd(exc, f"{where}.{k}")) from None
        except ValueError as exc:
            raise TopologyError(f"{where}.{k}: {exc}") from None
    return out


def _fields(raw: dict, model: type[BaseModel], loc: str, what: str) -> dict:
    """Validate the numeric fields of a node or link entry: SI values and their sources."""
    try:
        parsed = model(**raw)
    except ValidationError as exc:
        raise TopologyError(_pyd(exc, loc, what)) from None
    out: dict[str, Any] = {"sources": {}}
    for name, p in parsed:
        if p is not None:
            out[name] = p.value
            out["sources"][name] = p.source
    return out


def validate_scenario(data: Any, where: str) -> ScenarioFile:
    """The top level of a parsed scenario, checked (field types, schema version)."""
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: expected a mapping at the top level")
    check_tree(data, where)
    try:
        sf = ScenarioFile(**data)
    except ValidationError as exc:
        raise TopologyError(_pyd(exc, where)) from None
    if sf.schema_version != SCHEMA_VERSION:
        raise TopologyError(f"{where}: schema_version {sf.schema_version} is not supported (this is {SCHEMA_VERSION})")
    return sf


def load_topology(spec: str | Path | dict) -> Topology:
    """Load a scenario: a built-in name (``sac-testbed``), a YAML path, or a parsed mapping."""
    path: Path | None = None
    if isinstance(spec, dict):
        data, where = spec, "<scenario>"
    elif isinstance(spec, (str, Path)):
        path = resolve_scenario_path(spec)
        where = str(path)
        data = read_yaml(path)
    else:
        raise TopologyError(f"a scenario is a built-in name, a YAML path or a mapping, not {type(spec).__name__}")
    sf = validate_scenario(data, where)

    g = nx.DiGraph()
    groups: dict[str, list[str]] = {}
    gpus: list[str] = []
    for i, raw in enumerate(sf.nodes):
        loc = f"{where}: nodes[{i}]"
        try:
            ns = NodeSpec(**raw)
        except ValidationError as exc:
            raise TopologyError(_pyd(exc, loc)) from None
        loc = f"{where}: node {ns.id!r}"
        if ns.kind not in NODE_FIELDS:
            raise TopologyError(f"{loc}: unknown kind {ns.kind!r} (known: {', '.join(NODE_FIELDS)})")
        if ns.id in groups:
            raise TopologyError(f"{loc}: duplicate id")
        extra = {k: v for k, v in raw.items() if k not in ("id", "kind", "count", "description")}
        attrs: dict[str, Any] = {"kind": ns.kind, **_fields(extra, NODE_MODELS[ns.kind], loc, f"a {ns.kind}")}
        ids = [ns.id] if ns.count == 1 else [f"{ns.id}[{j}]" for j in range(ns.count)]
        if g.number_of_nodes() + len(ids) > LIMITS["nodes"]:
            raise TopologyError(f"{loc}: more than {LIMITS['nodes']} nodes in the scenario (limit)")
        if ns.kind == "gpu" and len(gpus) + len(ids) > LIMITS["gpus"]:
            raise TopologyError(f"{loc}: more than {LIMITS['gpus']} GPUs in the scenario (limit)")
        groups[ns.id] = ids
        for nid in ids:
            if nid in g:
                raise TopologyError(f"{loc}: node id {nid!r} is used twice")
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
            raise TopologyError(_pyd(exc, loc)) from None
        loc = f"{where}: link {ls.from_} -> {ls.to}"
        if ls.protocol not in PROTOCOLS:
            raise TopologyError(f"{loc}: unknown protocol {ls.protocol!r} (known: {', '.join(PROTOCOLS)})")
        extra = {k: v for k, v in raw.items() if k not in ("from_", "to", "protocol")}
        attrs = {"protocol": ls.protocol, "latency": 0.0, "granularity": 64.0,
                 **_fields(extra, LINK_MODEL, loc, "a link")}
        a, b = members(ls.from_, loc), members(ls.to, loc)
        if len(a) > 1 and len(b) > 1:
            if len(a) != len(b):
                raise TopologyError(f"{loc}: groups of different sizes ({len(a)} vs {len(b)})")
            pairs = list(zip(a, b))
        else:
            pairs = [(x, y) for x in a for y in b]
        if g.number_of_edges() + 2 * len(pairs) > LIMITS["edges"]:
            raise TopologyError(f"{loc}: more than {LIMITS['edges']} directed links in the scenario (limit)")
        fwd = {k: v for k, v in attrs.items() if k != "bandwidth_reverse"}
        rev = dict(fwd, bandwidth=attrs.get("bandwidth_reverse", attrs["bandwidth"]))
        for x, y in pairs:
            if x == y:
                raise TopologyError(f"{loc}: a link from {x} to itself")
            if g.has_edge(x, y):
                raise TopologyError(f"{loc}: {x} and {y} are already linked (one link per pair)")
            w = attrs["latency"] + 1e-9  # hop penalty: prefer fewer hops at equal latency
            g.add_edge(x, y, **fwd, hop_weight=w)
            g.add_edge(y, x, **rev, hop_weight=w)

    pools: dict[str, list[str]] = {}
    for pname, refs in sf.pools.items():
        if pname not in POOL_KINDS:
            raise TopologyError(f"{where}: pools.{pname}: unknown pool (known: {', '.join(POOL_KINDS)})")
        ms = [m for r in refs for m in members(r, f"{where}: pools.{pname}")]
        if not ms:
            raise TopologyError(f"{where}: pools.{pname}: empty pool")
        if len(ms) > LIMITS["pool_members"] or len(set(ms)) != len(ms):
            raise TopologyError(f"{where}: pools.{pname}: members must be distinct and at most "
                                f"{LIMITS['pool_members']}")
        for m in ms:
            if g.nodes[m]["kind"] != POOL_KINDS[pname]:
                raise TopologyError(f"{where}: pools.{pname}: {m} is a {g.nodes[m]['kind']}, "
                                    f"not a {POOL_KINDS[pname]}")
        pools[pname] = ms

    topo = Topology(name=sf.name, graph=g, gpus=gpus, pools=pools, model_name=sf.model,
                    serving=_params(sf.serving, f"{where}: serving"),
                    calibration=_params(sf.calibration, f"{where}: calibration"),
                    path=path, description=sf.description)
    if not gpus:
        raise TopologyError(f"{where}: the scenario has no GPU")
    if "dram" not in pools:   # the host pool: HiSparse's, the RDMA staging copy's and the prefetch target
        raise TopologyError(f"{where}: pools: no 'dram' pool (list the host_dram nodes under pools.dram)")
    for name in ("dp", "tp"):
        if topo.has_param(name) and topo.param(name) > len(gpus):
            raise TopologyError(f"{where}: {name}={topo.param(name):g} but the scenario has {len(gpus)} GPUs")
    for name, pool in (("cxl_devices", "cxl"), ("rdma_nics", "rdma")):
        if topo.has_param(name) and pool in pools and topo.param(name) > len(pools[pool]):
            raise TopologyError(f"{where}: {name}={topo.param(name):g} but pools.{pool} has "
                                f"{len(pools[pool])} member(s)")
    try:
        get_model(sf.model)
    except ModelError as exc:
        raise TopologyError(f"{where}: model: {exc}") from None
    _check_pool_routes(topo, where)
    return topo


def _check_pool_routes(topo: Topology, where: str) -> None:
    """Every GPU must reach every CXL / RDMA pool member and at least one DRAM pool member.

    Shortest paths towards each GPU (one Dijkstra on the reversed graph, one on it without CXL switches,
    whose paths are always forwardable); only when both fail is :meth:`Topology.route` asked.
    """
    g = topo.graph
    rev = g.reverse(copy=False)
    no_switch = nx.subgraph_view(rev, filter_node=lambda n: g.nodes[n]["kind"] != "cxl_switch")
    for gpu in topo.gpus:
        full = nx.single_source_dijkstra_path(rev, gpu, weight="hop_weight")   # paths gpu <- member, reversed
        plain = None
        for pname, ms in topo.pools.items():
            reached = 0
            for m in ms:
                ok = m in full and topo._forwardable(full[m][::-1])
                if not ok and m in full:
                    if plain is None:
                        plain = nx.single_source_dijkstra_path(no_switch, gpu, weight="hop_weight")
                    ok = m in plain or _routable(topo, m, gpu)
                if ok:
                    reached += 1
                elif pname != "dram":
                    raise TopologyError(f"{where}: GPU {gpu} has no route to {pname} pool member {m}")
            if not reached:
                raise TopologyError(f"{where}: GPU {gpu} has no route to any member of the {pname} pool")


def _routable(topo: Topology, src: str, dst: str) -> bool:
    try:
        topo.route(src, dst)
        return True
    except TopologyError:
        return False


def builtin_scenarios() -> list[str]:
    """Names of the scenarios shipped with the package (``topologies/*.yaml``)."""
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml")) if TOPOLOGY_DIR.is_dir() else []


def is_builtin(path: str | Path) -> bool:
    """True when ``path`` is one of the shipped scenario files."""
    p = Path(path).resolve()
    return p.parent == TOPOLOGY_DIR.resolve() and p.suffix == ".yaml"


def resolve_scenario_path(spec: str | Path) -> Path:
    """A path to a YAML file, or a built-in scenario name looked up in ``topologies/``."""
    if not isinstance(spec, (str, Path)):
        raise TopologyError(f"a scenario is a built-in name or a YAML path, not {type(spec).__name__}")
    text = str(spec)
    if not text.strip() or len(text) > LIMITS["text_chars"] or "\0" in text:
        raise TopologyError(f"not a scenario name or path: {text[:80]!r}{'...' if len(text) > 80 else ''}")
    p = Path(spec)
    try:
        exists = p.exists()
    except OSError as exc:               # e.g. a name too long for the file system
        raise TopologyError(f"{text[:80]}: cannot use as a scenario path ({exc.strerror})") from None
    if p.suffix in (".yaml", ".yml") or exists:
        if not exists:
            raise TopologyError(f"{p}: no such scenario file")
        if p.is_dir():
            raise TopologyError(f"{p}: is a directory, not a scenario file")
        return p
    cand = TOPOLOGY_DIR / f"{text}.yaml"
    if "/" not in text and cand.exists():
        return cand
    raise TopologyError(f"unknown scenario {text!r}; built-in: {', '.join(builtin_scenarios())} "
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
