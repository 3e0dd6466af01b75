"""Analytic steady state of the serving engine: its long-run limit under steady load, without the event loop.

The same step model as the engine (:mod:`sacmodel.serving.engine.stepmodel`), with the simulation replaced by
the long-run accounting of what the engine charges (times in s, rates per s):

- **Iterations.** A decode iteration lasts the shared part over the decoding tokens plus the slowest rank's
  part: the ranks step in lockstep, so it is the expectation of the busiest rank's batch (:func:`busiest`),
  whose spread comes from the spread of the requests' decode spans and the round-robin arrivals
  (:func:`occupancy_variance`). An admission runs its prefill chunks as eager iterations in which its rank
  does not decode (prefill has priority) while the others do (:func:`prefill_iteration`); the RDMA pool then
  copies the prompt when the request joins decode, stalling every rank (:func:`copy_time`); a prompt
  prefilled from scratch on a HiSparse pool is backed up, holding the GPU (the same stall).
- **Admissions.** The overlap scheduler's loop takes requests in once it has launched the current iteration,
  and the next iteration admits them (:func:`wait_for_admission`): an iteration admits what was dispatched
  during about one iteration before, so under steady load an admission episode holds one request or a few
  (:func:`no_waves`); their copies run together.
- **First token.** It leaves once the next batch is launched: after the eager launches when that batch is
  another admission, and with HiSparse after the CPU preparation of the rank's decode (:func:`launch_wait`).
- **Span.** From its first token to its last, a request's rank runs ``O - 1`` decode steps for it (and one
  staging iteration before them with HiSparse), plus its own rank's prefills; the other episodes that fall in
  the span lengthen it by their prefills and copies beyond the decode steps they replace
  (:func:`episode_extra`). TBT = span / (O - 1), as the engine counts it; Little's law on decode gives the
  request rate X = dp b / span.
- **Closed loop.** ``concurrency = X R`` (Little) with ``R`` the time from sending a request to seeing its last
  token; open loop: ``X`` = the arrival rate, at most the closed loop's.
- **Waves.** Identical outputs released at once (the benchmark) stay in waves (:func:`waves`): a wave is
  taken in one request after the other, so its admissions come in small batches, unless a copy outlasts the
  intake and gathers the rest of the wave into one batch.

Not modelled (the engine has them): the first wave and the end of a run, the first hits staged cold,
retraction and capacity limits, and under waves of the RDMA pool the small batches admitted before the first
copy, each copied on its own (its waves last longer than here: see ``docs/model.md``). Use the engine (the
default) for TTFT, percentiles and anything transient.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from .capacity import host_pool_tokens, host_tokens
from .config import FETCH_SYSTEMS, Config, backup_bandwidth, fetch_bandwidth
from .access import ndtr
from .engine.stepmodel import Model
from .engine.workload import RequestTable, Requests


@dataclass
class Load:
    """The workload's averages: prompt ``L``, tokens prefilled per admission ``E`` in ``chunks`` chunks,
    output ``O`` (all tokens), mean decode age ``age``, misses per request per step and layer ``m``, decode
    spans relative to the mean (``spread``: E|s1 - s2| / 2, ``overlap``: E min(s1, s2)), whether the prompt
    is cached, shared, and whether the load moves in waves."""
    L: float
    E: float
    chunks: int
    O: float
    age: float
    m: float
    spread: float
    overlap: float
    cold: bool
    shared: bool
    waves: bool


def load_of(cfg: Config, mdl: Model, reqs: Requests, rate, start: str = "together") -> Load:
    """The averages :class:`Load` holds, from the requests as the engine's table sees them (identical outputs
    move in waves only when the users start together)."""
    tb = RequestTable(cfg, reqs)
    L, O = float(np.mean(tb.L)), float(np.mean(tb.out))
    life = np.maximum(np.asarray(tb.out, dtype=float) - 1.0, 0.0)
    age = float((life * np.maximum(life - 1.0, 0.0) / 2.0).sum() / max(life.sum(), 1.0)) + 1.0
    curve = mdl.misses(int(round(L)), int(max(life.max(), 1)))
    m = float(curve[life.astype(int)].sum() / max(life.sum(), 1.0))
    s = np.sort(np.asarray(tb.out, dtype=float)) / O            # spans ~ outputs, relative to their mean
    n = len(s)
    rank = np.arange(n)
    spread = float(((2 * rank - n + 1) * s).sum() / (n * n)) if n > 1 else 0.0      # E|s1 - s2| / 2
    overlap = float(((2 * (n - rank) - 1) * s).sum() / (n * n))                     # E min(s1, s2)
    E = float(np.mean(tb.todo))
    waves = rate is None and start == "together" and n > 1 and s[0] == s[-1]
    return Load(L, E, max(1, math.ceil(E / cfg.prefill_chunk)), O, age, m, spread, overlap,
                cold=not all(tb.hit), shared=tb.pid is not None, waves=waves)


def occupancy_variance(b: float, ld: Load, dp: int) -> float:
    """Variance of a rank's decoding requests around its mean ``b``: each rank is an infinite-server queue
    (continuous batching) fed by every dp-th request (round robin), so Var = lam (E|S1 - S2| / 2 + c^2 E
    min(S1, S2)) with lam E[S] = b and c^2 = 1 / dp the arrivals' squared coefficient of variation."""
    return 0.0 if ld.waves else b * (ld.spread + ld.overlap / dp)


