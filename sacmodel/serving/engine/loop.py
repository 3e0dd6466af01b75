"""The event loop: the SGLang server with data-parallel attention, iteration by iteration.

Each mechanism of the measured server is a part of its own (the costs are in :mod:`sacmodel.serving.step`):

==================  ================================================================================
part                 what it follows in the server
==================  ================================================================================
``client``           the benchmark client: closed loop (at most ``concurrency`` in flight) or arrivals
``frontend``         the TokenizerManager's event loop: intake (``t_token`` per prompt token) and one
                     output message per turn while requests come in
``scheduler``        the data-parallel controller (round-robin dispatch) and each rank's scheduler: it
                     takes requests in as its overlap loop comes round, once it has launched the
                     iteration on the GPU, and admits them in the next; waiting queue, prefill batches
                     (chunked, memory-checked), decode batch
``memory``           device KV slots per rank; HiSparse's buffer allocation failure
``vllm``             ``engine="vllm"``: vLLM V1's scheduler in place of ``scheduler``'s batches (decodes and
                     prefill chunks mixed under one token budget; preemption by recompute) and its
                     block manager in place of ``memory``'s
``vllm_front``       ``engine="vllm"``: vLLM's API server in place of ``frontend``: one event loop for each
                     request's intake and the outputs (per message and per request), the tokenizer
                     thread's batches
``staging``          prefill to decode: staging, the RDMA pool's prefix copy, cold-staging backups
``cost``             the iteration's time: shared part plus the slowest rank, in jumps of identical steps
``distinct``         identical tokens of requests of one prompt (the MoE reads their experts once)
``misses``           the entries a request loads into its GPU buffer, step by step
``emit``             first tokens sent after the next batch is launched (overlap scheduler); decode
                     tokens one message per rank per step
==================  ================================================================================

A token reaches the client ``t_request`` after the front end hands it on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..capacity import host_pool_tokens
from ..config import Config, vllm_api_servers, vllm_front_end
from .client import Client
from .cost import IterationCost
from .distinct import DistinctTokens
from .emit import Emission
from .frontend import FrontEnd
from .memory import Crash, DeviceMemory, HostPool, SGLangMemory
from .misses import MissCurves
from .scheduler import Dispatch, Ranks
from .staging import Staging
from .stats import Stats, Timeline
from .stepmodel import Model
from .vllm import VLLMMemory, VLLMRanks
from .vllm_front import VLLMFrontEnd, VLLMServers
from .workload import RequestTable, Requests


@dataclass
class EngineResult:
    """Per-request times (s): sent, first token seen, last token seen; which completed; the crash if any."""
    release: np.ndarray
    first: np.ndarray
    done: np.ndarray
    completed: np.ndarray
    crash: Crash | None
    stats: dict = field(default_factory=dict)
    timeline: list = field(default_factory=list)


def run_engine(cfg: Config, reqs: Requests, concurrency: int, *, model: Model | None = None,
               record: bool = False, first_round: int = 0) -> EngineResult:
    """Simulate the workload; see the module docstring. ``record=True`` keeps a per-rank timeline sampled
    like the server log (every 40 decode steps: time, rank, running requests, device tokens held).
    ``first_round``: requests dispatched before this workload (the round-robin counter continues)."""
    return Engine(cfg, reqs, concurrency, model or Model(cfg), record, first_round).run()


def open_engine(cfg: Config, *, model: Model | None = None, concurrency: int = 1 << 30,
                max_output: int = 1) -> "Engine":
    """An engine with no requests yet: a cluster adds them with :meth:`Engine.submit` as it routes them and
    drives the clock with :meth:`Engine.step` (open loop: each request is sent at its arrival).
    ``max_output``: the longest output to come (the horizon of the miss curves, as a whole run has it)."""
    empty = Requests(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    eng = Engine(cfg, empty, concurrency, model or Model(cfg), False, 0)
    eng.ranks.curves.max_out = max(eng.ranks.curves.max_out, int(max_output))
    return eng


def _memory(cfg: Config, table: RequestTable, prefix_pages: int) -> DeviceMemory:
    """HiSparse's device-buffer accounting for its pools (as the testbed's fork checks it), vLLM's block manager,
    else SGLang's own."""
    if cfg.engine == "vllm":
        return VLLMMemory(cfg.dp, cfg.max_total_tokens, table, prefix_pages, cfg.page)
    if cfg.hisparse:
        return DeviceMemory(cfg.dp, cfg.max_total_tokens, table, prefix_pages)
    from ...hardware.sizing import new_token_ratio_default
    return SGLangMemory(cfg.dp, cfg.max_total_tokens, table, prefix_pages, cfg.page,
                        new_token_ratio_default(cfg.dp > 1))


