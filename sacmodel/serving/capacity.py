"""Memory: what a configuration holds per rank and per pool, and which limit binds first.

Per rank the server has a physical device KV pool of ``max_total_tokens`` slots (what ``#token`` in its log
counts). HiSparse draws every request's GPU buffer (``device_buffer`` + one page) from it and the cached
prefix keeps its device pages there while requests use it; ``gpu`` keeps each request's whole KV in it. The
host pool of a HiSparse rank is ``host_to_device_ratio`` x that pool, in local DRAM or in the rank's partition
of a CXL device; the RDMA pool stores the prompts remotely. The static check here answers "can this run at
all"; whether a run's peak fits is decided by the engine as requests come and go (round-robin dispatch and
varied outputs make some ranks hold more than their share).
"""
from __future__ import annotations

import math

from .config import Config


def weights_per_gpu(cfg: Config) -> float:
    """Bytes of weights on one GPU: attention replicated on every rank, MLP split over the tensor-parallel GPUs."""
    m, t = cfg.model, cfg.topo
    wb = t.param("weight_bytes_per_param")
    shared_w = m.params_total() - m.layers * m.attn_params()
    return wb * (m.layers * m.attn_params() + shared_w / t.param("tp"))


def device_token_bytes(cfg: Config) -> float:
    """HBM bytes of one slot of the device KV pool (main entry + indexer key, every layer)."""
    m = cfg.model
    return m.layers * (cfg.entry_bytes + m.index_key_bytes)


def static_check(cfg: Config, *, context: int, output: int, concurrency: int, prompts: str = "shared") -> dict:
    """Usage and capacity per resource for ``concurrency`` requests in flight; names the first limit hit.

    Returns ``{"feasible", "limit", "usage": {name: {"used", "capacity"}}, "requests_per_rank", ...}``.
    """
    t = cfg.topo
    gpu = t.node(t.gpus[0])
    per_rank = math.ceil(concurrency / cfg.dp)
    weights = weights_per_gpu(cfg)
    budget = t.param("mem_fraction") * gpu["hbm_capacity"] - weights
    slot = device_token_bytes(cfg)
    page = cfg.page
    shared = prompts == "shared"
    usage: dict[str, tuple[float, float]] = {}
    usage["hbm"] = (cfg.max_total_tokens * slot, budget)
    if cfg.system == "gpu":
        prefix = context if shared else 0
        per_req = -(-((0 if shared else context) + page + output) // page) * page
    else:
        prefix = context - cfg.prefill_chunk + page if shared else 0
        per_req = cfg.buffer_alloc if context > cfg.device_buffer else -(-(context + output) // page) * page
    usage["max_total_tokens"] = (prefix + per_rank * per_req, cfg.max_total_tokens)     # the device KV pool
    if cfg.hisparse and cfg.system != "rdma-topk":      # rdma-topk reads the remote pool, no host pool
        ratio = t.param("host_to_device_ratio") if t.has_param("host_to_device_ratio") else 2.0
        host_tokens = (context if shared else per_rank * context) + per_rank * (page + output)
        usage["host_pool"] = (host_tokens, ratio * cfg.max_total_tokens)
        pool_bytes = ratio * cfg.max_total_tokens * cfg.token_bytes * cfg.dp
        if cfg.system in ("dram", "rdma", "cxl-prefetch"):
            cap = sum(t.node(n)["capacity"] for n in t.pools.get("dram", []))
            usage["host_dram"] = (pool_bytes, cap)
        if cfg.system in ("cxl", "cxl-prefetch"):      # the KV's home: the CXL devices in use
            cap = sum(t.node(n).get("capacity", math.inf) for n in t.pools.get("cxl", [])[:cfg.cxl_devices])
            used = pool_bytes if cfg.system == "cxl" else (context if shared else concurrency * context) * cfg.token_bytes
            usage["cxl_pool"] = (used, cap)
    if cfg.system in ("rdma", "rdma-topk"):
        remote = t.nodes_of("remote_memory")
        if remote:
            usage["remote_pool"] = (context * cfg.token_bytes * (1 if shared else concurrency),
                                    sum(t.node(n)["capacity"] for n in remote))
    if budget <= 0:
        return {"feasible": False, "limit": "hbm (weights alone exceed the memory budget)", "usage": _fmt(usage),
                "weights_per_gpu_bytes": weights, "hbm_budget_bytes": budget, "requests_per_rank": per_rank}
    over = {k: u / c for k, (u, c) in usage.items() if u > c}
    return {"feasible": not over, "limit": max(over, key=over.get) if over else None, "usage": _fmt(usage),
            "weights_per_gpu_bytes": weights, "hbm_budget_bytes": budget, "requests_per_rank": per_rank,
            "max_total_tokens": cfg.max_total_tokens, "max_total_tokens_limits": dict(cfg.limits)}


def _fmt(usage: dict) -> dict:
    return {k: {"used": float(u), "capacity": float(c)} for k, (u, c) in usage.items()}
