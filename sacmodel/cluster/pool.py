"""How many hosts one CXL pool can feed: the same decode load on 1, 2, ... hosts sharing the pool's devices.

Each host decodes ``concurrency`` requests of ``context`` cached prompt tokens (read in place from the pool)
and ``output`` tokens. A decode step loads the entries its top-k misses from the devices; alone, a host asks
``demand`` = bytes per step / step time of them. While the hosts' combined demand stays below the devices'
bandwidth ``C`` the steps keep their time; beyond it the devices are shared max-min and every step stretches
so that the hosts together load ``C``: TBT(N) = max(TBT(1), N x demand x TBT(1) / C), a knee at
N = C / demand.
"""
from __future__ import annotations

import numpy as np

from ..data.traces import Trace
from ..hardware.scenarios import cluster_of
from ..serving.predict import ConfigError


def hosts_per_pool(scenario="sac-cluster-4x", hosts=(1, 2, 4, 6, 8, 12, 16), *, system: str = "cxl",
                   context: int = 32768, output: int = 256, concurrency: int = 64) -> dict:
    """TBT and the pool's traffic for each host count; the knee the devices' bandwidth predicts."""
    from .replay import replay
    cl = cluster_of(scenario)
    pool = next((t for t in cl.tiers.values() if t.kind == "cxl"), None)
    if pool is None:
        raise ConfigError(f"{cl.name}: no CXL pool to share")
    cap = pool.params.get("devices", 1) * pool.params.get("device_bandwidth", float("inf"))
    rows = []
    for n in hosts:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 256:
            raise ConfigError(f"hosts: whole numbers in 1..256, got {n!r}")
        k = n * concurrency
        tr = Trace(f"pool-{n}", np.zeros(k), np.full(k, context, np.int64), np.full(k, output, np.int64),
                   np.zeros(k), False)
        p = replay(scenario, system, tr, instances=n, concurrency=concurrency, cache="all")
        s = p.summary
        rows.append({"hosts": n, "tbt_mean_ms": p.tbt_mean_ms, "ttft_mean_ms": p.ttft_mean_ms,
                     "pool_traffic_GBps": s["pool"]["traffic_Bps"] / 1e9,
                     "demand_per_host_GBps": s["pool"]["demand_per_host_Bps"] / 1e9})
    d1 = rows[0]["demand_per_host_GBps"] * 1e9 if rows and rows[0]["hosts"] == 1 else None
    return {"devices_GBps": cap / 1e9, "rows": rows,
            "knee_hosts": cap / d1 if d1 else None,
            "rule": "TBT(N) = max(TBT(1), N x demand x TBT(1) / C)"}