def _front_end(cfg: Config) -> FrontEnd | VLLMFrontEnd | VLLMServers:
    """SGLang's TokenizerManager loop, or vLLM's API server (one, or ``--api-server-count`` of them)."""
    if cfg.engine != "vllm":
        return FrontEnd()
    servers = vllm_api_servers(cfg.topo)
    return VLLMFrontEnd(*vllm_front_end(cfg.topo)) if servers == 1 else VLLMServers(servers, *vllm_front_end(cfg.topo))


class Engine:
    """One run: the server's parts wired together, and the clock (``t`` in s, ``it`` iterations)."""

    def __init__(self, cfg: Config, reqs: Requests, concurrency: int, model: Model, record: bool,
                 first_round: int):
        self.cfg, self.model = cfg, model
        self.table = table = RequestTable(cfg, reqs)
        self.vllm = cfg.engine == "vllm"
        self.frontend = _front_end(cfg)
        self.client = Client(table, concurrency, self.frontend, model.v["t_token"])
        self.memory = _memory(cfg, table, reqs.prefix_pages)
        self.staging = Staging(cfg, table, model, reqs.cold_staging)
        self.distinct = DistinctTokens(cfg.dp, table.pid)
        host = host_pool_tokens(cfg)
        self.host = HostPool(cfg.dp, host, table, self.memory) if host is not None else None
        ranks = VLLMRanks if cfg.engine == "vllm" else Ranks
        self.ranks = ranks(cfg.dp, cfg, table, self.memory, self.staging, self.distinct,
                           MissCurves(model, table.max_out), self.host)
        self.dispatch = Dispatch(cfg.dp, first_round, self.ranks.rank_of)
        self.cost = IterationCost(model, table)
        self.emit = Emission(self.frontend, self.ranks.rank_of, table.out)
        self.stats = Stats()
        self.timeline = Timeline(record, cfg.dp)
        self.t, self.it, self.finished = 0.0, 0, 0
        self.hold_next = 0.0            # GPU time the backups started last iteration hold in the next one
        self.horizon = math.inf         # a cluster's next event: no jump of decode iterations goes past it
        self.pool = None                # a cluster's shared pool: (engine, step s, entries, steps) -> step s
        # SGLang's recv skipper (--scheduler-recv-interval N): the scheduler takes in new requests once N decode
        # iterations have run since its last intake, at once after a prefill (weight 1000) or when idle
        self.recv_n = cfg.recv_interval
        self.recv_count = self.recv_n
        # when each rank's scheduler loop last took requests in: the overlap loop receives once it has launched
        # the iteration now on the GPU (and sent the last one's first tokens), so a request that comes later
        # waits for the next loop, and its prefill for the iteration after the next
        self.recv_at = [0.0] * cfg.dp

    def run(self) -> EngineResult:
        self.client.send(0.0)
        n, memory, step = self.table.n, self.memory, self.step      # no request is added during a run
        guard = 40 * n + 8 * self.table.max_out + 100000
        while self.finished < n and memory.crash is None:
            guard -= 1
            if guard < 0:
                raise RuntimeError("serving engine did not finish (internal error)")
            if not step() and memory.crash is None:
                raise RuntimeError("serving engine stalled (internal error)")
        return self._result()

    def step(self, horizon: float = math.inf) -> bool:
        """One pass of the server's loop at ``self.t``: the front end's turns, dispatch, staged requests joining
        decode, then an iteration (a jump of identical decode iterations ending by ``horizon`` at the latest),
        or a wait for the next event. False when nothing is due (the engine idles until a request comes)."""
        fe, dispatch, memory, staging, t = self.frontend, self.dispatch, self.memory, self.staging, self.t
        self.horizon = horizon
        if fe.msgs or fe.intake or fe.tokq:
            fe.run(t, dispatch.push, self.client.deliver)
        if self.recv_n > 1:
            receives = self.recv_count >= self.recv_n
            if receives:
                self.recv_count = 0
        else:
            receives = True
        if dispatch.count and receives:
            dispatch.receive(self.recv_at, self.ranks, t)
        copy_t, copying = 0.0, 0
        if staging.count:              # staged requests acknowledged now join decode (after their copies)
            joined = staging.ready(self.it)
            if joined:
                self.ranks.join(joined)
            if staging.copies_prefix:
                copy_t = staging.copy_time(joined)
                copying = len(joined) if copy_t else 0
        admits, decoding, n_tok, n_new = self.ranks.schedule(t)
        if memory.crash is not None:
            self.client.stopped = True
            return False
        # vLLM's engine core returns a step's outputs when the step ends (no overlap scheduler to wait for)
        delays = self.cost.send_delays(self.ranks, admits, decoding) if (admits or decoding) and not self.vllm \
            else None
        hold_t = self._send_first_tokens(copy_t, delays) if self.emit.unsent or self.hold_next else 0.0
        if self.emit.unsent_last:       # the last batch's last tokens leave with its first tokens
            self.emit.last_tokens(self.t + copy_t, delays)
        if admits or decoding:
            self._iterate(admits, decoding, n_tok, n_new, copy_t, copying, hold_t, delays)
            return True
        return self._wait(copy_t, hold_t)

    # ---- a cluster drives the engine: requests come one by one, the clock is shared ----------------------
    def submit(self, arrival: float, L: int, out: int, cached: float = 0.0, rank: int | None = None) -> int:
        """Add a request reaching the server at ``arrival`` (s); ``rank``: the data-parallel rank a router
        chose (None: the server's round-robin). Returns its index in this engine."""
        i = self.table.append(L, out, cached, arrival)
        self.client.add()
        self.ranks.add(i)
        self.staging.add()
        self.memory.add(i)
        if rank is not None:
            self.dispatch.fixed[i] = rank
        self.client.send(max(self.t, arrival))     # the engine may be mid-iteration: it reaches the front end now
        return i

    def due(self) -> float:
        """When the engine next has something to do (s; inf: nothing until a request comes)."""
        ranks = self.ranks
        if self.staging.count or self.emit.unsent or self.emit.unsent_last or self.hold_next or any(ranks.running) or \
                any(ranks.waiting):
            return self.t
        return max(self.t, self._next_event())

    def release(self, r: int, i: int) -> None:
        """Free the device memory of request ``i`` that a hook kept after its prefill (a disaggregated prefill
        instance holds the KV until the decode instance has pulled it)."""
        self.memory.free(r, (i,), running=False)

    def _send_first_tokens(self, copy_t: float, delays: list[float] | None) -> float:
        """The last batch's first tokens leave once this iteration is launched (after its copies): the overlap
        scheduler launches the next batch before it processes the last one's results, so a rank that runs
        a batch without a CUDA graph hands its first tokens on only after the CPU has launched its kernels one
        by one. Their cold backups start now and hold the GPU in the next iteration. Returns the hold of
        this iteration (s)."""
        hold_t, self.hold_next = self.hold_next, 0.0
        unsent = self.emit.unsent
        if unsent:
            hold, k = self.staging.backups(unsent, self.ranks.rank_of) if self.staging.hisparse else (0.0, 0)
            if k:
                self.hold_next = hold
                self.stats.cold_backup_s += hold
                if self.timeline.on:
                    self.timeline.event(self.t, -1, "backup", hold, k)
            n_first = len(unsent)
            self.emit.first_tokens(self.t + copy_t, delays)
            self.stats.first_token_copy_wait_s += copy_t * n_first
        return hold_t

    def _wait(self, copy_t: float, hold_t: float) -> bool:
        """Nothing to run: a copy-only iteration, or the clock moves to the next event (False: none is due)."""
        if copy_t > 0 or self.staging.count or hold_t:
            self.t += copy_t + hold_t
            self.recv_at = [self.t] * self.cfg.dp
            self.it += 1
            self.recv_count += 1
            return True
        self.recv_count = self.recv_n          # an idle scheduler loops at once to its next intake
        nxt = self._next_event()
        if nxt == math.inf:
            return False
        self.t = max(self.t, nxt)
        self.recv_at = [self.t] * self.cfg.dp         # an idle loop receives at once
        self.client.send(self.t)
        return True

    def _next_event(self) -> float:
        """The next dispatch, send or front-end turn (s; inf if none is due)."""
        return min(self.dispatch.next_time(), self.client.next_send(), self.frontend.next_busy_turn())

    def _iterate(self, admits: list, decoding: list[int], n_tok: int, n_new: int, copy_t: float, copying: int,
                 hold_t: float, delays: list[float]) -> None:
        """Run one iteration (or a jump of identical decode iterations) and what follows from it."""
        ranks, stats, timeline = self.ranks, self.stats, self.timeline
        jump = 1
        if decoding and not admits and not copy_t and not self.staging.count and not hold_t:
            jump = ranks.max_jump(decoding)
            if self.recv_n > 1:                    # the jump ends where the scheduler next takes requests in
                jump = max(1, min(jump, self.recv_n - self.recv_count))
        distinct = self.distinct
        n_distinct = distinct.count_except(admits) + n_new if distinct.on else n_tok
        horizon = math.inf              # where a jump must end by (a single iteration is not cut)
        if jump > 1:
            inbox = self.dispatch.next_time() if self.recv_n <= 1 else math.inf   # else taken in at the intake only
            horizon = min(inbox, self.client.next_send(), self.frontend.next_busy_turn(), self.horizon)
        T, jump, shared, slowest = self.cost.iteration_time(ranks, admits, decoding, jump, n_tok, n_distinct,
                                                            self.t, horizon)
        if self.pool is not None:      # a pool shared with other hosts: its devices may slow this host down
            T = self.pool(self, T, self.cost.misses, jump)
        first = self.t + copy_t                           # the start of the first iteration
        last = first + (jump - 1) * T                     # the start of the (last) iteration
        self.t = t = self.t + (copy_t + jump * T + hold_t)
        # SGLang's overlap loop takes requests in once it has launched the iteration; vLLM's engine core between
        # its steps (run_busy_loop: _process_input_queue, then _process_engine_step)
        self.recv_at = [t] * self.cfg.dp if delays is None else [last + d for d in delays]
        self.it += jump
        self.recv_count += 1000 if admits else jump
        stats.add_iteration(jump, T, shared, copy_t, bool(admits), len(decoding), slowest, n_tok, n_distinct)
        if decoding:                 # the decoding ranks advance; their tokens and the ended requests' go out
            ended: list[tuple[int, bool]] = []
            tokens = jump * sum(ranks.running[r] for r in decoding) if self.vllm else 0
            self.finished += ranks.advance(decoding, jump, ended)
            if timeline.on:
                for r in decoding:
                    timeline.decode(t, r, jump, ranks.running[r], self.memory.used[r])
            if self.vllm:             # its output handler's work: the request outputs, from the first step on
                self.emit.decode_tokens(t, decoding, jump, ended, tokens, first)
            else:
                self.emit.decode_tokens(t, decoding, jump, ended)
        if timeline.on:
            for r, batch in admits:
                timeline.event(t, r, "prefill", len(batch), ranks.running[r])
            if copy_t:
                timeline.event(t, -1, "fetch", copy_t, copying)
        if admits:
            self._admitted(admits)
        self.client.send(t)

    def _admitted(self, admits: list) -> None:
        """The iteration's prefill batches ran: their requests stage to decode (or end); memory peaks noted."""
        ranks, stats, staged = self.ranks, self.stats, self.staging.staged
        for r, batch in admits:
            self.finished += ranks.finish_prefill(r, batch, self.it, self.emit.unsent, self.t)
            stats.peak_rank_requests = max(stats.peak_rank_requests, ranks.running[r] + len(staged[r]))
        self.memory.note_peak()       # only admissions take memory

    def result(self) -> EngineResult:
        """What the client has seen so far (a cluster calls it when its last request is done)."""
        return self._result()

    def _result(self) -> EngineResult:
        """Flush what is still queued and collect the client's view (a token is seen ``t_request`` after the
        front end hands it on)."""
        if self.emit.unsent:
            self.emit.first_tokens(self.t)
        if self.emit.unsent_last:
            self.emit.last_tokens(self.t)
        self.frontend.run(math.inf, self.dispatch.push, self.client.deliver)
        tr = self.model.v["t_request"]
        c = self.client
        first = np.array(c.first, dtype=float) + tr
        done = np.array(c.done, dtype=float) + tr             # every finished request's last token is delivered
        stats = self.stats.as_dict(self.memory.peak)
        if self.host is not None:
            stats["peak_host"] = self.host.peak
        return EngineResult(np.array(c.sent, dtype=float), first, done, np.isfinite(done), self.memory.crash,
                            stats, self.timeline.rows)
