"""The data-parallel ranks' schedulers: dispatch, waiting queues, prefill batches and decode batches.

- **Dispatch.** SGLang's data-parallel controller sends requests to the ranks round-robin in the order the
  front end hands them on, at once; a rank's scheduler takes them in only when its loop comes round
  (``event_loop_overlap``: receive, schedule, launch the next batch, then process the last one's results), so
  a request that reaches it after it launched the current iteration waits for the next (:class:`Dispatch`).
- **Prefill batches.** Each iteration a rank with waiting requests admits them into a prefill batch (prefill
  has priority over decode): up to ``prefill_chunk`` new tokens, no further request once the batch's new
  tokens reach ``max_prefill_tokens`` (SGLang's PrefillAdder: ``rem_input_tokens``, 16384 by default, binds
  when the chunk is larger), a prefix hit costing one page, at most
  ``max_running_requests`` requests on the rank, each only if its device memory fits
  (:class:`~sacmodel.serving.engine.memory.DeviceMemory`); a prompt longer than the budget is chunked over
  iterations and fills the batch, its chunks back to back (no decode between them: mixed chunks are off).
- **A full batch** (SGLang's ``running_batch.batch_is_full``). A request that does not fit the memory marks
  the rank full (``AddReqResult.NO_TOKEN``); a full rank does not try its queue again, and decodes, until a
  request leaves its batch: one ends (decoding, or at its prefill) or is retracted (``update_running_batch``
  and ``get_next_batch_to_run`` clear the flag when a batch shrinks). So a rank that found its memory short
  does not admit mid-decode as the new-token ratio decays step by step. (SGLang also sets the flag at
  ``max_running_requests``, where only a request leaving makes room anyway; a chunked prompt under way runs
  its next chunk whatever the flag.)
- **Decode batches.** A staged request joins its rank's decode batch; each rank keeps the sums the step model
  needs in O(1) per step: the requests' prompt lengths and join clocks (mean context), and their miss curves
  added into one accumulator per rank so that the entries a jump of j steps loads is acc[x + j] - acc[x].
"""
from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from .distinct import DistinctTokens
from .memory import DeviceMemory, HostPool, SGLangMemory
from .misses import MissCurves
from .staging import Staging
from .workload import RequestTable


_LATER = object()          # a request's miss curve not made yet


class Dispatch:
    """Requests the front end has handed on: the data-parallel controller sends each to the next rank in turn at
    once; the rank's scheduler takes in what has reached it when its loop next receives (:meth:`receive`)."""

    def __init__(self, dp: int, first_round: int, rank_of: list[int]):
        self.dp, self.rank_of = dp, rank_of
        self.inbox: list[deque] = [deque() for _ in range(dp)]   # (time handed on, request), per rank, in order
        self.counter = first_round % dp                     # the round-robin continues from earlier rounds
        self.fixed: dict[int, int] = {}                     # requests sent to a given rank (a router chose it)
        self.count = 0                                      # requests in the inboxes
        self.taken_in: dict[int, float] = {}                # when each request was first scheduled after it (s)

    def push(self, i: int, when: float) -> None:
        r = self.fixed.pop(i, None) if self.fixed else None
        if r is None:
            r = self.counter % self.dp
            self.counter += 1
        self.rank_of[i] = r
        self.inbox[r].append((when, i))
        self.count += 1

    def receive(self, cutoffs: list[float], ranks: "Ranks", now: float) -> None:
        """Each rank ``r`` takes into its waiting queue what reached it by ``cutoffs[r]`` (s), to be scheduled
        from ``now`` (s) on."""
        waiting, taken_in, count = ranks.waiting, self.taken_in, self.count
        for r, box in enumerate(self.inbox):
            if box:
                limit = cutoffs[r] + 1e-12
                w = waiting[r]
                while box and box[0][0] <= limit:
                    i = box.popleft()[1]
                    w.append(i)
                    taken_in[i] = now
                    count -= 1
        self.count = count

    def next_time(self) -> float:
        """When the earliest request still in an inbox reached it (inf: none)."""
        t = math.inf
        if self.count:
            for box in self.inbox:
                if box and box[0][0] < t:
                    t = box[0][0]
        return t


