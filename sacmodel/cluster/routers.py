"""Routers: which instance serves a request.

- ``round_robin``: instances in turn.
- ``least_load``: fewest requests in flight (by the load estimate), then fewest KV blocks held.
- ``prefix_affinity``: consistent choice by the request's leading blocks (a hash of the first
  ``affinity_blocks``), so the turns of a conversation land where their prefix is cached; requests without
  prefix information go to the least loaded instance.
- ``kv``: KV-aware, after NVIDIA Dynamo's router: for every instance the cost
  ``weight x prefill_blocks + decode_blocks``, where prefill blocks are the uncached prompt blocks of this
  request on that instance (its prefix overlap taken off) plus the prompt blocks it is already prefilling,
  and decode blocks the KV blocks it holds for requests in flight plus this request's. Temperature 0 takes the
  cheapest (ties: fewer requests in flight, fewer assigned so far, lower index); a positive temperature samples a softmax of the
  costs normalised to [0, 1] (seeded, so replays are reproducible).
"""
from __future__ import annotations

import math

import numpy as np

from ..util.names import ROUTERS


class RouterError(ValueError):
    """Unknown router or bad router parameter."""


class Router:
    name = ""

    def choose(self, cands: list[int], loads, overlap, input_tokens: int, blocks) -> int:
        """One of ``cands`` (instance indices). ``loads[i]``: :class:`~.load.InstanceLoad`; ``overlap(i)``:
        cached prefix blocks of this request on instance i; ``blocks``: the request's block keys."""
        raise NotImplementedError


class RoundRobin(Router):
    name = "round_robin"

    def __init__(self):
        self.k = 0

    def choose(self, cands, loads, overlap, input_tokens, blocks):
        i = cands[self.k % len(cands)]
        self.k += 1
        return i


def least_loaded(cands, loads) -> int:
    return min(cands, key=lambda i: (loads[i].in_flight, loads[i].active_blocks, loads[i].assigned, i))


class LeastLoad(Router):
    name = "least_load"

    def choose(self, cands, loads, overlap, input_tokens, blocks):
        return least_loaded(cands, loads)


class PrefixAffinity(Router):
    name = "prefix_affinity"

    def __init__(self, affinity_blocks: int = 4):
        if int(affinity_blocks) != affinity_blocks or affinity_blocks < 1:
            raise RouterError(f"affinity_blocks must be a positive integer, got {affinity_blocks!r}")
        self.k = int(affinity_blocks)

    def choose(self, cands, loads, overlap, input_tokens, blocks):
        if not len(blocks):
            return least_loaded(cands, loads)
        h = hash(tuple(int(b) for b in blocks[:self.k]))        # int tuples hash the same in every run
        return cands[(h * 0x9E3779B97F4A7C15 >> 17) % len(cands)]


class KvRouter(Router):
    name = "kv"

    def __init__(self, weight: float = 1.0, temperature: float = 0.0, seed: int = 0, block_tokens: int = 512):
        for n, v in (("weight", weight), ("temperature", temperature)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise RouterError(f"kv router {n} must be a non-negative number, got {v!r}")
        self.w, self.temp, self.bt = float(weight), float(temperature), block_tokens
        self.rng = np.random.default_rng(seed)

    def costs(self, cands, loads, overlap, input_tokens) -> list[float]:
        bt, w = self.bt, self.w
        own = math.ceil(input_tokens / bt)
        return [w * (loads[i].pending_tokens + max(0.0, input_tokens - overlap(i) * bt)) / bt
                + loads[i].active_blocks + own for i in cands]

    def choose(self, cands, loads, overlap, input_tokens, blocks):
        c = self.costs(cands, loads, overlap, input_tokens)
        lo = min(c)
        if self.temp == 0 or len(cands) == 1:
            return min((i for i, x in zip(cands, c) if x == lo),
                       key=lambda i: (loads[i].in_flight, loads[i].assigned, i))
        c = np.array(c)
        span = c.max() - lo
        p = np.ones(len(c)) if span == 0 else np.exp(-(c - lo) / (span * self.temp))
        return cands[int(self.rng.choice(len(c), p=p / p.sum()))]


def make_router(name: str, *, block_tokens: int = 512, **params) -> Router:
    """A router by name; ``params``: weight, temperature, seed (kv), affinity_blocks (prefix_affinity)."""
    allowed = {"round_robin": (), "least_load": (), "prefix_affinity": ("affinity_blocks",),
               "kv": ("weight", "temperature", "seed")}
    if name not in allowed:
        raise RouterError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")
    extra = set(params) - set(allowed[name])
    if extra:
        raise RouterError(f"router {name!r} takes no parameter(s) {', '.join(sorted(extra))}")
    if name == "round_robin":
        return RoundRobin()
    if name == "least_load":
        return LeastLoad()
    if name == "prefix_affinity":
        return PrefixAffinity(**params)
    return KvRouter(block_tokens=block_tokens, **params)
