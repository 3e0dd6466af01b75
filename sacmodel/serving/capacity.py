"""Memory: what a configuration holds per rank and per pool, what can never be served, and what only queues.

Per rank the server has a physical device KV pool of ``max_total_tokens`` slots (what ``#token`` in its log
counts), sized as SGLang sizes it (:func:`sacmodel.serving.config.profiled_pool`) unless set lower. HiSparse
draws every request's GPU buffer (``device_buffer`` + one page) from it and the cached prefix keeps its device
pages there while requests use it; ``gpu`` keeps each request's whole KV in it. The host pool of a HiSparse rank
is ``host_to_device_ratio`` x that pool, in local DRAM or in the rank's partition of a CXL device; the RDMA pool
stores the prompts remotely.

A configuration is **infeasible** only where the real server cannot serve it however long requests wait: the
weights do not fit the memory budget, one request alone does not fit the pool, or the pools allocated at start-up
do not fit their memory. More requests in flight than the device pool holds at once is not infeasible: the
scheduler keeps them waiting (``fits_at_once`` says whether they all fit together; the engine runs the queue).

The HiSparse host pool is not part of SGLang's admission: a request takes its prompt's host slots when its
prefill is staged, and one more slot per decode step for the token before; when an allocation finds the pool
full, ``HiSparseCoordinator`` raises ``RuntimeError("HiSparse host mem pool alloc failed ...")`` and the server
stops (sgl-project/sglang ``managers/hisparse_coordinator.py``, ``admit_request_into_staging`` and
``_eager_backup_previous_token``; the same in the testbed's fork, magicYang1573/sglang branch
hisparse-cxl-prefix-cache-opt-rdma). Its row of the memory table counts the requests the device pool admits at
once; the engine stops where the pool runs out (:class:`~sacmodel.serving.engine.memory.HostPool`).
"""
from __future__ import annotations

import math

from .config import Config


def weights_per_gpu(cfg: Config) -> float:
    """Bytes of weights on one GPU (:func:`sacmodel.hardware.sizing.weights_per_gpu`)."""
    from ..hardware.sizing import weights_per_gpu as sized
    t = cfg.topo
    return sized(cfg.model, t.param("weight_bytes_per_param"), tp=cfg.tp, dp=cfg.dp,
                 redundant=int(t.param("ep_redundant")) if t.has_param("ep_redundant") else 0)


def device_token_bytes(cfg: Config) -> float:
    """HBM bytes of one slot of a rank's device KV pool on one GPU (every layer; the indexer key for DSA)."""
    from ..hardware.sizing import kv_cell_bytes
    return kv_cell_bytes(cfg.model, cfg.entry_bytes, cfg.attn_tp)


