"""The cluster's prefix caches as the serving systems keep them.

- **Private tiers** (``hbm``, ``host``): one radix cache per data-parallel rank when the instance runs DP
  attention (each rank's SGLang scheduler has its own radix cache and KV pool), else one per instance; the
  instance's tier capacity is split over its ranks. Nodes move between the private tiers as in SGLang's
  HiRadixCache (an evicted device block goes to host DRAM).
- **Shared tiers**: one cache for every attached instance: the CXL pool (a prefix written once is read in place
  by every host) and Mooncake Store (:class:`~sacmodel.cluster.store.MooncakeStore`).
- The **home tier** of a system (where it reads a prefix in place and where its running requests' KV lives)
  holds its capacity minus what the running requests hold outside the cache: the tokens they still prefill and
  generate (``outside``).
- A block is a hit only once it exists: private blocks from the end of the prefill chunk that computed them,
  shared ones once their write has landed; a request's blocks are pinned while it runs, its generated tokens
  join the cache when it finishes, named as the conversation's next turn names them (the trace's block ids
  cover prompts only; :func:`~sacmodel.cluster.cosim._continuations`), else as blocks no prompt names.
"""
from __future__ import annotations

import math

from ..hardware.cluster import HOME, ClusterSpec
from .prefix_cache import RadixCache
from .store import MooncakeStore

KIND_ORDER = {"hbm": 0, "host": 1, "cxl": 2, "rdma": 3}
STORE_DEFAULTS = {"watermark": 0.90, "evict_ratio": 0.05, "lease": 10.0}    # Mooncake master at 3b5a5941


