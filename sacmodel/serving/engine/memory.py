"""Device KV memory per rank, as the testbed's scheduler accounts it, and the failure it can run into.

Each rank has ``max_total_tokens`` slots. The shared prefix holds its pages from the start; a request takes
its slots (:class:`~sacmodel.serving.engine.workload.RequestTable` ``hold``) when its prefill starts and
gives them back when it ends. A request that does not fit waits in the queue. But HiSparse allocates a long
request's whole device buffer while the admission check only reserved ``reserve`` tokens for it: when the
check passes and the buffer does not fit, the allocation raises and the server stops (the requests not yet
finished fail).
"""
from __future__ import annotations

from dataclasses import dataclass

from .workload import RequestTable


@dataclass
class Crash:
    """The server stopped at ``time`` (s) because rank ``rank`` failed for ``reason``."""
    time: float
    rank: int
    reason: str


class DeviceMemory:
    """Slots in use per rank; ``peak`` is the most any rank held right after an admission."""

    def __init__(self, dp: int, max_total: int, table: RequestTable, prefix_pages: int):
        self.used = [float(prefix_pages)] * dp
        self.max_total = max_total
        self.hold, self.reserve, self.long = table.hold, table.reserve, table.long
        self.crash: Crash | None = None
        self.peak = 0.0

    def take(self, r: int, i: int, now: float) -> bool:
        """Give request ``i`` its slots on rank ``r``; False when they do not fit (it waits, or the server
        crashed: see ``crash``)."""
        used, need = self.used[r], self.hold[i]
        if used + need > self.max_total:
            if self.long[i] and self.max_total - used >= self.reserve[i]:
                self.crash = Crash(now, r, f"device-buffer allocation of {need:.0f} slots failed on rank {r} "
                                           f"({used:.0f} of {self.max_total} slots in use)")
            return False
        self.used[r] += need
        return True

    def free(self, r: int, requests) -> None:
        """The ``requests`` ended on rank ``r``."""
        hold, used = self.hold, self.used[r]
        for i in requests:
            used -= hold[i]
        self.used[r] = used

    def note_peak(self) -> None:
        self.peak = max(self.peak, max(self.used))