def busiest(b: float, var: float, ranks: int) -> dict[int, float]:
    """Distribution {batch: probability} of the largest of ``ranks`` ranks' batches, each about normal with
    mean ``b`` and variance ``var`` on the integers (continuity-corrected); a fixed ``b`` rounds up."""
    if ranks <= 0:
        return {}
    if var <= 1e-12:
        return {max(1, math.ceil(b - 1e-9)): 1.0}
    sd = math.sqrt(var)
    top = int(math.ceil(b + 8 * sd)) + 1
    cdf = [float(ndtr((n + 0.5 - b) / sd)) ** ranks for n in range(top + 1)]
    dist = {n: cdf[n] - (cdf[n - 1] if n else 0.0) for n in range(top + 1)}
    dist[max(1, top)] = dist.get(max(1, top), 0.0) + 1.0 - cdf[-1]
    mass0 = dist.pop(0, 0.0)          # no rank busy: the iteration is priced as one request (rare)
    dist[1] = dist.get(1, 0.0) + mass0
    return {n: p for n, p in dist.items() if p > 0}


def rank_part(mdl: Model, dist: dict[int, float], ld: Load, active: int) -> tuple[float, float]:
    """(expected seconds of the slowest rank's decode part, probability it runs eagerly) over the busiest
    batch ``dist``: a + c L + g M at the mean context and ``n`` times the misses per request."""
    swap = ld.L > mdl.cfg.device_buffer
    part = sum(p * mdl.rank_time(n, active, ld.L + ld.age, n * ld.m, swap) for n, p in dist.items())
    eager = sum(p for n, p in dist.items() if n > mdl.graph_bs)
    return part, eager


def decode_iteration(mdl: Model, ld: Load, b: float, dp: int, groups: float | None = None) -> float:
    """Seconds of a decode iteration at ``b`` decoding requests per rank: the shared part over ``dp b`` tokens
    (``groups`` distinct ones: identical requests of a shared prompt that joined a rank together compute one
    token; default all distinct) plus the busiest rank's part, eagerly above the CUDA-graph batch."""
    active = max(1, min(dp, round(dp * b))) if b < 1 else dp
    n = max(dp * b, 1.0)
    part, eager = rank_part(mdl, busiest(b, occupancy_variance(b, ld, dp), active), ld, active)
    distinct = n if groups is None else min(n, groups)
    n_i, d_i = int(round(n)), int(round(distinct))
    gpu = mdl.joined(mdl.shared(n_i, False, d_i), part, mdl.tbo_left(n_i, False, d_i))
    return (1.0 - eager) * gpu + eager * mdl.overlapped(gpu, mdl.t_eager)      # launches overlap the GPU work


