"""Instances of a cluster file that span hosts: one SGLang server over ``hosts`` x the host scenario's GPUs.

A cluster-file instance may name the hosts it runs on (``hosts: [h0, h1]``, or ``hosts: 2``: that many
consecutive hosts of its ``host`` group per instance) and its server's parallelism and expert-parallel settings,
the same ones :func:`sacmodel.scenario` takes: ``tp``, ``dp``, ``ep``, ``moe_a2a``, ``deepep_mode``,
``two_batch_overlap``, ``ep_redundant``, ``cuda_graph_max_bs``, ``moe_dense_tp``. They are checked here once, against SGLang's
rules (the ones :func:`sacmodel.scenario` applies), each refusal naming the file and field.

The instance's machine (:func:`span_topology`) is the host scenario copied once per host (its GPUs, sockets,
DRAM, NICs and CXL adapters: each host keeps its own; the CXL switch and devices and the remote memory an
RDMA pool reads are one pool they share), the GPUs marked with their NVLink domain (one host) and the NICs
collectives across hosts use: the host scenario's GPU fields ``nics_per_gpu`` / ``nic_rate`` / ``nic_latency``
where it has them (a scenario :func:`sacmodel.scenario` built), else the cluster's ``network.rdma`` (its NICs
per host over the host's GPUs, their rate). The step model then prices the ranks' collectives and DeepEP's
all-to-all over that network as it does for ``scenario(gpu, gpus=16, ...)``
(:func:`sacmodel.hardware.sizing.layer_comm`).
"""
from __future__ import annotations

import copy
import math
from dataclasses import replace

from .gpus import GPUSpec
from .models import entry_bytes, model_of
from .rules import CUDA_GRAPH_MAX_BS, check_parallel, ep_settings      # the rules sacmodel.scenario() applies
from .sizing import kv_cell_bytes, kv_pool_tokens, weights_per_gpu
from .topology import Param, Topology, TopologyError

# the server settings a cluster-file instance may give (as sacmodel.scenario() takes them)
SETTINGS = ("tp", "dp", "ep", "moe_a2a", "deepep_mode", "two_batch_overlap", "ep_redundant", "cuda_graph_max_bs",
            "moe_dense_tp")
SHARED_KINDS = ("cxl_switch", "cxl_device", "remote_memory")
NIC_LATENCY_SOURCE = ("[assumed] nccl-tests#150: an 8 B all-reduce between two hosts over InfiniBand takes "
                      "19-20 us (the GPU catalog's default)")


def span_hosts(raw, iw: str, n: int, hlist: list[str], hosts: list[str]) -> list[tuple[str, ...]]:
    """The hosts each of an instance group's ``n`` instances spans: ``raw`` is a host count (consecutive hosts
    of its host group ``hlist``) or a list of host ids (one instance); None: one host each, as before."""
    if raw is None:
        return [(hlist[j % len(hlist)],) for j in range(n)]
    if isinstance(raw, list):
        if n != 1:
            raise TopologyError(f"{iw}.hosts: a list of hosts places one instance; with count {n} give a host "
                                "count (hosts: K) and a host group")
        bad = next((h for h in raw if not isinstance(h, str) or h not in hosts), None)
        if bad is not None or not raw:
            raise TopologyError(f"{iw}.hosts: unknown host {str(bad)[:40]!r} (hosts: {', '.join(hosts)})")
        if len(set(raw)) != len(raw):
            raise TopologyError(f"{iw}.hosts: a host is listed twice")
        return [tuple(raw)]
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise TopologyError(f"{iw}.hosts: expected a host count (a positive integer) or a list of host ids, got "
                            f"{str(raw)[:40]!r}")
    if raw * n > len(hlist):
        raise TopologyError(f"{iw}.hosts: {n} instance(s) of {raw} hosts each need {raw * n} hosts; the host group "
                            f"has {len(hlist)}")
    return [tuple(hlist[j * raw:(j + 1) * raw]) for j in range(n)]


def parse_settings(inst: dict, iw: str, host: Topology, k: int) -> dict:
    """The server settings an instance over ``k`` hosts gives, checked against SGLang's rules; {} when it gives
    none and spans one host (it runs the host scenario's server unchanged)."""
    given = {s: inst[s] for s in SETTINGS if s in inst}
    if not given and k == 1:
        return {}
    m = model_of(host)
    gpus = k * len(host.gpus)
    for s in ("tp", "dp", "ep", "ep_redundant", "cuda_graph_max_bs"):
        v = given.get(s)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (0 if s == "ep_redundant" else 1)):
            raise TopologyError(f"{iw}.{s}: expected a whole number, got {str(v)[:40]!r}")
    tp = given.get("tp", gpus)
    dp = given.get("dp", int(host.param("dp")) if k == 1 and "tp" not in given else 1)
    ep = given.get("ep", int(host.param("ep")) if k == 1 and host.has_param("ep") and "tp" not in given else 1)
    try:
        parts = ep_settings(m, tp=tp, dp=dp, ep=ep, moe_a2a=given.get("moe_a2a", "none"),
                            deepep_mode=given.get("deepep_mode", "auto"),
                            two_batch_overlap=given.get("two_batch_overlap", False),
                            ep_redundant=given.get("ep_redundant", 0), moe_dense_tp=given.get("moe_dense_tp"))
        check_parallel(m, gpus=gpus, tp=tp, dp=dp, ep=ep, redundant=parts["ep_redundant"],
                       where=f"{k} host(s) x {len(host.gpus)} GPUs")
    except TopologyError as exc:
        field = next((s for s in SETTINGS if str(exc).startswith((f"scenario: {s}=", f"scenario: {s} "))), "tp")
        raise TopologyError(f"{iw}.{field}: " + str(exc).removeprefix("scenario: ")) from None
    out = {"tp": tp, "dp": dp, "ep": ep, **parts}
    if "cuda_graph_max_bs" in given:
        if given["cuda_graph_max_bs"] > CUDA_GRAPH_MAX_BS:          # as sacmodel.scenario() bounds it
            raise TopologyError(f"{iw}.cuda_graph_max_bs: must be a whole number from 1 to {CUDA_GRAPH_MAX_BS}, got "
                                f"{given['cuda_graph_max_bs']}")
        out["cuda_graph_max_bs"] = given["cuda_graph_max_bs"]
    _check_fits(host, m, out, iw)
    return out


