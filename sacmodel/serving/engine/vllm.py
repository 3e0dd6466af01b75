"""vLLM V1's scheduler as engine parts beside SGLang's (``engine="vllm"``).

Read from vllm-project/vllm at 00024d31 (``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``,
``vllm/v1/core/kv_cache_manager.py`` ``allocate_slots``, ``vllm/engine/arg_utils.py`` ``get_batch_defaults``):

- **One batch per iteration, mixed.** There is no prefill or decode phase: each step every request gets the
  tokens it still needs under one token budget, ``max_num_batched_tokens`` (the config's ``prefill_chunk``).
  The RUNNING requests come first (each decoding request one token), then the WAITING ones fill what is left
  of the budget, FCFS; a prompt longer than what is left is chunked (chunked prefill is always on in V1) and
  its next chunk is scheduled first among the prefills of the next step (it is in the running list by then).
  No new request is admitted while the running ones hold ``max_num_seqs`` (``max_running_requests``).
- **Blocks, no reservation.** KV is allocated in 16-token blocks for the tokens scheduled; nothing is held
  back for a request's future output (SGLang reserves it, :class:`~sacmodel.serving.engine.memory.SGLangMemory`),
  so admission only needs the prompt's blocks to be free (:class:`VLLMMemory`).
- **Preemption by recompute.** When a running request's next token finds no free block, the scheduler
  preempts the last request of the running list (the one admitted last), frees its blocks and puts it back at
  the head of the waiting queue, to be prefilled again over its prompt and what it generated; no waiting
  request is admitted in a step that preempted (``Scheduler._preempt_request``, ``num_computed_tokens = 0``).
- **The prefix cache keeps a preempted request's blocks until they are reused.** Its blocks are freed with
  their hashes (prefix caching is on by default), tail first, to the end of the free-block queue
  (``KVCacheManager.free``: "the tail blocks are evicted first"; ``BlockPool.free_blocks`` appends, new blocks
  are taken from the queue's head): the blocks free before them go first, then its own, from its last block
  back. When it is scheduled again, ``get_computed_blocks`` finds the full blocks of its prompt and generated
  tokens still there (at most all its tokens but one), and only the rest is recomputed
  (:meth:`VLLMMemory.kept_tokens`).

The step cost of a mixed batch is one forward over the prefill tokens and the decode tokens:
:class:`~sacmodel.serving.engine.cost.IterationCost` adds a rank's prefill part and decode part when the
engine mixes (``IterationCost.mixed``), where SGLang's ranks each run one or the other.
"""
from __future__ import annotations

import math

from .memory import SGLangMemory
from .scheduler import Ranks


