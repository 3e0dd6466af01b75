"""Cluster description: the ``cluster:`` section of a schema-version-2 scenario file.

A cluster is a set of hosts, each with the hardware and serving parameters of one scenario (``host:`` names a
version-1 scenario, or the file carries the host's ``nodes``/``links`` inline), serving instances placed on
them (``both``: prefill and decode; ``prefill``/``decode``: disaggregated; ``engine: vllm`` runs an instance
with vLLM's scheduler and defaults instead of the host scenario's engine; ``hosts: K`` or ``hosts: [ids]`` with
``tp``/``dp``/``ep`` and SGLang's expert-parallel settings runs one server over several hosts, :mod:`.span`), the
KV tiers the instances cache prefixes in, and the network between hosts:

- ``hbm`` / ``host`` tiers belong to one instance (its GPUs' HBM, its host DRAM);
- a ``cxl`` tier is one pool behind the CXL switch, shared by the hosts in ``attached``: a prefix written once
  is read in place by every attached host;
- an ``rdma`` tier is a store reached over RDMA (Mooncake Store): ``replicas`` copies of every object, batch
  eviction above ``watermark`` (``evict_ratio`` of the objects at a time), its own NICs.

Every number is ``{value: <quantity with unit>, source: <provenance>}``; capacities take bytes ("2 TB") or
tokens ("200000 token"). Inside, SI floats; capacities are kept in tokens (bytes / KV bytes per token).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .models import entry_bytes, model_of
from .topology import Topology, TopologyError
from ..util.names import ENGINES, LIMITS
from .units import UnitError, parse_quantity, parse_tokens


def _num(raw, dimension: str, where: str) -> tuple[float, str, str]:
    """A ``{value, source}`` entry: (SI value, provenance, value as written); finite and non-negative."""
    from .schema import Num, parse  # validation only: a cached cluster needs neither
    if not isinstance(raw, dict):
        raise TopologyError(f"{where}: expected {{value: <quantity>, source: <provenance>}}, got {raw!r}")
    n = parse(Num, raw, where)
    try:
        v = parse_quantity(n.value, dimension, field=where)
    except UnitError as exc:
        raise TopologyError(str(exc)) from None
    if not math.isfinite(v) or v < 0:
        raise TopologyError(f"{where}: must be a finite non-negative number, got {n.value!r}")
    return v, n.source, str(n.value)

TIER_KINDS = ("hbm", "host", "cxl", "rdma")
ROLES = ("both", "prefill", "decode")
# the tier a system reads a cached prefix from in place (the engine models that read); hits in a farther
# tier are first moved there by the cluster layer
HOME = {"gpu": "hbm", "dram": "host", "cxl": "cxl", "cxl-prefetch": "cxl", "rdma": "rdma", "rdma-topk": "rdma"}
# tiers each system can take a cached prefix from (nearest first)
USABLE = {"gpu": ("hbm", "host", "cxl", "rdma"), "dram": ("host", "cxl", "rdma"), "cxl": ("cxl",),
          "cxl-prefetch": ("cxl",), "rdma": ("rdma",), "rdma-topk": ("rdma",)}


@dataclass
class TierSpec:
    """One KV tier: its kind, scope and capacity (tokens; ``math.inf`` = unbounded)."""
    name: str
    kind: str
    capacity_tokens: float
    attached: tuple | None = None        # hosts that reach a shared tier (None: all)
    replicas: int = 1
    watermark: float | None = None
    evict_ratio: float | None = None
    params: dict = field(default_factory=dict)    # bandwidths etc. (SI)
    sources: dict = field(default_factory=dict)
    shared: bool = False                 # one cache for every attached instance (else one per instance)


@dataclass
class InstanceSpec:
    id: str
    host: str
    role: str
    tiers: tuple
    engine: str | None = None            # "sglang" or "vllm" (None: the host scenario's)
    hosts: tuple = ()                    # every host the server spans (``host`` first); () : ``host`` alone
    settings: dict = field(default_factory=dict)   # its server's tp, dp, ep, DeepEP... (span.SETTINGS); {}: the
                                                   # host scenario's

    @property
    def spans(self) -> int:
        """Hosts the instance's server runs on."""
        return max(1, len(self.hosts))