def _per_request_slots(cfg: Config, context: int, output: int, shared: bool) -> tuple[float, float]:
    """(slots the shared prefix holds, slots one request holds) on a rank's device pool."""
    page = cfg.page
    if cfg.system == "gpu":
        prefix = context if shared else 0
        return prefix, -(-((0 if shared else context) + page + output) // page) * page
    prefix = context - cfg.prefill_chunk + page if shared else 0
    per_req = cfg.buffer_alloc if context > cfg.device_buffer else -(-(context + output) // page) * page
    return max(prefix, 0), per_req


def host_pool_tokens(cfg: Config) -> int | None:
    """Slots of a rank's HiSparse host pool: ``int(host_to_device_ratio x max_total_tokens)``, as
    ``MLATokenToKVPoolHost`` sizes it (None: no host pool; ``rdma-topk`` reads the remote pool directly)."""
    if not cfg.hisparse or cfg.system == "rdma-topk":
        return None
    t = cfg.topo
    ratio = t.param("host_to_device_ratio") if t.has_param("host_to_device_ratio") else 2.0
    return int(ratio * cfg.max_total_tokens)


def host_tokens(prompt: int, output: int) -> int:
    """Host-pool slots a request holds at most: its prompt's (staged after prefill) and the decode tokens backed
    up one step late (the first decode step backs nothing up; the last token is never written): ``output - 2``."""
    return int(prompt) + max(int(output) - 2, 0)


def device_admits(cfg: Config, context: int, output: int, shared: bool) -> int:
    """Requests a rank's device pool holds at once (its slots less the shared prefix's, over one request's)."""
    prefix, per_req = _per_request_slots(cfg, context, output, shared)
    return max(int((cfg.max_total_tokens - prefix) // per_req), 0) if per_req > 0 else 0


def static_check(cfg: Config, *, context: int, output: int, concurrency: int, prompts: str = "shared") -> dict:
    """Usage and capacity per resource; whether the run can be served at all and whether it fits at once.

    Returns ``{"feasible", "limit", "fits_at_once", "usage": {name: {"used", "capacity"}}, "requests_per_rank",
    ...}``: ``feasible`` False names the ``limit`` that no queueing can get round; ``usage`` counts all
    ``concurrency`` requests in flight together (the queue's peak if they all fit)."""
    t = cfg.topo
    per_rank = math.ceil(concurrency / cfg.dp)
    weights = weights_per_gpu(cfg)
    total = _budget(cfg)
    budget = total - weights
    slot = device_token_bytes(cfg)
    shared = prompts == "shared"
    prefix, per_req = _per_request_slots(cfg, context, output, shared)
    usage: dict[str, tuple[float, float]] = {"hbm": (weights + cfg.max_total_tokens * slot, total),
                                             "max_total_tokens": (prefix + per_rank * per_req, cfg.max_total_tokens)}
    alone = {"max_total_tokens": (prefix + per_req, cfg.max_total_tokens)}
    host = host_pool_tokens(cfg)
    if host is not None:
        ratio = host / cfg.max_total_tokens if cfg.max_total_tokens else 2.0
        # the requests the device pool lets in at once, each with its prompt (a shared prompt's prefix: once,
        # in its prefix-cache entry; a request stages its tail, at most a page) and its decode tokens
        at_once = min(per_rank, device_admits(cfg, context, output, shared), cfg.max_running_requests)
        own = min(cfg.page, context) if shared else context
        usage["host_pool"] = ((context if shared else 0) + at_once * host_tokens(own, output), host)
        alone["host_pool"] = (host_tokens(context, output), host)
        _pool_memory(cfg, usage, ratio, context, concurrency, shared)
    if cfg.system in ("rdma", "rdma-topk"):
        remote = t.nodes_of("remote_memory")
        if remote:
            cap = sum(t.node(n)["capacity"] for n in remote)
            usage["remote_pool"] = (context * cfg.token_bytes * (1 if shared else concurrency), cap)
            alone["remote_pool"] = (context * cfg.token_bytes, cap)
    out = {"usage": _fmt(usage), "weights_per_gpu_bytes": weights, "hbm_budget_bytes": budget,
           "requests_per_rank": per_rank, "max_total_tokens": cfg.max_total_tokens,
           "max_total_tokens_limits": dict(cfg.limits)}
    if budget <= 0 or cfg.max_total_tokens <= 0:
        return dict(out, feasible=False, fits_at_once=False,
                    limit="hbm (the weights leave no memory for the KV pool)")
    start = {k: usage[k] for k in ("host_dram", "cxl_pool") if k in usage}     # allocated at start-up
    never = {k: u / c for k, (u, c) in {**alone, **start}.items() if u > c}
    over = {k: u / c for k, (u, c) in usage.items() if u > c}
    if host is not None:
        out["host_pool_tokens"] = host
        out["host_requests_per_rank"] = host // max(host_tokens(context, output), 1)    # distinct prompts
    return dict(out, feasible=not never, fits_at_once=not over,
                limit=_limit_text(max(never, key=never.get), alone, start) if never else None)


def _budget(cfg: Config) -> float:
    """Bytes of one GPU SGLang lets weights and the KV pool use: ``mem_fraction`` of what is free at start."""
    from ..hardware.sizing import RUNTIME_RESERVE
    gpu = cfg.topo.node(cfg.topo.gpus[0])
    return cfg.topo.param("mem_fraction") * (gpu.get("memory_reported", gpu["hbm_capacity"]) - RUNTIME_RESERVE)


def _pool_memory(cfg: Config, usage: dict, ratio: float, context: int, concurrency: int, shared: bool) -> None:
    """The host pools' bytes against the DRAM or CXL memory that holds them (allocated when the server starts)."""
    t = cfg.topo
    pool_bytes = ratio * cfg.max_total_tokens * cfg.token_bytes * cfg.dp
    if cfg.system in ("dram", "rdma", "cxl-prefetch"):
        usage["host_dram"] = (pool_bytes, sum(t.node(n)["capacity"] for n in t.pools.get("dram", [])))
    if cfg.system in ("cxl", "cxl-prefetch"):      # the KV's home: the CXL devices in use
        cap = sum(t.node(n).get("capacity", math.inf) for n in t.pools.get("cxl", [])[:cfg.cxl_devices])
        used = pool_bytes if cfg.system == "cxl" else (context if shared else concurrency * context) * cfg.token_bytes
        usage["cxl_pool"] = (used, cap)


def _limit_text(name: str, alone: dict, start: dict) -> str:
    if name in start:
        return f"{name} (the pools allocated at start-up do not fit)"
    used, cap = alone[name]
    return f"{name} (one request alone needs {used:,.0f} of {cap:,.0f})"


def _fmt(usage: dict) -> dict:
    return {k: {"used": float(u), "capacity": float(c)} for k, (u, c) in usage.items()}
