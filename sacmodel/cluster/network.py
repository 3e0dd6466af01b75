"""The cluster's network for transfers between tiers and hosts: the resources (NICs, PCIe to host DRAM, CXL
adapters and devices, the store's NICs) and the flows a load, a write-through or a handoff puts on them."""
from __future__ import annotations

import math

from ..hardware.cluster import ClusterSpec, TierSpec, TransferEngine
from .transfer import Flow


# RDMA handoff for clusters without a network section (version-1 scenarios): the testbed's two 100 Gb/s NICs
# with the per-op cost and setup fitted to constants.md §3 (SGLang PD table, H20)
DEFAULT_TE = TransferEngine(nics=2, nic_rate=12.5e9, op_cost=0.239e-6, setup=1.79e-3)


class Network:
    """Shared resources (B/s) of the cluster's transfers and the flows that use them."""

    def __init__(self, cl: ClusterSpec, insts, system, host_topo):
        self.cl = cl
        self.te = cl.rdma or DEFAULT_TE
        self.capacity: dict = {}
        for h in {i.host for i in insts}:
            self.capacity[f"{h}.rdma_out"] = self.capacity[f"{h}.rdma_in"] = self.te.rate
            gpus = host_topo.gpus
            self.capacity[f"{h}.pcie"] = sum(host_topo.bottleneck(host_topo.route(
                host_topo.pool_for(r, "dram"), g)) for r, g in enumerate(gpus)) if host_topo.pools.get("dram") \
                else math.inf
        for t in cl.tiers.values():
            p = t.params
            if t.kind == "cxl":
                for h in {i.host for i in insts}:
                    self.capacity[f"{h}.cxl_write"] = p.get("host_write_bandwidth", math.inf)
                    self.capacity[f"{h}.cxl_read"] = p.get("host_read_bandwidth", math.inf)
                self.capacity[f"{t.name}.devices"] = p.get("devices", 1) * p.get("device_bandwidth", math.inf)
            if t.kind == "rdma":
                ste = p.get("rdma", self.te)
                self.capacity[f"{t.name}.rdma_out"] = self.capacity[f"{t.name}.rdma_in"] = ste.rate
        # resources of unbounded capacity do not limit a flow
        self.capacity = {k: v for k, v in self.capacity.items() if math.isfinite(v)}

    def _res(self, names):
        return tuple(r for r in names if r in self.capacity)

    def load_flow(self, start, h, kind, nbytes) -> Flow:
        """Move a cached prefix from a farther tier to the instance's home tier before it is served."""
        if kind == "rdma":
            store = next(t.name for t in self.cl.tiers.values() if t.kind == "rdma")
            return Flow(start, nbytes, self.te.setup, self._res((f"{store}.rdma_out", f"{h}.rdma_in")))
        if kind == "cxl":
            pool = next(t.name for t in self.cl.tiers.values() if t.kind == "cxl")
            return Flow(start, nbytes, 0.0, self._res((f"{pool}.devices", f"{h}.cxl_read")))
        return Flow(start, nbytes, 0.0, self._res((f"{h}.pcie",)))

    def write_flow(self, start, h, tier: TierSpec, nbytes) -> Flow:
        """Write new KV once to a shared tier (every replica for a store)."""
        if tier.kind == "cxl":
            return Flow(start, nbytes, 0.0, self._res((f"{h}.cxl_write", f"{tier.name}.devices")))
        return Flow(start, nbytes * tier.replicas, self.te.setup, self._res((f"{h}.rdma_out", f"{tier.name}.rdma_in")))

    def handoff_flow(self, start, src, dst, nbytes) -> Flow:
        """Prefill host -> decode host over RDMA (Transfer Engine)."""
        if src == dst:
            return Flow(start, 0.0, 0.0, ())
        return Flow(start, nbytes, self.te.setup, self._res((f"{src}.rdma_out", f"{dst}.rdma_in")))