@dataclass
class ClusterSpec:
    """A cluster: host scenario, hosts, instances, tiers, network. ``host`` is the loaded host scenario."""
    name: str
    host: Topology
    hosts: list[str]
    instances: list[InstanceSpec]
    tiers: dict[str, TierSpec]
    rdma: TransferEngine | None = None
    store_rdma: TransferEngine | None = None
    max_context: float | None = None
    description: str = ""
    sources: dict = field(default_factory=dict)
    path: Path | None = None
    implicit: bool = False               # made from a version-1 scenario: each instance caches in its home tier

    @property
    def roles(self) -> list[str]:
        return [i.role for i in self.instances]


def kv_bytes_per_token(topo: Topology) -> float:
    """Bytes of one token's KV over all layers: main entry plus indexer key (48,068 B for DeepSeek-V3.2 FP8)."""
    m = model_of(topo)
    return m.layers * (entry_bytes(topo, m) + m.index_key_bytes)


def parse_capacity(value, field_: str, bytes_per_token: float | None) -> float:
    """Tokens from '3M', 3000000, 'inf', '200000 token' or a size such as '1 TB' (converted with
    ``bytes_per_token``; None: sizes are refused, there is no model to convert them with); a wrong unit raises."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if not value >= 1:
            raise UnitError(f"{field_}: capacity must be at least one token, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise UnitError(f"{field_}: a capacity is tokens ('3M', 3000000) or bytes ('1 TB'), not {type(value).__name__}")
    s = str(value).strip()
    if s.lower() in ("inf", "infinite", "unbounded"):
        return math.inf
    try:
        return float(parse_tokens(s))
    except UnitError:
        pass
    for dim, scale in (("tokens", 1.0), ("bytes", 1.0 / (bytes_per_token or math.nan))):
        try:
            v = parse_quantity(s, dim, field=field_) * scale
        except UnitError:
            continue
        if bytes_per_token is None and dim == "bytes":
            raise UnitError(f"{field_}: {s!r} is a size in bytes; give tokens ('3M', '200000 token'): bytes are "
                            "not tokens without a model's KV bytes per token")
        if not v >= 1:
            raise UnitError(f"{field_}: {s!r} holds less than one token")
        return v
    raise UnitError(f"{field_}: {s!r} is not a capacity; give tokens ('3M', '200000 token') or bytes ('1 TB')")


def _count(raw, where: str, hi: int = 1024) -> int:
    """A count of devices (NICs, CXL devices, replicas): a whole number from 1 to ``hi`` (the
    ``--cxl-devices`` / ``--rdma-nics`` bound), checked before anything is built from it."""
    v, _, _ = _num(raw, "dimensionless", where)
    if v != int(v) or v < 1 or v > hi:
        raise TopologyError(f"{where}: must be a whole number from 1 to {hi:,}, got {v:g}")
    return int(v)


def _plain_count(v, where: str, limit: str) -> int:
    """A structural count (how many hosts or instances of a group), a plain integer like a node's ``count``, at
    most ``LIMITS[limit]``."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise TopologyError(f"{where}: must be a positive integer, got {str(v)[:40]!r}")
    if v > LIMITS[limit]:
        raise TopologyError(f"{where}: {v:,} is above the limit of {LIMITS[limit]:,} {limit} in a cluster")
    return v


def _expect(d, keys: set, where: str, required=()):
    if not isinstance(d, dict):
        raise TopologyError(f"{where}: expected a mapping, got {type(d).__name__}")
    unknown = set(d) - keys
    if unknown:
        raise TopologyError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(keys))})")
    for k in required:
        if k not in d:
            raise TopologyError(f"{where}: missing field {k!r}")


def _engine(raw, where) -> TransferEngine:
    _expect(raw, {"nics", "nic_rate", "op_cost", "setup", "slice"}, where, ("nics", "nic_rate", "op_cost"))
    kw = {"nics": _count(raw["nics"], f"{where}.nics"),
          "nic_rate": _num(raw["nic_rate"], "bandwidth", f"{where}.nic_rate")[0],
          "op_cost": _num(raw["op_cost"], "time", f"{where}.op_cost")[0]}
    if "setup" in raw:
        kw["setup"] = _num(raw["setup"], "time", f"{where}.setup")[0]
    if "slice" in raw:
        kw["slice_bytes"] = _num(raw["slice"], "bytes", f"{where}.slice")[0]
    if kw["nic_rate"] <= 0 or kw.get("slice_bytes", 1) <= 0:
        raise TopologyError(f"{where}: rates and slice size must be positive")
    return TransferEngine(**kw)


