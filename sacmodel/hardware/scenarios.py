"""Loading scenarios: built-in names and YAML paths, the validated-scenario cache, and the scenario's model.

:func:`load_topology` reads a file once through the schema (:mod:`sacmodel.hardware.schema`) and keeps the
result in the on-disk cache (:mod:`sacmodel.util.cache`); :func:`as_topology` accepts a name, a path or a
loaded :class:`~sacmodel.hardware.topology.Topology`; :func:`model_of` and :func:`entry_bytes` give the
scenario's model (with its ``model_overrides``) and its KV entry size.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..util import cache
from ..util.reading import check_input, read_bytes
from .cluster import TIER_KINDS, ClusterSpec, InstanceSpec, TierSpec, load_v2
from .topology import LIMITS, Topology, TopologyError

_PKG = Path(__file__).resolve().parents[1]        # the sacmodel package folder


# Built-in scenarios: ``topologies/`` of the repository, installed as the package ``sacmodel.topologies``.
TOPOLOGY_DIR = next((d for d in (_PKG / "topologies", _PKG.parent / "topologies") if d.is_dir()),
                    _PKG.parent / "topologies")


def load_topology(spec: str | Path | dict) -> Topology:
    """Load a scenario: a built-in name (``sac-testbed``), a YAML path, or a parsed mapping.

    A file validated before comes from the cache (:mod:`sacmodel.util.cache`) when it, every file it draws on (a
    cluster file's host scenario) and the validating code are unchanged.
    """
    if isinstance(spec, dict):
        return _load_mapping(spec)
    if not isinstance(spec, (str, Path)):
        raise TopologyError(f"a scenario is a built-in name, a YAML path or a mapping, not {type(spec).__name__}")
    path = resolve_scenario_path(spec)
    key = _cache_key(path)
    entry = cache.load("scenario", key) if key else None
    if entry is not None and all(_digest(Path(p)) == h for p, h in entry[1]):
        topo, deps = entry[0], [Path(p) for p, _ in entry[1]]
    else:
        from .schema import read_yaml
        _READING.append([])                  # the files the build reads besides this one
        try:
            topo = _build(read_yaml(path), str(path), path)
        finally:
            deps = _READING.pop()
        if key:
            topo.precompute_routes()
            cache.store("scenario", key, (topo, [(str(p), _digest(p)) for p in deps]))
    if _READING:                             # loaded while building a cluster file: that file depends on this
        _READING[-1].extend([path, *deps])
    return topo


_READING: list[list[Path]] = []


def _load_mapping(spec: dict) -> Topology:
    """A scenario given as a mapping (what :func:`sacmodel.scenario` builds), validated once per content and
    code version and then read from the cache."""
    import json
    try:
        text = json.dumps(spec, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):            # not plain data: validate it without caching
        return _build(spec, "<scenario>", None)
    key = cache.key(text.encode(), "<mapping>", code=_LOADER_SOURCES)
    topo = cache.load("scenario", key)
    if topo is None:
        topo = _build(spec, "<scenario>", None)
        topo.precompute_routes()
        cache.store("scenario", key, topo)
    return topo


def _build(data, where: str, path: Path | None) -> Topology:
    """Validate a parsed scenario and build its Topology; a schema-version-2 file is a host with a cluster."""
    if isinstance(data, dict) and data.get("schema_version") == 2:
        return load_v2(data, where, path, load_topology)
    from .schema import build
    return build(data, where, path)


def _bytes(path: Path) -> bytes | None:
    """The file's bytes through :mod:`sacmodel.util.reading` (a regular file within the size limit); None when
    it cannot be read so (the loader then reports why)."""
    try:
        return read_bytes(path, limit=LIMITS["file_bytes"], what="scenario file", err=TopologyError)
    except TopologyError:
        return None


def _digest(path: Path) -> str | None:
    data = _bytes(path)
    return None if data is None else cache.key(data)


def _cache_key(path: Path) -> str | None:
    """The file's bytes, its path (recorded in the Topology) and the code that validates it; None if unreadable
    or too large (the loader then reports why)."""
    data = _bytes(path)
    return None if data is None else cache.key(data, str(path), code=_LOADER_SOURCES)


_LOADER_SOURCES = ("hardware/topology.py", "hardware/schema.py", "hardware/scenarios.py", "hardware/units.py",
                   "hardware/models.py", "hardware/cluster.py", "hardware/span.py", "hardware/rules.py",
                   "hardware/sizing.py", "data/records.py", "util/reading.py", "util/names.py")


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
    if p.suffix in (".yaml", ".yml") or exists or p.is_symlink():
        if not exists:
            if p.is_symlink():               # names the link and where it points
                check_input(p, "scenario file", TopologyError)
            raise TopologyError(f"{p}: no such scenario file")
        if p.is_dir():
            raise TopologyError(f"{p}: is a directory, not a scenario file")
        return p
    cand = TOPOLOGY_DIR / f"{text}.yaml"
    if "/" not in text and cand.exists():
        return cand
    raise TopologyError(f"unknown scenario {text!r}; built-in: {', '.join(builtin_scenarios())} "
                        "(or give a path to a YAML file)")


@lru_cache(maxsize=32)
def _load_cached(key: str, mtime: float) -> Topology:
    return load_topology(key)


_REGISTERED: dict[str, Topology] = {}


def register_scenario(topo: Topology) -> str:
    """Make an in-memory scenario (one built by :func:`sacmodel.scenario`) answer to its name in this process;
    returns the name. A registered name takes precedence over a file of the same name."""
    _REGISTERED[topo.name] = topo
    return topo.name


def as_topology(scenario: str | Path | Topology) -> Topology:
    """A loaded scenario from a built-in name, a YAML path, a registered name or a :class:`Topology`."""
    if isinstance(scenario, Topology):
        return scenario
    if isinstance(scenario, str) and scenario in _REGISTERED:
        return _REGISTERED[scenario]
    p = resolve_scenario_path(scenario)
    return _load_cached(str(p), p.stat().st_mtime)


def cluster_of(scenario: Any, instances: int | None = None) -> ClusterSpec:
    """The cluster of a scenario (name, path, Topology or ClusterSpec); a version-1 scenario is a cluster of
    ``instances`` copies of its host (default 1), each with one private, unbounded prefix cache."""
    if isinstance(scenario, ClusterSpec):
        return scenario
    topo = as_topology(scenario)
    if topo.cluster is not None:
        return topo.cluster
    n = instances or 1
    tiers = {k: TierSpec(k, k, math.inf) for k in TIER_KINDS}    # a version-1 pool belongs to its host
    hosts = [f"host{i}" for i in range(n)]
    inst = [InstanceSpec(f"i{i}", hosts[i], "both", tuple(tiers)) for i in range(n)]
    return ClusterSpec(topo.name, topo, hosts, inst, tiers, description=topo.description, path=topo.path,
                       sources={"implicit": "version-1 scenario: one instance per host, private unbounded caches"},
                       implicit=True)


def load_cluster(path_or_name) -> ClusterSpec:
    """A cluster scenario by built-in name (``sac-cluster-4x``) or YAML path; version-1 files give one host."""
    return cluster_of(path_or_name)