class ClusterCaches:
    """Every cache of a replay; ``chains[k]``: instance k's tier names, nearest first."""

    def __init__(self, cl: ClusterSpec, insts, chains: dict, system: str, caps: dict, bt: int, ranks: dict,
                 pools: dict, *, per_rank: bool, hosts_of: dict):
        self.cl, self.system, self.bt, self.chains = cl, system, bt, chains
        self.home_kind = HOME[system]
        self.home_rank = KIND_ORDER[self.home_kind]
        self.ranks = {k: (ranks[k] if per_rank else 1) for k in chains}
        self.private: dict = {}        # (instance, rank scope) -> (RadixCache, tier names)
        self.shared: dict = {}         # tier name -> RadixCache (CXL pool) or MooncakeStore
        self.base: dict = {}           # home cache -> its capacity in blocks before running requests
        self.outside: dict = {}        # home cache -> tokens running requests hold outside it
        for k, chain in chains.items():
            priv = [t for t in chain if not cl.tiers[t].shared]
            n = self.ranks[k]
            for r in range(n):
                if priv:
                    blocks = _inclusive([_blocks(caps[t] / n, bt) for t in priv],
                                        [cl.tiers[t].params.get("inclusive", True) for t in priv])
                    if cl.tiers[priv[0]].kind == "hbm" and pools.get(k):     # the engine's own KV pool per rank
                        blocks[0] = min(blocks[0], _blocks(pools[k], bt))
                    self.private[(k, r)] = (RadixCache(blocks, priv), priv)
            for t in chain:
                ts = cl.tiers[t]
                if ts.shared and t not in self.shared:
                    self.shared[t] = self._shared_cache(ts, caps[t], hosts_of)
        for key, (c, names) in self.private.items():
            if cl.tiers[names[0]].kind == self.home_kind:
                self.base[id(c)] = c.cap[0]
        for t, c in self.shared.items():
            if cl.tiers[t].kind == self.home_kind and isinstance(c, RadixCache):
                self.base[id(c)] = c.cap[0]

    def _shared_cache(self, ts, cap: float, hosts_of: dict):
        if ts.kind == "rdma":
            kw = {"watermark": ts.watermark if ts.watermark is not None else STORE_DEFAULTS["watermark"],
                  "evict_ratio": ts.evict_ratio if ts.evict_ratio is not None else STORE_DEFAULTS["evict_ratio"],
                  "lease": ts.params.get("lease", STORE_DEFAULTS["lease"])}
            # every host of every instance mounts a segment (an instance over several hosts: one per host)
            segs = sorted(set(ts.attached or (h for hs in hosts_of.values() for h in hs))) \
                if ts.params.get("segments") == "hosts" else None
            return MooncakeStore(_blocks(cap / ts.replicas, self.bt), segments=segs, replicas=ts.replicas, **kw)
        return RadixCache([_blocks(cap, self.bt)], [ts.name])

    # ---- where a request's prefix is ---------------------------------------------------------------------
    def scope(self, k: int, r: int) -> tuple:
        return (k, r % self.ranks[k])

    def is_far(self, tier: str) -> bool:
        return KIND_ORDER[self.cl.tiers[tier].kind] > self.home_rank

    def near(self, k: int, r: int, keys, now: float) -> tuple[int, dict]:
        """Blocks of the longest prefix of ``keys`` that rank ``r`` of instance ``k`` reads where it is (tiers at
        or nearer than the home tier), and the blocks found per tier."""
        best, by = 0, {}
        pc = self.private.get(self.scope(k, r))
        if pc is not None:
            c, names = pc
            path = c.match(keys)
            n = 0
            for node in path:
                if self.is_far(names[c.tier[node]]):
                    break
                n += 1
            if n:
                by[names[0]] = n
                best = n
        for t in self.chains[k]:
            if t in self.shared and not self.is_far(t):
                m = self._match_shared(t, keys, now)
                if m > best:
                    by[t] = m - best
                    best = m
        return best, by

    def far(self, k: int, r: int, keys, have: int, now: float) -> list[tuple[str, int]]:
        """(tier, blocks) to bring home before the request is served: a longer prefix than ``have`` blocks in
        a private or shared tier beyond the home tier (nearest first)."""
        out, got = [], have
        pc = self.private.get(self.scope(k, r))
        if pc is not None:
            c, names = pc
            path = c.match(keys)
            if len(path) > got:
                t = names[c.tier[path[-1]]]
                if self.is_far(t):
                    out.append((t, len(path) - got))
                    got = len(path)
        for t in self.chains[k]:
            if t in self.shared and self.is_far(t):
                m = self._match_shared(t, keys, now)
                if m > got:
                    out.append((t, m - got))
                    got = m
        return out

    def _match_shared(self, t: str, keys, now: float) -> int:
        c = self.shared[t]
        return c.match_len(keys, now) if isinstance(c, MooncakeStore) else c.match_len(keys)

    # ---- pins and inserts --------------------------------------------------------------------------------
    def home(self, k: int, r: int):
        """The cache a rank's running requests use as their home tier (None: the home tier is not cached)."""
        pc = self.private.get(self.scope(k, r))
        if pc is not None and self.cl.tiers[pc[1][0]].kind == self.home_kind:
            return pc[0]
        for t in self.chains[k]:
            if t in self.shared and self.cl.tiers[t].kind == self.home_kind:
                c = self.shared[t]
                return c if isinstance(c, RadixCache) else None
        return None

    def shared_in_use(self, k: int, r: int, keys, n: int) -> int:
        """Blocks of the first ``n`` of ``keys`` that running requests already pin in the rank's home cache."""
        c = self.home(k, r)
        if c is None:
            return 0
        return sum(1 for node in c.match(keys[:n]) if c.ref[node] > 0)

    def pin(self, c: RadixCache, keys, n: int) -> list:
        """Pin (and insert) the first ``n`` blocks of ``keys`` in ``c``; returns the pinned path."""
        self._fit(c)
        return c.admit(keys[:n], c.match(keys[:n]))

    def hold(self, c: RadixCache | None, tokens: float) -> None:
        """Running requests hold ``tokens`` more (or fewer) outside cache ``c``: its room shrinks."""
        if c is not None and id(c) in self.base:
            self.outside[id(c)] = self.outside.get(id(c), 0.0) + tokens

    def _fit(self, c: RadixCache) -> None:
        base = self.base.get(id(c))
        if base is not None and math.isfinite(base):
            c.cap[0] = max(1.0, base - math.floor(self.outside.get(id(c), 0.0) / self.bt))

    def promote(self, k: int, r: int, keys, n: int) -> None:
        """Blocks brought home from a far tier join the home cache (unpinned)."""
        c = self.home(k, r)
        if c is not None and n:
            c.release(self.pin(c, keys, n))

    def write_targets(self, k: int) -> list[str]:
        """Shared tiers instance ``k`` writes a prompt's new blocks to (its home pool and the write-through
        tiers of its chain)."""
        return [t for t in self.chains[k] if t in self.shared]

    def land(self, t: str, keys, now: float, allocated=None) -> None:
        """A write to shared tier ``t`` landed: its blocks are readable."""
        c = self.shared[t]
        if isinstance(c, MooncakeStore):
            c.put_end(allocated if allocated is not None else keys, now)
        else:
            self._fit(c)
            c.release(c.admit(keys, c.match(keys)))

    def evicted(self) -> dict:
        out = {t: (c.evicted if isinstance(c, MooncakeStore) else int(c.evicted[0])) for t, c in self.shared.items()}
        for (k, r), (c, names) in self.private.items():
            for j, name in enumerate(names):
                out[name] = out.get(name, 0) + int(c.evicted[j])
        return out


def _inclusive(blocks: list, inclusive: list) -> list:
    """Capacities of a private chain for distinct blocks: an inclusive tier (SGLang HiCache's write-through host
    tier, the default) also holds a copy of the tier before it, so it adds only its surplus."""
    out = list(blocks)
    for j in range(1, len(out)):
        if inclusive[j]:
            out[j] = max(1.0, blocks[j] - blocks[j - 1])
    return out


def _blocks(tokens: float, bt: int) -> float:
    return tokens if math.isinf(tokens) else max(1.0, math.floor(tokens / bt))
