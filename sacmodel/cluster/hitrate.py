"""The hit-rate fast path: the share of prompt tokens a bounded prefix cache serves, with no timing.

Requests take no time (their blocks are free for eviction as soon as they are cached) and routers see the
caches but no load beyond the number of requests each instance was given. With ``ranks`` > 1 every instance
keeps one cache per data-parallel rank (SGLang with DP attention: each rank's scheduler has its own radix
cache) and takes its ranks in turn (its round-robin controller) unless the router addresses ranks itself.
One pass over the trace's block arrays per capacity point; used by ``sacmodel hitrate`` and by cluster plans.
"""
from __future__ import annotations

import math

from ..data.records import DataError
from ..data.traces import Trace, load_trace
from ..hardware.cluster import parse_capacity
from ..util.names import LIMITS
from .prefix_cache import RadixCache, chain, check_block_tokens, page_keys
from .routers import RouterState, make_router

POLICIES = ("lru",)


def as_trace(trace, limit: int | None = None) -> Trace:
    if isinstance(trace, Trace):
        return trace if limit is None else trace.head(limit)
    return load_trace(trace, limit=limit)


def hit_rates(trace, capacities, *, policy: str = "lru", block_tokens: int = 512, instances: int = 1,
              router: str = "round_robin", bytes_per_token: float | None = None, ranks: int = 1,
              **router_params) -> list[dict]:
    """For every capacity (tokens per instance, split evenly over its ``ranks``; '3M', 'inf', a number): hit
    rate and eviction counts. A size in bytes ('1 TB') needs ``bytes_per_token`` (a model's KV bytes per
    token); without it, it is refused."""
    if isinstance(instances, bool) or not isinstance(instances, int) or not 1 <= instances <= LIMITS["instances"]:
        raise ValueError(f"instances must be a whole number in 1..{LIMITS['instances']:,}, got {instances!r}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= 64:
        raise ValueError(f"ranks must be a whole number in 1..64 (data-parallel ranks per instance), got {ranks!r}")
    if isinstance(capacities, (str, int, float)):
        capacities = [capacities]
    capacities = list(capacities)
    if not capacities or len(capacities) > LIMITS["points"]:
        raise ValueError(f"give 1 to {LIMITS['points']:,} capacities, got {len(capacities)}")
    if bytes_per_token is not None and not (isinstance(bytes_per_token, (int, float)) and
                                            math.isfinite(bytes_per_token) and bytes_per_token > 0):
        raise ValueError(f"bytes_per_token must be a positive number, got {bytes_per_token!r}")
    tr = as_trace(trace)
    if not tr.has_prefix_info or tr.blocks is None:
        raise DataError(f"{tr.name}: the trace has no prefix information (no hash_ids): no prefix hits to count")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    bt = check_block_tokens(block_tokens, tr.block_tokens)
    caps = [parse_capacity(c, "capacity", bytes_per_token) for c in capacities]
    inp = tr.input_len.tolist()
    offs = tr.offsets.tolist()
    total = float(sum(inp))
    blocks, tb = tr.blocks, tr.block_tokens

    def keys():       # one request at a time: a million-request trace holds no per-block objects
        for i, n_in in enumerate(inp):
            yield chain(page_keys(blocks[offs[i]:offs[i + 1]], n_in, tb, bt)), n_in

    out = []
    for cap in caps:
        per = cap / ranks
        blocks_cap = per if math.isinf(per) else max(1.0, math.floor(per / bt))
        r = make_router(router, block_tokens=bt, **router_params)
        n_c = instances * ranks if r.rank_aware else instances
        caches = [RadixCache([blocks_cap]) for _ in range(instances * ranks)]
        state = RouterState(n_c)
        turn = [0] * instances                        # each instance's round-robin over its ranks
        hit = 0.0
        for k, n_in in keys():
            if r.rank_aware:
                c = r.choose(state, lambda j: (caches[j].match_len(k), 0, 0, 0), n_in, k) if n_c > 1 else 0
                j = c
            else:
                c = r.choose(state, _no_overlap, n_in, k) if n_c > 1 else 0
                j = c * ranks + turn[c] % ranks
                turn[c] += 1
            state.assigned[c] += 1
            hit += min(caches[j].touch(k) * bt, n_in - 1)
        out.append({"capacity_tokens": cap, "hit_rate": hit / total, "cached_tokens": hit, "prompt_tokens": total,
                    "evicted_blocks": sum(c.evicted[0] for c in caches), "block_tokens": bt, "ranks": ranks})
    return out


def _no_overlap(c):
    return (0, 0, 0, 0)


def prefix_hit_rate(trace, *, capacity_tokens, policy: str = "lru", block_tokens: int = 512, instances: int = 1,
                    router: str = "round_robin", bytes_per_token: float | None = None, ranks: int = 1,
                    **router_params) -> float:
    """Share of prompt tokens served from cache: ``instances`` LRU prefix caches of ``capacity_tokens`` each
    (tokens, '3M' or 'inf'; bytes such as '1 TB' with ``bytes_per_token``), each split over ``ranks``
    per-rank caches taken in turn, ``router`` spreading the requests; ``trace``: a path or a loaded Trace."""
    return hit_rates(trace, [capacity_tokens], policy=policy, block_tokens=block_tokens, instances=instances,
                     router=router, bytes_per_token=bytes_per_token, ranks=ranks, **router_params)[0]["hit_rate"]
