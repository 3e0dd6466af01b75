"""The router's light load estimate: per-request service times of an instance configuration and the
requests each instance has in flight.

Times come from a few runs of the single-instance engine (public ``run_engine``) on tiny workloads, cached
per configuration: the time to first token of one cold prompt of P tokens, of one cached prompt of L tokens,
and the decode step with b requests in flight. An instance then has ``dp`` admission lanes (its data-parallel
ranks take new requests side by side) and a decode batch; a request's estimated first token is when its lane
is free plus its admission, its estimated end adds (output - 1) steps at the batch it joins. Nothing here
reaches into the engine: the estimates only steer routing and tell the caches when a request's blocks are free.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from sacmodel.serving.engine.workload import Requests
from ..serving.predict import simulate


@dataclass
class ServiceEstimate:
    """Per-request times (s) of one configuration, interpolated from engine runs."""
    cold_x: np.ndarray
    cold_y: np.ndarray
    cached_x: np.ndarray
    cached_y: np.ndarray
    batch_x: np.ndarray
    step_y: np.ndarray
    dp: int

    def first(self, new_tokens: float, cached_tokens: float) -> float:
        """Seconds from reaching the instance to the first token, alone."""
        base = self.cold_y[0]
        t = np.interp(cached_tokens, self.cached_x, self.cached_y) if cached_tokens > 0 else base
        return float(t + max(0.0, np.interp(new_tokens, self.cold_x, self.cold_y) - base))

    def step(self, batch: float) -> float:
        """Seconds of one decode step with ``batch`` requests in flight on the instance."""
        return float(np.interp(batch, self.batch_x, self.step_y))


_ESTIMATES: dict = {}


def estimate(cfg, max_context: float = 131072) -> ServiceEstimate:
    """Engine runs on tiny workloads for ``cfg`` (cached per scenario, system and resources)."""
    key = (cfg.topo.name, id(cfg.topo), cfg.system, cfg.cxl_devices, cfg.rdma_nics, cfg.device_buffer, cfg.dp)
    if key in _ESTIMATES:
        return _ESTIMATES[key]
    kw: dict = {}
    one = lambda L, cached: simulate(  # noqa: E731
        cfg, Requests(np.zeros(1), np.array([L]), np.array([1]), np.array([cached], float)), 1, **kw).ttft_mean_ms / 1e3
    top = max(1024, int(max_context))
    cold_x = np.unique(np.array([1, 1024, 4096, 16384, 65536, top]).clip(1, top))
    cold_y = np.array([one(int(x), 0.0) for x in cold_x])
    cached_x = np.unique(np.array([1024, 8192, 32768, top]).clip(1024, top))
    cached_y = np.array([one(int(x), x - 1.0) for x in cached_x])
    batch_x = np.array([1.0, 8.0, 32.0, 128.0]) * max(1, cfg.dp) / 8
    batch_x = np.maximum.accumulate(np.maximum(batch_x, 1.0))
    steps = []
    for b in batch_x:
        n = int(b)
        r = simulate(cfg, Requests(np.zeros(2 * n), np.full(2 * n, 8192), np.full(2 * n, 33),
                                   np.full(2 * n, 8191.0)), n, **kw)
        steps.append(r.tbt_mean_ms / 1e3)
    est = ServiceEstimate(cold_x.astype(float), cold_y, cached_x.astype(float), cached_y, batch_x,
                          np.maximum.accumulate(np.array(steps)), cfg.dp)
    _ESTIMATES[key] = est
    return est


class InstanceLoad:
    """Requests an instance has in flight, by estimate: admission lanes and the decode batch."""

    def __init__(self, est: ServiceEstimate | None, block_tokens: int):
        self.est = est
        self.bt = block_tokens
        self.lanes = [0.0] * (est.dp if est else 1)
        self.next_lane = 0
        self.active: list[tuple[float, float, int]] = []     # heap of (est. end, blocks held, id)
        self.pending: list[tuple[float, float]] = []         # heap of (est. first token, uncached tokens)
        self.active_blocks = 0.0
        self.pending_tokens = 0.0
        self.assigned = 0

    def advance(self, now: float) -> None:
        while self.active and self.active[0][0] <= now:
            self.active_blocks -= heapq.heappop(self.active)[1]
        while self.pending and self.pending[0][0] <= now:
            self.pending_tokens -= heapq.heappop(self.pending)[1]

    @property
    def in_flight(self) -> int:
        return len(self.active)

    def add(self, now: float, new_tokens: float, cached_tokens: float, output: int, rid: int,
            prefill_only: bool = False, decode_only: bool = False) -> tuple[float, float]:
        """Account one request arriving at ``now``; returns its estimated (first token, end) times."""
        self.assigned += 1
        blocks = math.ceil((new_tokens + cached_tokens + (0 if prefill_only else output)) / self.bt)
        if self.est is None:                  # no timing (hit-rate fast path): requests take no time
            return now, now
        lane = self.next_lane
        self.next_lane = (lane + 1) % len(self.lanes)
        start = max(now, self.lanes[lane])
        first = start + (self.est.first(1.0, new_tokens + cached_tokens) if decode_only
                         else self.est.first(new_tokens, cached_tokens))
        self.lanes[lane] = first
        end = first if prefill_only else first + max(0, output - 1) * self.est.step(len(self.active) + 1)
        if not decode_only and new_tokens > 0:
            heapq.heappush(self.pending, (first, new_tokens))
            self.pending_tokens += new_tokens
        heapq.heappush(self.active, (end, blocks, rid))
        self.active_blocks += blocks
        return first, end
