"""The cluster's links as one fluid network on the shared clock: transfers and pool traffic share them max-min.

Two kinds of users share the resources (NIC ports, CXL adapters and devices, PCIe root complexes; B/s each):

- **transfers** move a number of bytes (a KV handoff, a far cache hit brought home, a write to a shared tier):
  they wait their latency, then stream at their max-min fair rate until done, and a callback runs at the end;
- **streams** are the engines' steady traffic to a shared pool (a decode step's swap-ins from the CXL devices):
  a stream asks for a demand rate (B/s) and gets its max-min fair share of it.

Rates are recomputed whenever a user starts, ends or changes its demand (a fluid model: between events every
rate is constant). Nothing here knows about caches or engines.
"""
from __future__ import annotations

import heapq
import math
from typing import Callable

from ..hardware.topology import water_fill


class Fabric:
    """Resources (name -> B/s) shared max-min by transfers and streams; times in s, sizes in bytes."""

    def __init__(self, capacity: dict[str, float]):
        self.capacity = {k: v for k, v in capacity.items() if math.isfinite(v)}
        self.t = 0.0
        self.pending: list = []                 # heap of (ready time, seq, flow id): transfers in their latency
        self.left: dict[int, float] = {}        # active transfers: bytes still to move
        self.res: dict[int, tuple] = {}         # flow id -> resources it crosses
        self.done_cb: dict[int, Callable[[float], None]] = {}
        self.size: dict[int, float] = {}
        self.demand: dict = {}                  # stream key -> B/s asked
        self.rate: dict = {}                    # flow id or stream key -> B/s granted now
        self.bytes_by: dict[str, float] = {}    # bytes that crossed each resource (transfers)
        self.seq = 0
        self.dirty = False
        self._next = math.inf

    # ---- users -----------------------------------------------------------------------------------------
    def transfer(self, start: float, nbytes: float, latency: float, resources, on_done) -> None:
        """Move ``nbytes`` over ``resources`` from ``start`` (after ``latency``); ``on_done(t)`` at the end."""
        res = tuple(r for r in resources if r in self.capacity)
        for r in res:
            self.bytes_by[r] = self.bytes_by.get(r, 0.0) + nbytes
        self.seq += 1
        fid = self.seq
        self.res[fid], self.done_cb[fid], self.size[fid] = res, on_done, nbytes
        heapq.heappush(self.pending, (start + latency, fid, nbytes))
        self._next = min(self._next, start + latency)

    def stream(self, key, now: float, demand: float, resources) -> float:
        """Set stream ``key``'s demand (B/s) from ``now`` on; returns the rate it gets (B/s)."""
        res = tuple(r for r in resources if r in self.capacity)
        if not res:
            return demand
        key = ("stream", key)                   # apart from the transfers' integer ids
        old = self.demand.get(key, 0.0)
        if demand <= 0:
            if old:
                self._progress(now)
                del self.demand[key]
                self.rate.pop(key, None)
                self.dirty = True
            return demand
        if old and abs(demand - old) <= 0.02 * old and not self.dirty:    # small changes keep the last share
            return min(demand, self.rate.get(key, demand))
        self._progress(now)
        self.demand[key], self.res[key] = demand, res
        self.dirty = True
        self._solve()
        return min(demand, self.rate[key])

    # ---- the clock ---------------------------------------------------------------------------------------
    def next_time(self) -> float:
        """When the next transfer becomes ready or ends (inf: none)."""
        if self.dirty:
            self._solve()
        return self._next

    def advance(self, now: float) -> None:
        """Run every event up to ``now``: ready transfers start, finished ones end (their callbacks run)."""
        while self.next_time() <= now:
            t = self._next
            self._progress(t)
            while self.pending and self.pending[0][0] <= t + 1e-15:
                _, fid, nbytes = heapq.heappop(self.pending)
                if nbytes <= 0 or not self.res[fid]:
                    self._finish(fid, t)
                else:
                    self.left[fid] = nbytes
            size, rate = self.size, self.rate
            # done: (almost) nothing left, or less than a nanosecond of it (the clock's float cannot move less)
            for fid in [f for f, b in self.left.items()
                        if b <= 1e-9 * size[f] + 1e-6 or b <= rate.get(f, 0.0) * 1e-9]:
                del self.left[fid]
                self._finish(fid, t)
            self.dirty = True

    def _finish(self, fid: int, t: float) -> None:
        self.rate.pop(fid, None)
        self.res.pop(fid, None)
        self.size.pop(fid, None)
        self.done_cb.pop(fid)(t)

    def _progress(self, now: float) -> None:
        """Move every active transfer on at its current rate up to ``now``."""
        dt = now - self.t
        if dt > 0:
            rate, left = self.rate, self.left
            for fid in left:
                left[fid] -= rate.get(fid, 0.0) * dt
            self.t = now

    def _solve(self) -> None:
        """Max-min rates of every active user, and the next event."""
        users = list(self.left) + list(self.demand)
        if users:
            caps = [math.inf] * len(self.left) + [self.demand[k] for k in self.demand]
            rates = water_fill([self.res[u] for u in users], caps, self.capacity.__getitem__)
            self.rate = dict(zip(users, rates))
        nxt = self.pending[0][0] if self.pending else math.inf
        for fid, b in self.left.items():
            r = self.rate.get(fid, 0.0)
            nxt = min(nxt, self.t + max(b, 0.0) / r if r > 0 else math.inf)
        self._next = nxt
        self.dirty = False
