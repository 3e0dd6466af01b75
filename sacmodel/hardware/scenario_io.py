"""Safe writing of scenario files: comments and layout kept, never a lost or half-written file.

:func:`update_scenario` sets ``{value, source}`` entries in a copy of a scenario's YAML (ruamel.yaml round
trip: comments, flow/block style, quoting and indentation are kept), writes it to a temporary file in the
destination's folder, reloads and validates it (every written value must read back), and only then renames
it over the destination. A crash, a kill or a full disk at any point leaves the destination as it was.
:func:`calibration_target` decides where ``calibrate`` may write: never over a built-in scenario or an
existing file without ``force``.
"""
from __future__ import annotations

import io
import math
import os
import stat
import sys
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError
from ruamel.yaml.util import load_yaml_guess_indent

from ..util.files import OutputError, atomic_path
from .scenarios import is_builtin, load_topology
from .schema import read_yaml
from .topology import Topology, TopologyError


class ScenarioWriteError(TopologyError):
    """A scenario that may not or could not be written; the destination is unchanged."""


def calibration_target(scenario: Path, out: str | Path | None, *, force: bool = False) -> Path:
    """The file ``calibrate`` writes: ``out``, or the scenario itself when ``out`` is None.

    Refused (:class:`ScenarioWriteError`): a built-in scenario or an existing ``out`` without ``force``,
    ``out`` equal to the scenario, a directory, a read-only file, a missing folder.
    """
    scenario = Path(scenario)
    if out is None:
        dst = scenario
        if is_builtin(dst) and not force:
            raise ScenarioWriteError(f"{dst}: a built-in scenario; write a copy with --out FILE, or pass --force "
                                     "to update it")
    else:
        dst = Path(out)
        if dst.is_dir():
            raise ScenarioWriteError(f"--out {dst}: is a directory; give a file name")
        if dst.exists() and dst.resolve() == scenario.resolve():
            raise ScenarioWriteError(f"--out {dst}: is the scenario itself; leave out --out to update it in place")
        if dst.exists() and not force:
            raise ScenarioWriteError(f"--out {dst}: exists; pass --force to overwrite it")
        if not dst.parent.is_dir():
            raise ScenarioWriteError(f"--out {dst}: no folder {dst.parent}")
    if dst.exists() and not dst.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise ScenarioWriteError(f"{dst}: read-only file; nothing written")
    if not os.access(dst.parent, os.W_OK):
        raise ScenarioWriteError(f"{dst}: the folder {dst.parent} is not writable; nothing written")
    return dst


def _yaml_for(text: str) -> YAML:
    """A round-trip YAML instance with the text's own indentation."""
    _, ind, bsi = load_yaml_guess_indent(text)
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    ind, bsi = ind or 2, bsi or 0
    y.indent(mapping=max(ind - bsi, 2), sequence=ind, offset=bsi)
    return y


def _scalar(text: str):
    """A plain number stays a YAML number ('612' -> 612); a quantity stays text ('8.53 us')."""
    for kind in (int, float):
        try:
            v = kind(text)
        except ValueError:
            continue
        return v if math.isfinite(v) else text
    return text


def _entry(old, value: str, source: str, shared: set[int] = frozenset()):
    """``old`` updated in place (keeps its style), or a new flow-style ``{value, source}`` mapping. An ``old``
    that other places of the file share through a YAML alias (its id in ``shared``) is not changed: the entry
    gets a mapping of its own, so that a fitted value lands where the parameter lives and nowhere else."""
    value = _scalar(value)
    if isinstance(old, CommentedMap) and id(old) not in shared:
        old["value"] = value
        old["source"] = source
        for k in [k for k in old if k not in ("value", "source")]:
            del old[k]
        return old
    new = CommentedMap([("value", value), ("source", source)])
    new.fa.set_flow_style()
    return new


