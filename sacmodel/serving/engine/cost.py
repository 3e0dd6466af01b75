"""How long an iteration takes: all ranks step in lockstep, so it lasts as long as the slowest rank.

An iteration's time on the GPU is the shared part (the fixed floor, collectives, the MLPs over the iteration's
tokens with routed experts read once per distinct token: :mod:`sacmodel.serving.engine.distinct`, the LM head)
plus the slowest rank's own part: its prefill batch (each request's uncached tokens), or its decode batch
(a + c L + g M with L the mean context and M the entries loaded per layer, from the rank's miss accumulator).
Where the ranks' swap-ins share a bottleneck (a CXL device), its bandwidth goes to them by their demands: a rank
whose misses are in leaves its share to the others (:func:`sacmodel.serving.costs.fair_share_finish`).
An iteration without a CUDA graph (any rank prefilling, or a decode batch above the captured sizes) launches
its kernels from the CPU one by one while the GPU runs those launched before: it lasts the longer of the GPU's
work (after the first launch) and the CPU's launches (:meth:`Model.overlapped`), not their sum; a prefill batch
within SGLang's piecewise CUDA graph (``pcg_tokens``) launches only its attention eagerly. Runs of identical decode iterations are priced in
one jump. vLLM's engine mixes a rank's prefill chunks and decode tokens in one forward
(:mod:`sacmodel.serving.engine.vllm`): its rank part is then the prefill batch plus the decode batch.
"""
from __future__ import annotations

import math

from .scheduler import Ranks
from .stepmodel import Model, batch_mha
from .workload import RequestTable


