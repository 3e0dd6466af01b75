"""The server's front end: SGLang's TokenizerManager, one event loop that takes requests in and streams outputs.

The loop runs in turns. A turn runs every request that is waiting to be taken in (HTTP body, JSON and
tokenisation: ``t_token`` per prompt token, blocking the loop; each goes to the scheduler as soon as it is
tokenised) and hands on at most one output message. The schedulers send one message per rank per iteration
(the tokens that rank produced), the detokeniser forwards them in order, and the loop's ``handle_loop``
receives one per turn (``await recv_pyobj()`` on a zmq socket). So while requests keep coming in, outputs are
handed on at one message per turn and the rest queue: a first token computed while the front end takes in a
wave is seen near the end of the wave, and the last tokens of a finishing wave come out one message per
intake, so a closed-loop client sends the next wave at the front end's intake pace. When nothing is waiting
to be taken in, the queued messages are handed on at once (streaming a message costs well under a
millisecond, against tens of milliseconds to tokenise a long prompt).
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Callable


class FrontEnd:
    """The front end's event loop as a queue of intakes and a FIFO of output messages (times in s)."""

    tokq: tuple = ()                    # requests past the loop waiting for a tokenizer thread (vLLM's)
    PRICES_REQUESTS = False             # a message's request outputs do not change its time (``produce``)

    def __init__(self):
        self.free = 0.0                 # when the loop has finished its current turn
        self.intake: list[tuple[float, int, float]] = []     # (arrival, request, work), by arrival
        self.msgs: deque[list] = deque()                     # [produced, messages, payload], in order produced
        self.payloads = 0               # blocks in msgs that carry first or last tokens

    def arrive(self, t: float, i: int, work: float) -> None:
        """Request ``i`` reaches the front end at ``t`` and needs ``work`` s of the loop to be taken in."""
        bisect.insort(self.intake, (t, i, work))

    def produce(self, t: float, count: int, payload: list | None = None, requests: int = 0,
                since: float | None = None) -> None:
        """``count`` output messages were produced by ``t``; ``payload`` (first or last tokens) rides on the
        last of them and is delivered with it. ``requests`` (request outputs in them) and ``since`` (when the
        first was produced) price vLLM's output handler; SGLang's loop hands a message on in one turn."""
        if count <= 0:
            return
        msgs = self.msgs
        if payload:
            msgs.append([t, count, payload])
            self.payloads += 1
        elif msgs and not msgs[-1][2]:
            msgs[-1][1] += count               # consecutive plain messages: one block
        else:
            msgs.append([t, count, None])

    def busy(self) -> bool:
        """Whether the loop still has something that can dispatch or deliver a request."""
        return bool(self.intake) or self.payloads > 0

    def next_turn(self) -> float:
        """When the loop's next turn starts (inf if it has nothing queued)."""
        nxt = min(self.intake[0][0] if self.intake else math.inf, self.msgs[0][0] if self.msgs else math.inf)
        return max(self.free, nxt)

    def next_busy_turn(self) -> float:
        """:meth:`next_turn` while the loop can still dispatch or deliver a request (:meth:`busy`), else inf."""
        intake = self.intake
        if intake or self.payloads > 0:         # next_turn(), inlined: it runs every iteration
            msgs = self.msgs
            nxt = intake[0][0] if intake else math.inf
            if msgs and msgs[0][0] < nxt:
                nxt = msgs[0][0]
            return nxt if nxt > self.free else self.free
        return math.inf

    def run(self, until: float, dispatch: Callable[[int, float], None],
            deliver: Callable[[list, float], None]) -> None:
        """Run every turn that starts by ``until``: ``dispatch(i, t)`` when request ``i`` is tokenised and sent
        to the scheduler, ``deliver(payload, t)`` when a message's payload reaches the client. A callback may
        add intakes or messages; they are served by later turns."""
        msgs, intake, inf = self.msgs, self.intake, math.inf
        while intake or msgs:
            s = intake[0][0] if intake else inf           # next_turn(), inlined
            if msgs and msgs[0][0] < s:
                s = msgs[0][0]
            if self.free > s:
                s = self.free
            if s > until:
                return
            if intake and intake[0][0] <= s:
                start = s
                k = bisect.bisect_right(intake, (start, math.inf, math.inf))
                for _, i, work in intake[:k]:
                    s += work
                    dispatch(i, s)
                del intake[:k]             # in place: callbacks may have added later arrivals
                if msgs and msgs[0][0] <= start:        # one message per turn
                    blk = msgs[0]
                    blk[1] -= 1
                    if blk[1] <= 0:
                        msgs.popleft()
                        if blk[2]:
                            self.payloads -= 1
                            deliver(blk[2], s)
                self.free = s
                continue
            # nothing to take in: hand on the queue at once, until a delivery brings a request in
            while msgs and msgs[0][0] <= s:
                blk = msgs.popleft()
                if blk[2]:
                    self.payloads -= 1
                    deliver(blk[2], s)
                    if intake and intake[0][0] <= s:
                        break
            self.free = s
