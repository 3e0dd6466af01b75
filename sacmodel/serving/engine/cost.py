"""How long an iteration takes: all ranks step in lockstep, so it lasts as long as the slowest rank.

An iteration's time on the GPU is the shared part (the fixed floor, collectives, the MLPs over the iteration's
tokens with routed experts read once per distinct token: :mod:`sacmodel.serving.engine.distinct`, the LM head)
plus the slowest rank's own part: its prefill batch (each request's uncached tokens), or its decode batch
(a + c L + g M with L the mean context and M the entries loaded per layer, from the rank's miss accumulator).
An iteration without a CUDA graph (any rank prefilling, or a decode batch above the captured sizes) adds the
CPU's launch time of its kernels beyond their in-graph floor. Runs of identical decode iterations are priced in
one jump.
"""
from __future__ import annotations

import math

from .scheduler import Ranks
from .stepmodel import Model
from .workload import RequestTable


class IterationCost:
    """Prices iterations for one run; caches the prefill and shared parts by their arguments."""

    def __init__(self, model: Model, table: RequestTable):
        self.model, self.table = model, table
        self.t_eager, self.graph_bs = model.t_eager, model.graph_bs
        self._prefill: dict = {}
        self._rank = model._rank_cache
        self._shared = model._shared_cache
        self.misses = 0.0               # entries per layer the last priced iteration loads (all ranks, per step)

    def prefill_part(self, admits: list, prefilled: list[int]) -> float:
        """Seconds of the slowest rank's prefill batch (``admits``: [(rank, [(request, tokens)])])."""
        L, todo, cache = self.table.L, self.table.todo, self._prefill
        part = 0.0
        for _, batch in admits:
            p = 0.0
            for i, take in batch:
                key = (take, L[i] - todo[i] + prefilled[i], prefilled[i] == 0)
                x = cache.get(key)
                if x is None:
                    x = cache[key] = self.model.prefill(*key)
                p += x
            part = max(part, p)
        return part

    def iteration_time(self, ranks: Ranks, admits: list, decoding: list[int], jump: int, n_tok: int,
                       n_distinct: int, now: float, horizon: float) -> tuple[float, int, float, tuple | None]:
        """Seconds per iteration over ``jump`` identical iterations: the shared part over the iteration's
        ``n_tok`` tokens (``n_distinct`` distinct) plus the slowest rank (its prefill batch in ``admits``, or
        its decode batch at its mean over the jump), shrinking the jump so that it ends by ``horizon`` (the next
        arrival or front-end turn). Returns (step time, jump, shared part, the slowest decoding rank's state
        (batch, mean context, misses, has long requests))."""
        running, clock, sum_l, sum_join = ranks.running, ranks.clock, ranks.sum_l, ranks.sum_join
        acc_at, base, n_long, cache, model = ranks.acc_at, ranks.base, ranks.n_long, self._rank, self.model
        newest_at, newest = ranks.newest_at, ranks.newest
        if admits:
            floor = self.prefill_part(admits, ranks.prefilled)
            seqs = n_tok - sum(take for _, batch in admits for _, take in batch) + sum(len(b) for _, b in admits)
            shared = self._shared.get((n_tok, n_distinct, True, seqs))
            if shared is None:
                shared = model.shared(n_tok, True, n_distinct, seqs)
            eager = self.t_eager
        else:
            floor = 0.0
            shared = self._shared.get((n_tok, n_distinct, False, n_tok))
            if shared is None:
                shared = model.shared(n_tok, False, n_distinct)
            eager = self.t_eager if max(running[r] for r in decoding) > self.graph_bs else 0.0
        active = len(decoding)
        while True:
            part, best, top, misses = floor, None, -1.0, 0.0
            half = (jump - 1) / 2.0
            for r in decoding:
                b = running[r]
                ck = clock[r]
                Lm = (sum_l[r] + b * ck - sum_join[r]) / b + 1.0 + half
                ar, o = acc_at[r], ck - base[r]
                M = (ar[o + jump] - ar[o]) / jump
                misses += M
                lg = n_long[r] > 0
                co = cache.get((b, active, lg))
                if co is None:
                    co = model.rank_coeffs(b, active, lg)
                q = co[2] * M
                nc = newest_at[r]
                if nc is not None and co[5]:            # the busiest block: the newest request's misses
                    age = ck - newest[r]
                    last = len(nc) - 1
                    s = co[5] * (nc[min(age + jump, last)] - nc[min(age, last)]) / jump
                    if s > q:
                        q = s
                p = co[0] + co[1] * Lm + q
                if Lm < co[3]:
                    p -= co[4] * (co[3] - Lm)
                if p > top:
                    top, best = p, (b, Lm, M, lg)
            if top > part:
                part = top
            T = shared + part + eager
            self.misses = misses
            if jump == 1 or now + jump * T <= horizon + 1e-12:
                return T, jump, shared, best
            jump = max(1, min(jump - 1, math.ceil((horizon - now) / T)))
