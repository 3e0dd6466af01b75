"""Routers: which instance (and, for a router that addresses data-parallel ranks, which rank) serves a request.

A router decides with what it can know: the requests it routed and the responses it has seen (its own
bookkeeping, :class:`RouterState`, as Dynamo's active-sequence tracker and the SGLang gateway keep it) and, for
a KV-aware router, the cache contents the engines report (KV events; ``overlap``).

- ``round_robin``: instances in turn (inside an instance SGLang's data-parallel controller takes the ranks in
  turn); ``random``: one at random (seeded).
- ``least_load``: fewest requests in flight, then fewest active blocks, then lowest index.
- ``prefix_affinity``: a consistent choice by the request's first ``affinity_blocks`` blocks.
- ``kv``: NVIDIA Dynamo's KV router (``lib/kv-router`` scheduling, v1.5.0 defaults), over (worker, data-parallel
  rank) pairs: cost = ``weight`` x max(0, (uncached prompt tokens the rank is prefilling, the oldest decayed
  with ``prefill_tokens_per_s``, + this prompt) / block - overlap credit) + the rank's unique active blocks +
  this prompt's blocks not already active there; the
  credit counts device-cache blocks fully, host-cache blocks ``host_weight`` (0.75) and disk-tier blocks
  ``disk_weight`` (0.25), a shared tier ``shared_weight`` (0). The cheapest wins, ties broken at random
  (seeded); ``temperature`` > 0 samples a softmax of the costs normalised to [0, 1]. ``queue_threshold``:
  requests wait in the router while every rank prefills more than that many x ``batched_tokens`` prompt
  tokens (Dynamo's ``router_queue_threshold``; off by default here: Dynamo's own default is 16 at 0243c51b,
  ``lib/kv-router/src/scheduling/config.rs``, 4 in some earlier versions, and none in others; on the
  conversation trace at 2-3 req/s on 8 pods neither 4 nor 16 ever holds a request).
- ``llm_d``: llm-d's endpoint picker (:class:`LlmD`): weighted prefix, KV-use and queue scorers.
- ``cache_aware``: the SGLang gateway's ``cache_aware`` policy (sgl-model-gateway ``policies/cache_aware.rs``):
  when the load is imbalanced (max - min in-flight > ``balance_abs`` and max > ``balance_rel`` x min) the least
  loaded instance; else the instance whose approximate tree (fed by the router's own decisions) matches more
  than ``cache_threshold`` of the prompt, or the instance with the smallest tree.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from ..util.names import ROUTERS


class RouterError(ValueError):
    """Unknown router or bad router parameter."""


class RouterState:
    """A router's own view of its candidates: requests in flight and assigned, prompt tokens still before their
    first token, and the prompt blocks of the requests in flight (each block once: unique active blocks).

    Prefill load as Dynamo's active-sequence tracker keeps it (ai-dynamo/dynamo
    ``lib/kv-router/src/sequences/prefill_tracker.rs`` at 0b6b9200, ``PrefillLoadTracker``): each request in
    flight adds its *effective* prefill tokens (prompt - cached, the router's weighted overlap credit); the
    oldest one (the anchor) decays linearly over its expected prefill time when the router has a prefill model,
    the elapsed time applied to the whole backlog (``active_tokens_at``); when the anchor's first token is seen
    the next oldest becomes the anchor, from then. ``now``: the clock of the decision being made (s)."""

    def __init__(self, n: int):
        self.in_flight = [0] * n
        self.assigned = [0] * n
        self.prefill_tokens = [0.0] * n          # the full (undecayed) sum of effective prefill tokens
        self.active: list[dict] = [{} for _ in range(n)]
        self.prefills: list[dict] = [{} for _ in range(n)]      # request -> (tokens, expected s), oldest first
        self.anchor = [0.0] * n                  # when the oldest prefill became the anchor (s)
        self.now = 0.0
        self.up = list(range(n))                 # candidates in routing (a failed instance's are removed)

    def remove(self, c: int) -> None:
        """Candidate ``c`` failed: routers stop choosing it (SGLang's router drops a worker that fails its
        health checks; Dynamo drops one whose lease lapsed)."""
        if c in self.up:
            self.up.remove(c)

    def add(self, c: int, keys, n_in: int, new: float | None = None, rid=None, expected_s: float | None = None
            ) -> None:
        """A request of ``n_in`` prompt tokens routed to ``c``; ``new``: its effective prefill tokens (default
        the whole prompt); ``rid``: its id, for the anchor's decay; ``expected_s``: its expected prefill time."""
        self.in_flight[c] += 1
        self.assigned[c] += 1
        tokens = float(n_in if new is None else new)
        self.prefill_tokens[c] += tokens
        if rid is not None:
            if not self.prefills[c]:
                self.anchor[c] = self.now
            self.prefills[c][rid] = (tokens, expected_s)
        act = self.active[c]
        for k in keys:
            act[k] = act.get(k, 0) + 1

    def first_token(self, c: int, n_in: int, rid=None) -> None:
        pf = self.prefills[c]
        if rid is not None and rid in pf:
            front = next(iter(pf)) == rid
            tokens = pf.pop(rid)[0]
            self.prefill_tokens[c] -= tokens
            if front:
                self.anchor[c] = self.now
            return
        self.prefill_tokens[c] -= n_in

    def prefill_at(self, c: int) -> float:
        """Prefill tokens still before their first token on ``c`` now, the oldest decayed."""
        full = self.prefill_tokens[c]
        pf = self.prefills[c]
        if not pf:
            return full
        tokens, expected = next(iter(pf.values()))
        if expected is None:
            return full
        if expected <= 0:
            return max(0.0, full - tokens)
        return max(0.0, full - tokens * (self.now - self.anchor[c]) / expected)

    def finish(self, c: int, keys) -> None:
        self.in_flight[c] -= 1
        act = self.active[c]
        for k in keys:
            n = act[k] - 1
            if n:
                act[k] = n
            else:
                del act[k]

    def new_blocks(self, c: int, keys) -> int:
        """Blocks of ``keys`` not active on ``c`` (active blocks of a prompt are a prefix of it: a block key
        names its whole prefix)."""
        act, lo, hi = self.active[c], 0, len(keys)
        if not hi or keys[0] not in act:    # nothing of it active (the usual case for most candidates)
            return hi
        while lo < hi:                      # the longest active prefix, by bisection
            mid = (lo + hi + 1) // 2
            if keys[mid - 1] in act:
                lo = mid
            else:
                hi = mid - 1
        return len(keys) - lo


class Router:
    name = ""
    rank_aware = False                       # chooses (instance, rank) pairs, not instances

    def choose(self, state: RouterState, overlap, n_in: int, keys) -> int:
        """Index of the candidate to serve a request of ``n_in`` prompt tokens with block ``keys``;
        ``overlap(c)`` -> (device, host, disk, shared) cached blocks of the prompt on candidate ``c``."""
        raise NotImplementedError

    def waits(self, state: RouterState) -> bool:
        """Whether a new request must wait in the router's queue."""
        return False

    def admit(self, state: RouterState, c: int, keys, n_in: int, rid=None) -> None:
        """Book a request the router just sent to candidate ``c`` (after :meth:`choose`)."""
        state.add(c, keys, n_in, rid=rid)


class RoundRobin(Router):
    name = "round_robin"

    def __init__(self):
        self.k = 0

    def choose(self, state, overlap, n_in, keys):
        c = state.up[self.k % len(state.up)]
        self.k += 1
        return c


def least_loaded(state: RouterState) -> int:
    return min(state.up,
               key=lambda c: (state.in_flight[c], len(state.active[c]), state.assigned[c], c))


class Random(Router):
    """A uniformly random candidate (seeded): the cache-blind baseline of llm-d's and Dynamo's benchmarks."""
    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def choose(self, state, overlap, n_in, keys):
        return state.up[int(self.rng.integers(len(state.up)))]


class LeastLoad(Router):
    name = "least_load"

    def choose(self, state, overlap, n_in, keys):
        return least_loaded(state)


class PrefixAffinity(Router):
    name = "prefix_affinity"

    def __init__(self, affinity_blocks: int = 4):
        if int(affinity_blocks) != affinity_blocks or affinity_blocks < 1:
            raise RouterError(f"affinity_blocks must be a positive integer, got {affinity_blocks!r}")
        self.k = int(affinity_blocks)

    def choose(self, state, overlap, n_in, keys):
        if not len(keys):
            return least_loaded(state)
        h = hash(tuple(int(b) for b in keys[:self.k]))        # int tuples hash the same in every run
        return state.up[(h * 0x9E3779B97F4A7C15 >> 17) % len(state.up)]


class KvRouter(Router):
    name = "kv"
    rank_aware = True

    def __init__(self, weight: float = 1.0, temperature: float = 0.0, seed: int = 0, block_tokens: int = 512,
                 host_weight: float = 0.75, disk_weight: float = 0.25, shared_weight: float = 0.0,
                 queue_threshold: float | None = None, batched_tokens: int = 16384,
                 prefill_tokens_per_s: float | None = None):
        if prefill_tokens_per_s is not None and (isinstance(prefill_tokens_per_s, bool) or not (
                isinstance(prefill_tokens_per_s, (int, float)) and 0 < prefill_tokens_per_s < math.inf)):
            raise RouterError(f"kv router prefill_tokens_per_s must be a positive number, got {prefill_tokens_per_s!r}")
        for n, v in (("weight", weight), ("temperature", temperature), ("host_weight", host_weight),
                     ("disk_weight", disk_weight), ("shared_weight", shared_weight)):
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise RouterError(f"kv router {n} must be a non-negative number, got {v!r}")
        if queue_threshold is not None and not (isinstance(queue_threshold, (int, float)) and queue_threshold > 0):
            raise RouterError(f"kv router queue_threshold must be a positive number, got {queue_threshold!r}")
        self.w, self.temp, self.bt = float(weight), float(temperature), block_tokens
        self.tier_w = (1.0, float(host_weight), float(disk_weight), float(shared_weight))
        self.queue = None if queue_threshold is None else float(queue_threshold) * batched_tokens
        self.rng = np.random.default_rng(seed)
        self.rate = None if prefill_tokens_per_s is None else float(prefill_tokens_per_s)
        self.credit: list[float] = []

    def costs(self, state: RouterState, overlap, n_in: int, keys) -> list[float]:
        """Dynamo's cost per candidate (blocks): ``weight`` x max(0, (active prefill + prompt) / block - overlap
        credit) + active blocks + new blocks; the active prefill counts the effective tokens of the requests in
        flight, the oldest decayed (:class:`RouterState`)."""
        bt, w = self.bt, self.w
        t0, t1, t2, t3 = self.tier_w
        out, self.credit = [], []
        active, prefill_at, new_blocks = state.active, state.prefill_at, state.new_blocks
        for c in range(len(state.in_flight)):
            o0, o1, o2, o3 = overlap(c)
            credit = sum((o0 * t0, o1 * t1, o2 * t2, o3 * t3))
            self.credit.append(credit)
            prefill = max(0.0, (prefill_at(c) + n_in) / bt - credit)
            out.append(w * prefill + len(active[c]) + new_blocks(c, keys))
        return out

    def admit(self, state, c, keys, n_in, rid=None):
        """The request's effective prefill tokens: prompt - the weighted overlap credit on ``c`` (Dynamo's
        ``effective_prefill_tokens(isl, weighted_cached_tokens)``, ``lib/kv-router/src/scheduling/
        prefill_load.rs``), expected to take tokens / ``prefill_tokens_per_s`` (Dynamo's linear prefill load
        model; without one, as by default, nothing decays)."""
        credit = self.credit[c] if c < len(self.credit) else 0.0
        new = max(0.0, n_in - credit * self.bt)
        state.add(c, keys, n_in, new=new, rid=rid, expected_s=None if self.rate is None else new / self.rate)
        self.credit = []

    def choose(self, state, overlap, n_in, keys):
        up = state.up
        if self.temp == 0 or len(up) == 1:
            return self._cheapest(state, overlap, n_in, keys)
        cost = self.costs(state, overlap, n_in, keys)
        c = cost if len(up) == len(cost) else [cost[i] for i in up]
        lo = min(c)
        c = np.array(c)
        span = c.max() - lo
        p = np.ones(len(c)) if span == 0 else np.exp(-(c - lo) / (span * self.temp))
        return up[int(self.rng.choice(len(c), p=p / p.sum()))]

    def _cheapest(self, state, overlap, n_in, keys) -> int:
        """The candidate of least :meth:`costs` (ties broken by the seeded generator), without scoring the
        candidates that cannot be it: each candidate's cost with the most overlap credit a prompt of
        ``len(keys)`` blocks can have (every block on the device or the best tier, and in the shared tier) is a
        lower bound of its cost, in floating point too (the same operations on a larger subtrahend), so the
        candidates are scored in the order of that bound until it exceeds the least cost found. With 18
        instances of 8 ranks most candidates are ruled out so and their cache is not looked at."""
        bt, w = self.bt, self.w
        t0, t1, t2, t3 = self.tier_w
        up, active, prefill_at, new_blocks = state.up, state.active, state.prefill_at, state.new_blocks
        most = len(keys) * (max(t0, t1, t2) + t3) * (1 + 1e-12) + 1e-9     # above any credit, rounding included
        bound = []
        for j, c in enumerate(up):
            x = (prefill_at(c) + n_in) / bt
            la, nb = len(active[c]), new_blocks(c, keys)
            bound.append((w * max(0.0, x - most) + la + nb, j, x, la, nb))
        bound.sort()
        self.credit = credit = [0.0] * len(state.in_flight)
        exact: dict = {}
        lo = math.inf
        for lb, j, x, la, nb in bound:
            if lb > lo:
                break
            c = up[j]
            o0, o1, o2, o3 = overlap(c)
            credit[c] = cr = sum((o0 * t0, o1 * t1, o2 * t2, o3 * t3))
            cost = exact[j] = w * max(0.0, x - cr) + la + nb
            if cost < lo:
                lo = cost
        ties = [j for j in sorted(exact) if exact[j] == lo]
        return up[ties[0] if len(ties) == 1 else ties[int(self.rng.integers(len(ties)))]]

    def waits(self, state):
        return self.queue is not None and bool(state.up) and min(state.prefill_at(c) for c in state.up) > self.queue


class CacheAware(Router):
    """The SGLang gateway's approximate tree: for each block key the instances that were sent it, with the
    time they were last sent it (its LRU)."""
    name = "cache_aware"

    def __init__(self, cache_threshold: float = 0.3, balance_abs: int = 64, balance_rel: float = 1.5,
                 max_tree_tokens: float = 2 ** 26 / 4, block_tokens: int = 512):
        for n, v in (("cache_threshold", cache_threshold), ("balance_abs", balance_abs),
                     ("balance_rel", balance_rel), ("max_tree_tokens", max_tree_tokens)):
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and v >= 0):
                raise RouterError(f"cache_aware router {n} must be a non-negative number, got {v!r}")
        self.threshold, self.abs, self.rel = float(cache_threshold), balance_abs, float(balance_rel)
        self.max_blocks = max(1, int(max_tree_tokens // block_tokens))
        self.trees: list[OrderedDict] = []          # per instance: block key -> None, least recently sent first

    def choose(self, state, overlap, n_in, keys):
        n = len(state.in_flight)
        if not self.trees:
            self.trees = [OrderedDict() for _ in range(n)]
        up = state.up
        load = [state.in_flight[i] for i in up]
        hi, lo = max(load), min(load)
        if hi - lo > self.abs and hi > self.rel * lo:
            c = least_loaded(state)
        else:
            match = {i: self._match(self.trees[i], keys) for i in up}
            best = max(up, key=lambda i: (match[i], -i))
            if keys and match[best] / len(keys) > self.threshold:
                c = best
            else:
                c = min(up, key=lambda i: (len(self.trees[i]), i))
        self._insert(self.trees[c], keys)
        return c

    @staticmethod
    def _match(tree: OrderedDict, keys) -> int:
        n = 0
        for k in keys:
            if k not in tree:
                break
            n += 1
        return n

    def _insert(self, tree: OrderedDict, keys) -> None:
        for k in keys:
            tree[k] = None
            tree.move_to_end(k)
        while len(tree) > self.max_blocks:            # the gateway's periodic LRU pass, done at once
            tree.popitem(last=False)


class LlmD(Router):
    """llm-d's inference scheduler (Gateway API Inference Extension endpoint picker): a weighted sum of scorer
    values in [0, 1], the highest wins (ties at random, seeded). ``prefix``: 'precise' (the pod's longest cached
    prefix from its KV events, min-max normalised over the pods that hold any of it: :meth:`_precise`), 'estimated' (the share found in an LRU of blocks the
    scheduler itself routed there, at most ``lru_tokens`` per pod, looking at the first ``match_tokens`` of the
    prompt) or 'none'; kv-cache score = 1 - the pod's KV use; queue score = (longest - this pod's waiting queue)
    / (longest - shortest), 1 when all are equal. Defaults: the precise configuration of llm-d's benchmark
    (weights prefix 3, kv 2, queue 2); its 'estimated' one weighs all three 1, its 'load' one has no prefix."""
    name = "llm_d"

    def __init__(self, prefix: str = "precise", prefix_weight: float = 3.0, kv_weight: float = 2.0,
                 queue_weight: float = 2.0, lru_tokens: float = 31250 * 16, match_tokens: int = 256 * 16,
                 seed: int = 0, block_tokens: int = 512):
        if prefix not in ("precise", "estimated", "none"):
            raise RouterError(f"llm_d router prefix must be precise, estimated or none, got {prefix!r}")
        for n, v in (("prefix_weight", prefix_weight), ("kv_weight", kv_weight), ("queue_weight", queue_weight)):
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise RouterError(f"llm_d router {n} must be a non-negative number, got {v!r}")
        self.mode, self.w = prefix, (float(prefix_weight), float(kv_weight), float(queue_weight))
        self.lru_blocks = max(1, int(lru_tokens // block_tokens))
        self.match_blocks = max(1, int(match_tokens // block_tokens))
        self.rng = np.random.default_rng(seed)
        self.metrics = None                   # candidate -> (waiting requests, KV use in [0, 1]); the co-simulation
        self.trees: list[OrderedDict] = []

    def choose(self, state, overlap, n_in, keys):
        n = len(state.in_flight)
        m = [self.metrics(c) if self.metrics else (state.in_flight[c], 0.0) for c in range(n)]
        up = state.up
        q = [m[c][0] for c in up]
        qmax, qmin = max(q), min(q)
        q = [x[0] for x in m]
        pre = self._precise(overlap, keys, n, up) if self.w[0] and self.mode == "precise" and keys else None
        score = [-math.inf] * n
        for c in up:
            if pre is None:
                pre_c = self._prefix(c, overlap, keys, n) if self.w[0] else 0.0
            else:
                pre_c = pre[c]
            qs = 1.0 if qmax == qmin else (qmax - q[c]) / (qmax - qmin)
            score[c] = self.w[0] * pre_c + self.w[1] * (1.0 - m[c][1]) + self.w[2] * qs
        hi = max(score)
        ties = [c for c, x in enumerate(score) if x == hi]
        c = ties[0] if len(ties) == 1 else ties[int(self.rng.integers(len(ties)))]
        if self.mode == "estimated":
            if not self.trees:                # (a prefix weight of 0 never asked _prefix to make them)
                self.trees = [OrderedDict() for _ in range(n)]
            tree = self.trees[c]
            for k in keys[:self.match_blocks]:
                tree[k] = None
                tree.move_to_end(k)
            while len(tree) > self.lru_blocks:
                tree.popitem(last=False)
        return c

    @staticmethod
    def _precise(overlap, keys, n: int, up=None) -> list[float]:
        """The precise-prefix scorer: each pod's longest cached prefix (blocks), min-max normalised over the pods
        that hold at least its first block; a pod holding none scores 0, and when every such pod matches
        equally they all score 1 (llm-d-inference-scheduler ``pkg/plugins/scorer/precise_prefix_cache.go``
        ``Score`` and ``utils.go`` ``indexedScoresToNormalizedScoredPods`` at 17abea8a / 2202f3ca)."""
        hits = {c: m for c in (range(n) if up is None else up) if (m := overlap(c)[0]) > 0}
        if not hits:
            return [0.0] * n
        lo, hi = min(hits.values()), max(hits.values())
        return [0.0 if c not in hits else 1.0 if hi == lo else (hits[c] - lo) / (hi - lo) for c in range(n)]

    def _prefix(self, c: int, overlap, keys, n: int) -> float:
        if not keys or self.mode == "none":
            return 0.0
        if self.mode == "precise":
            return overlap(c)[0] / len(keys)
        if not self.trees:
            self.trees = [OrderedDict() for _ in range(n)]
        head = keys[:self.match_blocks]
        return CacheAware._match(self.trees[c], head) / len(head)


def make_router(name: str, *, block_tokens: int = 512, **params) -> Router:
    """A router by name; ``params`` as each router's docstring lists them."""
    allowed = {"round_robin": (), "random": ("seed",), "least_load": (), "prefix_affinity": ("affinity_blocks",),
               "kv": ("weight", "temperature", "seed", "host_weight", "disk_weight", "shared_weight",
                      "queue_threshold", "batched_tokens", "prefill_tokens_per_s"),
               "cache_aware": ("cache_threshold", "balance_abs", "balance_rel", "max_tree_tokens"),
               "llm_d": ("prefix", "prefix_weight", "kv_weight", "queue_weight", "lru_tokens", "match_tokens", "seed")}
    if not isinstance(name, str) or name not in allowed:
        raise RouterError(f"unknown router {str(name)[:40]!r}; known: {', '.join(ROUTERS)}")
    extra = set(params) - set(allowed[name])
    if extra:
        raise RouterError(f"router {name!r} takes no parameter(s) {', '.join(sorted(extra))}")
    if name == "round_robin":
        return RoundRobin()
    if name == "least_load":
        return LeastLoad()
    if name == "random":
        return Random(**params)
    if name == "prefix_affinity":
        return PrefixAffinity(**params)
    if name == "cache_aware":
        return CacheAware(block_tokens=block_tokens, **params)
    if name == "llm_d":
        return LlmD(block_tokens=block_tokens, **params)
    return KvRouter(block_tokens=block_tokens, **params)