TIER_FIELDS = {"kind", "capacity", "attached", "replicas", "watermark", "evict_ratio", "devices",
               "device_bandwidth", "host_write_bandwidth", "host_read_bandwidth", "rdma", "description",
               "inclusive", "segments", "lease"}
BANDWIDTHS = ("device_bandwidth", "host_write_bandwidth", "host_read_bandwidth")


def parse_cluster(raw: dict, host: Topology, where: str, name: str, description: str = "",
                  path: Path | None = None) -> ClusterSpec:
    """Validate a ``cluster:`` section (``where`` names the file in messages)."""
    w = f"{where}: cluster"
    _expect(raw, {"host", "hosts", "instances", "tiers", "network", "max_context"}, w, ("instances", "tiers"))
    if not isinstance(raw.get("hosts") or [], list):
        raise TopologyError(f"{w}.hosts: expected a list of hosts")
    hosts, groups = _parse_hosts(raw.get("hosts") or [{"id": "host"}], w)
    if not isinstance(raw["tiers"], dict) or not raw["tiers"]:
        raise TopologyError(f"{w}.tiers: expected a mapping of tier name -> tier")
    if len(raw["tiers"]) > LIMITS["tiers"]:
        raise TopologyError(f"{w}.tiers: more than {LIMITS['tiers']} tiers (limit)")
    if not isinstance(raw["instances"] or [], list):
        raise TopologyError(f"{w}.instances: expected a list of instances")
    bpt = kv_bytes_per_token(host)
    tiers = {str(tname): _parse_tier(str(tname), t, f"{w}.tiers.{tname}", bpt, hosts, groups)
             for tname, t in raw["tiers"].items()}
    net = raw.get("network") or {}
    _expect(net, {"rdma"}, f"{w}.network")
    rdma = _engine(net["rdma"], f"{w}.network.rdma") if "rdma" in net else None
    instances = _parse_instances(raw["instances"] or [], w, hosts, groups, tiers, host, rdma)
    max_ctx = None
    if "max_context" in raw:
        max_ctx = _num(raw["max_context"], "tokens", f"{w}.max_context")[0]
    for t in tiers.values():
        if t.kind == "rdma" and rdma is None:
            raise TopologyError(f"{w}.network.rdma: tier {t.name!r} is an RDMA store; describe the hosts' NICs")
    return ClusterSpec(name, host, hosts, instances, tiers, rdma=rdma, max_context=max_ctx,
                       description=description, path=path)


def _parse_hosts(entries, w: str) -> tuple[list[str], dict[str, list[str]]]:
    """Host ids (a group of ``count`` hosts is id0, id1, ...) and the groups by their written id."""
    hosts: list[str] = []
    seen: set[str] = set()
    groups: dict[str, list[str]] = {}
    for i, h in enumerate(entries):
        hw = f"{w}.hosts[{i}]"
        _expect(h, {"id", "count", "description"}, hw, ("id",))
        n = _plain_count(h["count"], f"{hw}.count", "hosts") if "count" in h else 1
        if len(hosts) + n > LIMITS["hosts"]:
            raise TopologyError(f"{hw}: more than {LIMITS['hosts']:,} hosts in the cluster (limit)")
        ids = [str(h["id"])] if n == 1 else [f"{h['id']}{j}" for j in range(n)]
        if seen.intersection(ids) or str(h["id"]) in groups:
            raise TopologyError(f"{hw}: duplicate host id {h['id']!r}")
        hosts += ids
        seen.update(ids)
        groups[str(h["id"])] = ids
    return hosts, groups


