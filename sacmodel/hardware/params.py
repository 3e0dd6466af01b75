"""Named parameters of a loaded scenario: read, set and copy with new values.

A name is a calibration or serving parameter (``t_graph_kernel``), a field of every node of a kind
(``node:rdma_nic.op_cost``) or of every link touching a node kind (``link:gpu.latency``), or a field of one node
(``node@cxl_dev[0].bandwidth``) or of one directed link (``link@cxl_adapter->rc.bandwidth``, the way data flows
from ``cxl_adapter`` to ``rc``). Values are SI.
"""
from __future__ import annotations

import copy

from .scenarios import as_topology
from .topology import Topology, TopologyError


def element(topo: Topology, name: str) -> tuple[dict, str]:
    """The attribute dict of the node or directed link a ``node@ID.FIELD`` / ``link@U->V.FIELD`` name points to,
    and the field."""
    body, _, fld = name[5:].rpartition(".")
    if not body or not fld:
        raise TopologyError(f"{topo.name}: {name!r} is not of the form node@ID.FIELD or link@FROM->TO.FIELD")
    if name.startswith("node@"):
        topo.node(body)                   # a clear error for an unknown id
        return topo.graph.nodes[body], fld
    return topo.graph.edges[link_of(topo, name)], fld


def link_of(topo: Topology, name: str) -> tuple[str, str]:
    """The directed link ``(FROM, TO)`` a ``link@FROM->TO.FIELD`` name points to."""
    body = name[5:].rpartition(".")[0]
    for i in range(len(body)):            # ids may hold '->': the split that names an existing link
        if body.startswith("->", i) and (body[:i], body[i + 2:]) in topo.graph.edges:
            return body[:i], body[i + 2:]
    raise TopologyError(f"{topo.name}: no link {body!r} (links are named FROM->TO, the way data flows)")


def get_param(topo: Topology, name: str) -> float:
    if name.startswith(("node@", "link@")):
        attrs, fld = element(topo, name)
        if fld not in attrs:
            raise TopologyError(f"{topo.name}: {name}: no field {fld!r}")
        return attrs[fld]
    if name.startswith("node:"):
        kind, fld = name[5:].split(".")
        return topo.node(topo.nodes_of(kind)[0])[fld]
    if name.startswith("link:"):
        kind, fld = name[5:].split(".")
        u = topo.nodes_of(kind)[0]
        v = next(iter(topo.graph.successors(u)))
        return topo.graph.edges[u, v][fld]
    return topo.param(name)


def set_param(topo: Topology, name: str, value: float) -> None:
    """Set parameter ``name`` (SI) on an in-memory scenario (copy it first if it is shared)."""
    if name.startswith(("node@", "link@")):
        attrs, fld = element(topo, name)
        if fld not in attrs:
            raise TopologyError(f"{topo.name}: {name}: no field {fld!r}")
        attrs[fld] = value
    elif name.startswith("node:"):
        kind, fld = name[5:].split(".")
        for n in topo.nodes_of(kind):
            topo.graph.nodes[n][fld] = value
    elif name.startswith("link:"):
        kind, fld = name[5:].split(".")
        for n in topo.nodes_of(kind):
            for u, v in list(topo.graph.out_edges(n)) + list(topo.graph.in_edges(n)):
                topo.graph.edges[u, v][fld] = value
    elif name in topo.calibration:
        # a fitted constant: the route cache holds routes and their shares, which read only the graph's nodes
        # and links, and miss curves keyed on the score process's constants (stepmodel.kept_curve), so it
        # stays valid (a fit sets constants hundreds of times; recomputing the routes was a third of its time)
        topo.calibration[name].value = value
        return
    elif name in topo.serving:
        topo.serving[name].value = value
    else:
        raise TopologyError(f"{topo.name}: no parameter {name!r} to set")
    topo._routes.clear()


def with_params(scenario, values: dict[str, float]) -> Topology:
    """A private copy of ``scenario`` with parameters replaced (SI values)."""
    t = copy.deepcopy(as_topology(scenario))
    for k, v in values.items():
        set_param(t, k, v)
    return t
