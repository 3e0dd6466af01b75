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
    """The server stopped at ``time`` (s) because rank ``rank`` failed for ``reason`` (in ``resource``)."""
    time: float
    rank: int
    reason: str
    resource: str = "max_total_tokens"


class DeviceMemory:
    """Slots in use per rank; ``peak`` is the most any rank held right after an admission."""

    def __init__(self, dp: int, max_total: int, table: RequestTable, prefix_pages: int):
        self.used = [float(prefix_pages)] * dp
        self.max_total = max_total
        self.hold, self.reserve, self.long = table.hold, table.reserve, table.long
        self.crash: Crash | None = None
        self.peak = 0.0

    def add(self, i: int) -> None:
        """Request ``i`` was appended to the table (its ``hold`` is the table's)."""

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

    def free(self, r: int, requests, running: bool = True) -> None:
        """The ``requests`` ended on rank ``r``."""
        hold, used = self.hold, self.used[r]
        for i in requests:
            used -= hold[i]
        self.used[r] = used

    def note_peak(self) -> None:
        self.peak = max(self.peak, max(self.used))


class SGLangMemory(DeviceMemory):
    """SGLang's own accounting of the device KV pool (every system without HiSparse), per rank.

    A request holds its prompt's slots from admission and one more for every token it generates. Admission
    (``PrefillAdder``) takes a request only if its prompt plus min(output, 4096) tokens fit what is free after
    a reservation for the requests already admitted: their remaining output (at most 4096 each) times the
    rank's ``new_token_ratio`` once they decode, in full before. The ratio starts at its initial value, decays
    by a fixed step per decode step to its minimum, and is reset when a decode step does not fit: then the
    requests with the fewest generated tokens (ties: the longest prompt) are retracted, their slots freed, and
    they wait again to be prefilled over their prompt and what they generated (``retract_decode``).
    """

    CLIP = 4096                       # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
    RETRACT_STEPS = 20                # SGLANG_RETRACT_DECODE_STEPS

    def __init__(self, dp: int, max_total: int, table: RequestTable, prefix_pages: int, page: int,
                 ratio: tuple[float, float, float]):
        super().__init__(dp, max_total, table, prefix_pages)
        self.page, self.prefix_pages = page, prefix_pages
        # a request holds its whole prompt: the new tokens, and a cached prefix locked while it runs (a shared
        # prompt's prefix is held once, in ``prefix_pages``)
        held = table.todo if prefix_pages else table.L
        self.hold_src, self.L, self.out = table.todo, table.L, table.out
        self.slots = [float(-(-t // page) * page) for t in held]
        self.clip = [float(min(o - 1, self.CLIP)) for o in table.out]         # output tokens it may still need
        self.init, self.floor, self.decay = ratio
        self.ratio = [self.init] * dp
        self.pending = [0.0] * dp             # clip of admitted requests not decoding yet
        self.running_clip = [0.0] * dp        # clip of decoding requests
        self.running = self.clock = self.sum_join = None      # the ranks' decode state (bind)

    def add(self, i: int) -> None:
        held = self.hold_src[i] if self.prefix_pages else self.L[i]
        self.slots.append(float(-(-held // self.page) * self.page))
        self.clip.append(float(min(self.out[i] - 1, self.CLIP)))

    def set_held(self, i: int, tokens: float) -> None:
        """Request ``i`` (not admitted yet) will hold ``tokens`` prompt slots (a cluster's prefix cache knows
        how much of its prompt other running requests already hold)."""
        self.slots[i] = float(-(-int(tokens) // self.page) * self.page)

    def bind(self, running: list[int], clock: list[int], sum_join: list[int]) -> None:
        self.running, self.clock, self.sum_join = running, clock, sum_join

    def decoded(self, r: int) -> float:
        """Tokens the decoding requests of rank ``r`` have generated (slots they added since admission)."""
        return float(self.running[r] * self.clock[r] - self.sum_join[r])

    def free_slots(self, r: int) -> float:
        return self.max_total - self.used[r] - self.decoded(r)

    def take(self, r: int, i: int, now: float) -> bool:
        d = self.decoded(r)
        reserve = self.pending[r] + self.ratio[r] * max(0.0, self.running_clip[r] - d)
        if self.slots[i] + self.clip[i] >= self.max_total - self.used[r] - d - reserve:
            return False
        self.used[r] += self.slots[i]
        self.pending[r] += self.clip[i]
        return True

    def joined(self, r: int, requests) -> None:
        for i in requests:
            self.pending[r] -= self.clip[i]
            self.running_clip[r] += self.clip[i]

    def free(self, r: int, requests, running: bool = True) -> None:
        """The ``requests`` ended on rank ``r`` (``running``: they were decoding, else they ended at prefill)."""
        for i in requests:
            self.used[r] -= self.slots[i]
            if running:
                self.running_clip[r] -= self.clip[i]
            else:
                self.pending[r] -= self.clip[i]

    def steps_fit(self, r: int) -> int:
        """Decode steps rank ``r`` can run before its pool is full (``free_slots`` over the batch, inlined: it
        runs for every decoding rank every iteration)."""
        b = self.running[r]
        return int((self.max_total - self.used[r] - float(b * self.clock[r] - self.sum_join[r])) // (b if b > 1 else 1))

    def full(self, ranks: list[int]) -> list[int]:
        """Those of the decoding ``ranks`` whose next decode step does not fit their pool (``steps_fit`` < 1,
        that is, fewer free slots than requests)."""
        running, clock, sum_join, used, top = self.running, self.clock, self.sum_join, self.used, self.max_total
        return [r for r in ranks if top - used[r] - float(running[r] * clock[r] - sum_join[r]) < running[r]]

    def fewest_steps(self, ranks: list[int]) -> int:
        """The fewest decode steps any of the ``ranks`` can run before its pool is full."""
        return min(self.steps_fit(r) for r in ranks)

    def advance(self, ranks: list[int], steps: int) -> None:
        """The ``ranks`` decoded ``steps`` steps without retracting: their ratios decay."""
        ratio, floor, fall = self.ratio, self.floor, self.decay * steps
        for r in ranks:
            x = ratio[r] - fall
            ratio[r] = x if x > floor else floor

    def idle(self, r: int) -> None:
        self.ratio[r] = self.init

    def retracted(self, r: int, i: int, generated: int, prompt: int, remaining: int) -> None:
        """Request ``i`` left rank ``r``'s decode batch after ``generated`` tokens: its slots are freed and it
        will be admitted again over ``prompt`` tokens with ``remaining`` to generate."""
        self.used[r] -= self.slots[i]
        self.running_clip[r] -= self.clip[i]
        self.slots[i] = float(-(-prompt // self.page) * self.page)
        self.clip[i] = float(min(remaining, self.CLIP))

    def reset_ratio(self, r: int, decoded: float, max_new: float, batch: int) -> None:
        """After a retraction: the ratio the survivors' progress suggests (``Scheduler.update_running_batch``)."""
        self.ratio[r] = min(1.0, (decoded + self.RETRACT_STEPS * batch) / (max_new + 1))


class HostPool:
    """A rank's HiSparse host pool (``capacity`` slots per rank), as the coordinator allocates it.

    A request takes its prompt's slots when its prefill is staged (a prefix hit whose prompt has a host-cache
    entry on the rank takes only its own tail; the first such hit of a prompt on a rank holds the entry, kept
    while the run lasts) and, from its second decode step on, one slot per step for the token before; it gives
    them back when it ends. SGLang does not admit by the host pool: an allocation that finds it full raises and
    the server stops (``crash`` on the device memory, which the loop watches). ``peak``: the most any rank held.
    """

    def __init__(self, dp: int, capacity: int, table: RequestTable, memory: DeviceMemory):
        self.capacity, self.table, self.memory = capacity, table, memory
        self.static = [0.0] * dp              # prompt slots of the running and staged requests, and the entries
        self.own = [0.0] * table.n            # prompt slots each request holds
        self.entries: list[set] = [set() for _ in range(dp)]   # prompts with a host-cache entry on each rank
        self.peak = 0.0
        self.running = self.clock = self.sum_join = None       # the ranks' decode state (bind)

    def bind(self, running: list[int], clock: list[int], sum_join: list[int]) -> None:
        self.running, self.clock, self.sum_join = running, clock, sum_join

    def add(self, i: int) -> None:
        self.own.append(0.0)

    # A rank's backed-up decode tokens (the steps its running requests ran since each joined) are
    # running x clock - the sum of their join clocks, computed in place where the pool is checked (a hot path).

    def stage(self, r: int, i: int, now: float) -> bool:
        """Request ``i``'s prefill on rank ``r`` is staged: its prompt's slots; False (and a crash) if full."""
        tb = self.table
        pid = tb.pid[i] if tb.pid is not None else None
        need = float(tb.L[i])
        if pid is not None and tb.hit[i]:
            need = float(tb.todo[i])                              # its own tail; the prefix is in the entry
            entries = self.entries[r]
            if pid not in entries:
                entries.add(pid)
                self.static[r] += tb.L[i] - tb.todo[i]
        used = self.static[r] + float(self.running[r] * self.clock[r] - self.sum_join[r])      # + decoded tokens
        total = used + need
        if total > self.capacity:
            self._crash(now, r, need, used)
            return False
        self.static[r] += need
        self.own[i] = need
        if total > self.peak:
            self.peak = total
        return True

    def fewest_steps(self, ranks: list[int]) -> int:
        """The fewest decode steps any of the ``ranks`` can run before a backup finds its host pool full (it
        runs for every decoding rank before each jump)."""
        static, running, clock, sum_join, cap = self.static, self.running, self.clock, self.sum_join, self.capacity
        fewest = 1 << 30                # a rank without requests backs nothing up
        for r in ranks:
            b = running[r]
            if b:
                free = cap - static[r] - float(b * clock[r] - sum_join[r])
                n = int(free // b) + 1 if free >= 0 else 0
                if n < fewest:
                    fewest = n
        return fewest

    def check(self, ranks: list[int], now: float) -> bool:
        """The decoding ``ranks``' next step backs its tokens up: False (and a crash) where a pool is full."""
        static, running, clock, sum_join, peak = self.static, self.running, self.clock, self.sum_join, self.peak
        cap = self.capacity
        for r in ranks:
            used = static[r] + float(running[r] * clock[r] - sum_join[r])       # + decoded tokens
            if used > cap:
                self.peak = peak
                self._crash(now, r, running[r], used - running[r])
                return False
            if used > peak:
                peak = used
        self.peak = peak
        return True

    def free(self, r: int, requests) -> None:
        own = self.own
        for i in requests:
            self.static[r] -= own[i]
            own[i] = 0.0

    def _crash(self, now: float, r: int, need: float, used: float) -> None:
        tb = self.table
        most = min((tb.L[i] + max(tb.out[i] - 2, 0) for i in range(tb.n)), default=1)
        self.memory.crash = Crash(now, r, f"HiSparse host pool allocation of {need:.0f} tokens failed on rank {r} "
                                          f"({used:.0f} of {self.capacity:,} slots in use; SGLang stops; "
                                          f"{self.capacity // max(most, 1)} requests of {most:,} tokens fit a rank)",
                                  "host_pool")
