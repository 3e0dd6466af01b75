"""The scenario file: its schema (pydantic), reading the YAML within the size limits, and building the
:class:`~sacmodel.hardware.topology.Topology` from it.

Validation checks the YAML's size and shape, every field's dimension and range (:data:`FIELD_RANGES`,
:data:`PARAM_RANGES` in :mod:`sacmodel.hardware.topology`) and the size limits (:data:`LIMITS`); the engine then trusts what
it gets. Errors are :class:`TopologyError` with the file and field in the message. Loading goes through
:func:`sacmodel.hardware.topology.load_topology`, which keeps validated scenarios in the cache (:mod:`sacmodel.util.cache`) so that
this module, pydantic, YAML and pint load only for a scenario file not seen before.
"""
from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import networkx as nx
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    create_model,
    field_validator,
)

from ..util.reading import check_tree as _check_tree
from ..util.reading import read_text as _read_text
from .models import ModelError, get_model
from .topology import (
    FIELD_OVERRIDES,
    FIELD_RANGES,
    LIMITS,
    LINK_FIELDS,
    NODE_FIELDS,
    PARAM_DIMENSIONS,
    PARAM_RANGES,
    RETIRED_PARAMS,
    POOL_KINDS,
    PROTOCOLS,
    SCHEMA_VERSION,
    Param,
    Range,
    Topology,
    TopologyError,
    param_range,
)
from .units import UnitError, parse_quantity

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


class WorkloadSpec(BaseModel):
    """The workload a scenario stands for when a prediction names none (``workload:``): its prompts, with the
    source that says so. Without it a prediction assumes independent users (distinct prompts)."""
    model_config = ConfigDict(extra="forbid")
    prompts: Literal["shared", "distinct"]
    source: Text


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: StrictInt
    name: Name
    description: Text = ""
    model: Name
    workload: Optional[WorkloadSpec] = None
    nodes: list[dict[str, Any]] = Field(max_length=LIMITS["nodes"])
    links: list[dict[str, Any]] = Field(max_length=LIMITS["edges"])
    pools: dict[str, list[Name]] = {}
    serving: dict[str, Any] = {}
    calibration: dict[str, Any] = {}


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
        msg = ("expected {value: <quantity>, source: <provenance>}" if quantity else "expected a mapping") + \
            f", got {_short(e.get('input'))}"
    elif path and path[-1] == "value" and e["type"].endswith("_type"):
        msg = f"expected a quantity such as '26 GB/s' or a number, got {_short(e.get('input'))}"
    return f"{where}: {loc}: {msg}" if loc else f"{where}: {msg}"


def parse(model: type[BaseModel], raw: dict, where: str, what: str = ""):
    """``model(**raw)``, or a :class:`TopologyError` naming ``where`` and the field (see :func:`_pyd`)."""
    try:
        return model(**raw)
    except ValidationError as exc:
        raise TopologyError(_pyd(exc, where, what)) from None


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


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping. YAML keeps the last silently, so a
    second ``tp:`` (or a second ``serving:`` block) added by hand would replace the first without a word. A key
    from a merge (``<<: *base``) may still be overridden."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                    seen.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:           # an unhashable key: the base constructor names it
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice, first on line {first}: YAML would keep only the "
                        "last; remove one", key_node.start_mark)
        return super().construct_mapping(node, deep)


# PyYAML (YAML 1.1) reads 1e-4, 2.5e3 and 1e300 as text: its floats need a dot and a signed exponent. YAML 1.2
# and every other reader take them as numbers, as does a user who writes a price per GB or a count so
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                       re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                                       list("-+0123456789"))


def read_yaml(path: Path, err=TopologyError, what: str = "scenario file") -> Any:
    """``yaml.safe_load`` of a regular file read through :mod:`sacmodel.util.reading` (the size limit held while
    reading; a directory, FIFO or device refused); errors name the file (a ``what``) and line."""
    where = str(path)
    text = _read_text(path, limit=LIMITS["file_bytes"], what=what, err=err)
    try:
        _check_yaml_depth(text, where, err)
        data = yaml.load(text, Loader=_UniqueKeyLoader)
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
        if rng is None and k in RETIRED_PARAMS:
            raise TopologyError(f"{where}.{k}: {RETIRED_PARAMS[k]}")
        if rng is None:
            known = sorted(set(PARAM_RANGES) | set(PARAM_DIMENSIONS))
            raise TopologyError(f"{where}.{k}: unknown parameter {k!r} (known: {', '.join(known)})")
        if not isinstance(raw, dict):
            raise TopologyError(f"{where}.{k}: expected {{value: <quantity>, source: <provenance>}}, got {_short(raw)}")
        num = parse(Num, raw, f"{where}.{k}")
        try:
            out[k] = _quantity(num, rng)
        except ValueError as exc:
            raise TopologyError(f"{where}.{k}: {exc}") from None
    return out


