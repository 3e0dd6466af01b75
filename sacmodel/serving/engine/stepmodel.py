"""The step model of one configuration reduced to closed forms the engine can evaluate fast.

The expressions of :mod:`sacmodel.serving.step` are evaluated through their generated numeric code; a rank's
decode part is linear in the mean context L and the entries loaded M, so three evaluations give its
coefficients for a batch size, and the loop computes a + c L + g M."""
from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from .. import step as steps
from ..config import Config, static_values, swap_route
from .misses import cumulative_misses


# Rank coefficients and shared parts are pure functions of the static values and their arguments: kept across
# Model instances of identical configurations (a sweep over contexts re-creates the Model per prediction).
_CONFIG_IDS: dict[tuple, int] = {}           # static values -> an id never reused (a counter)
_NEXT_ID = itertools.count()
_SHARED_PARTS: dict[tuple, object] = {}
_MAX_SHARED = 200_000


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
        signature = (tuple(self.v.items()), self.k, bool(cfg.hisparse), cfg.system)
        self._id = _config_id(signature)
        # the shared part's arguments: fixed ones filled in once, the three that vary set per call
        names = self.shared_c.names
        self._shared_args = self.shared_c.args(dict(self.v, N=1.0, N_d=1.0, mlp_eff=1.0))
        self._shared_at = (names.index("N"), names.index("N_d"), names.index("mlp_eff"))

    # rank part = a + c * L + g * M  for b requests (exact: the expressions are linear in L and M)
    def rank_coeffs(self, b: int, active: int, swap: bool = True) -> tuple[float, float, float]:
        """Coefficients of the rank part; ``swap=False`` when all its requests fit the GPU buffer."""
        key = (b, active, swap)
        c = self._rank_cache.get(key)
        if c is not None:
            return c
        bw, lat = swap_route(self.cfg, active)
        c = _SHARED_PARTS.get(("rank", self._id, b, active, swap, bw, lat))
        if c is None:
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
            c = _remember(("rank", self._id, b, active, swap, bw, lat), (t00 - slope_l * L0, slope_l, t01 - t00))
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
            s = _SHARED_PARTS.get(("shared", self._id, *key))
            if s is None:
                a = list(self._shared_args)
                i_n, i_d, i_eff = self._shared_at
                a[i_n], a[i_d] = float(max(n_tokens, 1)), float(max(d, 1))
                a[i_eff] = self.v["prefill_eff"] if prefill else self.v["compute_eff"]
                s = _remember(("shared", self._id, *key), self.shared_c.total(*a))
            self._shared_cache[key] = s
        return s

    def prefill(self, P: float, H: float) -> float:
        """Seconds of one request's prefill of ``P`` new tokens after ``H`` cached ones (its own part)."""
        x = _SHARED_PARTS.get(("prefill", self._id, P, H))
        if x is None:
            L = H + P
            v = dict(self.v, P=float(P), H=float(H), k_attn=min(self.k, L) if self.k else L)
            x = _remember(("prefill", self._id, P, H), self.prefill_c.total(*self.prefill_c.args(v)))
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
            c = cumulative_misses(self.cfg, key[0], max_age)
            self._miss_cache[key] = c
        return c
