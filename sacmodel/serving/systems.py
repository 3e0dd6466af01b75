"""KV-cache systems: where the prefix KV lives and how a GPU reaches it.

``gpu``: no pool, whole KV in HBM. ``dram``: HiSparse host-DRAM pool, top-k misses gathered per layer.
``cxl``: SAC, the pool in CXL memory (GPU rank r uses device r mod n). ``rdma``: RDMA pool, whole prefix
RDMA-read into the local host pool before decode, then as ``dram``. What-ifs: ``cxl-prefetch`` (bulk copy of
the prefix over CXL, then as ``dram``) and ``rdma-topk`` (only the missed top-k entries over RDMA).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..hardware.scenarios import as_topology
from ..hardware.topology import Topology, TopologyError, max_min_share
from .costs import compile_expr, gather_time, lines_per_entry, rdma_time

SYSTEMS = ("gpu", "dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk")
MAIN_SYSTEMS = ("gpu", "dram", "cxl", "rdma")
BACKENDS = ("dram", "cxl", "rdma")


class SystemError_(ValueError):
    """Unknown system or backend."""


def check_system(system: str) -> str:
    if system not in SYSTEMS:
        raise SystemError_(f"unknown system {system!r}; known: {', '.join(SYSTEMS)}")
    return system



# ---- data paths ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Path_:
    """Where a GPU's pool traffic comes from: pool node, route, and the bandwidth/latency it sees."""
    pool: str
    route: tuple[str, ...]
    bandwidth: float      # B/s available to this GPU (max-min share among the active ranks)
    latency: float        # s, load round trip


def swap_paths(topo: Topology, pool: str, *, active_ranks: int | None = None,
               n_devices: int | None = None) -> list[Path_]:
    """Per-rank paths from ``pool`` to each GPU when ``active_ranks`` GPUs gather at the same time."""
    n = len(topo.gpus) if active_ranks is None else active_ranks
    if not 1 <= n <= len(topo.gpus):
        raise TopologyError(f"{topo.name}: active ranks must be 1..{len(topo.gpus)}, got {n}")
    flows = [(topo.pool_for(r, pool, n_devices), topo.gpus[r]) for r in range(n)]
    shares = max_min_share(topo, flows)
    out = []
    for (src, dst), bw in zip(flows, shares):
        route = topo.route(src, dst)
        out.append(Path_(src, tuple(route), bw, topo.round_trip_latency(route)))
    return out


@lru_cache(maxsize=None)
def _gather_fn():
    return compile_expr(gather_time())


@lru_cache(maxsize=None)
def _rdma_fn():
    return compile_expr(rdma_time())


def gather_seconds(topo: Topology, path: Path_, n_entries, entry: float):
    """Time (s) of one gather kernel of ``n_entries`` entries of ``entry`` bytes over ``path``."""
    line = topo.param("cacheline")
    return _gather_fn()(n=n_entries, lines_per_entry=lines_per_entry(entry, line), cacheline=line,
                        bw=path.bandwidth, lat=path.latency,
                        outstanding_lines=topo.param("outstanding_lines"), t_kernel=topo.param("t_kernel"))


def rdma_seconds(topo: Topology, nic: str, ops, nbytes, n_nics: int = 1):
    """RDMA time (s) of ``ops`` operations moving ``nbytes`` spread over ``n_nics`` NICs like ``nic``."""
    node = topo.node(nic)
    return _rdma_fn()(ops=ops / n_nics, bytes=nbytes / n_nics, rate=node["rate"], rdma_op_cost=node["op_cost"])


def fetch_latency_us(scenario, backend: str, *, topk: int, entry_bytes: float = 656, rank: int = 0) -> float:
    """Predicted single-layer top-k gather latency (us) of the fetch micro-benchmark.

    ``dram``/``cxl``: one GPU gather kernel over the route to the pool. ``rdma``: one RDMA READ per entry
    into a host staging buffer, then the same gather from host DRAM.
    """
    topo = as_topology(scenario)
    if backend not in BACKENDS:
        raise SystemError_(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if topk <= 0 or entry_bytes <= 0:
        raise ValueError("topk and entry_bytes must be positive")
    if not 0 <= rank < len(topo.gpus):
        raise TopologyError(f"{topo.name}: no GPU rank {rank}")
    if backend == "rdma":
        nic = topo.pool_for(rank, "rdma")
        t = rdma_seconds(topo, nic, topk, topk * entry_bytes) + gather_seconds(
            topo, single_path(topo, "dram", rank), topk, entry_bytes)
    else:
        t = gather_seconds(topo, single_path(topo, backend, rank), topk, entry_bytes)
    return float(t) * 1e6


def single_path(topo: Topology, pool: str, rank: int) -> Path_:
    """The path from ``pool`` to GPU ``rank`` when that GPU is the only one reading (micro-benchmark)."""
    src = topo.pool_for(rank, pool)
    route = topo.route(src, topo.gpus[rank])
    return Path_(src, tuple(route), topo.bottleneck(route), topo.round_trip_latency(route))