def _check_fits(host: Topology, m, s: dict, iw: str) -> None:
    """Refuse an instance whose weights leave no KV pool on a GPU (SGLang's ``profile_max_num_token``: the
    server stops when ``mem_fraction`` x memory - weights holds no page)."""
    gpu = host.node(host.gpus[0])
    memory = gpu.get("memory_reported", gpu["hbm_capacity"])
    weights = weights_per_gpu(m, host.param("weight_bytes_per_param"), tp=s["tp"], dp=s["dp"],
                              redundant=s["ep_redundant"])
    page = int(host.param("page_tokens")) if host.has_param("page_tokens") else 64
    cell = kv_cell_bytes(m, entry_bytes(host, m), max(1, s["tp"] // s["dp"]))
    if kv_pool_tokens(memory, host.param("mem_fraction"), weights, cell, page) < page:
        raise TopologyError(f"{iw}.tp: {m.name} does not fit on tp={s['tp']} GPUs of the host scenario: its weights "
                            f"take {weights / 2**30:.1f} GiB per GPU, more than mem_fraction "
                            f"{host.param('mem_fraction'):g} of {memory / 2**30:.1f} GiB leaves (SGLang stops at "
                            "start: no KV pool); use more hosts")


def network_of(host: Topology, rdma, iw: str) -> dict:
    """The GPU fields collectives across hosts read: NVLink domain (the host's GPUs), NICs per GPU, their
    rate (B/s) and latency (s), from the host scenario's GPUs or else the cluster's ``network.rdma``."""
    gpu = host.node(host.gpus[0])
    n = len(host.gpus)
    out = {"nvlink_domain": float(n)}
    if "nic_rate" in gpu and "nics_per_gpu" in gpu:
        out.update(nics_per_gpu=gpu["nics_per_gpu"], nic_rate=gpu["nic_rate"])
    elif rdma is not None:
        out.update(nics_per_gpu=rdma.nics / n, nic_rate=rdma.nic_rate)
    else:
        raise TopologyError(f"{iw}.hosts: an instance across hosts sends its collectives over the hosts' NICs: "
                            "describe them (cluster.network.rdma: nics, nic_rate), or use a host scenario whose "
                            "GPUs give nics_per_gpu and nic_rate")
    out["nic_latency"] = gpu.get("nic_latency", GPUSpec.nic_latency)
    return out


def span_topology(host: Topology, k: int, settings: dict, net: dict, name: str) -> Topology:
    """The machine of one server over ``k`` copies of ``host`` (nodes of copy i > 0 named ``<id>@<i>``), its
    GPUs carrying the network fields ``net`` and its serving section the instance's ``settings``."""
    t = copy.deepcopy(host)
    g = t.graph
    base_nodes = list(g.nodes(data=True))
    base_edges = list(g.edges(data=True))
    # the CXL switch and its devices are one pool the hosts share (a cluster tier the instance's every host
    # reaches): each copy's adapters link to them; everything else is the copy's own
    shared = {n for n, d in base_nodes if d.get("kind") in SHARED_KINDS}
    gpus, pools = list(host.gpus), {p: list(v) for p, v in host.pools.items()}
    for i in range(1, k):
        ren = {n: (n if n in shared else f"{n}@{i}") for n, _ in base_nodes}
        g.add_nodes_from((ren[n], copy.deepcopy(d)) for n, d in base_nodes if n not in shared)
        g.add_edges_from((ren[u], ren[v], copy.deepcopy(d)) for u, v, d in base_edges
                         if not (u in shared and v in shared))
        for n, _ in base_nodes:
            if n not in shared:
                g.nodes[ren[n]]["host_copy"] = i
        gpus += [ren[x] for x in host.gpus]
        for p, members in host.pools.items():
            pools[p] += [ren[x] for x in members if x not in shared]
    if k > 1:
        for n, _ in base_nodes:
            if n not in shared:
                g.nodes[n]["host_copy"] = 0
    for x in gpus:
        node = g.nodes[x]
        for f, v in net.items():
            node.setdefault(f, v)
        node.setdefault("sources", {}).setdefault("nic_latency", NIC_LATENCY_SOURCE)
    serving = dict(host.serving)
    src = f"given (cluster file instance over {k} host(s))"
    for s, v in settings.items():
        text = s in ("moe_a2a", "deepep_mode")
        if (s in ("moe_a2a", "two_batch_overlap", "ep_redundant", "moe_dense_tp") and v in ("none", False, 0, None)) or \
                (s == "deepep_mode" and settings.get("moe_a2a") != "deepep"):
            serving.pop(s, None)
            continue
        serving[s] = Param(math.nan if text else float(v), src, str(v))
    if "prefill_chunk" in host.serving:        # SGLang divides the server's chunked_prefill_size by dp
        total = host.param("prefill_chunk") * int(host.param("dp"))
        serving["prefill_chunk"] = Param(float(max(1, int(total) // settings["dp"])),
                                         f"the host's chunked_prefill_size {int(total)} / dp={settings['dp']}",
                                         str(int(total) // settings["dp"]))
    return replace(t, name=name, gpus=gpus, pools=pools, serving=serving, cluster=None, _routes={})
