"""The cluster's network: the resources transfers share (B/s each) and the resources each kind of transfer uses.

Per host: every NIC's two directions (``h.nicJ.out`` / ``h.nicJ.in``, one Transfer Engine operation's rate),
PCIe between host DRAM and the GPUs (``h.pcie``), the CXL adapters (``h.cxl_read`` / ``h.cxl_write``); per
shared tier: the CXL pool's devices (``t.devices``) and a dedicated store's NICs (``t.rdma_out`` / ``t.rdma_in``).

Mooncake's Transfer Engine posts each operation on one NIC, the one nearest the GPU whose memory it moves
(topology-aware NIC selection), so one request's handoff moves at one NIC's rate; a model whose KV is split
over tensor-parallel GPUs (or replicated on them, as MLA's latent under TP attention) moves one share per GPU,
each on its own NIC.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..hardware.cluster import ClusterSpec, TierSpec, TransferEngine

# RDMA for clusters without a network section (version-1 scenarios): the testbed's two 100 Gb/s NICs with the
# per-op cost and setup fitted to constants.md §3 (SGLang PD table, H20)
DEFAULT_TE = TransferEngine(nics=2, nic_rate=12.5e9, op_cost=0.239e-6, setup=1.79e-3)


class Network:
    """Capacities (resource -> B/s) and the resource sets of loads, writes and handoffs."""

    def __init__(self, cl: ClusterSpec, hosts, host_topo):
        self.cl = cl
        self.te = cl.rdma or DEFAULT_TE
        self.gpus = max(1, len(host_topo.gpus))
        nic_rate = replace(self.te, nics=1).rate
        cap: dict = {}
        pcie = sum(host_topo.bottleneck(host_topo.route(host_topo.pool_for(r, "dram"), g))
                   for r, g in enumerate(host_topo.gpus)) if host_topo.pools.get("dram") else math.inf
        for h in hosts:
            for j in range(self.te.nics):
                cap[f"{h}.nic{j}.out"] = cap[f"{h}.nic{j}.in"] = nic_rate
            cap[f"{h}.pcie"] = pcie
        for t in cl.tiers.values():
            p = t.params
            if t.kind == "cxl":
                for h in hosts:
                    cap[f"{h}.cxl_write"] = p.get("host_write_bandwidth", math.inf)
                    cap[f"{h}.cxl_read"] = p.get("host_read_bandwidth", math.inf)
                cap[f"{t.name}.devices"] = p.get("devices", 1) * p.get("device_bandwidth", math.inf)
            if t.kind == "rdma":
                cap[f"{t.name}.rdma_out"] = cap[f"{t.name}.rdma_in"] = p.get("rdma", self.te).rate
        self.capacity = {k: v for k, v in cap.items() if math.isfinite(v)}

    def nic(self, gpu: int) -> int:
        """The NIC nearest GPU ``gpu`` of a host."""
        return (gpu % self.gpus) * self.te.nics // self.gpus

    def load(self, h: str, gpu: int, tier: TierSpec, nbytes: float, holders: dict | None = None) -> list[tuple]:
        """(bytes, latency, resources) of bringing a far hit home to host ``h``; ``holders`` (host -> share of
        the blocks) for a store whose segments are on the hosts (a replica on ``h`` is read locally)."""
        if tier.kind == "host":
            return [(nbytes, 0.0, (f"{h}.pcie",))]
        if tier.kind == "cxl":
            return [(nbytes, 0.0, (f"{tier.name}.devices", f"{h}.cxl_read"))]
        nin = f"{h}.nic{self.nic(gpu)}.in"
        if not holders:
            return [(nbytes, self.te.setup, (f"{tier.name}.rdma_out", nin))]
        total = sum(holders.values())
        out = []
        for src, n in sorted(holders.items()):
            res = (f"{h}.pcie",) if src == h else (f"{src}.nic{self.nic(gpu)}.out", nin)
            out.append((nbytes * n / total, 0.0 if src == h else self.te.setup, res))
        return out

    def write(self, h: str, gpu: int, tier: TierSpec, nbytes: float) -> list[tuple]:
        """(bytes, latency, resources) of writing new KV from host ``h`` to a shared tier (every replica)."""
        if tier.kind == "cxl":
            return [(nbytes, 0.0, (f"{h}.cxl_write", f"{tier.name}.devices"))]
        return [(nbytes * tier.replicas, self.te.setup, (f"{h}.nic{self.nic(gpu)}.out", f"{tier.name}.rdma_in"))]

    def handoff(self, src: list, dst: list, nbytes: float, split: bool) -> list[tuple]:
        """(bytes, latency, resources) of a prefill-to-decode KV handoff from the GPUs ``src`` of the prefill
        rank to those ``dst`` of the decode rank ((host, GPU index on it) each, in tp rank order): one share per
        prefill GPU, on the NIC nearest it, to the NIC nearest the decode GPU of the same tp rank (modulo the
        decode rank's GPUs); ``split``: the shares divide the KV (else each GPU sends all of it). GPUs on one
        host move nothing over the network."""
        share = nbytes / len(src) if split else nbytes
        out = []
        for j, (sh, sg) in enumerate(src):
            dh, dg = dst[j % len(dst)]
            if sh != dh:
                out.append((share, self.te.setup, (f"{sh}.nic{self.nic(sg)}.out", f"{dh}.nic{self.nic(dg)}.in")))
        return out