def prefill_iteration(mdl: Model, ld: Load, b: float, dp: int, per_rank: int, ranks: int) -> float:
    """Seconds of one prefill chunk iteration in which ``ranks`` ranks admit ``per_rank`` requests each (eager):
    the shared part over the prefill and the other ranks' decode tokens, and the slower of the prefilling
    ranks' chunks and the other ranks' decode parts."""
    P = ld.E / ld.chunks
    first = mdl.prefill(P, ld.L - ld.E, True)
    more = mdl.prefill(P, ld.L - ld.E + P, False) if ld.chunks > 1 else first
    chunk = per_rank * (first + (ld.chunks - 1) * more) / ld.chunks
    others = dp - ranks
    dec = 0.0
    if others > 0 and b > 0:
        dec, _ = rank_part(mdl, busiest(b, occupancy_variance(b, ld, dp), others), ld, dp)
    tokens = per_rank * ranks * P + others * b
    seqs = others * b + per_rank * ranks
    eager = mdl.t_eager_pcg if per_rank * P <= mdl.pcg_tokens else mdl.t_eager     # piecewise CUDA graph
    key = (int(round(tokens)), True, int(round(tokens)), int(round(max(seqs, 1))))
    gpu = mdl.joined(mdl.shared(*key), max(chunk, dec), mdl.tbo_left(*key))
    return mdl.overlapped(gpu, eager)                                         # launches overlap the GPU work


def copy_time(cfg: Config, mdl: Model, ld: Load, per_rank: int, ranks: int) -> float:
    """Seconds every rank stalls while ``ranks`` ranks copy ``per_rank`` prompts each back to back (the RDMA
    pool's prefix copy, cxl-prefetch's DMA), or back up prompts prefilled from scratch (HiSparse pools)."""
    t = 0.0
    if cfg.system in FETCH_SYSTEMS:
        bw = fetch_bandwidth(cfg, tuple(range(ranks))).get(0, 0.0) if cfg.system == "rdma" else 0.0
        t += per_rank * mdl.fetch(ld.L, bw)
    if cfg.hisparse and ld.cold:
        t += per_rank * mdl.backup(ld.L, backup_bandwidth(cfg, tuple(range(ranks)))[0])
    return t


def episode_extra(T_p: float, T_d: float, t_c: float, chunks: int, ranks: int, dp: int) -> float:
    """Seconds an admission episode (``ranks`` ranks admitting: ``chunks`` prefill iterations of ``T_p`` s and
    a copy of ``t_c`` s) adds to a request's span beyond the decode steps it replaces: the iterations in
    which its rank decodes (a share 1 - ranks / dp of them) replace a decode step."""
    return chunks * T_p + t_c - chunks * (1.0 - ranks / dp) * T_d


def wait_for_boundary(after: float, steps: tuple[tuple[float, float], ...]) -> float:
    """Seconds a request dispatched ``after`` s past an iteration boundary waits for the next one, when the
    iteration starting at that boundary lasts tau with probability p (``steps``: (p, tau)) and the ones after
    it T_d, the first entry's tau (the engine admits only at iteration boundaries)."""
    T_d = steps[0][1]
    out = 0.0
    for p, tau in steps:
        left = after - tau
        out += p * (tau - after if left < 0 else T_d * math.ceil(left / T_d + 1e-12) - left)
    return out


def wait_for_admission(after: float, recv: float, steps: tuple[tuple[float, float], ...]) -> float:
    """Seconds a request dispatched ``after`` s past an iteration boundary waits for its admission. The overlap
    scheduler's loop takes requests in ``recv`` s into each iteration, once it has launched it, and the
    iteration after that intake admits them: a request that comes before the intake is admitted at the next
    boundary, a later one an iteration (``T_d``, the first entry's tau) after the boundary that follows
    (``steps`` as for :func:`wait_for_boundary`)."""
    if after <= recv:
        return sum(p * (tau - after) for p, tau in steps)
    return wait_for_boundary(after - recv, steps) - recv + steps[0][1]


@dataclass
class Terms:
    """One evaluation at ``b`` decoding requests per rank: iteration times, copy, span and cycle (s), the
    request rate ``X`` (1/s), the time before the first token ``pre`` (s, without ``t_request``), requests
    per admission episode ``g`` and the share of time in admissions and copies ``stall``."""
    b: float
    T_d: float
    T_p: float
    t_c: float
    S: float
    X: float
    pre: float
    g: float = 1.0
    stall: float = 0.0

    @property
    def R(self) -> float:
        return self.pre + self.S


