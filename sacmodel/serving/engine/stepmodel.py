"""The step model of one configuration reduced to closed forms the engine can evaluate fast.

The expressions of :mod:`sacmodel.serving.step` are evaluated through their generated numeric code; a rank's
decode part is linear in the mean context L and the entries loaded M, so three evaluations give its
coefficients for a batch size, and the loop computes a + c L + g M."""
from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from ...hardware.sizing import idle_eager_kernels, piecewise_eager_kernels
from .. import step as steps
from ..config import Config, cuda_graph_off, score_constants, static_values, swap_route
from .misses import CurveCache, cumulative_misses


# Rank coefficients and shared parts are pure functions of the static values and their arguments: kept across
# Model instances of identical configurations (a sweep over contexts re-creates the Model per prediction).
_CONFIG_IDS: dict[tuple, int] = {}           # static values -> an id never reused (a counter)
_NEXT_ID = itertools.count()
_SHARED_PARTS: dict[tuple, object] = {}
_MAX_SHARED = 200_000


# Static values that no rank, shared or prefill part reads (the front end's, the prefix copy's, and HiSparse's
# admission, which the prefill part's key carries itself): left out of the parts' signature, so that a fit
# moving them (calibrate's serving stage) reuses the parts. tests/fit/test_fit_reuse.py checks it.
PARTS_FREE = ("t_request", "t_token", "stage_copy_bw", "stage_passes", "t_hs_admit")


def _config_id(signature: tuple) -> int:
    if len(_CONFIG_IDS) >= 10_000:
        _CONFIG_IDS.clear()
    i = _CONFIG_IDS.get(signature)
    if i is None:
        i = _CONFIG_IDS[signature] = next(_NEXT_ID)
    return i


def _remember(key: tuple, value):
    if len(_SHARED_PARTS) >= _MAX_SHARED:
        _SHARED_PARTS.clear()
    _SHARED_PARTS[key] = value
    return value


# SGLang's dense MLA runs multi-head attention over a cached prefix from this many tokens on
# (SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD, v0.5.9). SGLang compares the sum of the prefixes of the whole forward
# batch with it, and the batch takes one path (sgl-project/sglang v0.5.3 a4a3d8239
# python/sglang/srt/models/deepseek_v2.py:275-316 _get_sum_extend_prefix_lens / _handle_attention_backend, the
# fa3 handler Hopper's MLA default: model_executor/model_runner.py:533-535; the same at v0.5.6 7ae368efd
# deepseek_v2.py:321-356): a batch of new prompts behind the rest of a chunked one (prefix below the threshold)
# runs the absorbed form for all of them
MLA_CHUNKED_PREFIX = 8192


