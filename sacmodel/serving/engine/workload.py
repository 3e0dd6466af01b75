"""The engine's input: the requests of a workload, and the per-request numbers the scheduler reads."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import Config


@dataclass
class Requests:
    """A workload as per-request arrays: arrival (s), prompt tokens, output tokens, cached-prefix tokens.

    ``prefix_pages``: device tokens that the cached prefix holds on every rank (the benchmark's shared prompt,
    prefilled once per rank in its first round); 0 when cached prefixes are evictable. ``cold_staging``: no
    host-pool entry is found yet for the prompts' page-aligned prefixes (as in the benchmark's second round),
    so each rank's first prefix hit of each prompt is staged cold. ``lead``: how many of the first requests are
    the users' first requests, each sent at its own ``arrival`` (a staggered start) while the rest of a closed
    loop go as slots free; 0: every request goes at its arrival as the cap lets it (all at once, or Poisson).
    """
    arrival: np.ndarray
    context: np.ndarray
    output: np.ndarray
    cached: np.ndarray
    prefix_pages: int = 0
    prompt: np.ndarray | None = None      # prompt id per request (same id = same prompt); None: all distinct
    cold_staging: bool = False            # no host-pool entry under the prompts' prefix keys yet
    tail: np.ndarray | None = None        # a prefix hit's uncached tokens per request; None: from the lengths
    delay: np.ndarray | None = None       # each request's delay from the client to the server (s); None: 0
    lead: int = 0                         # users' first requests with their own start times (staggered start)

    def __post_init__(self):
        self.arrival = np.asarray(self.arrival, dtype=float)
        self.context = np.asarray(self.context, dtype=np.int64)
        self.output = np.asarray(self.output, dtype=np.int64)
        self.cached = np.asarray(self.cached, dtype=np.int64)
        if self.prompt is not None:
            self.prompt = np.asarray(self.prompt, dtype=np.int64)
        if self.tail is not None:
            self.tail = np.asarray(self.tail, dtype=np.int64)
        if self.delay is not None:
            self.delay = np.asarray(self.delay, dtype=float)

    def __len__(self) -> int:
        return len(self.arrival)


def prompt_todo(L: int, cached: int, page: int, tail: int | None = None) -> int:
    """Prompt tokens a request of ``L`` tokens prefills: all of them, or after a prefix hit of ``cached`` tokens
    what the page-aligned match leaves (``tail``, if given): :class:`RequestTable`'s rule for one request."""
    if cached > 0:
        return L - (min(int(cached), L - 1) // page) * page if tail is None else min(int(tail), L)
    return L


class RequestTable:
    """What the scheduler knows of each request, as Python lists (quicker than numpy items in the loop).

    ``todo``: tokens to prefill (a prefix hit is matched page-aligned, leaving 1..page tokens: the requests'
    ``tail`` if given, else what their exact lengths leave); ``hold``:
    device slots the request takes from the start of its prefill to its end (a HiSparse request longer than
    the device buffer holds the buffer allocation, others their pages); ``reserve``: what the testbed's
    admission check reserves (a page plus the output, at most 4096 tokens); ``life``: decode steps (the
    prefill gives the first token); ``shape``: (prompt tokens, decode steps), the key of a miss curve.
    """

    def __init__(self, cfg: Config, reqs: Requests):
        page = cfg.page
        self.page = page
        self._long_above = cfg.device_buffer if cfg.hisparse else math.inf     # HiSparse: longer holds the buffer
        self._alloc = float(cfg.buffer_alloc)
        ctx, cached, outs = reqs.context, reqs.cached, reqs.output
        self.n = len(reqs)
        self.L = ctx.tolist()
        self.out = outs.tolist()
        self.arrival = reqs.arrival.tolist()
        self.max_out = max(self.out) if self.out else 1
        exact = ctx - (np.minimum(cached, ctx - 1) // page) * page
        tail = exact if reqs.tail is None else np.minimum(reqs.tail, ctx)
        todo = np.where(cached > 0, tail, ctx)
        self.todo = todo.tolist()
        self.hit = (cached > 0).tolist()
        long_ = (ctx > cfg.device_buffer) & bool(cfg.hisparse)
        self.long = long_.tolist()
        self.hold = np.where(long_, float(cfg.buffer_alloc), (-(-(todo + outs) // page) * page).astype(float)).tolist()
        self.reserve = (page + np.minimum(outs, 4096)).tolist()
        self.life = (outs - 1).tolist()
        self.shape = list(zip(self.L, self.life))
        self.pid = reqs.prompt.tolist() if reqs.prompt is not None else None
        self.delay = reqs.delay.tolist() if reqs.delay is not None else None
        self.lead = int(reqs.lead)

    def append(self, L: int, out: int, cached: float, arrival: float, tail: int | None = None) -> int:
        """Add one request (a cluster routes requests to an engine as they come); returns its index."""
        i = self.n
        self.n += 1
        self.L.append(int(L))
        self.out.append(int(out))
        self.arrival.append(float(arrival))
        self.max_out = max(self.max_out, int(out))
        self.long.append(L > self._long_above)
        self.todo.append(int(L))
        self.hit.append(False)
        self.hold.append(0.0)
        self.reserve.append(self.page + min(int(out), 4096))
        self.life.append(int(out) - 1)
        self.shape.append((int(L), int(out) - 1))
        if self.pid is not None:
            self.pid.append(-1 - i)                  # a prompt of its own
        if self.delay is not None:
            self.delay.append(0.0)
        self.set_cached(i, cached, tail)
        return i

    def set_cached(self, i: int, cached: float, tail: int | None = None) -> None:
        """Request ``i`` found ``cached`` prompt tokens in the prefix cache (set when it is admitted)."""
        L, page = self.L[i], self.page
        todo = prompt_todo(L, cached, page, tail)
        self.todo[i] = todo
        self.hit[i] = cached > 0
        self.hold[i] = self._alloc if self.long[i] else float(-(-(todo + self.out[i]) // page) * page)