class IterationCost:
    """Prices iterations for one run; caches the prefill and shared parts by their arguments."""

    def __init__(self, model: Model, table: RequestTable):
        self.model, self.table = model, table
        self.t_eager, self.graph_bs = model.t_eager, model.graph_bs
        self.t_eager_pcg, self.pcg_tokens = model.t_eager_pcg, model.pcg_tokens
        self.t_eager_idle, self.dp = model.t_eager_idle, model.cfg.dp
        self._prefill: dict = {}
        self._by_active: dict[int, dict] = {}      # rank coefficients by active ranks, then batch and long requests
        self._shared, self._left = model._shared_cache, model._left_cache
        v = model.v
        self._hs = v["hs_on"] * v["t_hs"], v["hs_on"] * v["t_hs_req"]
        # HiSparse's CPU work before a launch (0 without it) and an IDLE batch's launch: constant over a run
        self.t_hs, self.t_hs_req, self.t_hs_admit = v["t_hs"], v["t_hs_req"], v["t_hs_admit"]
        self.idle_launch = model.launch_cpu(self.t_eager_idle)
        # the CPU's launch time of each launch_time an iteration can have (a graph replay, eager, piecewise graph)
        self.launch_cpu = {x: model.launch_cpu(x) for x in (0.0, self.t_eager, self.t_eager_pcg)}
        self.route_shared = model.route_shared
        # seconds per entry per layer at the shared route's fair share among k copies (index k); a rank alone
        # on the route with b requests: the slope of its rank coefficients with one active rank
        self.share_unit = [model.swap_unit(k) if k else 0.0 for k in range(model.cfg.dp + 1)] \
            if self.route_shared else []
        self._own: dict[int, float] = {}
        self._launched: tuple = (None, None, 0.0)      # (decoding, admits, eager launches) of the last send_delays
        self.misses = 0.0               # entries per layer the last priced iteration loads (all ranks, per step)
        # vLLM runs a rank's prefill chunks and decode tokens in one forward: its rank part is their sum
        self.mixed = model.cfg.engine == "vllm"
        self.mixed_parts: dict[int, float] | None = None      # the iteration's prefill part of each rank (mixed)
        # SGLang runs a dense-MLA prefill batch on one attention path, chosen by the batch's prefixes in all
        m = model.cfg.model
        self.batch_path = m.kind == "mla" and not m.sparse and model.cfg.engine != "vllm"

    def own_unit(self, b: int) -> float:
        """Seconds per entry per layer of a rank's swap-in alone on the route (``b`` blocks in flight)."""
        u = self._own.get(b)
        if u is None:
            u = self._own[b] = self.model.rank_coeffs(b, 1, True)[2]
        return u

    def _coeffs(self, b: int, active: int, lg: bool) -> tuple:
        """A decoding rank's coefficients (a, c, g, k, d, h) of :meth:`Model.rank_coeffs` and its own unit
        (:meth:`own_unit`; 0 where its route is not shared or all its requests fit the buffer)."""
        return self.model.rank_coeffs(b, active, lg) + (self.own_unit(b) if lg and self.route_shared else 0.0,)

    def prefill_part(self, admits: list, prefilled: list[int]) -> float:
        """Seconds of the slowest rank's prefill batch (``admits``: [(rank, [(request, tokens)])])."""
        return max(self.prefill_parts(admits, prefilled).values(), default=0.0)

    def prefill_parts(self, admits: list, prefilled: list[int]) -> dict[int, float]:
        """Seconds of each admitting rank's prefill batch, by rank."""
        L, todo, cache = self.table.L, self.table.todo, self._prefill
        parts = {}
        for r, batch in admits:
            p = 0.0
            mha = batch_mha(sum(L[i] - todo[i] + prefilled[i] for i, _ in batch)) if self.batch_path else None
            for i, take in batch:
                done = prefilled[i]
                key = (take, L[i] - todo[i] + done, done == 0, mha)
                x = cache.get(key)
                if x is None:
                    x = cache[key] = self.model.prefill(*key)
                p += x
            parts[r] = p
        return parts

    def _fixed_parts(self, ranks: Ranks, admits: list, decoding: list[int], n_tok: int,
                     n_distinct: int) -> tuple[float, float, float, float]:
        """(the slowest rank's prefill batch, the shared part, the communication two-batch overlap can still hide
        behind the ranks' attention (:meth:`Model.tbo_left`), the eager launches) of an iteration."""
        model = self.model
        if admits:
            parts = self.prefill_parts(admits, ranks.prefilled)
            floor = max(parts.values())
            self.mixed_parts = parts if self.mixed else None
            seqs, prefill = n_tok, 0
            for _, batch in admits:             # sequences whose next token is computed: one per request
                seqs += len(batch)
                for _, take in batch:
                    prefill += take
            seqs -= prefill
            key = (n_tok, n_distinct, True, seqs)
            shared = self._shared.get(key)
            if shared is None:
                shared = model.shared(n_tok, True, n_distinct, seqs)
            return floor, shared, self._left[key], self._prefill_launch(n_tok if self.mixed else prefill)
        self.mixed_parts = None
        key = (n_tok, n_distinct, False, n_tok)
        shared = self._shared.get(key)
        if shared is None:
            shared = model.shared(n_tok, False, n_distinct)
        known = self._launched           # send_delays priced this iteration's launches (the same batch lists)
        eager = known[2] if known[0] is decoding and known[1] is admits else self.launch_time(ranks, (), decoding)
        return 0.0, shared, self._left[key], eager

    def _prefill_launch(self, tokens: int) -> float:
        """Eager launches of an iteration that prefills ``tokens`` tokens (a piecewise CUDA graph up to its cap)."""
        return self.t_eager_pcg if tokens <= self.pcg_tokens else self.t_eager

    def launch_time(self, ranks: Ranks, admits, decoding: list[int]) -> float:
        """Seconds the CPU spends launching the iteration's kernels beyond a CUDA graph's replay: the eager
        launches of an iteration that runs without a graph (a prefill anywhere, or a decode batch above the
        captured sizes), else 0."""
        if admits:
            tokens = 0
            for _, batch in admits:
                for _, take in batch:
                    tokens += take
            return self._prefill_launch(tokens)
        if decoding and max(map(ranks.running.__getitem__, decoding)) > self.graph_bs:
            return self.t_eager
        return 0.0

    def send_delays(self, ranks: Ranks, admits: list, decoding: list[int]) -> list[float]:
        """Seconds after the scheduling each rank has launched its part of the iteration, when it hands the last
        batch's first tokens on and its loop next takes requests in: the CPU work before the launch and the eager
        launches of an iteration without a CUDA graph; a rank with no batch of its own then launches an IDLE
        batch. The work before the launch is the slowest rank's preparation (HiSparse's step preparation,
        serialised with the GPU, or its admission work with a request's first chunk), since every rank waits for
        the others at the gather of the batch shapes that data-parallel attention runs on the CPU group after
        each rank has prepared its batch (SGLang's ``prepare_mlp_sync_batch``)."""
        eager = self.launch_time(ranks, admits, decoding)
        self._launched = (decoding, admits, eager)
        launch = self.launch_cpu[eager]
        t_hs, t_hs_req, t_hs_admit = self.t_hs, self.t_hs_req, self.t_hs_admit    # 0 without HiSparse
        running = ranks.running
        sync = 0.0                      # the slowest rank's preparation, which every rank waits for
        if decoding:                    # the largest batch's (t_hs_req >= 0: the time grows with the batch)
            x = t_hs + t_hs_req * max(map(running.__getitem__, decoding))
            if x > sync:
                sync = x
        prefilled = ranks.prefilled     # a request is admitted into HiSparse with its first chunk (``admit_on``)
        if t_hs_admit:
            for r, batch in admits:
                starting = 0
                for i, _ in batch:
                    if not prefilled[i]:
                        starting += 1
                x = t_hs_admit * starting
                if x > sync:
                    sync = x
        out = [sync + (self.idle_launch if launch else 0.0)] * self.dp
        own = sync + launch
        for r in decoding:
            out[r] = own
        for r, _ in admits:
            out[r] = own
        return out

    def _slowest(self, ranks: Ranks, decoding: list[int], jump: int, cache: dict) -> tuple[float, tuple | None]:
        """The slowest decoding rank's part (s) over the next ``jump`` steps, at its mean over them, and its state
        (batch, mean context, misses, has long requests); sets :attr:`misses`. Where the ranks' swap-ins share
        a route, the ranks are walked by their demand, each one's finish at its fair share accumulated as
        :func:`sacmodel.serving.costs.fair_share_finish` does (equal parts: the lower rank is the slowest, as
        in rank order)."""
        running, clock, sum_l, sum_join = ranks.running, ranks.clock, ranks.sum_l, ranks.sum_join
        n_long, newest_at, mixed = ranks.n_long, ranks.newest_at, self.mixed_parts
        active, half = len(decoding), (jump - 1) / 2.0
        if ranks.swaps:                             # entries per layer each rank loads per step over the jump
            acc_at, base, Ms = ranks.acc_at, ranks.base, []
            for r in decoding:
                ar, o = acc_at[r], clock[r] - base[r]
                Ms.append((ar[o + jump] - ar[o]) / jump)
            self.misses = sum(Ms)
        else:                                       # nothing loaded: the accumulators stay at zero
            Ms, self.misses = [0.0] * active, 0.0
        split = self.route_shared and ranks.swaps
        units, copies, f, prev = self.share_unit, active, 0.0, 0.0    # copies still running, the finish so far
        top, best, slowest = -1.0, None, -1
        for M, r in sorted(zip(Ms, decoding)) if split else zip(Ms, decoding):
            if split:
                if M > prev:
                    f += (M - prev) * units[copies]
                    prev = M
                copies -= 1
            b = running[r]
            ck = clock[r]
            Lm = (sum_l[r] + b * ck - sum_join[r]) / b + 1.0 + half
            lg = n_long[r] > 0
            co = cache.get(b + b + lg)
            if co is None:
                co = cache[b + b + lg] = self._coeffs(b, active, lg)
            a, c, g, k, d, h, u = co
            if split and lg:                        # the route split by demand (f), within the rank's own limit
                q = u * M
                if f > q:
                    q = f
            else:
                q = g * M
            nb = newest_at[r]
            if nb is not None and h:                # the busiest block: the newest request's misses
                nc, last, born = nb
                age = ck - born
                hi = age + jump
                if hi < last:                       # still young (the usual case): no clamping to its end
                    s = h * (nc[hi] - nc[age]) / jump
                else:
                    s = h * (nc[last] - nc[age if age < last else last]) / jump
                if s > q:
                    q = s
            p = a + c * Lm + q
            if Lm < k:
                p -= d * (k - Lm)
            if mixed is not None:
                p += mixed.get(r, 0.0)
            if p > top or (p == top and r < slowest):
                top, best, slowest = p, (b, Lm, M, lg), r
        return top, best

    def iteration_time(self, ranks: Ranks, admits: list, decoding: list[int], jump: int, n_tok: int,
                       n_distinct: int, now: float, horizon: float) -> tuple[float, int, float, tuple | None]:
        """Seconds per iteration over ``jump`` identical iterations: the shared part over the iteration's
        ``n_tok`` tokens (``n_distinct`` distinct) plus the slowest rank (its prefill batch in ``admits``, or
        its decode batch at its mean over the jump), shrinking the jump so that it ends by ``horizon`` (the next
        arrival or front-end turn). Returns (step time, jump, shared part, the slowest decoding rank's state
        (batch, mean context, misses, has long requests))."""
        model = self.model
        floor, shared, left, eager = self._fixed_parts(ranks, admits, decoding, n_tok, n_distinct)
        active = len(decoding)
        cache = self._by_active.get(active)          # (b << 1 | has long requests) -> coefficients, own unit
        if cache is None:
            cache = self._by_active[active] = {}
        while True:
            top, best = self._slowest(ranks, decoding, jump, cache)
            part = floor
            if top > part:
                part = top
            T = shared + part
            if left > 0.0:                          # two-batch overlap hides DeepEP's calls behind attention
                T = model.joined(shared, part, left, self._hs[0] + self._hs[1] * best[0] if best else 0.0)
            if eager:                               # launches overlap the GPU work (Model.overlapped)
                T = model.overlapped(T, eager)
            if jump == 1 or now + jump * T <= horizon + 1e-12:
                return T, jump, shared, best
            jump = max(1, min(jump - 1, math.ceil((horizon - now) / T)))