def _fields(raw: dict, model: type[BaseModel], loc: str, what: str) -> dict:
    """Validate the numeric fields of a node or link entry: SI values and their sources."""
    parsed = parse(model, raw, loc, what)
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
    sf = parse(ScenarioFile, data, where)
    if sf.schema_version != SCHEMA_VERSION:
        raise TopologyError(f"{where}: schema_version {sf.schema_version} is not supported "
                            f"(this is {SCHEMA_VERSION}, or 2 with a 'cluster:' section)")
    return sf


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


def build(data: Any, where: str, path: Path | None) -> Topology:
    """Validate a parsed scenario (``where`` names it in errors) and build its :class:`Topology`."""
    sf = validate_scenario(data, where)
    g = nx.DiGraph()
    groups, gpus = _add_nodes(g, sf.nodes, where)
    _add_links(g, sf.links, groups, where)
    pools = _pools(g, sf.pools, groups, where)
    topo = Topology(name=sf.name, graph=g, gpus=gpus, pools=pools, model_name=sf.model,
                    serving=_params(sf.serving, f"{where}: serving"),
                    calibration=_params(sf.calibration, f"{where}: calibration"),
                    path=path, description=sf.description,
                    workload=sf.workload.prompts if sf.workload else None)
    _check_whole(topo, sf.model, where)
    return topo


def _add_nodes(g, nodes: list, where: str) -> tuple[dict[str, list[str]], list[str]]:
    """Add the nodes (an entry with ``count`` n is the group id[0]..id[n-1]); returns the groups by written
    id and the GPUs in order."""
    groups: dict[str, list[str]] = {}
    gpus: list[str] = []
    for i, raw in enumerate(nodes):
        loc = f"{where}: nodes[{i}]"
        ns = parse(NodeSpec, raw, loc)
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
    return groups, gpus


def _members(g, groups: dict, ref: str, loc: str) -> list[str]:
    """The nodes a reference names: a group's members, or one node."""
    if ref in groups:
        return groups[ref]
    if ref in g:
        return [ref]
    raise TopologyError(f"{loc}: unknown node {ref!r}")


def _add_links(g, links: list, groups: dict, where: str) -> None:
    """Add each link both ways (``bandwidth_reverse`` for the way back); a link between two groups of the same
    size pairs their members, else it joins every member of one to every member of the other."""
    for i, raw in enumerate(links):
        loc = f"{where}: links[{i}]"
        raw = dict(raw)
        if "from" in raw:
            raw["from_"] = raw.pop("from")
        ls = parse(LinkSpec, raw, loc)
        loc = f"{where}: link {ls.from_} -> {ls.to}"
        if ls.protocol not in PROTOCOLS:
            raise TopologyError(f"{loc}: unknown protocol {ls.protocol!r} (known: {', '.join(PROTOCOLS)})")
        extra = {k: v for k, v in raw.items() if k not in ("from_", "to", "protocol")}
        attrs = {"protocol": ls.protocol, "latency": 0.0, "granularity": 64.0,
                 **_fields(extra, LINK_MODEL, loc, "a link")}
        a, b = _members(g, groups, ls.from_, loc), _members(g, groups, ls.to, loc)
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


def _pools(g, spec: dict, groups: dict, where: str) -> dict[str, list[str]]:
    """The memory pools: each a list of distinct nodes of the pool's kind."""
    pools: dict[str, list[str]] = {}
    for pname, refs in spec.items():
        if pname not in POOL_KINDS:
            raise TopologyError(f"{where}: pools.{pname}: unknown pool (known: {', '.join(POOL_KINDS)})")
        ms = [m for r in refs for m in _members(g, groups, r, f"{where}: pools.{pname}")]
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
    return pools


def _check_whole(topo: Topology, model: str, where: str) -> None:
    """What only the whole scenario can tell: a GPU and a host pool exist, the counts it names fit, the model is
    known, every GPU reaches its pools."""
    gpus, pools = topo.gpus, topo.pools
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
        get_model(model)
    except ModelError as exc:
        raise TopologyError(f"{where}: model: {exc}") from None
    _check_pool_routes(topo, where)