class VLLMMemory(SGLangMemory):
    """vLLM's KV cache manager per rank: a request takes its prompt's blocks when admitted and one slot per
    generated token, with no reservation for its future output (``CLIP`` 0, no new-token ratio): the pool fills
    until a decode step does not fit, and then the scheduler preempts (:meth:`VLLMRanks.schedule`)."""

    CLIP = 0

    def __init__(self, dp: int, max_total: int, table, prefix_pages: int, page: int):
        super().__init__(dp, max_total, table, prefix_pages, page, (0.0, 0.0, 0.0))
        self.table = table
        self.taken = [0.0] * dp          # tokens of blocks rank r has allocated so far (the free queue's reads)
        self.kept: dict = {}             # preempted request -> (rank, its blocks' place in the queue, tokens)

    def take(self, r: int, i: int, now: float) -> bool:
        """Request ``i``'s prompt blocks fit the free blocks of rank ``r`` (``allocate_slots``); a preempted
        request first finds what the prefix cache kept of it (only the rest is prefilled again)."""
        if self.slots[i] > self.max_total - self.used[r] - self.decoded(r):
            return False
        if i in self.kept:
            kept = self.kept_tokens(i)
            tb = self.table
            if kept > tb.L[i] - tb.todo[i]:
                tb.set_cached(i, kept)
            del self.kept[i]
        self.used[r] += self.slots[i]
        self.taken[r] += self.slots[i]
        return True

    def advance(self, ranks: list[int], steps: int) -> None:
        """The ``ranks`` decoded ``steps`` steps: one new slot per running request and step."""
        super().advance(ranks, steps)
        for r in ranks:
            self.taken[r] += steps * self.running[r]

    def preempted(self, r: int, requests: list[int], free_before: float, held: dict) -> None:
        """``requests`` (in the order they were preempted) left rank ``r`` when it had ``free_before`` free
        slots; ``held``: request -> (tokens whose KV it had computed: prompt and decode steps, slots it freed).
        Each one's blocks join the free queue behind what was free and the requests preempted before it."""
        ahead = free_before
        for i in requests:
            computed, freed = held[i]
            self.kept[i] = (r, self.taken[r] + ahead, float((computed // self.page) * self.page))
            ahead += freed

    def kept_tokens(self, i: int) -> float:
        """Tokens of preempted request ``i`` the prefix cache still holds: its full blocks less those new
        allocations have taken since (from its last block back)."""
        r, start, full = self.kept[i]
        return max(0.0, full - max(0.0, self.taken[r] - start))


class VLLMRanks(Ranks):
    """The ranks' schedulers as vLLM's: each rank's decoding requests and a prefill batch in one iteration."""

    PAGED_BUDGET = False          # vLLM counts scheduled tokens exactly

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_input = math.inf   # no max_prefill_tokens: the token budget alone bounds a prefill

    def schedule(self, now: float) -> tuple[list, list[int], int, int]:
        """Each rank decodes its running requests (one token each; preempting the newest where a step does not
        fit) and fills the rest of its token budget with prefill chunks: (admits [(rank, batch)], decoding
        ranks, tokens of the forward pass, tokens of distinct new prefill chunks)."""
        waiting, running, memory = self.waiting, self.running, self.memory
        decoding = [r for r in range(self.dp) if running[r]]
        preempted = set()
        if decoding:
            for r in memory.full(decoding):
                self._preempt(r)
                preempted.add(r)
        admits, n_tok, n_new, chunks = [], 0, 0, set()
        for r in range(self.dp):
            n_tok += running[r]
            budget = self.chunk - running[r]
            if waiting[r] and budget > 0 and r not in preempted:
                batch, k, new = self.prefill_batch(r, now, chunks, budget)
                n_tok, n_new = n_tok + k, n_new + new
                if memory.crash is not None:
                    break
                if batch:
                    admits.append((r, batch))
        return admits, decoding, n_tok, n_new

    def _retract_key(self, i: int) -> tuple:
        """vLLM preempts from the tail of its running list: the request admitted last first (``running.pop()``;
        requests are admitted in arrival order)."""
        return -self.joined[i], -i

    def _preempt(self, r: int) -> None:
        """Rank ``r``'s next decode step does not fit: the newest requests are preempted (their KV freed) and go
        back to the head of its waiting queue, in their order. The newest running request is a prompt still
        being prefilled, if there is one (admitted last, it is the tail of vLLM's running list): it goes first."""
        w, memory, tb, ck = self.waiting[r], self.memory, self.table, self.clock[r]
        if w and self.prefilled[w[0]] > 0 and self._preempt_prefill(r, w[0]):
            return
        before = len(w)
        free_before = memory.free_slots(r)
        # each running request's KV (prompt and decode steps) and the slots it holds
        held = {i: (tb.L[i] + ck - self.joined[i], memory.slots[i] + ck - self.joined[i]) for _, i in self.ends[r]}
        self._retract(r)
        gone = list(w)[before:]                  # in the order they were preempted
        memory.preempted(r, gone, free_before, held)
        back = [w.pop() for _ in range(len(w) - before)]
        w.extendleft(back)

    def _preempt_prefill(self, r: int, i: int) -> bool:
        """Preempt request ``i``, whose prompt rank ``r`` is prefilling in chunks: its blocks are freed (the
        prefix cache keeps those of its cached prefix and computed chunks, :meth:`VLLMMemory.preempted`) and it
        waits at the head of the queue to be prefilled again (its first token later). True if the rank's next
        decode step fits then."""
        memory, tb = self.memory, self.table
        free_before = memory.free_slots(r)
        done = tb.L[i] - tb.todo[i] + self.prefilled[i]          # its cached prefix and the chunks it computed
        held = {i: (done, memory.slots[i])}
        memory.free(r, (i,), running=False)
        self.prefilled[i] = 0
        memory.preempted(r, [i], free_before, held)
        return memory.steps_fit(r) >= 1