def _parse_tier(tname: str, t, tw: str, bpt: float, hosts: list[str], groups: dict) -> TierSpec:
    """One KV tier: kind, capacity (bytes or tokens), the hosts it is attached to, replicas, eviction and
    bandwidths."""
    _expect(t, TIER_FIELDS, tw, ("kind", "capacity"))
    if t["kind"] not in TIER_KINDS:
        raise TopologyError(f"{tw}.kind: unknown tier kind {t['kind']!r} (known: {', '.join(TIER_KINDS)})")
    cap = t["capacity"]
    if not isinstance(cap, dict) or "source" not in cap:
        raise TopologyError(f"{tw}.capacity: expected {{value: <bytes or tokens>, source: <provenance>}}")
    try:
        tokens = parse_capacity(cap.get("value"), f"{tw}.capacity", bpt)
    except UnitError as exc:
        raise TopologyError(str(exc)) from None
    spec = TierSpec(tname, t["kind"], tokens, sources={"capacity": cap["source"]},
                    shared=t["kind"] in ("cxl", "rdma"))
    if "attached" in t:
        if t["kind"] not in ("cxl", "rdma"):
            raise TopologyError(f"{tw}.attached: only shared tiers (cxl, rdma) are attached to hosts")
        if not isinstance(t["attached"], list):
            raise TopologyError(f"{tw}.attached: expected a list of host ids, got {str(t['attached'])[:40]!r}")
        att = []
        for ref in t["attached"]:
            if str(ref) not in groups and str(ref) not in hosts:
                raise TopologyError(f"{tw}.attached: unknown host {ref!r}")
            att += groups.get(str(ref), [str(ref)])
        spec.attached = tuple(att)
    if "replicas" in t:
        spec.replicas = _count(t["replicas"], f"{tw}.replicas")
    for k in ("watermark", "evict_ratio"):
        if k in t:
            v, src, _ = _num(t[k], "dimensionless", f"{tw}.{k}")
            if not 0 < v <= 1:
                raise TopologyError(f"{tw}.{k}: must be in (0, 1], got {v:g}")
            setattr(spec, k, v)
            spec.sources[k] = src
    if (spec.watermark is None) != (spec.evict_ratio is None):
        raise TopologyError(f"{tw}: give both watermark and evict_ratio (batch eviction) or neither")
    for k in BANDWIDTHS:
        if k in t:
            v, src, _ = _num(t[k], "bandwidth", f"{tw}.{k}")
            if v <= 0:
                raise TopologyError(f"{tw}.{k}: must be positive")
            spec.params[k], spec.sources[k] = v, src
    if "devices" in t:
        spec.params["devices"] = _count(t["devices"], f"{tw}.devices")
    if "rdma" in t:
        if t["kind"] != "rdma":
            raise TopologyError(f"{tw}.rdma: only an rdma tier has its own NICs")
        spec.params["rdma"] = _engine(t["rdma"], f"{tw}.rdma")
    _store_fields(spec, t, tw)
    return spec


def _store_fields(spec: TierSpec, t: dict, tw: str) -> None:
    """``inclusive`` (a host tier keeping a copy of what the GPU tier holds: SGLang HiCache's write-through,
    the default), ``segments`` (a store's memory on the hosts themselves, or ``dedicated`` servers) and
    ``lease`` (Mooncake Store's read lease)."""
    if "inclusive" in t:
        if spec.kind != "host" or not isinstance(t["inclusive"], bool):
            raise TopologyError(f"{tw}.inclusive: true or false, for a host tier (whether it mirrors the GPU tier)")
        spec.params["inclusive"] = t["inclusive"]
    if "segments" in t:
        if spec.kind != "rdma" or t["segments"] not in ("hosts", "dedicated"):
            raise TopologyError(f"{tw}.segments: 'hosts' or 'dedicated', for an rdma store")
        spec.params["segments"] = t["segments"]
    if "lease" in t:
        if spec.kind != "rdma":
            raise TopologyError(f"{tw}.lease: only a store (rdma tier) leases its objects")
        v, src, _ = _num(t["lease"], "time", f"{tw}.lease")
        spec.params["lease"], spec.sources["lease"] = v, src


