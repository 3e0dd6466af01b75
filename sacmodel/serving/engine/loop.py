"""Event engine: the SGLang scheduler with data-parallel attention, iteration by iteration.

What it simulates (each piece is a mechanism of the measured server, see ``step.py`` for the costs):

- **Client and front end.** The benchmark client releases requests (all at once, at most ``concurrency``
  in flight, the next as soon as it sees a request's last token; or at given arrival times). The server's
  front end (:mod:`sacmodel.serving.engine.frontend`) is one event loop: it takes requests in one after another
  (``t_token`` per prompt token) and, while it has requests to take in, hands on one output message (one
  rank's tokens of one iteration) per turn, so first and last tokens wait behind the rank messages queued
  before them. A token reaches the client ``t_request`` after the front end hands it on.
- **Dispatch.** Requests go to the data-parallel ranks round-robin in the order they arrive.
- **Iterations.** All ranks step in lockstep. Each iteration a rank either admits waiting requests (a
  prefill batch: up to ``prefill_chunk`` new tokens, a prefix hit costing one page) or decodes its running
  requests; the iteration lasts as long as the slowest rank (:mod:`sacmodel.serving.step`).
- **Staging and RDMA fetch.** An admitted request joins decode one iteration after its first token (its new
  tokens are copied to the host pool first). On the RDMA pool the scheduler then copies the request's whole
  prompt from the pool (CPU gather, RDMA READ, CPU transpose and scatter) before anything else, which stalls
  every rank for that iteration; concurrent fetches share the NICs.
- **Cold staging.** A request staged without a host-pool entry for its prefix backs its whole prompt up from
  the GPU to the pool as its result is processed: a prompt prefilled from scratch, and the first prefix hit of
  a prompt on a rank when no entry is found for it (``cold_staging``: in the benchmark's second round the
  first round's entry is not reused; the logs show each rank's first hit staged cold). The copy starts when
  the forward launched before it ends and holds the GPU: the next iteration lasts that much longer (the ranks
  backing up at once share the GPU-to-pool route), and the request, with the rank's requests staged after it,
  is acknowledged one iteration later than a warm one. Other prefix hits reuse the entry and stage only
  their new tokens.
- **Overlap scheduler.** A batch's results (a prefill's first tokens) are sent once the next batch has been
  scheduled, so the prefix copies run in that scheduling delay the first tokens of the batch before it
  (SGLang's overlapped event loop; ``disable_overlap_schedule=False`` in the testbed's logs).
- **Buffer warm-up and settling.** A request admitted on a cached prefix starts with an empty GPU buffer: its
  first steps load the buffer (``B`` entries over ``T_C`` steps), then the steady misses of the score process
  at its current correlation (:mod:`sacmodel.serving.access`, :func:`sacmodel.serving.config.score_correlation`).
- **Memory.** Each HiSparse request holds ``device_buffer + 64`` physical slots from admission to the end; the
  shared prefix holds its device pages. If a rank's scheduler admits a request whose buffer does not fit
  (its admission check only reserves ``64 + min(output, 4096)`` tokens), the buffer allocation raises and
  the server stops: the requests not yet finished fail.
- **Identical tokens.** Requests of one prompt decoded greedily (the benchmark) generate the same token at
  the same position, so the MoE layers read the experts of the distinct tokens only.

Runs of identical decode iterations are advanced in one jump (bounded while the miss rate still changes).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .. import step as steps
from ..access import steady_state
from ..config import (
    FETCH_SYSTEMS,
    Config,
    backup_bandwidth,
    fetch_bandwidth,
    score_correlation,
    static_values,
    swap_route,
)
from .frontend import FrontEnd


@dataclass
class Requests:
    """A workload as per-request arrays: arrival (s), prompt tokens, output tokens, cached-prefix tokens.

    ``prefix_pages``: device tokens that the cached prefix holds on every rank (the benchmark's shared prompt,
    prefilled once per rank in its first round); 0 when cached prefixes are evictable. ``cold_staging``: no
    host-pool entry is found yet for the prompts' page-aligned prefixes (as in the benchmark's second round),
    so each rank's first prefix hit of each prompt is staged cold.
    """
    arrival: np.ndarray
    context: np.ndarray
    output: np.ndarray
    cached: np.ndarray
    prefix_pages: int = 0
    prompt: np.ndarray | None = None      # prompt id per request (same id = same prompt); None: all distinct
    cold_staging: bool = False            # no host-pool entry under the prompts' prefix keys yet (see run_engine)

    def __post_init__(self):
        self.arrival = np.asarray(self.arrival, dtype=float)
        self.context = np.asarray(self.context, dtype=np.int64)
        self.output = np.asarray(self.output, dtype=np.int64)
        self.cached = np.asarray(self.cached, dtype=np.int64)
        if self.prompt is not None:
            self.prompt = np.asarray(self.prompt, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.arrival)


@dataclass
class Crash:
    time: float
    rank: int
    reason: str


@dataclass
class EngineResult:
    release: np.ndarray
    first: np.ndarray
    done: np.ndarray
    completed: np.ndarray
    crash: Crash | None
    stats: dict = field(default_factory=dict)
    timeline: list = field(default_factory=list)


# ---- per-configuration numbers ----------------------------------------------------------------------
# trace replays compute the miss curves on the server's 64-token page grid (see Model.misses)
TRACE_CONTEXT_GRID = 64


class Model:
    """The step model of one configuration, reduced to fast closed forms for the engine's inner loop."""

    def __init__(self, cfg: Config, context_grid: int = 1):
        self.cfg = cfg
        self.context_grid = int(context_grid)
        self.v = static_values(cfg)
        self.rank_c = steps.compiled("rank")
        self.shared_c = steps.compiled("shared")
        self.prefill_c = steps.compiled("prefill")
        self.fetch_c = steps.compiled("fetch")
        self.staging_c = steps.compiled("staging")
        self.k = float(cfg.model.topk) if cfg.model.sparse else 0.0
        self.B = float(cfg.device_buffer)
        self._rank_cache: dict = {}
        self._shared_cache: dict = {}
        self._miss_cache: dict = {}
        # the shared part's arguments: fixed ones filled in once, the three that vary set per call
        names = self.shared_c.names
        self._shared_args = self.shared_c.args(dict(self.v, N=1.0, N_d=1.0, mlp_eff=1.0))
        self._shared_at = (names.index("N"), names.index("N_d"), names.index("mlp_eff"))

    # rank part = a + c * L + g * M  for b requests (exact: the expressions are linear in L and M)
    def rank_coeffs(self, b: int, active: int, swap: bool = True) -> tuple[float, float, float]:
        """Coefficients of the rank part; ``swap=False`` when all its requests fit the GPU buffer."""
        key = (b, active, swap)
        c = self._rank_cache.get(key)
        if c is None:
            bw, lat = swap_route(self.cfg, active)
            v = dict(self.v, b=float(b), sw_bw=bw, sw_lat=lat, k_attn=self.k or 1.0,
                     swap_on=1.0 if swap and self.cfg.hisparse and self.cfg.system != "rdma-topk" else 0.0)
            f = self.rank_c.total
            L0, L1 = 4 * self.k + 1.0, 8 * self.k + 2.0           # both above k: the linear branch
            a = self.rank_c.args(dict(v, L=L0, M=0.0))
            i_l, i_m = self.rank_c.names.index("L"), self.rank_c.names.index("M")
            t00 = f(*a)
            a[i_l] = L1
            t10 = f(*a)
            a[i_l], a[i_m] = L0, 1.0
            t01 = f(*a)
            slope_l = (t10 - t00) / (L1 - L0)
            c = (t00 - slope_l * L0, slope_l, t01 - t00)
            self._rank_cache[key] = c
        return c

    def rank_terms(self, b: int, active: int, L: float, M: float, swap: bool = True) -> dict[str, float]:
        bw, lat = swap_route(self.cfg, active)
        v = dict(self.v, b=float(b), L=float(L), M=float(M), sw_bw=bw, sw_lat=lat, k_attn=min(self.k, L) or L,
                 swap_on=1.0 if swap and self.cfg.hisparse and self.cfg.system != "rdma-topk" else 0.0)
        a = self.rank_c.args(v)
        return {k: f(*a) for k, f in self.rank_c.funcs.items()}

    def shared(self, n_tokens: int, prefill: bool, distinct: int | None = None) -> float:
        d = n_tokens if distinct is None else distinct
        key = (n_tokens, d, prefill)
        s = self._shared_cache.get(key)
        if s is None:
            a = list(self._shared_args)
            i_n, i_d, i_eff = self._shared_at
            a[i_n], a[i_d] = float(max(n_tokens, 1)), float(max(d, 1))
            a[i_eff] = self.v["prefill_eff"] if prefill else self.v["compute_eff"]
            s = self.shared_c.total(*a)
            self._shared_cache[key] = s
        return s

    def prefill(self, P: float, H: float) -> float:
        L = H + P
        v = dict(self.v, P=float(P), H=float(H), k_attn=min(self.k, L) if self.k else L)
        return self.prefill_c.total(*self.prefill_c.args(v))

    def fetch(self, tokens: float, nic_bw: float) -> float:
        if self.cfg.system == "cxl-prefetch":
            return tokens * self.cfg.token_bytes / self.pf_dma_bw()
        v = dict(self.v, N_f=float(tokens), nic_bw=nic_bw)
        return self.fetch_c.total(*self.fetch_c.args(v))

    def backup(self, tokens: float, bw: float) -> float:
        """Seconds a cold staging backup of a ``tokens``-token prompt takes at ``bw`` B/s."""
        v = dict(self.v, N_b=float(tokens), bk_bw=bw)
        return self.staging_c.total(*self.staging_c.args(v))

    @lru_cache(maxsize=1)
    def pf_dma_bw(self) -> float:
        from ...hardware.topology import max_min_share
        t = self.cfg.topo
        flows = [(d, t.pool_for(0, "dram")) for d in t.pools["cxl"][:self.cfg.cxl_devices]]
        return sum(max_min_share(t, flows))

    def misses(self, context: int, max_age: int) -> np.ndarray:
        """Cumulative entries loaded per layer by one request, C[a] = sum of misses of its steps 0..a-1.

        With ``context_grid`` g > 1 the curve is computed at the context rounded to a multiple of g: it is
        smooth in the context (64 tokens move it by about 1% at 4K, less beyond), and a trace of many prompt
        lengths then needs one curve per grid step instead of one per length."""
        g = self.context_grid
        key = (g * round(context / g) if g > 1 and context > g else context, max_age)
        c = self._miss_cache.get(key)
        if c is None:
            c = cumulative_misses(self.cfg, key[0], max_age)
            self._miss_cache[key] = c
        return c