def batch_mha(prefixes: int) -> bool:
    """Whether SGLang runs a dense-MLA prefill batch whose requests have ``prefixes`` cached tokens in all as
    multi-head attention (none, or at least :data:`MLA_CHUNKED_PREFIX`), else the absorbed form."""
    return prefixes == 0 or prefixes >= MLA_CHUNKED_PREFIX

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
        self.graph_bs = 0 if cuda_graph_off(cfg.topo) else cfg.graph_bs
        eager = steps.compiled("eager")
        self.t_eager = eager.total(*eager.args(self.v))
        # a prefill of at most pcg_tokens tokens runs as a piecewise CUDA graph: only attention launches eagerly
        self.pcg_tokens = cfg.pcg_tokens
        self.t_eager_pcg = eager.total(*eager.args(dict(self.v, n_kernels=float(piecewise_eager_kernels(cfg.model)))))
        # a rank with no batch in an iteration without a CUDA graph launches an IDLE batch (its MLP part)
        self.t_eager_idle = eager.total(*eager.args(dict(self.v, n_kernels=float(idle_eager_kernels(cfg.model)))))
        self.t_launch, self.t_graph = float(self.v["t_launch"]), float(self.v["t_graph_kernel"])
        self.launch_overlap = float(self.v["launch_overlap"])
        self._rank_cache: dict = {}
        self._rank_values_cache: dict = {}
        self._shared_cache: dict = {}
        self._miss_cache = CurveCache()
        signature = (tuple(kv for kv in self.v.items() if kv[0] not in PARTS_FREE), self.k, bool(cfg.hisparse),
                     cfg.system)
        self._id = _config_id(signature)
        # the shared part's arguments: fixed ones filled in once, the four that vary set per call
        names = self.shared_c.names
        self._shared_args = self.shared_c.args(dict(self.v, N=1.0, N_d=1.0, S=1.0, mlp_eff=1.0, moe_mlp_eff=1.0,
                                                    tbo_routed=0.0))
        self._shared_at = (names.index("N"), names.index("N_d"), names.index("S"), names.index("mlp_eff"),
                           names.index("moe_mlp_eff"))
        self._comm_at = (names.index("coll_bytes"), names.index("t_collective"), names.index("a2a_share"),
                         names.index("ep_skew"), names.index("a2a_lat_share"))
        self._tbo_at = names.index("tbo")
        self._routed_at, self._gemm_at = names.index("tbo_routed"), names.index("gemm_share")
        self._left_cache: dict = {}
        self.tbo_f = steps.tbo_factor(self.v["moe_layers"])
        self.tbo_share = self.v["moe_layers"] / self.v["layers"]     # the rank part's share in overlapped layers

    def overlapped(self, gpu: float, excess: float) -> float:
        """Seconds of an iteration whose GPU work is ``gpu`` s (its in-graph floor included) when it runs
        without a CUDA graph and its eager launches cost the CPU ``excess`` s beyond that floor (``t_eager``,
        ``t_eager_pcg``, 0 for a graph replay). The CPU launches kernels asynchronously while the GPU runs the
        ones launched before, so the iteration lasts what the two allow together: the GPU's work after the
        first kernel's launch, or the CPU's launches of all ``n`` kernels (``n t_launch``) and the last
        kernel's run, whichever is longer: max(gpu + t_launch, n t_launch + t_graph_kernel). Not their sum.
        ``launch_overlap`` (0-1) blends it with the sum ``gpu + excess``, for a server whose forward waits on the
        GPU between its launches (the testbed's: 0, see its scenario)."""
        tl, tg, f = self.t_launch, self.t_graph, self.launch_overlap
        if excess <= 0.0 or tl <= tg:
            return gpu
        cpu = excess * tl / (tl - tg)           # excess = n (t_launch - t_graph_kernel)
        a, b = gpu + tl, cpu + tg
        both = a if a > b else b
        return both if f >= 1.0 else f * both + (1.0 - f) * (gpu + excess)

    def launch_cpu(self, excess: float) -> float:
        """Seconds until the CPU has launched an eager iteration whose launches exceed its in-graph floor by
        ``excess``: all n kernels at ``t_launch`` where they overlap the GPU (``launch_overlap`` 1), the excess
        where the testbed's fork adds them (0; the time its fit was made with)."""
        tl, tg, f = self.t_launch, self.t_graph, self.launch_overlap
        if excess <= 0.0 or tl <= tg or f <= 0.0:
            return excess
        return f * excess * tl / (tl - tg) + (1.0 - f) * excess

    def _rank_values(self, b: int, active: int, swap: bool) -> dict:
        """Symbol values of a rank's decode part but its context and misses (read-only: kept by arguments)."""
        key = (b, active, swap)
        v = self._rank_values_cache.get(key)
        if v is None:
            bw, lat = swap_route(self.cfg, active)
            v = self._rank_values_cache[key] = dict(
                self.v, b=float(b), sw_bw=bw, sw_lat=lat, M_max=0.0,
                swap_on=1.0 if swap and self.cfg.hisparse and self.cfg.system != "rdma-topk" else 0.0)
        return v

    # rank part = a + c L + max(g M, h M_max) for b requests (exact: piecewise linear in L, M and M_max), less
    # d (k - L) below the top-k
    def rank_coeffs(self, b: int, active: int, swap: bool = True) -> tuple:
        """Coefficients (a, c, g, k, d, h) of the rank part; ``swap=False`` when all its requests fit the GPU
        buffer. A sparse model's attention reads min(k, L) entries: below ``k`` the part is d (k - L) less; the
        swap-in lasts at least h x the misses of its busiest request."""
        key = (b, active, swap)
        c = self._rank_cache.get(key)
        if c is not None:
            return c
        bw, lat = swap_route(self.cfg, active)
        c = _SHARED_PARTS.get(("rank", self._id, b, active, swap, bw, lat))
        if c is None:
            c = _remember(("rank", self._id, b, active, swap, bw, lat), self._fit_rank(b, active, swap))
        self._rank_cache[key] = c
        return c

    def _fit_rank(self, b: int, active: int, swap: bool) -> tuple:
        v = self._rank_values(b, active, swap)
        f = self.rank_c.total
        k = self.k
        L0, L1 = (4 * k + 1.0, 8 * k + 2.0) if k else (1024.0, 2048.0)

        def at(L, M, M_max=0.0):
            return f(*self.rank_c.args(dict(v, L=L, M=M, M_max=M_max, k_attn=k or L)))
        t00 = at(L0, 0.0)
        slope_l = (at(L1, 0.0) - t00) / (L1 - L0)
        d = self.rank_c.funcs["attention"](*self.rank_c.args(dict(v, L=L0, M=0.0, k_attn=1.0))) if k else 0.0
        return t00 - slope_l * L0, slope_l, at(L0, 1.0) - t00, k, d, at(L0, 0.0, 1.0) - t00

    def swap_unit(self, active: int) -> float:
        """Seconds per entry per layer (all layers of a step) a rank's swap-in takes to copy at its fair share of
        the pool's route when ``active`` ranks copy at once (the rank's own bound, its loads in flight, is the
        slope of :meth:`rank_coeffs` with the route alone). 0 where nothing is swapped."""
        if not self.swaps_over_route:
            return 0.0
        return self.v["layers"] * self.v["entry_bytes"] / swap_route(self.cfg, active)[0]

    @property
    def route_shared(self) -> bool:
        """True when the ranks' swap-ins share a bottleneck (a CXL device, an adapter): a rank's bandwidth
        depends on how many copy at once, so the engine splits the route by the ranks' demands."""
        if not self.swaps_over_route:
            return False
        return swap_route(self.cfg, self.cfg.dp)[0] < swap_route(self.cfg, 1)[0]

    @property
    def swaps_over_route(self) -> bool:
        return bool(self.cfg.hisparse) and self.cfg.system != "rdma-topk"

    def rank_time(self, b: int, active: int, L: float, M: float, swap: bool = True, M_max: float = 0.0) -> float:
        """Seconds of a rank's decode part: ``b`` requests of mean context ``L`` missing ``M`` entries per layer,
        the busiest of them ``M_max``."""
        a, c, g, k, d, h = self.rank_coeffs(b, active, swap)
        return a + c * L + max(g * M, h * M_max) - (d * (k - L) if L < k else 0.0)

    def rank_values(self, b: int, active: int, L: float, M: float, swap: bool = True,
                    M_max: float = 0.0) -> dict[str, float]:
        """Symbol values of a rank's decode part (the arguments of :meth:`rank_terms`)."""
        return dict(self._rank_values(b, active, swap), L=float(L), M=float(M), M_max=float(M_max),
                    k_attn=min(self.k, L) if self.k else L)

    def rank_terms(self, b: int, active: int, L: float, M: float, swap: bool = True,
                   M_max: float = 0.0) -> dict[str, float]:
        a = self.rank_c.args(self.rank_values(b, active, L, M, swap, M_max))
        return {k: f(*a) for k, f in self.rank_c.funcs.items()}

    def shared(self, n_tokens: int, prefill: bool, distinct: int | None = None, seqs: int | None = None) -> float:
        """Seconds of the shared part over ``n_tokens`` (``distinct`` of them distinct, ``seqs`` sequences whose
        next token is computed; both default to ``n_tokens``)."""
        d = n_tokens if distinct is None else distinct
        q = n_tokens if seqs is None else seqs
        key = (n_tokens, d, prefill, q)
        s = self._shared_cache.get(key)
        if s is None:
            s, left = self._shared_pair(key)
            self._shared_cache[key] = s
            self._left_cache[key] = left
        return s

    def _shared_pair(self, key: tuple) -> tuple[float, float]:
        """(the shared part, :meth:`tbo_left`) of an iteration of ``key`` = (tokens, distinct, prefill, seqs)."""
        pair = _SHARED_PARTS.get(("shared", self._id, *key))
        if pair is not None:
            return pair
        n_tokens, d, prefill, q = key
        a = list(self._shared_args)
        i_n, i_d, i_s, i_eff, i_moe = self._shared_at
        a[i_n], a[i_d], a[i_s] = float(max(n_tokens, 1)), float(max(d, 1)), float(max(q, 1))
        a[i_eff], a[i_moe] = self._efficiencies(prefill)
        if prefill:
            i_cb, i_tc, i_sh, i_sk, i_ls = self._comm_at
            a[i_cb], a[i_tc] = self.v["coll_bytes_prefill"], self.v["t_collective_prefill"]
            a[i_sh], a[i_sk] = self.v["a2a_share_prefill"], self.v["ep_skew_prefill"]
            a[i_ls], a[self._routed_at] = self.v["a2a_lat_share_prefill"], 1.0
        if not self.splits(n_tokens):
            a[self._tbo_at] = 0.0
        elif a[self._tbo_at] > 0.0:
            a[self._gemm_at] = self.v["tbo_gemm_share_prefill" if prefill else "tbo_gemm_share"]
        left = 0.0
        if a[self._tbo_at] > 0.0:
            f = self.shared_c.funcs
            a2a = (f["comm"](*a) * a[self._comm_at[2]] + f["a2a_imbalance"](*a)
                   + 2 * self.v["layers"] * self.v["n_coll"] * a[self._comm_at[1]] * a[self._comm_at[4]])
            left = max(0.0, self.tbo_f * a2a + f["tbo_overlap"](*a))
        return _remember(("shared", self._id, *key), (self.shared_c.total(*a), left))

    def tbo_left(self, n_tokens: int, prefill: bool, distinct: int | None = None, seqs: int | None = None) -> float:
        """Seconds of DeepEP's dispatch and combine in an iteration that two-batch overlap could still hide behind
        the ranks' attention after the shared part's experts, already scaled by what overlaps (1 - 1/(2 MoE layers),
        :func:`sacmodel.serving.step.tbo_hidden`); 0 without the overlap."""
        d = n_tokens if distinct is None else distinct
        q = n_tokens if seqs is None else seqs
        key = (n_tokens, d, prefill, q)
        if key not in self._left_cache:
            self.shared(n_tokens, prefill, distinct, seqs)
        return self._left_cache[key]

    def joined(self, shared: float, part: float, left: float, cpu: float = 0.0) -> float:
        """Seconds of the GPU work of an iteration: the shared part plus the slowest rank's ``part``, less what
        two-batch overlap hides of the communication still exposed (``left``, :meth:`tbo_left`) behind that
        rank's attention in the MoE layers (its part but ``cpu``, the CPU work HiSparse serialises with the GPU,
        times ``tbo_share``, the MoE layers' share: the dense layers run before the overlap): SGLang runs one
        micro-batch's attention while the other's dispatch or combine is in flight, in decode and in prefill
        (:func:`sacmodel.serving.step.tbo_hidden`)."""
        if left <= 0.0:
            return shared + part
        gpu = self.tbo_f * self.tbo_share * (part - cpu)
        return shared + part - (gpu if gpu < left else left) if gpu > 0.0 else shared + part

    def shared_values(self, n_tokens: float, prefill: bool, distinct: float | None = None,
                      seqs: float | None = None) -> dict[str, float]:
        """Symbol values of the shared part (the arguments of :meth:`shared_terms`)."""
        mlp, moe = self._efficiencies(prefill)
        v = dict(self.v, N=float(max(n_tokens, 1)), N_d=float(max(distinct or n_tokens, 1)),
                 S=float(max(seqs or n_tokens, 1)), mlp_eff=mlp, moe_mlp_eff=moe)
        if prefill:
            v.update(coll_bytes=self.v["coll_bytes_prefill"], t_collective=self.v["t_collective_prefill"],
                     a2a_share=self.v["a2a_share_prefill"], ep_skew=self.v["ep_skew_prefill"],
                     a2a_lat_share=self.v["a2a_lat_share_prefill"])
        if not self.splits(n_tokens):
            v["tbo"] = 0.0
        elif v["tbo"] > 0.0:
            v["gemm_share"] = self.v["tbo_gemm_share_prefill" if prefill else "tbo_gemm_share"]
        v["tbo_routed"] = 1.0 if prefill else 0.0
        return v

    def _efficiencies(self, prefill: bool) -> tuple[float, float]:
        """(dense GEMMs', routed experts' GEMMs') compute efficiency of an iteration: ``prefill_eff`` and
        ``moe_prefill_eff`` in one that prefills, ``compute_eff`` for both in a decode step."""
        if prefill:
            return self.v["prefill_eff"], self.v["moe_prefill_eff"]
        return self.v["compute_eff"], self.v["compute_eff"]

    def splits(self, n_tokens: float) -> bool:
        """Whether two-batch overlap can split an iteration of ``n_tokens`` over the ranks into two micro-batches:
        every rank needs two tokens at least (a rank's one sequence does not split; the ranks split together)."""
        return n_tokens >= 2 * self.cfg.dp

    def shared_terms(self, n_tokens: int, prefill: bool, distinct: int | None = None,
                     seqs: int | None = None) -> dict[str, float]:
        a = self.shared_c.args(self.shared_values(n_tokens, prefill, distinct, seqs))
        return {k: f(*a) for k, f in self.shared_c.funcs.items()}

    def prefill_values(self, P: float, H: float, first: bool = False, mha: bool | None = None) -> dict:
        """Symbol values of one chunk of ``P`` tokens after ``H``: SGLang's attention path for it (``mha``: the
        dense-MLA path its batch takes, :func:`batch_mha`; None: the chunk's own prefix decides, as alone).

        DSA: dense multi-head attention while the whole sequence is within the top-k (SGLang's short-prompt path;
        not with HiSparse, whose fork forces the sparse kernels), the indexer only past the top-k. Dense MLA:
        multi-head attention with no prefix or a prefix of 8192 tokens or more, absorbed otherwise. GQA: dense."""
        m, L = self.cfg.model, H + P
        admit = 1.0 if first else 0.0
        if m.sparse:
            mha = 1.0 if L <= m.topk and not self.cfg.hisparse else 0.0
            return dict(P=float(P), H=float(H), k_attn=min(self.k, L), mha_on=mha, dense_on=0.0,
                        index_on=1.0 if L > m.topk else 0.0, admit_on=admit)
        if mha is None:
            mha = batch_mha(H)              # alone: its own prefix decides
        on = 1.0 if m.kind == "mla" and mha else 0.0
        return dict(P=float(P), H=float(H), k_attn=1.0, mha_on=on, dense_on=1.0, index_on=0.0, admit_on=admit)

    def prefill(self, P: float, H: float, first: bool = False, mha: bool | None = None) -> float:
        """Seconds of one request's prefill of ``P`` new tokens after ``H`` cached ones (its own part; ``first``:
        the chunk that admits it; ``mha``: its batch's dense-MLA path, as :meth:`prefill_values`)."""
        key = ("prefill", self._id, self.v["t_hs_admit"], P, H, first, mha)
        x = _SHARED_PARTS.get(key)
        if x is None:
            v = dict(self.v, **self.prefill_values(P, H, first, mha))
            x = _remember(key, self.prefill_c.total(*self.prefill_c.args(v)))
        return x

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
            c = self._miss_cache.put(key, kept_curve(self.cfg, key[0], max_age))
        return c