def span_steps(cfg: Config, ld: Load) -> float:
    """Iterations a request's rank runs for it from its first token to its last: ``O - 1`` decode steps, and a
    staging iteration before them with HiSparse."""
    return ld.O - (0.0 if cfg.hisparse else 1.0)


def launch_wait(mdl: Model, ld: Load, p_admission: float, b: float = 0.0) -> float:
    """Mean seconds a first token waits for the launch of its rank's next batch: the eager launches of an
    admission, which follows with probability ``p_admission`` (a CUDA-graph decode is launched at once), and
    with HiSparse the CPU preparation of the rank's decode of ``b`` requests before it."""
    eager = mdl.launch_cpu(mdl.t_eager_pcg if ld.E / ld.chunks <= mdl.pcg_tokens else mdl.t_eager)
    v = mdl.v
    prep = v["hs_on"] * (v["t_hs"] + v["t_hs_req"] * b) * min(max(b, 0.0), 1.0)
    return min(max(p_admission, 0.0), 1.0) * eager + prep


def no_waves(cfg: Config, mdl: Model, ld: Load, b: float, C: int) -> Terms:
    """Steady load without waves at ``b`` decoding requests per rank (``C`` in flight). An iteration admits
    what was dispatched during the one before: about Poisson with mean x = X / I (I iterations per second),
    so an admission episode holds g = x / (1 - e^-x) requests on about dp (1 - (1 - 1/dp)^g) ranks, and their
    copies run together. From the span, X = dp b / S (Little's law on decode): S = O T_d + t_c + dp b (1 -
    1/C) extra / g, the other episodes in the span coming at X (1 - 1/C) / g per second. With SGLang's
    ``scheduler_recv_interval`` N the scheduler takes requests in every N decode iterations: an episode admits
    what came during N iterations, and a request waits (N - 1) / 2 of them on average for the intake."""
    dp, N = cfg.dp, cfg.recv_interval
    T_d = decode_iteration(mdl, ld, b, dp)
    g = 1.0
    for _ in range(30):
        ranks = max(1, min(dp, round(dp * (1.0 - (1.0 - 1.0 / dp) ** g))))
        T_p = prefill_iteration(mdl, ld, b, dp, 1, ranks)
        t_c = copy_time(cfg, mdl, ld, 1, ranks)
        extra = episode_extra(T_p, T_d, t_c, ld.chunks, ranks, dp)
        S = span_steps(cfg, ld) * T_d + t_c + dp * b * (1.0 - 1.0 / C) * extra / g
        X = dp * b / S
        stall = X / g * (ld.chunks * T_p + t_c)             # share of time in prefills and copies
        iters = X / g * ld.chunks + max(1.0 - stall, 0.0) / T_d
        x = X / iters * N
        new = x / -math.expm1(-x) if x > 1e-12 else 1.0
        if abs(new - g) < 1e-9:
            break
        g = new
    p_join = min(1.0, X / g * ld.chunks / iters)            # a batch joins (and copies) at the next boundary
    after = mdl.v["t_token"] * ld.L                         # the next request is dispatched this long after
    recv = launch_wait(mdl, ld, 0.0, b)                     # a decoding rank's loop takes requests in then
    W = wait_for_admission(after, recv, ((1.0 - p_join, T_d), (p_join, T_d + t_c))) + (N - 1) / 2.0 * T_d
    pre = after + W + ld.chunks * T_p + p_join * t_c        # its first token waits for copies run before it
    pre += launch_wait(mdl, ld, p_join * (1.0 - 1.0 / C), b)  # the next admission is another request's
    return Terms(b, T_d, T_p, t_c, S, X, pre, g, stall)