def cumulative_misses(cfg: Config, context: int, max_age: int) -> np.ndarray:
    """C[a] for a = 0..max_age+1 (see :meth:`Model.misses`); zeros when nothing is swapped."""
    n = max_age + 2
    if not _swaps(cfg, context, max_age):
        return np.zeros(n)
    per = _per_step(cfg, context, np.arange(n, dtype=float))
    return np.concatenate([[0.0], np.cumsum(per)])[:n]


def cumulative_misses_at(cfg: Config, context: int, ages) -> np.ndarray:
    """C[a] at any ages (array), also far beyond an engine run: exact sums up to ``EXACT_AGES``, then the
    per-step misses (smooth there: settled correlation, slowly growing context) integrated on a geometric grid."""
    ages = np.asarray(ages, dtype=float)
    top = int(np.max(ages)) if ages.size else 0
    if top <= EXACT_AGES:
        return cumulative_misses(cfg, context, max(top, 1))[ages.astype(int)]
    if not _swaps(cfg, context, top):
        return np.zeros(ages.shape)
    c0 = cumulative_misses(cfg, context, EXACT_AGES)          # C[0..EXACT_AGES + 1]
    g = np.unique(np.concatenate([np.geomspace(EXACT_AGES, top + 1, 512), [float(EXACT_AGES), top + 1.0]]))
    m = _per_step(cfg, context, g, first_fill=False)
    cg = c0[EXACT_AGES] + np.concatenate([[0.0], np.cumsum(np.diff(g) * (m[1:] + m[:-1]) / 2)])
    out = np.interp(ages, g, cg)
    low = ages <= EXACT_AGES
    out[low] = c0[ages[low].astype(int)]
    return out