def shared_nodes(data) -> set[int]:
    """Ids of the mappings and lists that appear at more than one place of a loaded YAML document (aliases)."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if id(node) in seen:
            shared.add(id(node))
            continue
        seen.add(id(node))
        stack.extend(node.values() if isinstance(node, dict) else node)
    return shared


def set_entries(data, entries: dict[str, tuple[str, str]]) -> list[str]:
    """Set ``name -> (value text, source)`` in a round-trip scenario mapping; returns notes for the user.

    Names: a serving/calibration parameter (updated where it is, else added under ``calibration:``), every
    node of a kind (``node:rdma_nic.op_cost``) or every link touching a node of a kind (``link:gpu.latency``).
    An entry written through a YAML alias (``t_kernel: *lat``) would change every place that shares it: the
    entry gets its own mapping instead, and a note says so.
    """
    shared = shared_nodes(data)
    notes: list[str] = []
    for name, (value, source) in entries.items():
        if name.startswith(("node:", "link:")):
            kind, fld = name[5:].split(".", 1)
            nodes = [n for n in data.get("nodes") or [] if isinstance(n, dict) and n.get("kind") == kind]
            if not nodes:
                raise ScenarioWriteError(f"{name}: the scenario has no node of kind {kind!r}")
            if name.startswith("node:"):
                targets = nodes
            else:
                ids = {n.get("id") for n in nodes}
                targets = [lk for lk in data.get("links") or [] if lk.get("from") in ids or lk.get("to") in ids]
            for t in targets:
                if id(t.get(fld)) in shared:
                    notes.append(f"{name}: {t.get('id', t.get('from'))}.{fld} was a YAML alias shared with other "
                                 "entries; it now has a value of its own (the others keep theirs)")
                t[fld] = _entry(t.get(fld), value, source, shared)
            continue
        table = next((t for t in ("calibration", "serving") if isinstance(data.get(t), dict) and name in data[t]),
                     "calibration")
        if not isinstance(data.get(table), dict):
            data[table] = CommentedMap()
        if id(data[table].get(name)) in shared:
            notes.append(f"{name} was a YAML alias shared with other entries; it now has a value of its own "
                         "(the others keep theirs)")
        data[table][name] = _entry(data[table].get(name), value, source, shared)
    return notes


def scenario_values(topo: Topology, name: str) -> list[float]:
    """Every SI value the scenario holds for ``name`` (one per node or link for ``node:``/``link:`` names)."""
    if name.startswith(("node:", "link:")):
        kind, fld = name[5:].split(".", 1)
        nodes = topo.nodes_of(kind)
        if name.startswith("node:"):
            return [topo.graph.nodes[n][fld] for n in nodes]
        return [d[fld] for u, v, d in topo.graph.edges(data=True) if (u in nodes or v in nodes) and fld in d]
    return [topo.param(name)]


def update_scenario(src: str | Path, dst: str | Path, entries: dict[str, tuple[str, str]],
                    expected: dict[str, float] | None = None) -> Path:
    """Write ``src`` with ``entries`` (name -> (value text, source)) set to ``dst``, atomically.

    The new text must load as a scenario and give back ``expected`` (name -> SI value, relative 1e-5);
    otherwise nothing is written. Returns ``dst``.
    """
    src, dst = Path(src), Path(dst)
    read_yaml(src)                                    # size, depth, encoding checks with clear errors
    text = src.read_text(encoding="utf-8")
    y = _yaml_for(text)
    try:
        data = y.load(text)
        notes = set_entries(data, entries)
        buf = io.StringIO()
        y.dump(data, buf)
    except YAMLError as exc:
        raise ScenarioWriteError(f"{src}: cannot edit the YAML ({exc}); nothing written") from None

    def check(tmp: Path) -> None:
        try:
            topo = load_topology(tmp)
        except TopologyError as exc:
            msg = str(exc).replace(str(tmp), str(dst))
            raise ScenarioWriteError(f"the updated scenario would not load: {msg}; {dst} unchanged") from None
        for name, v in (expected or {}).items():
            got = scenario_values(topo, name)
            if not got or any(not math.isclose(g, v, rel_tol=1e-5, abs_tol=1e-300) for g in got):
                raise ScenarioWriteError(f"{dst}: {name} would read back as {got}, not {v:g}; {dst} unchanged")

    write_atomic(dst, buf.getvalue(), check)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return dst


def _write(fh, data: bytes) -> None:
    fh.write(data)


def write_atomic(dst: str | Path, text: str, check=None) -> None:
    """Write ``text`` through the writing layer (:func:`sacmodel.util.files.atomic_path`: a temporary file
    beside ``dst``, ``check(tmp_path)``, then a rename; a symbolic link is followed, a special file written
    through). On any failure ``dst`` keeps its old content."""
    try:
        with atomic_path(dst, check) as tmp:
            with open(tmp, "wb") as fh:
                _write(fh, text.encode("utf-8"))
                fh.flush()
    except OutputError as exc:
        raise ScenarioWriteError(str(exc)) from None
    except OSError as exc:
        raise ScenarioWriteError(f"{dst}: cannot write ({exc.strerror or exc}); the file is unchanged") from None