def wave_batch(mdl: Model, ld: Load, C: int, dp: int) -> tuple[float, float]:
    """(requests per admission, seconds per admission) while a wave comes in one request every ``f`` s: an
    admission takes in what arrived during the one before, so g = T_p(g) / f (at least one, at most the
    wave), spread over the ranks round-robin. An admission of n requests takes T_p(n); between whole numbers
    T_p is interpolated, so g = T_p(g) / f always has a solution (with T_p stepping at whole numbers the
    iteration could alternate between two counts) and it moves smoothly with the inputs."""
    f = mdl.v["t_token"] * ld.L
    top = max(C - 1.0, 1.0)
    at: dict[int, float] = {}

    def T_at(n: int) -> float:
        if n not in at:
            ranks = max(1, min(dp, n))
            at[n] = prefill_iteration(mdl, ld, C / dp, dp, math.ceil(n / ranks), ranks)
        return at[n]

    def T_p(g: float) -> float:
        n = min(int(g), int(top))
        w = g - n
        return T_at(n) if w <= 0.0 else (1.0 - w) * T_at(n) + w * T_at(n + 1)

    def gap(g: float) -> float:
        return min(max(ld.chunks * T_p(g) / f, 1.0), top) - g

    if top <= 1.0:
        g = 1.0
    elif gap(top) >= 0.0:                   # every later request comes during the first admission
        g = top
    else:                                   # gap(1) >= 0: a root lies between
        g = brentq(gap, 1.0, top, xtol=1e-9)
    return g, T_p(g)


def waves(cfg: Config, mdl: Model, ld: Load, C: int) -> Terms:
    """Identical requests released at once stay in waves. A wave is taken in one request after the other
    (``t_token`` per prompt token each, ``f``): its first request is admitted alone, each later admission
    takes in what arrived during the previous one (:func:`wave_batch`), and later admissions fall in an earlier
    request's span (half of them on average). If the first request's copy outlasts the wave's intake it
    gathers the rest, which every rank admits in one batch and copies back to back, all ranks at once.
    Requests of one shared prompt admitted together on a rank compute one distinct token."""
    dp = cfg.dp
    f = mdl.v["t_token"] * ld.L
    b = C / dp
    T_p1, t_c1 = prefill_iteration(mdl, ld, b, dp, 1, 1), copy_time(cfg, mdl, ld, 1, 1)
    if C == 1 or t_c1 + T_p1 < C * f:                     # admitted as the wave comes in
        g, T_p = wave_batch(mdl, ld, C, dp)
        ranks = max(1, min(dp, round(g)))
        n_ep = 1.0 + (C - 1.0) / g
        T_d = decode_iteration(mdl, ld, b, dp, groups=n_ep * ranks if ld.shared else None)
        t_c = copy_time(cfg, mdl, ld, math.ceil(g / ranks), ranks)
        extra = episode_extra(T_p, T_d, t_c, ld.chunks, ranks, dp)
        S = span_steps(cfg, ld) * T_d + t_c + (n_ep - 1.0) / 2.0 * extra
        pre = f + (n_ep - 1.0) / 2.0 * (ld.chunks * T_p + t_c) \
            + wait_for_admission(f, launch_wait(mdl, ld, 1.0, b), ((1.0, T_p),)) \
            + ld.chunks * T_p + launch_wait(mdl, ld, (n_ep - 1.0) / n_ep, b)
        X = C / (pre + S)
        return Terms(b, T_d, T_p, t_c, S, X, pre, g, X / C * n_ep * (ld.chunks * T_p + t_c))
    ranks, per = min(dp, C - 1), math.ceil((C - 1) / dp)
    T_d = decode_iteration(mdl, ld, b, dp, groups=dp + 1.0 if ld.shared else None)
    T_p = prefill_iteration(mdl, ld, 0.0, dp, per, ranks)
    t_c = copy_time(cfg, mdl, ld, per, ranks)
    first = ld.chunks * T_p1                              # the first request: admitted, then copied alone
    S_rest = span_steps(cfg, ld) * T_d + t_c
    S = ((ld.chunks * T_p + t_c1 + S_rest) + (C - 1) * S_rest) / C
    pre = f + first + (t_c1 + ld.chunks * T_p) * (C - 1) / C + launch_wait(mdl, ld, (C - 1) / C, b)
    period = f + first + t_c1 + ld.chunks * T_p + S_rest
    return Terms(b, T_d, T_p, t_c, S, C / period, pre, C / 2.0, (first + t_c1 + ld.chunks * T_p + t_c) / period)