EXACT_AGES = 8192


def _swaps(cfg: Config, context: int, max_age: int) -> bool:
    return bool(cfg.hisparse and cfg.model.sparse and cfg.device_buffer < context + max_age)


def _per_step(cfg: Config, context: int, ages: np.ndarray, first_fill: bool = True) -> np.ndarray:
    """Entries loaded per layer at each age (decode steps since admission): the top-k into an empty buffer at
    age 0, the buffer's fill over ``T_C`` steps, then the steady misses at the age's correlation."""
    k = float(min(cfg.model.topk, context))
    B = float(cfg.device_buffer)
    phi = score_correlation(cfg, ages)
    m, _ = steady_state(context=context + ages, topk=k, buffer_slots=B, correlation=phi, need_fill=False)
    if B >= context:            # fits the buffer at first: loaded whole once, misses only as it grows past B
        per = np.where(context + ages > B, m, 0.0)
        if first_fill:
            per[ages == 0] = context
        return per
    if not first_fill:
        return m
    # just past the buffer it may take longer than the request's life to fill: count that life at most
    t_fill = float(steady_state(context=context, topk=k, buffer_slots=B, correlation=score_correlation(cfg, np.zeros(1)),
                                max_steps=len(ages) + 2)[1][0])
    t_fill = max(1.0, t_fill if math.isfinite(t_fill) else float(len(ages)))
    per = np.where(ages < t_fill, (B - k) / max(t_fill - 1.0, 1.0), m)
    per[ages == 0] = k
    return per