class Ranks:
    """Per-rank scheduler state (lists indexed by rank) and per-request progress (lists indexed by request)."""

    PAGED_BUDGET = True           # a prefill's tokens count against the budget in whole pages (SGLang)

    def __init__(self, dp: int, cfg, table: RequestTable, memory: DeviceMemory, staging: Staging,
                 distinct: DistinctTokens, curves: MissCurves, host: HostPool | None = None):
        self.dp, self.table, self.memory, self.staging, self.host = dp, table, memory, staging, host
        self.distinct = distinct
        self.curves = curves
        # each request's miss curve over its life (None: none), made when it joins decode and dropped when it ends
        # (held for every request at once, the curves of a long run filled the memory)
        self.curve: list = [_LATER] * table.n
        self.hooks = None                                 # a cluster's view of admissions, prefills and ends
        self.page, self.chunk, self.max_run = cfg.page, cfg.prefill_chunk, cfg.max_running_requests
        self.max_input = cfg.max_prefill_tokens           # SGLang's max_prefill_tokens (PrefillAdder)
        self.todo, self.pid, self.staged = table.todo, table.pid, staging.staged
        n = table.n
        self.rank_of = [0] * n
        self.prefilled = [0] * n              # prompt tokens prefilled so far
        self.joined = [0] * n                 # decode clock of its rank when it joined
        self.waiting = [deque() for _ in range(dp)]
        self.full = [False] * dp              # SGLang's running_batch.batch_is_full, per rank
        self.ends: list[list[tuple[int, int]]] = [[] for _ in range(dp)]   # heap of (clock at its last step, i)
        self.running = [0] * dp
        self.n_long = [0] * dp                # running requests longer than the device buffer
        self.clock = [0] * dp                 # decode steps each rank has run
        self.sum_l = [0.0] * dp               # sum of the running requests' prompt lengths
        self.sum_join = [0] * dp              # sum of their join clocks
        self.newest = [0] * dp                # clock of the latest join
        # the miss curve of a request of the latest join (its busiest): (curve, its last index, join clock)
        self.newest_at: list[tuple | None] = [None] * dp
        self._last_view: tuple = (None, None, 0)      # (curve, its memoryview, its last index): _view
        self.acc = [np.zeros(max(4096, 4 * table.max_out)) for _ in range(dp)]
        self.acc_at = [memoryview(a) for a in self.acc]    # the same memory, read as Python floats (quicker)
        self.base = [0] * dp                  # the clock of each accumulator's first entry
        # a configuration whose requests never load entries (no HiSparse buffer, or dense attention) keeps its
        # accumulators at zero: they are neither grown nor read
        self.swaps = bool(cfg.hisparse and cfg.model.sparse)
        self.paged = isinstance(memory, SGLangMemory)        # SGLang's own admission and retraction
        if self.paged:
            memory.bind(self.running, self.clock, self.sum_join)
        if host is not None:
            host.bind(self.running, self.clock, self.sum_join)

    def add(self, i: int) -> None:
        """Request ``i`` was appended to the table."""
        if self.host is not None:
            self.host.add(i)
        self.rank_of.append(0)
        self.prefilled.append(0)
        self.joined.append(0)
        self.curve.append(_LATER)

    # ---- admission -----------------------------------------------------------------------------------
    def schedule(self, now: float) -> tuple[list, list[int], int, int]:
        """Each rank admits a prefill batch (prefill has priority) or decodes: (admits [(rank, batch)], decoding
        ranks, tokens of the forward pass, tokens of distinct new prefill chunks). Stops at a crash."""
        waiting, running, memory, paged, full = self.waiting, self.running, self.memory, self.paged, self.full
        admits, decoding, n_tok, n_new, n_dec, chunks = [], [], 0, 0, 0, None
        for r in range(self.dp):
            if waiting[r] and not (full[r] and self._blocked(r)):
                if chunks is None:
                    chunks = set()
                batch, k, new = self.prefill_batch(r, now, chunks)
                n_tok, n_new = n_tok + k, n_new + new
                if memory.crash is not None:
                    break
                if batch:
                    admits.append((r, batch))
                    continue
            if running[r]:
                decoding.append(r)
                n_dec += running[r]
            elif paged and not waiting[r]:
                memory.idle(r)
        if self.host is not None and decoding:     # the decode step's backups find room, or the server stops
            self.host.check(decoding, now)
        if paged and decoding:        # a rank's retraction touches only that rank: checked after the batches
            full = memory.full(decoding)
            for r in full:
                n_dec -= running[r]
                self._retract(r)
                n_dec += running[r]
        return admits, decoding, n_tok + n_dec, n_new

    def _blocked(self, r: int) -> bool:
        """Whether full rank ``r`` skips its prefill: unless its queue's head is a chunked prompt under way (its
        next chunk runs whatever the flag), or the rank holds no request that could leave to clear the flag."""
        return self.prefilled[self.waiting[r][0]] == 0 and bool(self.running[r] or self.staged[r])

    def prefill_batch(self, r: int, now: float, chunks: set, budget: int | None = None) -> tuple[list, int, int]:
        """Rank ``r``'s prefill batch: [(request, tokens)], its tokens, and the tokens of chunks not seen in
        ``chunks`` (distinct (prompt, position, length) chunks of the iteration, added to it). ``budget``:
        the tokens it may take (None: the chunk); SGLang counts each request's tokens in whole pages. A
        request its memory refuses marks the rank full (:attr:`full`)."""
        w, prefilled, todo, pid = self.waiting[r], self.prefilled, self.todo, self.pid
        page = self.page if self.PAGED_BUDGET else 1
        hooks, staging = self.hooks, self.staging
        batch, n_tok, n_new = [], 0, 0
        if budget is None:
            budget = self.chunk
        inputs = self.max_input
        room = self.max_run - self.running[r] - len(self.staged[r])
        while w and budget > 0 and inputs > 0 and len(batch) < room:
            i = w[0]
            if batch and -(-(todo[i] - prefilled[i]) // page) * page >= inputs:
                break                                      # add_one_req: paged input >= rem_input_tokens
            if prefilled[i] == 0:                          # its memory is taken when it starts
                if hooks is not None:                      # the rank's prefix cache as it is now
                    hooks.lookup(r, i)
                if staging.hisparse:
                    staging.on_admit(r, i)
                if not self.memory.take(r, i, now):
                    self.full[r] = True                    # AddReqResult.NO_TOKEN
                    break
                if hooks is not None:
                    hooks.started(r, i)
            take = todo[i] - prefilled[i]
            if take > budget:
                take = budget
            batch.append((i, take))
            n_tok += take
            if pid is not None:
                chunk = (pid[i], prefilled[i], take)
                if chunk not in chunks:
                    chunks.add(chunk)
                    n_new += take
            paged = -(-take // page) * page
            budget -= paged
            inputs -= paged
            if prefilled[i] + take < todo[i]:
                break                                      # a chunked prompt fills the batch
            w.popleft()
        return batch, n_tok, n_new

    def finish_prefill(self, r: int, batch: list, it: int, done: list[int], now: float = 0.0) -> int:
        """The batch's prefill ran: requests whose prompt is done (appended to ``done``, their first tokens to
        send) are staged to decode from iteration ``it`` on (taking their host-pool slots at ``now``, s), or end
        (one output token). Returns how many ended."""
        prefilled, todo, out, hooks, host = self.prefilled, self.table.todo, self.table.out, self.hooks, self.host
        ended = 0
        for i, take in batch:
            prefilled[i] += take
            if hooks is not None:
                hooks.prefilled(r, i, prefilled[i])
            if prefilled[i] < todo[i]:
                continue
            done.append(i)
            if out[i] <= 1:                               # its first token ends it
                self.full[r] = False
                if hooks is None or not hooks.ended(r, i):
                    self.memory.free(r, (i,), running=False)
                ended += 1
            else:
                if host is not None and not host.stage(r, i, now):
                    return ended                          # the server stopped
                self.staging.stage(r, i, it)
        return ended

    # ---- decode --------------------------------------------------------------------------------------
    def join(self, joined: list[tuple[int, list[int]]]) -> None:
        """Staged requests join their rank's decode batch at its current clock (``joined``: (rank, requests))."""
        tb, distinct, paged = self.table, self.distinct, self.paged
        life, L, long_ = tb.life, tb.L, tb.long
        joined_at, ends, clock, push = self.joined, self.ends, self.clock, heapq.heappush
        for r, ready in joined:
            j = clock[r]
            sum_l, n_long = 0, 0
            e = ends[r]
            for i in ready:
                joined_at[i] = j
                push(e, (j + life[i] - 1, i))      # clock of its last step
                sum_l += L[i]
                n_long += long_[i]
            if distinct.on:
                distinct.join(r, ready, j)
            if paged:
                self.memory.joined(r, ready)
            if self.swaps:
                self._add_misses(r, j, ready)
            self.sum_l[r] += sum_l
            self.n_long[r] += n_long
            self.sum_join[r] += j * len(ready)
            self.newest[r] = j
            self.running[r] += len(ready)

    def _add_misses(self, r: int, j: int, ready: list[int]) -> None:
        """The miss curves of requests joining rank ``r`` at clock ``j``, added into its accumulator (requests of
        one shape add one curve times their count); the busiest of them is the rank's newest."""
        shape, life, curve = self.table.shape, self.table.life, self.curve
        for i in ready:
            if curve[i] is _LATER:
                curve[i] = self.curves.over_life(shape[i])
        o = j - self.base[r]                             # the accumulator's index of clock j
        if len(ready) == 1:                              # the usual case: one request joins
            i = ready[0]
            cl = curve[i]
            top = o + (life[i] if life[i] > 0 else 0) + 1
            a = self.acc[r]
            if top > len(a):                             # the rank's steps are read over the request's life
                a, o = self._grow(r, top + self.base[r]), 0   # even when it loads nothing itself
            if cl is None:                               # it loads nothing
                self.newest_at[r] = None
                return
            seg = a[o:o + shape[i][1] + 1]
            seg += cl
            view = self._last_view          # _view, inlined: most joining requests share the last curve
            if view[0] is not cl:
                view = self._view(cl)
            self.newest_at[r] = (view[1], view[2], j) if view[2] > 0 else None
            return
        shapes: dict[tuple[int, int], list] = {}         # shape -> [count, one request of it]
        longest = 0
        for i in ready:
            sh = shape[i]
            if sh in shapes:
                shapes[sh][0] += 1
            else:
                shapes[sh] = [1, i]
            if life[i] > longest:
                longest = life[i]
        if j + longest + 1 - self.base[r] <= len(self.acc[r]):
            a = self.acc[r]
        else:
            a, o = self._grow(r, j + longest + 1), 0
        busiest = None
        for sh, (cnt, one) in shapes.items():
            cl = curve[one]
            if cl is not None:
                seg = a[o:o + sh[1] + 1]
                seg += cl if cnt == 1 else cnt * cl
                if busiest is None or cl[1] > busiest[1]:
                    busiest = cl
        view = self._view(busiest) if busiest is not None else None
        self.newest_at[r] = (view[1], view[2], j) if view is not None and view[2] > 0 else None

    def _view(self, cl: np.ndarray) -> tuple:
        """(the curve, the curve read as Python floats, its last index); the last one made is kept, since most
        joining requests share their curve."""
        if cl is not self._last_view[0]:
            self._last_view = (cl, memoryview(cl), len(cl) - 1)
        return self._last_view

    def _grow(self, r: int, size: int) -> np.ndarray:
        """Rank ``r``'s miss accumulator, holding clocks from the rank's clock up to ``size``. Entries before the
        clock are never read or written again (reads start at the clock, ends at or after it), so they are
        dropped and the accumulator's first entry is the clock (``base``): a long run's accumulator does not
        grow with the run."""
        a, lo = self.acc[r], self.clock[r]
        live = a[lo - self.base[r]:]
        new = np.zeros(max(size - lo, 4 * len(live), 4096))
        new[:len(live)] = live
        self.acc[r], self.acc_at[r], self.base[r] = new, memoryview(new), lo
        return new

    def max_jump(self, decoding: list[int]) -> int:
        """Decode steps the ranks can advance in one go: to the next finish, and while a young request's
        misses still change at most doubling its age (a jump's rank parts are exact averages over it; only
        which rank is slowest may change inside it)."""
        clock, ends, newest = self.clock, self.ends, self.newest
        to_end = youngest = math.inf
        for r in decoding:
            ck = clock[r]
            if ends[r][0][0] - ck < to_end:
                to_end = ends[r][0][0] - ck
            if ck - newest[r] < youngest:
                youngest = ck - newest[r]
        jump = min(to_end + 1, 256 if youngest >= 512 else 2 * youngest + 1)
        if self.paged:                               # until the first pool fills up
            jump = min(jump, self.memory.fewest_steps(decoding))
        if self.host is not None:                    # until a host pool fills up
            jump = min(jump, self.host.fewest_steps(decoding))
        return max(1, jump)

    def advance(self, decoding: list[int], jump: int, ended: list) -> int:
        """The ``decoding`` ranks decode ``jump`` steps; requests past their last step end (appended to
        ``ended`` as (request, True)). Returns how many ended."""
        clock, ends = self.clock, self.ends
        k = 0
        if self.paged:
            self.memory.advance(decoding, jump)
        for r in decoding:
            ck = clock[r] = clock[r] + jump
            if ends[r][0][0] < ck:
                k += self._end(r, ck, ended)
        return k

    def _end(self, r: int, ck: int, ended: list) -> int:
        """Requests of rank ``r`` whose last step came before clock ``ck`` end; returns how many."""
        tb, curve, joined, pop = self.table, self.curve, self.joined, heapq.heappop
        life, L, long_ = tb.life, tb.L, tb.long
        e, acc_at, base, swaps = self.ends[r], self.acc_at[r], self.base[r], self.swaps
        sum_l, sum_join, n_long = self.sum_l[r], self.sum_join[r], self.n_long[r]
        gone = []
        while e and e[0][0] < ck:
            i = pop(e)[1]
            if swaps:
                cl = curve[i]
                if cl is not None:
                    acc_at[joined[i] + life[i] - base] -= cl.item(-1)
                curve[i] = None                  # its curve is no longer held
            sum_l -= L[i]
            sum_join -= joined[i]
            n_long -= long_[i]
            ended.append((i, True))
            gone.append(i)
        self.sum_l[r], self.sum_join[r], self.n_long[r] = sum_l, sum_join, n_long
        self.running[r] -= len(gone)
        self.full[r] = False                             # the decode batch shrank
        if self.distinct.on:
            self.distinct.leave(r, gone, joined, ck)
        self.memory.free(r, gone)
        if self.host is not None:
            self.host.free(r, gone)
        if self.hooks is not None:
            for i in gone:
                self.hooks.ended(r, i)
        return len(gone)

    # ---- retraction (SGLang's accounting) ------------------------------------------------------------
    def _retract_key(self, i: int) -> tuple:
        """SGLang retracts the requests with the fewest generated tokens first, ties the longest prompt."""
        return -self.joined[i], -self.table.L[i]

    def _retract(self, r: int) -> None:
        """Rank ``r``'s next decode step does not fit its pool: retract the requests with the fewest generated
        tokens (ties: the longest prompt) until it fits, keeping one; they wait to be prefilled again over
        their prompt and generated tokens, with the rest of their output still to come."""
        tb, memory, joined, ck = self.table, self.memory, self.joined, self.clock[r]
        e = self.ends[r]
        order = sorted((i for _, i in e), key=self._retract_key)
        gone = []
        for i in order[:-1]:
            if memory.steps_fit(r) >= 1:
                break
            gone.append(i)
            generated = ck - joined[i] + 1                  # its prefill's token and its decode steps
            self.sum_l[r] -= tb.L[i]
            self.sum_join[r] -= joined[i]
            self.n_long[r] -= tb.long[i]
            self.running[r] -= 1
            remaining = tb.life[i] - (ck - joined[i])       # tokens still to generate after re-prefill + 1
            # its KV is freed, not cached: prefilled again over what it generated, and over its prompt unless
            # that is a shared prefix the radix cache keeps
            kept = tb.L[i] - tb.todo[i] if self.memory.prefix_pages else 0
            tb.L[i] += generated
            tb.todo[i] = tb.L[i] - kept
            tb.hit[i] = kept > 0
            tb.life[i] = max(remaining - 1, 0)
            tb.out[i] = tb.life[i] + 1
            self.prefilled[i] = 0
            memory.retracted(r, i, generated, tb.todo[i] if kept else tb.L[i], tb.life[i])
            self.waiting[r].append(i)
        if gone:
            self.full[r] = False
            left = set(gone)
            self.ends[r] = [x for x in e if x[1] not in left]
            heapq.heapify(self.ends[r])
            if self.distinct.on:
                self.distinct.leave(r, gone, joined, ck)
            survivors = [i for _, i in self.ends[r]]
            memory.reset_ratio(r, memory.decoded(r), sum(tb.out[i] for i in survivors), len(survivors))
