"""Tiered prefix caches: a radix tree over block (or page) hashes whose nodes live in one tier each.

A request's prompt is a chain of blocks (Mooncake ``hash_ids`` of 512 tokens, SGLang pages of 64); the cache
is a trie keyed by (parent node, block), so two requests share a node only when they share the whole prefix
up to it. Each node resides in exactly one tier of a chain (e.g. HBM -> host DRAM): the nodes of a nearer tier
form a prefix-closed subtree (a node's tier is never nearer than its parent's), as in SGLang's HiRadixCache.

Eviction is LRU over unreferenced leaves, tier by tier. It needs no search: each tier keeps its unpinned
nodes in an ordered dict from least to most recently used, and a path is touched from its leaf up to the root,
so a child always precedes its parent; the front of a tier's order is therefore always a leaf of that tier.
A leaf evicted from tier t is demoted to tier t + 1 (or dropped from the last tier); a hit in a farther tier
is promoted to tier 0. Nodes on the path of a request in flight are pinned (reference counted) and never
evicted. An optional batch policy (Mooncake Store: above a high watermark, evict a share of the objects)
replaces evicting one leaf at a time.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Sequence


class RadixCache:
    """A trie of blocks over a chain of tiers with capacities in blocks (``math.inf`` = unbounded).

    ``watermark``/``evict_ratio``: batch eviction (when a tier reaches ``watermark`` x capacity, evict
    ``evict_ratio`` of its blocks, least recently used first) instead of one leaf at a time.
    """

    def __init__(self, capacities: Sequence[float], names: Sequence[str] | None = None, *,
                 watermark: float | None = None, evict_ratio: float | None = None):
        if not capacities:
            raise ValueError("a cache needs at least one tier")
        for c in capacities:
            if not c >= 1:
                raise ValueError(f"tier capacities must be at least one block, got {c!r}")
        self.cap = [float(c) for c in capacities]
        self.names = list(names) if names is not None else [f"tier{i}" for i in range(len(capacities))]
        self.watermark, self.evict_ratio = watermark, evict_ratio
        self.trie: dict[tuple[int, int], int] = {}
        # node 0 is the root (no block, never evicted); per-node columns
        self.parent, self.key, self.tier, self.ref = [-1], [None], [-1], [0]
        self.free: list[int] = []
        self.order: list[OrderedDict] = [OrderedDict() for _ in capacities]
        self.used = [0] * len(capacities)
        self.evicted = [0] * len(capacities)    # blocks that left each tier (demoted or dropped)
        self.promoted = 0
        self.pins = 0                            # paths admitted and not yet released
        self.pinned = 0                          # nodes pinned by at least one path (in use by a request)

    # ---- queries ------------------------------------------------------------------------------
    def match(self, blocks) -> list[int]:
        """Nodes of the longest cached prefix of ``blocks`` (root excluded)."""
        path, cur, trie = [], 0, self.trie
        for b in blocks:
            nxt = trie.get((cur, b))
            if nxt is None:
                break
            path.append(nxt)
            cur = nxt
        return path

    def match_len(self, blocks) -> int:
        cur, n, trie = 0, 0, self.trie
        for b in blocks:
            cur = trie.get((cur, b))
            if cur is None:
                break
            n += 1
        return n

    def tier_counts(self, path: list[int]) -> list[int]:
        """Blocks of ``path`` resident in each tier."""
        out = [0] * len(self.cap)
        for n in path:
            out[self.tier[n]] += 1
        return out

    def __len__(self) -> int:
        return sum(self.used)

    # ---- updates ------------------------------------------------------------------------------
    def admit(self, blocks, path: list[int] | None = None) -> list[int]:
        """Pin the cached prefix of ``blocks``, promote it to tier 0 and insert the rest into tier 0.

        Returns the pinned path; it is shorter than ``blocks`` when every block of the nearest tier with
        room is pinned by requests in flight. Release it with :meth:`release`.
        """
        if path is None:
            path = self.match(blocks)
        self.pins += 1
        if len(self.cap) == 1 and self.watermark is None:
            return self._admit_one_tier(blocks, path)
        for n in path:
            self._pin(n)
        for n in path:                       # promotion on hit (nearest tier first, root side first)
            t = self.tier[n]
            if t > 0:
                self.used[t] -= 1            # vacate first: the block it displaces may take its place
                if not self._room(0):
                    self.used[t] += 1
                    break
                self.used[0] += 1
                self.tier[n] = 0
                self.promoted += 1
        cur = path[-1] if path else 0
        for b in blocks[len(path):]:
            if not self._room(0):
                break
            cur = self._new(cur, b)
            path.append(cur)
        return path

    def release(self, path: list[int]) -> None:
        """Unpin a path returned by :meth:`admit`; it becomes the most recently used (leaf first)."""
        order, tier, ref = self.order, self.tier, self.ref
        self.pins -= 1
        for n in reversed(path):
            ref[n] -= 1
            if ref[n] == 0:
                order[tier[n]][n] = None
                self.pinned -= 1

    def touch(self, blocks) -> int:
        """Admit and release at once (a request that takes no time); returns the cached blocks it found."""
        if len(self.cap) > 1 or self.watermark is not None or self.pins:
            path = self.match(blocks)
            hit = len(path)
            self.release(self.admit(blocks, path))
            return hit
        # the same for one tier with nothing pinned, inlined (the hit-rate fast path runs this per request)
        trie, order, key, free, parent, tier = self.trie, self.order[0], self.key, self.free, self.parent, self.tier
        path, cur = [], 0
        for b in blocks:
            nxt = trie.get((cur, b))
            if nxt is None:
                break
            path.append(nxt)
            cur = nxt
        hit = len(path)
        for n in path:                       # out of the eviction order while the new blocks go in
            del order[n]
        cap, used, new = self.cap[0], self.used[0], []
        for b in blocks[hit:int(min(len(blocks), cap))]:
            if used >= cap:
                v = order.popitem(last=False)[0]
                del trie[key[v]]
                key[v] = None
                tier[v] = -1
                free.append(v)
                used -= 1
                self.evicted[0] += 1
            k = (cur, b)
            if free:
                n = free.pop()
                parent[n], key[n], tier[n] = cur, k, 0
            else:
                n = len(parent)
                parent.append(cur)
                key.append(k)
                tier.append(0)
                self.ref.append(0)
            trie[k] = n
            used += 1
            new.append(n)
            cur = n
        self.used[0] = used
        for n in reversed(new):
            order[n] = None
        for n in reversed(path):
            order[n] = None
        return hit

    # ---- internals ----------------------------------------------------------------------------
    def _admit_one_tier(self, blocks, path: list[int]) -> list[int]:
        """:meth:`admit` for one tier evicting leaf by leaf, inlined (replays run it for every request)."""
        trie, order, key, free, parent, tier, ref = (self.trie, self.order[0], self.key, self.free, self.parent,
                                                     self.tier, self.ref)
        for n in path:
            if ref[n] == 0:
                del order[n]
                self.pinned += 1
            ref[n] += 1
        cap, used = self.cap[0], self.used[0]
        cur = path[-1] if path else 0
        for b in blocks[len(path):]:
            while used >= cap and order:       # down to the capacity (it shrinks while requests run)
                v = order.popitem(last=False)[0]
                del trie[key[v]]
                key[v] = None
                tier[v] = -1
                free.append(v)
                used -= 1
                self.evicted[0] += 1
            if used >= cap:
                break
            k = (cur, b)
            if free:
                n = free.pop()
                parent[n], key[n], tier[n], ref[n] = cur, k, 0, 1
            else:
                n = len(parent)
                parent.append(cur)
                key.append(k)
                tier.append(0)
                ref.append(1)
            trie[k] = n
            used += 1
            path.append(n)
            cur = n
            self.pinned += 1
        self.used[0] = used
        return path

    def _pin(self, n: int) -> None:
        if self.ref[n] == 0:
            del self.order[self.tier[n]][n]
            self.pinned += 1
        self.ref[n] += 1

    def _new(self, parent: int, block) -> int:
        if self.free:
            n = self.free.pop()
            self.parent[n], self.key[n], self.tier[n], self.ref[n] = parent, (parent, block), 0, 1
        else:
            n = len(self.parent)
            self.parent.append(parent)
            self.key.append((parent, block))
            self.tier.append(0)
            self.ref.append(1)
        self.trie[(parent, block)] = n
        self.used[0] += 1
        self.pinned += 1
        return n

    def _room(self, t: int) -> bool:
        """Make room for one more block in tier ``t``; False if every resident block is pinned."""
        cap = self.cap[t]
        if self.watermark is not None:
            if self.used[t] + 1 > self.watermark * cap:
                for _ in range(max(1, math.ceil(self.evict_ratio * self.used[t]))):
                    if not self.order[t]:
                        break
                    self._evict(t)
            return self.used[t] + 1 <= cap
        if self.used[t] + 1 <= cap:
            return True
        while self.used[t] + 1 > cap:
            if not self.order[t]:
                return False
            self._evict(t)
        return True

    def _evict(self, t: int) -> None:
        """Demote the least recently used leaf of tier ``t`` to tier t + 1, or drop it from the last tier."""
        n = self.order[t].popitem(last=False)[0]
        self.evicted[t] += 1
        if t + 1 < len(self.cap) and self._room(t + 1):
            self.used[t] -= 1
            self.used[t + 1] += 1
            self.tier[n] = t + 1
            self.order[t + 1][n] = None
            return
        self.used[t] -= 1
        del self.trie[self.key[n]]
        self.key[n] = None
        self.tier[n] = -1
        self.free.append(n)

    def check(self) -> None:
        """Verify the invariants (for tests): prefix-closed tiers, counts, no node evicted while pinned."""
        live = [n for n in range(1, len(self.parent)) if self.key[n] is not None]
        assert len(live) == sum(self.used) == len(self.trie)
        for n in live:
            p = self.parent[n]
            assert p == 0 or (self.key[p] is not None and self.tier[p] <= self.tier[n])
            assert self.ref[n] >= 0 and ((self.ref[n] == 0) == (n in self.order[self.tier[n]]))
        assert self.pinned == sum(1 for n in live if self.ref[n] > 0)
        for t in range(len(self.cap)):
            assert self.used[t] == sum(1 for n in live if self.tier[n] == t)


def page_keys(blocks, input_len: int, trace_block: int, block_tokens: int) -> list:
    """Cache keys of one request at ``block_tokens`` granularity from its trace blocks of ``trace_block`` tokens.

    Finer pages split each block (page j of block b is ``b * k + j``, k pages per block); coarser pages group
    blocks and are named by their last block, which identifies the whole prefix (Mooncake hashes are chained).
    """
    if block_tokens == trace_block:
        return blocks.tolist() if hasattr(blocks, "tolist") else list(blocks)
    n_pages = -(-int(input_len) // block_tokens)
    if block_tokens < trace_block:
        k = trace_block // block_tokens
        return [int(b) * k + j for b in blocks for j in range(k)][:n_pages]
    m = block_tokens // trace_block
    return [int(blocks[min((g + 1) * m, len(blocks)) - 1]) for g in range(-(-len(blocks) // m))]


def chain(keys) -> list[int]:
    """Keys that name their whole prefix: the j-th is a hash of the (j-1)-th and block j (a block's id alone may
    recur after another prefix; routers compare sets of these keys across instances)."""
    out, h = [], 0
    for k in keys:
        h = hash((h, int(k)))
        out.append(h)
    return out


def check_block_tokens(block_tokens, trace_block: int) -> int:
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1 or (
            trace_block % block_tokens and block_tokens % trace_block):
        raise ValueError(f"block_tokens must divide or be a multiple of the trace's {trace_block}-token blocks, "
                         f"got {block_tokens!r}")
    return block_tokens