KEPT_CURVE_BYTES = 32 << 20
"""Bytes of miss curves kept per scenario (least recently used ones leave first): a replay of the 12,031-request
conversation trace uses about 940 curves of 2,002 floats (15 MB) per configuration, and the next replay of the
same configuration (another router, another split) reads them again instead of computing them."""


class KeptCurves(CurveCache):
    """The scenario's store of miss curves: a cache, so a copy of the scenario (deep copy, pickle to a worker
    process) starts empty rather than carrying tens of MB along."""

    limit = KEPT_CURVE_BYTES

    def __deepcopy__(self, memo):
        return KeptCurves()

    def __reduce__(self):
        return (KeptCurves, ())


def kept_curve(cfg: Config, context: int, max_age: int) -> np.ndarray:
    """:func:`cumulative_misses`, kept with the scenario's routes across predictions and replays of the same
    configuration (read-only: every draw, prediction and replay shares it), keyed also on the constants of the
    score process (a fit changes them in place: :func:`sacmodel.hardware.params.set_param` leaves the route
    cache)."""
    store = cfg.topo._routes.get(("miss curves",))
    if store is None:
        store = cfg.topo._routes[("miss curves",)] = KeptCurves()
    key = (cfg.system, cfg.model.name, cfg.model.topk, cfg.device_buffer, cfg.cxl_devices, cfg.rdma_nics, cfg.dp,
           context, max_age, *score_constants(cfg))
    c = store.get(key)
    if c is None:
        c = cumulative_misses(cfg, context, max_age)
        c.flags.writeable = False
        store.put(key, c)
    return c