def _parse_instances(entries, w: str, hosts: list[str], groups: dict, tiers: dict, host: Topology,
                     rdma: TransferEngine | None) -> list[InstanceSpec]:
    """Instances (a group of ``count`` is id0, id1, ... spread over its host group), each with the tiers its
    host reaches; an instance over several hosts (``hosts``) with its server's settings (:mod:`.span`)."""
    from .span import SETTINGS, span_hosts
    instances: list[InstanceSpec] = []
    for i, inst in enumerate(entries):
        iw = f"{w}.instances[{i}]"
        _expect(inst, {"id", "count", "host", "role", "tiers", "description", "engine", "hosts", *SETTINGS}, iw,
                ("id", "tiers"))
        role = inst.get("role", "both")
        if role not in ROLES:
            raise TopologyError(f"{iw}.role: unknown role {role!r} (known: {', '.join(ROLES)})")
        engine = inst.get("engine")
        if engine is not None and engine not in ENGINES:
            raise TopologyError(f"{iw}.engine: unknown engine {str(engine)[:40]!r} (known: {', '.join(ENGINES)})")
        n = _plain_count(inst["count"], f"{iw}.count", "instances") if "count" in inst else 1
        if len(instances) + n > LIMITS["instances"]:
            raise TopologyError(f"{iw}: more than {LIMITS['instances']:,} instances in the cluster (limit)")
        listed = inst.get("hosts") if isinstance(inst.get("hosts"), list) and inst["hosts"] else None
        href = str(inst.get("host", hosts[0] if len(hosts) == 1 else listed[0] if listed else ""))
        if href not in groups and href not in hosts:
            raise TopologyError(f"{iw}.host: unknown host {inst.get('host')!r} (hosts: {', '.join(hosts)})")
        hlist = groups.get(href, [href])
        if len(hlist) not in (1, n) and "hosts" not in inst:
            raise TopologyError(f"{iw}: {n} instances over host group {href!r} of {len(hlist)} hosts")
        spans = span_hosts(inst.get("hosts"), iw, n, hlist, hosts)
        settings = _instance_settings(inst, iw, host, len(spans[0]), rdma)
        tl = inst["tiers"]
        if not isinstance(tl, list):
            raise TopologyError(f"{iw}.tiers: expected a list of tier names")
        for tn in tl:
            if not isinstance(tn, str) or tn not in tiers:
                raise TopologyError(f"{iw}.tiers: unknown tier {tn!r} (tiers: {', '.join(tiers)})")
        if settings and engine == "vllm":
            raise TopologyError(f"{iw}.engine: an instance with its own parallel settings (or over several hosts) "
                                "runs SGLang's server; the vLLM engine does not model them")
        for j in range(n):
            iid = str(inst["id"]) if n == 1 else f"{inst['id']}{j}"
            span = spans[j]
            h = span[0]
            # a tier the server's every host reaches (a CXL pool attached to some of them serves none)
            reach = tuple(tn for tn in tl if tiers[tn].attached is None or set(span) <= set(tiers[tn].attached))
            if not reach:
                where = f"host {h!r}" if len(span) == 1 else f"hosts {', '.join(span)}"
                raise TopologyError(f"{iw}: instance {iid!r} on {where} reaches no KV tier "
                                    f"(listed: {', '.join(tl) or 'none'})")
            instances.append(InstanceSpec(iid, h, role, reach, engine, span if len(span) > 1 else (),
                                          dict(settings)))
    if not instances:
        raise TopologyError(f"{w}.instances: no instances")
    if len({i.id for i in instances}) != len(instances):
        raise TopologyError(f"{w}.instances: duplicate instance ids")
    roles = {i.role for i in instances}
    if roles in ({"prefill"}, {"decode"}):
        (only,) = roles
        raise TopologyError(f"{w}.instances: every instance has role {only!r}; a disaggregated cluster needs a "
                            f"{'decode' if only == 'prefill' else 'prefill'} instance too (or role 'both')")
    return instances


def _instance_settings(inst: dict, iw: str, host: Topology, k: int, rdma) -> dict:
    """An instance's server settings over ``k`` hosts (checked), with the network its ranks cross."""
    from .span import network_of, parse_settings
    settings = parse_settings(inst, iw, host, k)
    if settings and k > 1:
        network_of(host, rdma, iw)          # refuse now an instance across hosts with no network to price
    return settings