# ---- the engine -------------------------------------------------------------------------------------
def run_engine(cfg: Config, reqs: Requests, concurrency: int, *, model: Model | None = None,
               record: bool = False, first_round: int = 0) -> EngineResult:
    """Simulate the workload; see the module docstring. ``record=True`` keeps a per-rank timeline sampled
    like the server log (every 40 decode steps: time, rank, running requests, device tokens held).
    ``first_round``: requests dispatched before this workload (the round-robin counter continues)."""
    mdl = model or Model(cfg)
    dp = cfg.dp
    n = len(reqs)
    L = reqs.context.tolist()
    out = reqs.output.tolist()
    arrival = reqs.arrival.tolist()
    page = cfg.page
    hs = cfg.hisparse
    v = mdl.v
    t_token, t_admit = v["t_token"], v["t_admit"]
    chunk, max_total, max_run = cfg.prefill_chunk, cfg.max_total_tokens, cfg.max_running_requests
    fetching_system = cfg.system in FETCH_SYSTEMS
    max_out = max(out) if out else 1
    # per-request constants, as arrays then lists for the loop
    ctx, cached, outs = reqs.context, reqs.cached, reqs.output
    # uncached tokens to prefill: a prefix hit is matched page-aligned, leaving 1..page tokens
    todo_a = np.where(cached > 0, ctx - (np.minimum(cached, ctx - 1) // page) * page, ctx)
    todo = todo_a.tolist()
    hit = (cached > 0).tolist()
    # physical device slots a request holds from the start of its prefill to its end
    long_a = (ctx > cfg.device_buffer) & bool(hs)
    long_ = long_a.tolist()
    hold = np.where(long_a, float(cfg.buffer_alloc), (-(-(todo_a + outs) // page) * page).astype(float)).tolist()
    reserve = (page + np.minimum(outs, 4096)).tolist()
    life = (outs - 1).tolist()                   # decode steps of each request (the prefill gives its first token)
    shape = list(zip(L, life))
    curves: dict[int, np.ndarray] = {}
    lives: dict[tuple[int, int], np.ndarray | None] = {}

    def curve(c: int) -> np.ndarray:
        x = curves.get(c)
        if x is None:
            x = curves[c] = mdl.misses(c, max_out)
        return x

    def curve_over_life(sh: tuple[int, int]) -> np.ndarray | None:
        """C[0..steps] of a request of shape (prompt length, decode steps); None when it loads nothing (its
        share of the miss sums below is 0 throughout)."""
        if sh not in lives:
            x = curve(sh[0])[:sh[1] + 1]
            lives[sh] = x if x.any() else None
        return lives[sh]
    # acc[r][x]: misses-so-far of the rank's running requests at its decode clock x, so that the entries a
    # jump of j steps loads per layer is acc[x + j] - acc[x] (each request adds its cumulative curve over its
    # life; a finished one takes back its last point)
    acc = [np.zeros(max(4096, 4 * max_out)) for _ in range(dp)]
    acc_at = [memoryview(a) for a in acc]       # the same memory: single entries as Python floats (much quicker)
    release = [math.nan] * n
    prefilled = [0] * n
    rank_of = [0] * n
    joined = [0] * n
    waiting = [deque() for _ in range(dp)]
    staging: list[list[tuple[int, int]]] = [[] for _ in range(dp)]    # (iteration it may decode from, request)
    ends: list[list[tuple[int, int]]] = [[] for _ in range(dp)]       # heap of (clock at its last token, request)
    running = [0] * dp
    n_long = [0] * dp                                                 # running requests longer than the buffer
    clock = [0] * dp                                                  # decode iterations each rank has run
    sum_l = [0.0] * dp                                                # sum of prompt lengths of running requests
    sum_join = [0] * dp                                               # sum of their join clocks
    newest = [0] * dp                                                 # clock of the latest join
    shared_prompt = reqs.prompt is not None
    pid = reqs.prompt.tolist() if shared_prompt else None
    single = shared_prompt and len(set(pid)) == 1          # one prompt: groups keyed by join clock alone
    groups_at: list[dict] = [{} for _ in range(dp)]                   # (prompt, join clock) -> requests
    groups_ver, same_cache = 0, {}                                    # distinct (prompt, age) pairs, cached
    # one prompt: bit a of age_bits[r] is set while rank r decodes requests a steps after they joined, so the
    # distinct ages over the decoding ranks are the set bits of the OR of their masks (a decode step shifts them)
    age_bits = [0] * dp
    # cold staging: a prompt prefilled from scratch, and (with cold_staging) the first hit of a prompt on a rank
    first_hits = bool(hs) and shared_prompt and reqs.cold_staging
    cold_seen: list[set] = [set() for _ in range(dp)]
    cold = [False] * n
    used = [float(reqs.prefix_pages)] * dp
    logged = [0] * dp
    timeline = []
    fe = FrontEnd()
    seen_first = [math.nan] * n                   # when the client sees a request's first and last tokens (s)
    seen_done = [math.nan] * n
    unsent: list[int] = []                       # first tokens computed, sent with the next batch's scheduling
    pending: list[tuple[float, int]] = []        # (dispatch time, request)
    counter = first_round % dp
    next_req, in_flight, finished = 0, 0, 0
    crash: Crash | None = None
    t, it = 0.0, 0
    swap = {}                                    # (b, active) -> [steps, steps x L, steps x M] for the breakdown
    # run statistics (the stats dict of the result, filled at the end)
    n_iter = n_decode = n_prefill = peak_requests = 0
    fetch_s = decode_s = prefill_s = shared_s = peak_used = copy_wait_s = backup_s = 0.0
    hold_next = 0.0

    def release_more(now: float):
        nonlocal next_req, in_flight
        while next_req < n and in_flight < concurrency and arrival[next_req] <= now + 1e-12 and crash is None:
            i = next_req
            r = now if arrival[i] < now else arrival[i]
            release[i] = r
            fe.arrive(r, i, t_token * L[i])
            next_req += 1
            in_flight += 1

    def emit_first(when: float):
        """The first tokens in ``unsent`` leave their ranks at ``when``: one message per rank."""
        by_rank: dict[int, list] = {}
        for i in unsent:
            by_rank.setdefault(rank_of[i], []).append((i, False))
            if out[i] <= 1:
                by_rank[rank_of[i]].append((i, True))
        for r in sorted(by_rank):
            fe.produce(when, 1, by_rank[r])

    def dispatch(i: int, when: float):
        heapq.heappush(pending, (when, i))

    def deliver(payload: list, when: float):
        nonlocal in_flight
        for i, last in payload:
            if last:
                seen_done[i] = when
                in_flight -= 1
            else:
                seen_first[i] = when
        release_more(when)

    pre_cache: dict = {}
    rank_cache, shared_cache = mdl._rank_cache, mdl._shared_cache
    fetch_cache: dict = {}

    def fetch_time(tokens: int, nic_bw: float) -> float:
        key = (tokens, nic_bw)
        x = fetch_cache.get(key)
        if x is None:
            x = fetch_cache[key] = mdl.fetch(tokens, nic_bw)
        return x

    release_more(0.0)
    guard = 40 * n + 8 * max_out + 100000
    staged = 0
    while finished < n and crash is None:
        guard -= 1
        if guard < 0:
            raise RuntimeError("serving engine did not finish (internal error)")
        if fe.msgs or fe.intake:
            fe.run(t, dispatch, deliver)
        while pending and pending[0][0] <= t + 1e-12:             # dispatch, round-robin in arrival order
            i = heapq.heappop(pending)[1]
            r = counter % dp
            counter += 1
            rank_of[i] = r
            waiting[r].append(i)
        # ---- staged requests join decode (rdma and cxl-prefetch copy the whole prompt first)
        fetch_t, fetching = 0.0, []
        if staged:
            for r in range(dp):
                st = staging[r]
                if st and st[0][0] <= it:
                    ready = []
                    for j_, i_ in st:              # acknowledged in order: a later one waits for an earlier one
                        if j_ > it:
                            break
                        ready.append(i_)
                    staging[r] = st[len(ready):]
                    staged -= len(ready)
                    j = clock[r]
                    shapes: dict[tuple[int, int], int] = {}     # requests of one shape add one curve
                    longest = 0
                    for i in ready:
                        joined[i] = j
                        if shared_prompt:
                            gk = j if single else (pid[i], j)
                            groups_at[r][gk] = groups_at[r].get(gk, 0) + 1
                            groups_ver += 1
                            if single:
                                age_bits[r] |= 1
                        heapq.heappush(ends[r], (j + life[i] - 1, i))      # clock of its last step
                        sum_l[r] += L[i]
                        n_long[r] += long_[i]
                        sh = shape[i]
                        shapes[sh] = shapes.get(sh, 0) + 1
                        if life[i] > longest:
                            longest = life[i]
                    a = acc[r]
                    if j + longest + 1 > len(a):
                        a = acc[r] = np.concatenate([a, np.zeros(max(j + longest + 1, 2 * len(a)) - len(a))])
                        acc_at[r] = memoryview(a)
                    for sh, cnt in shapes.items():
                        cl = curve_over_life(sh)
                        if cl is not None:
                            seg = a[j:j + sh[1] + 1]
                            seg += cl if cnt == 1 else cnt * cl
                    sum_join[r] += j * len(ready)
                    newest[r] = j
                    running[r] += len(ready)
                    if fetching_system:
                        fetching.append((r, ready))
            if fetching:
                bws = fetch_bandwidth(cfg, tuple(r for r, _ in fetching)) if cfg.system == "rdma" else {}
                for r, ready in fetching:
                    bw = bws.get(r, 0.0)
                    fetch_t = max(fetch_t, sum(fetch_time(L[i], bw) for i in ready))
        # cold staging: the backups launched as the last batch's results were processed (hold_next) start once
        # the forward launched before them ends, so they hold the GPU during this iteration's forward
        hold_t, hold_next = hold_next, 0.0
        if hs and unsent:
            backing: dict[int, int] = {}
            for i in unsent:
                if cold[i]:
                    backing[rank_of[i]] = backing.get(rank_of[i], 0) + L[i]
            if backing:
                bws = backup_bandwidth(cfg, tuple(backing))
                hold_next = max(mdl.backup(tok, bws[r]) for r, tok in backing.items())
                backup_s += hold_next
                if record:
                    timeline.append((t, -1, "backup", hold_next, len(backing)))
        if unsent:      # overlap scheduler: a batch's results go out once the next batch is scheduled
            emit_first(t + fetch_t)
            copy_wait_s += fetch_t * len(unsent)
            unsent.clear()
        # ---- each rank: admit waiting requests (prefill has priority) or decode
        admits, decoding = [], []
        n_tok = 0                                                  # tokens of the iteration's forward pass
        chunks, n_new = set(), 0        # prompt ids: distinct (prompt, position, tokens) chunks admitted, their tokens
        for r in range(dp):
            w = waiting[r]
            if w:
                batch, budget = [], chunk
                n_active = running[r] + len(staging[r])
                while w and budget > 0 and n_active + len(batch) < max_run:
                    i = w[0]
                    if prefilled[i] == 0:                          # its memory is taken when it starts
                        if hs and not hit[i]:
                            cold[i] = True
                        elif first_hits and pid[i] not in cold_seen[r]:
                            cold_seen[r].add(pid[i])
                            cold[i] = True
                        if used[r] + hold[i] > max_total:
                            if long_[i] and max_total - used[r] >= reserve[i]:
                                crash = Crash(t, r, f"device-buffer allocation of {hold[i]:.0f} slots failed on rank "
                                                    f"{r} ({used[r]:.0f} of {max_total} slots in use)")
                            break
                        used[r] += hold[i]
                    take = min(todo[i] - prefilled[i], budget)
                    batch.append((i, take))
                    n_tok += take
                    if shared_prompt and (pid[i], prefilled[i], take) not in chunks:
                        chunks.add((pid[i], prefilled[i], take))
                        n_new += take
                    budget -= -(-take // page) * page
                    if prefilled[i] + take < todo[i]:
                        break                                      # a chunked prompt fills the batch
                    w.popleft()
                if crash:
                    break
                if batch:
                    admits.append((r, batch))
                    continue
            if running[r]:
                decoding.append(r)
                n_tok += running[r]
        if crash:
            break
        if not admits and not decoding:
            if fetch_t > 0 or staged or hold_t:
                t += fetch_t + hold_t
                it += 1
                continue
            nxt = [pending[0][0]] if pending else []
            if next_req < n and in_flight < concurrency:
                nxt.append(arrival[next_req])
            if fe.busy():
                nxt.append(fe.next_turn())
            if not nxt:
                raise RuntimeError("serving engine stalled (internal error)")
            t = max(t, min(nxt))
            release_more(t)
            continue
        # ---- the iteration's time
        active = len(decoding)
        jump = 1
        if decoding and not admits and not fetch_t and not staged and not hold_t:
            jump = min(ends[r][0][0] - clock[r] for r in decoding) + 1
            # while a young request's misses still change, the jump at most doubles its age (the rank parts are
            # exact averages over a jump; only which rank is slowest may change inside it)
            youngest = min(clock[r] - newest[r] for r in decoding)
            jump = max(1, min(jump, 256 if youngest >= 512 else 2 * youngest + 1))
        pre_part = 0.0
        for r, batch in admits:
            p = 0.0
            for i, take in batch:
                key = (take, L[i] - todo[i] + prefilled[i])
                x = pre_cache.get(key)
                if x is None:
                    x = pre_cache[key] = mdl.prefill(*key)
                p += x
                if hit[i] and prefilled[i] == 0:
                    p += t_admit
            pre_part = max(pre_part, p)
        if shared_prompt:      # same prompt at the same position: the same token, the same experts
            if single:
                u = 0
                for r in decoding:
                    u |= age_bits[r]
                n_same = u.bit_count()
            else:
                # the count depends on the groups and on the ranks' clocks relative to each other only
                c0 = clock[decoding[0]] if decoding else 0
                skey = (groups_ver, tuple([clock[r] - c0 for r in decoding]), tuple(decoding))
                n_same = same_cache.get(skey)
                if n_same is None:
                    n_same = len({(p_, clock[r] - j_) for r in decoding for (p_, j_) in groups_at[r]})
                    same_cache[skey] = n_same
            n_distinct = n_same + n_new                             # plus the distinct prefill chunks
        else:
            n_distinct = n_tok
        shared = shared_cache.get((n_tok, n_distinct, bool(admits)))
        if shared is None:
            shared = mdl.shared(n_tok, bool(admits), n_distinct)
        horizon = min(pending[0][0] if pending else math.inf,
                      arrival[next_req] if next_req < n and in_flight < concurrency else math.inf,
                      fe.next_turn() if fe.busy() else math.inf)
        while True:                   # shrink the jump if it would run past the next arrival
            part, best, top = pre_part, None, -1.0
            half = (jump - 1) / 2.0
            for r in decoding:
                b = running[r]
                ck = clock[r]
                Lm = (sum_l[r] + b * ck - sum_join[r]) / b + 1.0 + half
                ar = acc_at[r]
                M = (ar[ck + jump] - ar[ck]) / jump
                lg = n_long[r] > 0
                co = rank_cache.get((b, active, lg))
                if co is None:
                    co = mdl.rank_coeffs(b, active, lg)
                p = co[0] + co[1] * Lm + co[2] * M
                if p > top:
                    top, best = p, (b, Lm, M, lg)
            if top > part:
                part = top
            T = shared + part
            if jump == 1 or t + jump * T <= horizon + 1e-12:
                break
            jump = max(1, min(jump - 1, math.ceil((horizon - t) / T)))
        t += fetch_t + jump * T + hold_t
        it += jump
        n_iter += jump
        fetch_s += fetch_t
        if admits:
            n_prefill += 1
            prefill_s += T
        else:
            n_decode += jump
            decode_s += jump * T
            shared_s += jump * shared
            b, Lm, M, lg = best
            sw = swap.setdefault((b, active, lg), [0.0, 0.0, 0.0])
            sw[0] += jump
            sw[1] += jump * Lm
            sw[2] += jump * M
        # ---- advance the requests
        ended: list[tuple[int, bool]] = []
        for r in decoding:
            clock[r] += jump
            if single:
                age_bits[r] <<= jump
            e = ends[r]
            while e and e[0][0] < clock[r]:
                i = heapq.heappop(e)[1]
                cl = curve_over_life(shape[i])
                if cl is not None:
                    acc_at[r][joined[i] + life[i]] -= cl[-1]
                sum_l[r] -= L[i]
                sum_join[r] -= joined[i]
                n_long[r] -= long_[i]
                running[r] -= 1
                if shared_prompt:
                    gk = joined[i] if single else (pid[i], joined[i])
                    groups_at[r][gk] -= 1
                    if not groups_at[r][gk]:
                        del groups_at[r][gk]
                        groups_ver += 1
                        if single:
                            age_bits[r] &= ~(1 << (clock[r] - joined[i]))
                ended.append((i, True))
                finished += 1
                used[r] -= hold[i]
            if record:
                logged[r] += jump
                while logged[r] >= 40:
                    logged[r] -= 40
                    timeline.append((t, r, "decode", running[r], used[r]))
        # each decoding rank streams its tokens every step, one message per rank; the last step's carry the ends
        plain = jump * len(decoding)
        if ended:
            by_rank: dict[int, list] = {}
            for e in ended:
                by_rank.setdefault(rank_of[e[0]], []).append(e)
            plain -= len(decoding)
            for r in decoding:
                plain += 1
                if r in by_rank:
                    fe.produce(t, plain, by_rank[r])
                    plain = 0
        fe.produce(t, plain)
        if record:
            for r, batch in admits:
                timeline.append((t, r, "prefill", len(batch), running[r]))
            if fetch_t:
                timeline.append((t, -1, "fetch", fetch_t, len(fetching)))
        for r, batch in admits:
            for i, take in batch:
                prefilled[i] += take
                if prefilled[i] < todo[i]:
                    continue
                unsent.append(i)
                if out[i] <= 1:                               # its first token ends it (emit_first)
                    finished += 1
                    used[r] -= hold[i]
                    continue
                # decodes from the iteration after next; a cold one a step later (its backup is still running
                # when that iteration acknowledges staged requests, and the rank's later ones wait behind it)
                staging[r].append((it + 2 if cold[i] else it + 1, i))
                staged += 1
            peak_requests = max(peak_requests, running[r] + len(staging[r]))
        if admits:            # only admissions take memory
            peak_used = max(peak_used, max(used))
        release_more(t)
    if unsent:
        emit_first(t)
    fe.run(math.inf, dispatch, deliver)
    stats = {"iterations": n_iter, "decode_steps": n_decode, "prefill_iterations": n_prefill, "fetch_s": fetch_s,
             "decode_s": decode_s, "prefill_s": prefill_s, "shared_s": shared_s, "peak_used": peak_used,
             "peak_rank_requests": peak_requests, "swap_states": swap, "first_token_copy_wait_s": copy_wait_s,
             "cold_backup_s": backup_s}
    tr = v["t_request"]
    seen = np.array(seen_first, dtype=float) + tr
    done_a = np.array(seen_done, dtype=float) + tr         # every finished request's last token is delivered
    return EngineResult(np.array(release, dtype=float), seen, done_a, np.isfinite(done_a), crash, stats, timeline)