def solve(cfg: Config, mdl: Model, ld: Load, C: int, rate: float | None) -> Terms:
    """The steady state: closed loop, ``C = X R``; open loop, ``X = rate`` while that keeps at most ``C`` in
    flight (else the closed loop at ``C``, the client's cap)."""
    if ld.waves:
        return waves(cfg, mdl, ld, C)
    top = C / cfg.dp
    at = lambda b: no_waves(cfg, mdl, ld, b, C)  # noqa: E731
    if rate is not None:
        hi = at(top)
        if hi.X > rate:
            b = brentq(lambda b: at(b).X - rate, 1e-9 * top, top, xtol=1e-9 * top)
            t = at(b)
            if t.X * t.R <= C:
                return t
    g = lambda b: (lambda t: t.X * t.R - C)(at(b))  # noqa: E731
    return at(brentq(g, 1e-9 * top, top, xtol=1e-9 * top))


def prefill_only(cfg: Config, mdl: Model, ld: Load, C: int, rate: float | None) -> Terms:
    """Requests of one output token end with their prefill: each is taken in (``f = t_token L``, one at a
    time, so X <= 1 / f) and admitted (``chunks`` prefill iterations): R = f + chunks T_p, X = C / R, or
    the rate if lower."""
    T_p = prefill_iteration(mdl, ld, 0.0, cfg.dp, 1, 1)
    f = mdl.v["t_token"] * ld.L
    pre = f + ld.chunks * T_p
    X = min(C / pre, 1.0 / f if f > 0 else math.inf, math.inf if rate is None else rate)
    return Terms(0.0, 0.0, T_p, 0.0, 0.0, X, pre, 1.0, min(1.0, X * ld.chunks * T_p))


def _host_pool_stop(cfg: Config, reqs: Requests, decoding: float) -> str | None:
    """The limit where the requests a rank decodes at once overflow its HiSparse host pool (SGLang stops there,
    :class:`~sacmodel.serving.engine.memory.HostPool`), else None."""
    cap = host_pool_tokens(cfg)
    if cap is None or not len(reqs):
        return None
    shared = reqs.prompt is not None and bool(reqs.cached.any())
    L, out = float(reqs.context.mean()), float(reqs.output.mean())
    held = (L if shared else 0.0) + math.ceil(decoding - 1e-9) * host_tokens(min(cfg.page, L) if shared else L, out)
    if held <= cap:
        return None
    return (f"host_pool: {held:,.0f} of {cap:,} host-pool slots a rank for the {math.ceil(decoding - 1e-9)} requests "
            "it decodes at once; a HiSparse allocation that finds the pool full stops the server")


def steady_state(cfg: Config, reqs: Requests, concurrency: int, rate: float | None = None,
                 start: str = "together") -> dict:
    """Metrics of the steady state (fields of :class:`sacmodel.serving.predict.Prediction`; ms, tokens/s);
    ``start="staggered"``: users at their own phases, so identical outputs do not move in waves."""
    mdl = Model(cfg)
    ld = load_of(cfg, mdl, reqs, rate, start)
    C = max(1, min(concurrency, len(reqs)))
    t = solve(cfg, mdl, ld, C, rate) if ld.O > 1 else prefill_only(cfg, mdl, ld, C, rate)
    stop = _host_pool_stop(cfg, reqs, t.b)
    if stop:
        return {"feasible": False, "success_fraction": 0.0, "limit": stop}
    tr = mdl.v["t_request"]
    tbt = t.S / (ld.O - 1.0) if ld.O > 1 else math.nan
    return {"ttft_mean_ms": (t.pre + tr) * 1e3, "tbt_mean_ms": tbt * 1e3, "e2e_mean_ms": (t.R + tr) * 1e3,
            "output_throughput_tok_s": t.X * ld.O, "request_throughput_req_s": t.X,
            "breakdown": {"mean_step_ms": t.T_d * 1e3, "prefill_iteration_ms": t.T_p * 1e3,
                          "prefix_fetch_ms": t.t_c * 1e3, "misses_per_layer_per_request": ld.m,
                          "decoding_per_rank": t.b, "requests_per_admission": t.g,
                          "share_time_stalled": t.stall, "waves": ld.waves}}
