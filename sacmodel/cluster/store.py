"""Mooncake Store as a KV tier: objects (one per block), leases, background eviction above a high watermark,
and writes dropped when the store is full (kvcache-ai/Mooncake ``mooncake-store`` master service at 3b5a5941).

- A **put** allocates its objects at ``PutStart`` (a full store fails it: the write is dropped and the next
  eviction pass is requested) and makes them readable at ``PutEnd``, when the transfer has landed.
- A **read** (``ExistKey`` / ``GetReplicaList``) grants each object it touches a lease of ``lease`` seconds
  (10 s); an object under lease is never evicted. A prefix is read up to its first missing object.
- **Eviction** runs in the background every ``tick`` (10 ms): when the used share is above ``watermark``
  (0.90) or a put failed, it frees max(``evict_ratio``, used - watermark + ``evict_ratio``) of the capacity,
  complete objects with expired leases only, oldest lease first.
- Each object has ``replicas`` copies on the store's segments; with segments on the hosts themselves a reader
  prefers a replica on its own host (``Client::GetPreferredReplica``).
"""
from __future__ import annotations

import math
import random


class MooncakeStore:
    """Objects keyed by block key; capacity in objects (blocks); times in s."""

    def __init__(self, capacity: float, *, watermark: float = 0.90, evict_ratio: float = 0.05, lease: float = 10.0,
                 tick: float = 0.010, segments: list | None = None, replicas: int = 1, seed: int = 0):
        if not capacity >= 1:
            raise ValueError(f"store capacity must be at least one block, got {capacity!r}")
        self.cap, self.hw, self.ratio, self.lease, self.tick = float(capacity), watermark, evict_ratio, lease, tick
        self.lease_until: dict = {}          # complete objects -> lease expiry (s)
        self.where: dict = {}                # object -> hosts holding its replicas (segments on hosts)
        self.processing: set = set()         # allocated at PutStart, not yet PutEnd
        self.segments, self.replicas = segments, max(1, replicas)
        self.rng = random.Random(seed)
        self.next_tick = 0.0
        self.need_eviction = False
        self.evicted = self.dropped = self.passes = 0

    @property
    def used(self) -> int:
        return len(self.lease_until) + len(self.processing)

    # ---- reads ---------------------------------------------------------------------------------------------
    def match_len(self, keys, now: float) -> int:
        """Objects of the longest stored prefix of ``keys``; each gets a lease."""
        self._background(now)
        lease, until = self.lease_until, now + self.lease
        n = 0
        for k in keys:
            if k not in lease:
                break
            lease[k] = until
            n += 1
        return n

    def holders(self, keys) -> dict:
        """Host -> objects of ``keys`` it holds a replica of (segments on hosts; {} for a dedicated store)."""
        out: dict = {}
        if self.segments is None:
            return out
        for k in keys:
            for h in self.where.get(k, ()):
                out[h] = out.get(h, 0) + 1
        return out

    # ---- writes --------------------------------------------------------------------------------------------
    def put_start(self, keys, now: float, writer=None) -> list:
        """Allocate the objects of ``keys`` not stored yet; returns those allocated (a full store drops the
        rest and asks for an eviction pass)."""
        self._background(now)
        out = []
        for k in keys:
            if k in self.lease_until or k in self.processing:
                continue
            if self.used + 1 > self.cap:
                self.dropped += 1
                self.need_eviction = True
                continue
            self.processing.add(k)
            out.append(k)
        if self.segments is not None:
            for k in out:
                self.where[k] = self._place(writer)
        return out

    def put_end(self, keys, now: float) -> None:
        """The objects have landed: readable from now on (their lease starts expired)."""
        for k in keys:
            if k in self.processing:
                self.processing.discard(k)
                self.lease_until[k] = now

    def _place(self, writer) -> tuple:
        """Replica hosts of a new object: random segments (the master's default allocation strategy)."""
        segs = self.segments
        return tuple(self.rng.sample(segs, min(self.replicas, len(segs))))

    # ---- eviction --------------------------------------------------------------------------------------------
    def _background(self, now: float) -> None:
        """The eviction thread's passes due by ``now`` (one pass covers the ticks since the last one)."""
        if now < self.next_tick:
            return
        self.next_tick = now + self.tick
        if self.used > self.hw * self.cap or self.need_eviction:
            self.evict(now)

    def evict(self, now: float) -> int:
        """One eviction pass; returns the objects freed."""
        self.passes += 1
        self.need_eviction = False
        share = max(self.ratio, self.used / self.cap - self.hw + self.ratio)
        target = max(1, math.ceil(share * self.cap - 1e-9))      # (float noise must not add an object)
        lease = self.lease_until
        expired = sorted((t, i, k) for i, (k, t) in enumerate(lease.items()) if t <= now)
        freed = 0
        for _, _, k in expired[:target]:
            del lease[k]
            self.where.pop(k, None)
            freed += 1
        self.evicted += freed
        return freed