def instance_topology(cl: ClusterSpec, inst: InstanceSpec) -> Topology:
    """The machine an instance's server runs on: the host scenario itself, or for an instance with its own
    settings (over one host or several) the host copied once per host with those settings
    (:func:`sacmodel.hardware.span.span_topology`); one per distinct (hosts, settings), kept on ``cl``."""
    if not inst.settings:
        return cl.host
    from .span import network_of, span_topology
    key = (inst.spans, tuple(sorted(inst.settings.items())))
    memo = cl.__dict__.setdefault("_span_topos", {})
    if key not in memo:
        s = inst.settings
        name = (f"{cl.host.name}x{inst.spans}-tp{s['tp']}" + (f"-dp{s['dp']}" if s["dp"] > 1 else "")
                + (f"-ep{s['ep']}" if s["ep"] > 1 else ""))
        net = network_of(cl.host, cl.rdma, f"{cl.name}: instance {inst.id!r}") if inst.spans > 1 else {}
        memo[key] = span_topology(cl.host, inst.spans, s, net, name)
    return memo[key]


V2_FIELDS = {"schema_version", "name", "description", "model", "cluster", "nodes", "links", "pools", "serving",
             "calibration", "workload"}


def load_v2(data: dict, where: str, path: Path | None, load_host: Callable[[Any], Topology]) -> Topology:
    """A schema-version-2 file: the host scenario (loaded with ``load_host``, a name, path or mapping) with its
    ``cluster`` attached."""
    unknown = set(data) - V2_FIELDS
    if unknown:
        raise TopologyError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    for k in ("name", "cluster"):
        if k not in data:
            raise TopologyError(f"{where}: missing field {k!r}")
    raw = data["cluster"]
    if not isinstance(raw, dict):
        raise TopologyError(f"{where}: cluster: expected a mapping")
    if "nodes" in data:
        v1 = {k: v for k, v in data.items() if k not in ("cluster",)}
        v1["schema_version"] = 1
        from .schema import build              # the inline host: its errors name this file
        host = build(v1, where, path)
    elif "host" in raw:
        ignored = [k for k in ("serving", "calibration", "pools", "links") if k in data]
        if ignored:
            raise TopologyError(f"{where}: {', '.join(ignored)}: a cluster file that names its host scenario "
                                "(cluster.host) takes them from there; move them into the host scenario, or give "
                                "the host inline (nodes, links) with them")
        ref = raw["host"]
        if not isinstance(ref, (str, dict)):
            raise TopologyError(f"{where}: cluster.host: expected a scenario name or path, got {str(ref)[:40]!r}")
        if isinstance(ref, str) and path is not None and not Path(ref).is_absolute() and \
                (path.parent / ref).suffix in (".yaml", ".yml") and _exists(path.parent / ref):
            ref = path.parent / ref
        try:
            host = load_host(ref)
        except TopologyError as exc:             # the error names this file and field, then what the host said
            raise TopologyError(f"{where}: cluster.host: {exc}") from None
        if host.cluster is not None:
            raise TopologyError(f"{where}: cluster.host {raw['host']!r} is itself a cluster")
    else:
        raise TopologyError(f"{where}: cluster: give the host hardware inline (nodes, links) or name it (host:)")
    if "model" in data and data["model"] != host.model_name:
        raise TopologyError(f"{where}: model {data['model']!r} differs from the host scenario's "
                            f"{host.model_name!r}")
    topo = replace(host, name=str(data["name"]), description=str(data.get("description", host.description)),
                   path=path, _routes={})
    topo.cluster = parse_cluster(raw, topo, where, topo.name, topo.description, path)
    return topo



def _exists(p: Path) -> bool:
    """Whether ``p`` exists; a name the file system cannot take (too long) does not."""
    try:
        return p.exists()
    except OSError:
        return False


KiB = 1024.0


@dataclass(frozen=True)
class TransferEngine:
    """Mooncake Transfer Engine cost model for one host's NICs (SI units: bytes, seconds, bytes/s)."""
    nics: int
    nic_rate: float
    op_cost: float
    setup: float = 0.0
    slice_bytes: float = 64 * KiB
    efficiency: float = 1.0

    @property
    def rate(self) -> float:
        """Bandwidth of one transfer alone on the NICs (B/s)."""
        return self.nics * self.slice_bytes / (self.op_cost + self.slice_bytes / (self.efficiency * self.nic_rate))

    def time(self, nbytes, slice_bytes: float | None = None):
        """Seconds to move ``nbytes`` alone (numpy arrays welcome); ``slice_bytes`` overrides the slice size."""
        te = self if slice_bytes is None else replace(self, slice_bytes=slice_bytes)
        return te.setup + np.asarray(nbytes, float) / te.rate
