"""Serving model: TTFT, TBT, throughput and capacity of each KV-cache architecture.

Decode: all data-parallel attention ranks step together (the tensor-parallel MoE/dense layers are shared),
so a step lasts as long as the busiest rank. One step of a rank with ``b`` decoding requests, global batch
``B``, context ``L``:

    T = layers x t_layer                                  fixed per-layer overheads (launches, collectives)
      + roofline(attention projections: replicated weights, b tokens)
      + roofline(MLP: dense + shared + distinct routed experts touched by B tokens, split over tp GPUs)
      + b x layers x roofline(indexer over L keys)       DSA lightning indexer (keys in HBM)
      + b x layers x roofline(attention over min(k, L))   sparse (or dense) attention
      + layers x swap-in of the b x m LRU misses          pool systems; gather over the topology route,
                                                          bandwidth max-min shared by the ranks

Admission of a request (its first token) is an extend step on its rank: ``t_admit`` plus loading the prefix's
indexer keys at ``admit_bandwidth`` plus a cold gather of k entries per layer. The RDMA pool first RDMA-reads
the whole prefix (one READ per entry spread over ``rdma_nics`` NICs; each rank fetches its requests in FIFO
order and the ranks that fetch share the NICs equally), then copies it from the staging buffer into the host
pool (``copy_bandwidth``). An RDMA-loaded prefix is the request's own copy in the host pool, indexer keys
included, so its indexer scans the keys over the host route each step instead of from HBM.

A cold (uncached) prompt is prefilled instead, in chunks of ``prefill_chunk`` tokens, one chunk per step
(:func:`prefill_expressions`), the rank's own decode batch waiting meanwhile.

The workload follows the testbed benchmark: ``requests`` released at t = 0, at most ``concurrency`` in flight,
the same cached prompt; or Poisson arrivals at ``rate``; or per-request arrays (:class:`Requests`, trace
replay). A small event-driven engine (:func:`run_engine`) steps the batch and jumps over runs of identical
steps; with one request in flight it reduces to the closed forms of :func:`sacmodel.solvers.symbolic`.
:func:`steady_state` is the analytic alternative: a fixed point on the request throughput.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import sympy as sp

from .access import expected_pages, steady_state_misses
from .costs import compile_expr, gather_time, lines_per_entry, rdma_time, sym
from .models import ModelSpec
from .systems import (as_topology, check_system, entry_bytes, model_of, swap_paths)
from .topology import Topology, TopologyError, max_min_share


class ConfigError(ValueError):
    """A workload or configuration the model cannot take (bad argument values)."""


# ---- symbolic step model --------------------------------------------------------------------------
def _roof(flops, hbm_bytes, peak):
    eff = sym("compute_eff", "dimensionless", "achieved fraction of peak FLOP/s")
    heff = sym("hbm_eff", "dimensionless", "achieved fraction of HBM bandwidth")
    return sp.Max(flops / (peak * eff), hbm_bytes / (sym("hbm_bw", "byte/second", "GPU HBM bandwidth") * heff))


def step_expressions() -> dict[str, sp.Expr]:
    """Components (s) of one decode step of the busiest rank, as sympy expressions over named symbols."""
    b = sym("b", "dimensionless", "decoding requests on the busiest rank")
    B = sym("B", "dimensionless", "decoding requests over all ranks")
    L = sym("L", "dimensionless", "context length (tokens)")
    kk = sym("k_attn", "dimensionless", "entries the attention reads per layer: min(topk, L) or L")
    layers = sym("layers", "dimensionless", "transformer layers")
    wb = sym("w_bytes", "byte", "bytes per weight parameter")
    tp = sym("tp", "dimensionless", "tensor-parallel GPUs sharing the MLP")
    p16 = sym("peak_bf16", "FLOP/second", "GPU peak BF16 FLOP/s")
    p8 = sym("peak_fp8", "FLOP/second", "GPU peak FP8 FLOP/s")
    m = sym("m_miss", "dimensionless", "LRU misses per request per layer per step")
    swap_on = sym("swap_on", "dimensionless", "1 if the context does not fit the device buffer, else 0")
    R, e = sym("n_experts", "dimensionless", "routed experts"), sym("e_active", "dimensionless", "experts per token")
    n_sh = sym("n_shared", "dimensionless", "shared experts")
    P_att, P_exp = sym("p_attn", "dimensionless", "attention params per layer"), sym("p_expert", "dimensionless", "params per expert")
    P_mlp = sym("p_dense_mlp", "dimensionless", "dense MLP params per layer")
    l_moe = sym("moe_layers", "dimensionless", "MoE layers")
    l_dense = sym("dense_layers", "dimensionless", "dense-MLP layers")
    f_ix = sym("f_index", "FLOP", "indexer FLOPs per key per layer")
    f_at = sym("f_attn", "FLOP", "attention FLOPs per entry per layer")
    ikb = sym("index_key_bytes", "byte", "indexer key bytes per token per layer")
    eb = sym("entry_bytes", "byte", "main KV entry bytes per token per layer")
    distinct = R * (1 - (1 - e / R) ** B)
    mlp_w = wb * (l_dense * P_mlp + l_moe * (n_sh + distinct) * P_exp) / tp
    mlp_f = sym("flop_unit", "FLOP", "one FLOP") * 2 * B * (l_dense * P_mlp + l_moe * (n_sh + e) * P_exp) / tp
    g = gather_time("sw_").subs(sym("sw_n", "dimensionless"), b * m)
    return {
        "fixed": layers * sym("t_layer", "second", "fixed overhead per layer per step"),
        "attn_proj": _roof(sym("flop_unit", "FLOP") * 2 * b * layers * P_att, wb * layers * P_att, p16),
        "mlp": _roof(mlp_f, mlp_w, p16),
        "indexer": b * layers * sp.Max(f_ix * L / (p8 * sym("compute_eff", "dimensionless")),
                                        ikb * L / sym("ikey_bw", "byte/second", "bandwidth of the indexer-key scan")),
        "attention": b * layers * _roof(f_at * kk, eb * kk, p16),
        "swap": swap_on * layers * (g + _rdma_reads(b * m, sym("rdma_share", "dimensionless",
                                                               "share of the NICs one rank gets"))),
    }


def _rdma_reads(entries, share):
    """RDMA-topk only (``rdma_topk_on`` = 1): READs of missed entries over the rank's share of the NICs.

    Per missed entry: ``rdma_ops_per_miss`` operations moving ``rdma_bytes_per_miss`` bytes (1 op and one
    entry when reading entry by entry; the expected pages and whole pages when reading page by page).
    """
    on = sym("rdma_topk_on", "dimensionless", "1 for rdma-topk, else 0")
    ops = sym("rdma_ops_per_miss", "dimensionless", "RDMA READs per missed entry (rdma-topk)")
    nbytes = sym("rdma_bytes_per_miss", "byte", "bytes RDMA-read per missed entry (rdma-topk)")
    return on * entries * (ops * sym("rdma_op_cost", "second") + nbytes / sym("pf_rate", "byte/second")) / share


def admission_expressions() -> dict[str, sp.Expr]:
    """Components (s) of admitting one cached-prefix request (extend step) and of fetching its prefix."""
    L = sym("L", "dimensionless")
    layers = sym("layers", "dimensionless")
    ikb, eb = sym("index_key_bytes", "byte"), sym("entry_bytes", "byte")
    pool_on = sym("pool_on", "dimensionless", "1 for pool systems (prefix indexer keys loaded), else 0")
    swap_on = sym("swap_on", "dimensionless")
    kk = sym("k_attn", "dimensionless")
    cold = gather_time("sw_").subs(sym("sw_n", "dimensionless"), kk) + _rdma_reads(kk, 1)
    ops = sym("rdma_ops_per_token", "dimensionless", "RDMA READs per token per layer")
    fetch = rdma_time("pf_").subs({sym("pf_ops"): ops * L * layers, sym("pf_bytes", "byte"): eb * L * layers})
    return {
        "admit": sym("t_admit", "second", "fixed cost of admitting a request (scheduling, extend step)")
        + pool_on * L * layers * ikb / sym("admit_bandwidth", "byte/second", "prefix indexer-key load bandwidth")
        + swap_on * layers * cold,
        "rdma_fetch": fetch,
        "rdma_copy": eb * L * layers / sym("copy_bandwidth", "byte/second", "staging-to-pool copy bandwidth"),
        "dma_fetch": eb * L * layers / sym("pf_dma_bw", "byte/second", "bulk prefix copy bandwidth"),
    }


def prefill_expressions() -> dict[str, sp.Expr]:
    """Components (s) of prefilling ``P`` uncached tokens after ``H`` cached ones on one rank (chunked).

    ``Bp`` tokens are prefilled over all ranks at once (they share the tensor-parallel MLP). The indexer is
    causal, O(P (H + P)); the sparse attention reads min(k, i) entries for the i-th token.
    """
    P = sym("P", "dimensionless", "prompt tokens to prefill on the rank")
    Bp = sym("Bp", "dimensionless", "prompt tokens prefilled over all ranks at once")
    layers = sym("layers", "dimensionless")
    k = sym("k_attn", "dimensionless")
    eff = sym("prefill_eff", "dimensionless", "achieved fraction of peak FLOP/s in prefill")
    p16, p8 = sym("peak_bf16", "FLOP/second"), sym("peak_fp8", "FLOP/second")
    fu = sym("flop_unit", "FLOP")
    chunks = sp.ceiling(P / sym("prefill_chunk", "dimensionless", "tokens per prefill chunk"))
    # weights are streamed once per chunk; compute runs at the prefill efficiency
    wb, tp = sym("w_bytes", "byte"), sym("tp", "dimensionless")
    R, e = sym("n_experts", "dimensionless"), sym("e_active", "dimensionless")
    n_sh, P_exp = sym("n_shared", "dimensionless"), sym("p_expert", "dimensionless")
    P_att, P_mlp = sym("p_attn", "dimensionless"), sym("p_dense_mlp", "dimensionless")
    l_moe, l_dense = sym("moe_layers", "dimensionless"), sym("dense_layers", "dimensionless")
    hbm = sym("hbm_bw", "byte/second") * sym("hbm_eff", "dimensionless")
    tok_chunk = Bp / chunks
    distinct = R * (1 - (1 - e / R) ** tok_chunk)
    weights = wb * (layers * P_att + (l_dense * P_mlp + l_moe * (n_sh + distinct) * P_exp) / tp)
    mlp_f = fu * 2 * Bp * (l_dense * P_mlp + l_moe * (n_sh + e) * P_exp) / tp
    H = sym("H", "dimensionless", "cached prefix tokens the new tokens attend to")

    def entries_upto(n):  # sum over positions i = 1..n of min(k, i)
        return sp.Piecewise((n * (n + 1) / 2, n <= k), (k * (k + 1) / 2 + (n - k) * k, True))
    attn_entries = entries_upto(H + P) - entries_upto(H)
    return {
        "prefill_fixed": chunks * layers * sym("t_layer", "second"),
        "prefill_weights": chunks * weights / hbm,
        "prefill_dense": (fu * 2 * P * layers * P_att + mlp_f) / (p16 * eff),
        "prefill_indexer": layers * sym("f_index", "FLOP") * (P * H + P * (P + 1) / 2) / (p8 * eff),
        "prefill_attention": layers * sym("f_attn", "FLOP") * attn_entries / (p16 * eff),
    }


_COMPILED: dict[str, object] = {}


def _fn(name: str):
    if not _COMPILED:
        for k, e in {**step_expressions(), **admission_expressions(), **prefill_expressions()}.items():
            _COMPILED[k] = compile_expr(e)
    return _COMPILED[name]


# ---- binding a scenario ---------------------------------------------------------------------------
@dataclass
class Config:
    """A resolved configuration: scenario, model, system and resource counts."""
    topo: Topology
    model: ModelSpec
    system: str
    cxl_devices: int
    rdma_nics: int
    device_buffer: int
    dp: int


def resolve(scenario, system: str, *, cxl_devices=None, device_buffer=None, rdma_nics=None) -> Config:
    topo = as_topology(scenario)
    check_system(system)
    model = model_of(topo)
    dp = int(topo.param("dp"))
    if dp < 1 or dp > len(topo.gpus):
        raise TopologyError(f"{topo.name}: dp={dp} but the scenario has {len(topo.gpus)} GPUs")

    def count(v, name, pool):
        n = int(topo.param(name)) if v is None else v
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
        have = len(topo.pools.get(pool, []))
        if system_uses(system, pool) and n > have:
            raise ConfigError(f"{name}={n} but the scenario has {have} {pool} pool member(s)")
        return int(n)
    buf = int(topo.param("device_buffer")) if device_buffer is None else device_buffer
    if int(buf) != buf or buf < 1:
        raise ConfigError(f"device_buffer must be a positive integer, got {device_buffer!r}")
    return Config(topo, model, system, count(cxl_devices, "cxl_devices", "cxl"),
                  count(rdma_nics, "rdma_nics", "rdma"), int(buf), dp)


def system_uses(system: str, pool: str) -> bool:
    return {"cxl": {"cxl"}, "cxl-prefetch": {"cxl", "dram"}, "rdma": {"rdma", "dram"}, "rdma-topk": {"rdma"},
            "dram": {"dram"}, "gpu": set()}[system].__contains__(pool)


def _rdma_granularity(cfg: Config, v: dict, context: float) -> tuple[float, float]:
    """(operations, bytes) per missed entry for rdma-topk: by entry, or by page (``rdma_topk_granularity``)."""
    t = cfg.topo
    unit = t.serving["rdma_topk_granularity"].raw if "rdma_topk_granularity" in t.serving else "entry"
    if unit == "entry":
        return 1.0, v["entry_bytes"]
    if unit != "page":
        raise ConfigError(f"{t.name}: rdma_topk_granularity must be 'entry' or 'page', not {unit!r}")
    page = t.param("page_tokens")
    m = v["m_miss"] or v["k_attn"]
    pages = expected_pages(m, int(context), int(page)) if m > 0 else 0.0
    per = pages / m if m > 0 else 1.0
    return per, per * page * v["entry_bytes"]


def bind(cfg: Config, context: float, active_ranks: int | None = None) -> dict[str, float]:
    """Numeric values of every symbol of the step and admission expressions."""
    t, m = cfg.topo, cfg.model
    gpu = t.node(t.gpus[0])
    eb = entry_bytes(t, m)
    k_attn = m.attention_entries(context)
    pool = cfg.system not in ("gpu",)
    swap_on = 1.0 if pool and context > cfg.device_buffer else 0.0
    v = dict(
        L=float(context), k_attn=float(k_attn), layers=float(m.layers), w_bytes=t.param("weight_bytes_per_param"),
        tp=t.param("tp"), peak_bf16=gpu["flops_bf16"], peak_fp8=gpu["flops_fp8"], hbm_bw=gpu["hbm_bandwidth"],
        compute_eff=t.param("compute_eff"), hbm_eff=t.param("hbm_eff"), t_layer=t.param("t_layer"),
        n_experts=float(max(m.routed_experts, 1)), e_active=float(m.experts_per_token),
        n_shared=float(m.shared_experts), p_attn=m.attn_params(), p_expert=m.expert_params(),
        p_dense_mlp=m.dense_mlp_params(), moe_layers=float(m.moe_layers),
        dense_layers=float(m.layers - m.moe_layers), flop_unit=1.0,
        f_index=m.flops_indexer(1.0), f_attn=m.flops_sparse_attn(1.0), index_key_bytes=m.index_key_bytes,
        entry_bytes=eb, swap_on=swap_on, pool_on=1.0 if pool else 0.0,
        t_admit=t.param("t_admit"), admit_bandwidth=t.param("admit_bandwidth"),
        prefill_eff=t.param("prefill_eff") if t.has_param("prefill_eff") else t.param("compute_eff"),
        prefill_chunk=t.param("prefill_chunk") if t.has_param("prefill_chunk") else 8192.0,
        m_miss=steady_state_misses(context, k_attn, cfg.device_buffer, overlap_at(t, context)) if swap_on else 0.0,
        rdma_ops_per_token=t.param("rdma_ops_per_token"), copy_bandwidth=t.param("copy_bandwidth"),
        lines_per_entry=lines_per_entry(eb, t.param("cacheline")), cacheline=t.param("cacheline"),
        outstanding_lines=t.param("outstanding_lines"), t_kernel=t.param("t_kernel"),
    )
    if m.routed_experts == 0:
        v["n_experts"], v["e_active"] = 1.0, 0.0
    # swap-in path of the busiest rank with ``active_ranks`` ranks gathering at once
    pk = {"dram": "dram", "cxl": "cxl", "rdma": "dram", "cxl-prefetch": "dram", "rdma-topk": "dram"}.get(cfg.system)
    if pk in ("dram", "cxl"):
        paths = swap_paths(t, pk, active_ranks=active_ranks or cfg.dp,
                           n_devices=cfg.cxl_devices if pk == "cxl" else None)
        worst = min(paths, key=lambda p: p.bandwidth)
        v.update(sw_bw=worst.bandwidth, sw_lat=worst.latency)
    else:
        v.update(sw_bw=1.0, sw_lat=1e-6)
    if cfg.system == "rdma":   # private prefix copy: keys in the host pool, scanned over the PCIe route
        v["ikey_bw"] = min(p.bandwidth for p in swap_paths(t, "dram", active_ranks=active_ranks or cfg.dp))
    else:
        v["ikey_bw"] = v["hbm_bw"] * v["hbm_eff"]
    nics = t.pools.get("rdma", [])
    if nics:
        nic = t.node(nics[0])
        v.update(pf_rate=nic["rate"] * cfg.rdma_nics, rdma_op_cost=nic["op_cost"] / cfg.rdma_nics)
    else:
        v.update(pf_rate=1.0, rdma_op_cost=0.0)
    v["rdma_topk_on"] = 1.0 if cfg.system == "rdma-topk" else 0.0
    v["rdma_ops_per_miss"], v["rdma_bytes_per_miss"] = _rdma_granularity(cfg, v, context)
    v["rdma_share"] = 1.0 / cfg.dp     # every rank fetches at once: each gets 1/dp of the NICs
    if cfg.system == "cxl-prefetch":
        flows = [(d, t.pool_for(0, "dram")) for d in t.pools["cxl"][:cfg.cxl_devices]]
        v["pf_dma_bw"] = sum(max_min_share(t, flows))
    else:
        v["pf_dma_bw"] = 1.0
    return v


REF_CONTEXT = 32768  # context at which ``topk_overlap`` is stated (tokens)


def overlap_at(topo: Topology, context: float) -> float:
    """Fraction of a step's top-k kept from the previous step at ``context`` tokens.

    ``topk_overlap`` holds at 32K tokens; the churn (1 - overlap) scales as (L / 32K)^topk_churn_exponent,
    since a longer context spreads the selection over more candidates (exponent 0: no dependence).
    """
    rho0 = topo.param("topk_overlap")
    gamma = topo.param("topk_churn_exponent") if topo.has_param("topk_churn_exponent") else 0.0
    return float(min(1.0, max(0.0, 1.0 - (1.0 - rho0) * (context / REF_CONTEXT) ** gamma)))


def step_breakdown(cfg: Config, v: dict, b: float, B: float) -> dict[str, float]:
    """Seconds of each component of one decode step with ``b`` requests on the busiest rank, ``B`` total."""
    vals = dict(v, b=b, B=B)
    out = {}
    for k in ("fixed", "attn_proj", "mlp", "indexer", "attention", "swap"):
        f = _fn(k)
        out[k] = float(f(**{n: vals[n] for n in f.names}))
    return out


def prefill_breakdown(cfg: Config, v: dict, tokens: float, ranks: int = 1, cached: float = 0.0,
                      total: float | None = None) -> dict[str, float]:
    """Seconds of each component of prefilling ``tokens`` new tokens after ``cached`` ones, while ``ranks``
    ranks prefill as much (or ``total`` tokens over all ranks)."""
    vals = dict(v, P=float(tokens), H=float(cached), Bp=float(total if total is not None else tokens * ranks))
    return {k: float(_fn(k)(**{n: vals[n] for n in _fn(k).names})) for k in
            ("prefill_fixed", "prefill_weights", "prefill_dense", "prefill_indexer", "prefill_attention")}


def admission_breakdown(cfg: Config, v: dict) -> dict[str, float]:
    """Seconds of the admission (extend) step and, for prefetch systems, of the prefix fetch phases."""
    get = lambda k: float(_fn(k)(**{n: v[n] for n in _fn(k).names}))  # noqa: E731
    out = {"admit": get("admit"), "fetch": 0.0, "copy": 0.0}
    if cfg.system == "rdma":
        out["fetch"] = get("rdma_fetch")
        out["copy"] = get("rdma_copy")
    elif cfg.system == "cxl-prefetch":
        out["fetch"] = get("dma_fetch")
    return out


# ---- capacity -------------------------------------------------------------------------------------
def capacity(cfg: Config, context: int, output: int, concurrency: int) -> dict:
    """Memory use per GPU and per pool for ``concurrency`` requests in flight; names the binding limit."""
    t, m = cfg.topo, cfg.model
    eb = entry_bytes(t, m)
    per_rank = math.ceil(concurrency / cfg.dp)
    gpu = t.node(t.gpus[0])
    wb = t.param("weight_bytes_per_param")
    tp = t.param("tp")
    shared_w = m.params_total() - m.layers * m.attn_params()
    weights = wb * (m.layers * m.attn_params() + shared_w / tp)
    budget = t.param("mem_fraction") * gpu["hbm_capacity"] - weights
    tok_kv = m.layers * (eb + m.index_key_bytes)
    private_prefix = cfg.system in ("rdma",)          # each fetched copy is the request's own
    if cfg.system == "gpu":
        tokens = context * (per_rank if private_prefix else 1) + per_rank * output
        hbm = tokens * tok_kv
    else:
        idx_tokens = (0 if private_prefix else context) + per_rank * output   # rdma: prefix keys in host pool
        tokens = per_rank * (min(cfg.device_buffer, context) + output)
        hbm = idx_tokens * m.layers * m.index_key_bytes + per_rank * (
            min(cfg.device_buffer, context) * m.layers * eb + output * m.layers * eb)
    limits = {"hbm": (hbm, budget), "max_total_tokens": (tokens, t.param("max_total_tokens"))}
    pool_bytes = (concurrency if private_prefix else 1) * context * m.layers * eb + concurrency * output * m.layers * eb
    if cfg.system in ("dram", "rdma", "cxl-prefetch"):
        cap = sum(t.node(n)["capacity"] for n in t.pools.get("dram", []))
        if t.has_param("host_pool_capacity"):
            cap = t.param("host_pool_capacity")
        limits["host_pool"] = (pool_bytes * (cfg.dp if not private_prefix else 1), cap)
    if cfg.system in ("cxl", "cxl-prefetch"):
        devs = t.pools["cxl"][:cfg.cxl_devices]
        limits["cxl_pool"] = (pool_bytes * cfg.dp, sum(t.node(n)["capacity"] for n in devs))
    if cfg.system in ("rdma", "rdma-topk"):
        remote = t.nodes_of("remote_memory")
        if remote:
            limits["remote_pool"] = (context * m.layers * eb, sum(t.node(n)["capacity"] for n in remote))
    if budget <= 0:
        return {"feasible": False, "limit": "hbm (weights alone exceed the memory budget)", "usage": {},
                "weights_per_gpu_bytes": weights, "hbm_budget_bytes": budget}
    over = {k: u / c for k, (u, c) in limits.items() if u > c}
    usage = {k: {"used": u, "capacity": c} for k, (u, c) in limits.items()}
    worst = max(over, key=over.get) if over else None
    return {"feasible": not over, "limit": worst, "usage": usage, "weights_per_gpu_bytes": weights,
            "hbm_budget_bytes": budget, "requests_per_rank": per_rank}


# ---- prediction -----------------------------------------------------------------------------------
@dataclass
class Prediction:
    """Predicted serving metrics of one system on one workload. Times in ms, throughput in tokens/s."""
    system: str
    scenario: str
    context: int
    output: int
    concurrency: int
    requests: int
    feasible: bool
    limit: str | None
    ttft_mean_ms: float = math.nan
    ttft_p50_ms: float = math.nan
    ttft_p99_ms: float = math.nan
    tbt_mean_ms: float = math.nan
    tbt_p99_ms: float = math.nan
    e2e_mean_ms: float = math.nan
    output_throughput_tok_s: float = math.nan
    request_throughput_req_s: float = math.nan
    duration_s: float = math.nan
    breakdown: dict = field(default_factory=dict)
    capacity: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _check_workload(context, output, concurrency, requests, rate):
    for name, v in (("context", context), ("output", output), ("concurrency", concurrency)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    if requests is not None and (not isinstance(requests, (int, np.integer)) or requests < 1):
        raise ConfigError(f"requests must be a positive integer, got {requests!r}")
    if rate is not None and not (isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate)):
        raise ConfigError(f"rate must be a positive number of requests/s, got {rate!r}")


def predict(scenario, system: str, *, context: int, output: int, concurrency: int, requests: int | None = None,
            cxl_devices: int | None = None, device_buffer: int | None = None, rdma_nics: int | None = None,
            rate: float | None = None, seed: int = 0, prefix_cached: bool = True,
            method: str = "engine") -> Prediction:
    """Predict TTFT, TBT, E2E latency and throughput of ``system`` on ``scenario`` for a workload.

    Closed loop (default): ``requests`` (default 8 x concurrency, as the testbed benchmark) released at
    t = 0 with at most ``concurrency`` in flight. Open loop: Poisson arrivals at ``rate`` requests/s
    (``seed`` fixes them), at most ``concurrency`` in flight. ``prefix_cached=False``: every prompt is
    prefilled from scratch (the testbed's cache-filling round 1) instead of hitting the cached prefix.
    ``method="analytic"``: the steady state of the same model by a fixed point (no first-wave transient,
    no percentiles); ``"engine"`` (default) runs the event-driven engine.
    """
    _check_workload(context, output, concurrency, requests, rate)
    cfg = resolve(scenario, system, cxl_devices=cxl_devices, device_buffer=device_buffer, rdma_nics=rdma_nics)
    n_req = requests if requests is not None else 8 * concurrency
    max_ctx = cfg.model.extra.get("max_context")
    pred = Prediction(system, cfg.topo.name, context, output, concurrency, n_req, True, None,
                      config={"cxl_devices": cfg.cxl_devices, "rdma_nics": cfg.rdma_nics,
                              "device_buffer": cfg.device_buffer, "dp": cfg.dp, "rate": rate})
    if max_ctx and context > max_ctx:
        pred.feasible, pred.limit = False, "model max context"
        return pred
    cap = capacity(cfg, context, output, concurrency)
    pred.capacity = cap
    if not cap["feasible"]:
        pred.feasible, pred.limit = False, cap["limit"]
        return pred
    if method == "analytic":
        res = steady_state(cfg, context=context, output=output, concurrency=concurrency, rate=rate,
                           prefix_cached=prefix_cached)
    elif method == "engine":
        res = simulate_serving(cfg, context=context, output=output, concurrency=concurrency, requests=n_req,
                               rate=rate, seed=seed, prefix_cached=prefix_cached)
    else:
        raise ConfigError(f"method must be 'engine' or 'analytic', not {method!r}")
    if res.get("unstable"):
        pred.feasible, pred.limit = False, res["unstable"]
        return pred
    pred.config["prefix_cached"] = prefix_cached
    for k, v in res.items():
        setattr(pred, k, v)
    return pred


def compare(scenario, systems=("gpu", "dram", "cxl", "rdma"), **kw) -> dict[str, Prediction]:
    """``predict`` for several systems on the same workload."""
    return {s: predict(scenario, s, **kw) for s in systems}


# ---- event-driven engine --------------------------------------------------------------------------
class _Fetcher:
    """Prefix fetches: one FIFO lane per rank; active lanes share the fetch path equally (processor sharing).

    ``work`` is the fetch time of one prefix alone on the idle path (s).
    """

    def __init__(self, lanes: int, work: float):
        self.queues: list[list[tuple[int, float]]] = [[] for _ in range(lanes)]
        self.left: dict[int, float] = {}            # lane -> remaining work of its head
        self.work, self.t = work, 0.0

    def add(self, i: int, lane: int, work: float | None = None) -> None:
        self.queues[lane].append((i, self.work if work is None else work))
        if lane not in self.left:
            self.left[lane] = self.queues[lane][0][1]

    def next_done(self, now: float) -> float:
        if not self.left:
            return math.inf
        return max(now, self.t) + min(self.left.values()) * len(self.left)

    def advance(self, now: float) -> list[tuple[int, float]]:
        """Progress to ``now``; returns (request, completion time) of finished fetches, in order."""
        done = []
        while self.left and now > self.t:
            n = len(self.left)
            step = min(min(self.left.values()) * n, now - self.t)
            for lane in self.left:
                self.left[lane] -= step / n
            self.t += step
            for lane in sorted(self.left, key=lambda ln: self.left[ln]):
                if self.left[lane] <= 1e-12:
                    done.append((self.queues[lane].pop(0)[0], self.t))
                    del self.left[lane]
                    if self.queues[lane]:
                        self.left[lane] = self.queues[lane][0][1]
        self.t = max(self.t, now)
        return done


def steady_state(cfg: Config, *, context: int, output: int, concurrency: int, rate: float | None = None,
                 prefix_cached: bool = True) -> dict:
    """Steady state of the serving model by a fixed point on the request throughput X (requests/s).

    It assumes requests out of phase with each other (e.g. varied output lengths): the testbed benchmark's
    identical requests instead move in waves (admitted together, finishing together), which only the engine
    captures.

    Closed loop: X = c / R(X) with the request cycle R = t_request + W + a + (O - 1) T / (1 - X a), where
    a is the admission (extend or prefill) step, which stalls every rank, T the decode step with B = c - X (W + a)
    requests decoding, and W the prefix fetch (processor sharing: w / (1 - X w), plus half a prefetch
    check period). Open loop at ``rate``: X = rate, stable only if X a < 1 and X w < 1.
    """
    from scipy.optimize import brentq
    dp = cfg.dp
    steps = _StepCache(cfg)
    adm = admission_breakdown(cfg, steps.values(1, context))
    if prefix_cached:
        a = adm["admit"]
        w = adm["fetch"] + adm["copy"] if cfg.system in ("rdma", "cxl-prefetch") else 0.0
    else:
        a = sum(prefill_breakdown(cfg, steps.values(1, context), context, 1).values())
        w = 0.0
    poll = cfg.topo.param("prefetch_poll") / 2 if w > 0 else 0.0
    t_req = cfg.topo.param("t_request")
    L_dec = context + (output - 1) / 2.0   # mean context a decode step sees

    def cycle(X):
        fetch = w / (1 - X * w) + poll if w > 0 else 0.0
        stall = 1 - X * a
        # requests decoding: the in-flight ones not waiting in the engine's front part (Little's law)
        front = X * (t_req + fetch + a)
        B = max(1.0, min(concurrency, concurrency - front) if rate is None else X * (output - 1) * 0.1)
        for _ in range(50):   # B and T depend on each other in the open loop
            b = math.ceil(B / dp)
            T = steps.step(b, int(round(B)), min(dp, max(1, int(round(B)))), L_dec)[0] / stall
            if rate is None:
                break
            B_new = max(1.0, X * (output - 1) * T)
            if abs(B_new - B) < 1e-6 * B:
                break
            B = B_new
        return t_req + fetch + a + (output - 1) * T, T, fetch, B

    limits = [1 / a if a > 0 else math.inf, 1 / w if w > 0 else math.inf]
    x_max = min(limits) * (1 - 1e-9)
    if rate is not None:
        if rate >= x_max:
            which = "admission" if limits[0] <= limits[1] else "prefix fetch"
            return {"unstable": f"{which} saturated: arrivals {rate:g}/s exceed {x_max:.3g}/s"}
        X = rate
        R, T, fetch, B = cycle(X)
    else:
        g = lambda X: X * cycle(X)[0] - concurrency  # noqa: E731
        hi = min(x_max, concurrency / (t_req + a + 1e-12))
        X = brentq(g, 1e-12, hi, xtol=1e-12, rtol=1e-12) if g(hi) > 0 else hi
        R, T, fetch, B = cycle(X)
    br = step_breakdown(cfg, steps.values(min(dp, max(1, int(round(B)))), L_dec), math.ceil(B / dp),
                        int(round(B)))
    # a request reaching its rank waits for the current step (half a step on average) and for the rank's
    # earlier admissions (M/D/1 queue with arrivals X / dp, service a)
    rho = X * a / dp
    wait = T / 2 + (rho * a / (2 * (1 - rho)) if rho < 1 else math.inf)
    ttft = t_req + fetch + wait + a
    R = R + wait
    return {"ttft_mean_ms": ttft * 1e3, "tbt_mean_ms": T * 1e3, "e2e_mean_ms": R * 1e3,
            "output_throughput_tok_s": X * output, "request_throughput_req_s": X,
            "breakdown": {**{f"step_{k}_ms": v * 1e3 for k, v in br.items()}, "admit_ms": a * 1e3,
                          "prefix_fetch_ms": fetch * 1e3, "share_time_admitting": X * a,
                          "decoding_requests": B}}


class _StepCache:
    """Step time by (b, B, active ranks, context) for one configuration (bindings cached per context)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.bound: dict[tuple, dict] = {}
        self.cache: dict[tuple, tuple[float, dict]] = {}

    def values(self, ranks: int, context: float) -> dict:
        key = (ranks, context)
        if key not in self.bound:
            self.bound[key] = bind(self.cfg, context, active_ranks=max(1, ranks))
        return self.bound[key]

    def step(self, b: int, B: int, ranks: int, context: float) -> tuple[float, dict]:
        key = (b, B, ranks, context)
        if key not in self.cache:
            br = step_breakdown(self.cfg, self.values(ranks, context), b, B)
            self.cache[key] = (sum(br.values()), br)
        return self.cache[key]


@dataclass
class Requests:
    """A workload as per-request arrays: arrival time (s), context, output and cached-prefix tokens."""
    arrival: np.ndarray
    context: np.ndarray
    output: np.ndarray
    cached: np.ndarray

    @classmethod
    def uniform(cls, n: int, context: int, output: int, *, rate: float | None = None, seed: int = 0,
                prefix_cached: bool = True) -> "Requests":
        rng = np.random.default_rng(seed)
        arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n)) if rate else np.zeros(n)
        return cls(arrivals, np.full(n, context), np.full(n, output), np.full(n, context if prefix_cached else 0))


def simulate_serving(cfg: Config, *, context: int, output: int, concurrency: int, requests: int,
                     rate: float | None = None, seed: int = 0, prefix_cached: bool = True) -> dict:
    """Run the engine on the benchmark workload; returns the metric fields of :class:`Prediction`."""
    reqs = Requests.uniform(requests, context, output, rate=rate, seed=seed, prefix_cached=prefix_cached)
    return run_engine(cfg, reqs, concurrency)


def _snap(x: float, resolution: float) -> float:
    """``x`` rounded to ``resolution`` relative precision within its power-of-two octave."""
    q = 2 ** math.floor(math.log2(max(x, 1.0))) * resolution
    return max(1.0, round(x / q) * q)


def run_engine(cfg: Config, reqs: Requests, concurrency: int, context_resolution: float = 0.0) -> dict:
    """Event-driven engine over per-request arrays (closed loop by ``concurrency``; arrivals in ``reqs``).

    A rank's decode step uses the mean context of its requests (rounded to ``context_resolution`` relative
    precision when > 0, so that heterogeneous traces reuse cached step times); the step of all ranks lasts as
    long as the slowest rank's. Admission = loading the cached prefix (``admit``) and prefilling the rest in
    chunks of ``prefill_chunk`` tokens, one chunk per step (the rank's own batch waits, other ranks decode).
    """
    dp = cfg.dp
    n = len(reqs.arrival)
    ctx, out, hit = reqs.context.astype(float), reqs.output.astype(int), reqs.cached.astype(float)
    if context_resolution > 0:   # snap lengths to the grid so that step and admission costs are reused
        ctx = np.array([_snap(x, context_resolution) for x in ctx])
        hit = np.minimum(np.array([_snap(x, context_resolution) if x > 0 else 0.0 for x in hit]), ctx - 1)
    # the KV grows by one entry per generated token: a decode step of request i sees on average
    # context + (output - 1) / 2 entries over its life
    dctx = ctx + (out - 1) / 2.0
    steps = _StepCache(cfg)
    fetching = cfg.system in ("rdma", "cxl-prefetch")

    def round_ctx(x: float) -> float:
        return _snap(x, context_resolution) if context_resolution > 0 else x

    adm_cache: dict[float, dict] = {}

    def admission(L: float) -> dict:
        if L not in adm_cache:
            adm_cache[L] = admission_breakdown(cfg, steps.values(1, L))   # one rank admits; cold gather alone
        return adm_cache[L]

    chunk = cfg.topo.param("prefill_chunk") if cfg.topo.has_param("prefill_chunk") else 8192.0
    prefilled = np.zeros(n)   # new tokens already prefilled (chunked prefill spans several steps)

    def next_chunk(i: int) -> float:
        return min(chunk, ctx[i] - hit[i] - prefilled[i])

    def admit_time(i: int, total_new: float) -> float:
        """This step's work for request i: loading its cached prefix (first step) and one prefill chunk."""
        t_ = admission(ctx[i])["admit"] if hit[i] > 0 and prefilled[i] == 0 else 0.0
        c = next_chunk(i)
        if c > 0:
            t_ += sum(prefill_breakdown(cfg, steps.values(1, ctx[i]), c, cached=hit[i] + prefilled[i],
                                        total=total_new).values())
        return t_

    def fetch_work(i: int) -> float:
        if not fetching or hit[i] <= 0:
            return 0.0
        a = admission(hit[i])
        return a["fetch"] + a["copy"]

    fetcher = _Fetcher(dp, 0.0) if fetching else None
    release = np.full(n, np.nan)
    first = np.full(n, np.nan)
    done = np.full(n, np.nan)
    remaining: list[dict[int, int]] = [dict() for _ in range(dp)]   # rank -> {req: tokens left}
    ready: list[list[int]] = [[] for _ in range(dp)]                # waiting for admission on a rank
    pending: list[tuple[float, int]] = []                           # heap of (reaches the engine, req)
    polled: list[tuple[float, int]] = []                            # heap of (fetch seen done, req)
    poll = cfg.topo.param("prefetch_poll") if fetcher else 0.0
    t_request = cfg.topo.param("t_request")
    next_req, in_flight, t = 0, 0, 0.0
    busy = {"step_time": 0.0, "admit_time": 0.0, "decode_steps": 0}
    comp_time: dict[str, float] = {}

    def enter(i: int, now: float):
        release[i] = now
        heapq.heappush(pending, (now + t_request, i))

    def arrive_engine(now: float):
        while pending and pending[0][0] <= now + 1e-12:
            _, i = heapq.heappop(pending)
            w = fetch_work(i)
            if w > 0:
                fetcher.add(i, i % dp, w)
            else:
                ready[i % dp].append(i)

    def start_fetches(now: float):
        if fetcher:
            # the scheduler notices a finished prefetch at its next periodic check: on average half a period
            # later (the phase of the checks is not synchronised with the fetches)
            for i, t_done in fetcher.advance(now):
                heapq.heappush(polled, (t_done + poll / 2, i))
        while polled and polled[0][0] <= now + 1e-12:
            i = heapq.heappop(polled)[1]
            ready[i % dp].append(i)

    def release_more(now: float):
        nonlocal next_req, in_flight
        while next_req < n and in_flight < concurrency and reqs.arrival[next_req] <= now + 1e-12:
            enter(next_req, max(now, reqs.arrival[next_req]))
            next_req += 1
            in_flight += 1

    release_more(0.0)
    arrive_engine(0.0)
    start_fetches(0.0)
    guard = 0
    ctx_sum = [0.0] * dp            # sum of the contexts decoding on each rank
    finished = 0
    while finished < n:
        guard += 1
        if guard > 50 * n + 10 * int(out.max()) + 10000:
            raise RuntimeError("serving engine did not converge (internal error)")
        arrive_engine(t)
        start_fetches(t)
        admitting = [r for r in range(dp) if ready[r]]
        decoding = [r for r in range(dp) if remaining[r] and r not in admitting]
        B = sum(len(remaining[r]) for r in decoding)
        if not admitting and not decoding:
            t_next = min(fetcher.next_done(t) if fetcher else math.inf, pending[0][0] if pending else math.inf,
                         polled[0][0] if polled else math.inf,
                         reqs.arrival[next_req] if next_req < n and in_flight < concurrency else math.inf)
            if not math.isfinite(t_next):
                raise RuntimeError("serving engine stalled (internal error)")
            t = max(t, t_next)
            release_more(t)
            start_fetches(t)
            continue
        T_dec, br = 0.0, {}
        for r in decoding:
            L_r = round_ctx(ctx_sum[r] / len(remaining[r]))
            Tr, brr = steps.step(len(remaining[r]), B, len(decoding), L_r)
            if Tr > T_dec:
                T_dec, br = Tr, brr
        if admitting:
            heads = [ready[r][0] for r in admitting]
            new_tokens = float(sum(next_chunk(i) for i in heads))
            n_steps, T = 1, max([admit_time(i, new_tokens) for i in heads] + [T_dec])
        else:
            n_steps = min(min(remaining[r].values()) for r in decoding)
            horizon = [fetcher.next_done(t) if fetcher else math.inf, pending[0][0] if pending else math.inf,
                       polled[0][0] if polled else math.inf]
            if next_req < n and in_flight < concurrency:
                horizon.append(reqs.arrival[next_req])
            dt = min(horizon) - t
            if math.isfinite(dt):
                n_steps = max(1, min(n_steps, math.ceil(dt / T_dec - 1e-9)))
            T = T_dec
        t += n_steps * T
        if decoding:
            busy["decode_steps"] += n_steps
            busy["step_time"] += n_steps * T
            for k, x in br.items():
                comp_time[k] = comp_time.get(k, 0.0) + n_steps * x
        for r in decoding:
            fin = []
            for i in remaining[r]:
                remaining[r][i] -= n_steps
                if remaining[r][i] <= 0:
                    fin.append(i)
            for i in fin:
                del remaining[r][i]
                ctx_sum[r] -= dctx[i]
                done[i] = t
                in_flight -= 1
                finished += 1
            if not remaining[r]:
                ctx_sum[r] = 0.0    # no drift from float sums
        if admitting:
            busy["admit_time"] += T
        for r in admitting:
            i = ready[r][0]
            prefilled[i] += max(next_chunk(i), 0.0)
            if ctx[i] - hit[i] - prefilled[i] > 0:
                continue                # more chunks to go: the request stays at the head of its rank
            ready[r].pop(0)
            first[i] = t
            if out[i] <= 1:
                done[i] = t
                in_flight -= 1
                finished += 1
            else:
                remaining[r][i] = out[i] - 1
                ctx_sum[r] += dctx[i]
        release_more(t)
        start_fetches(t)

    ttft = (first - release) * 1e3
    e2e = (done - release) * 1e3
    multi = out > 1
    tbt = (done - first)[multi] / (out[multi] - 1) * 1e3 if multi.any() else np.array([math.nan])
    duration = float(np.nanmax(done) - np.nanmin(release))
    steps_total = max(busy["decode_steps"], 1)
    breakdown = {f"step_{k}_ms": v / steps_total * 1e3 for k, v in comp_time.items()}
    # asynchronous backup of every new token's KV entry to the pool: bandwidth it takes (no step time)
    backup = out.sum() * cfg.model.layers * entry_bytes(cfg.topo, cfg.model) / duration if duration else 0.0
    breakdown.update({"backup_write_GBps": backup / 1e9 if cfg.system != "gpu" else 0.0})
    a0 = admission(float(np.median(ctx)))
    cold = bool((hit <= 0).all())
    full_prefill = (sum(prefill_breakdown(cfg, steps.values(1, float(np.median(ctx))), float(np.median(ctx))).values())
                    if cold else 0.0)
    breakdown.update({"admit_ms": (full_prefill if cold else a0["admit"]) * 1e3,
                      "prefix_fetch_ms": (0.0 if cold else a0["fetch"]) * 1e3,
                      "prefix_copy_ms": (0.0 if cold else a0["copy"]) * 1e3,
                      "mean_step_ms": busy["step_time"] / steps_total * 1e3,
                      "share_time_admitting": busy["admit_time"] / duration if duration else 0.0})
    return {"ttft_mean_ms": float(ttft.mean()), "ttft_p50_ms": float(np.percentile(ttft, 50)),
            "ttft_p99_ms": float(np.percentile(ttft, 99)), "tbt_mean_ms": float(np.mean(tbt)),
            "tbt_p99_ms": float(np.percentile(tbt, 99)), "e2e_mean_ms": float(e2e.mean()),
            "output_throughput_tok_s": float(out.sum()) / duration if duration else math.nan,
            "request_throughput_req_s": n / duration if duration else math.nan,
            "duration_s": duration, "breakdown": breakdown,
            # per request, in input order (cluster branch: the interface of the issue-7 engine)
            "per_request": {"first_s": first, "done_s": done, "ttft_ms": ttft,
                            "tbt_ms": np.where(multi, (done - first) / np.maximum(out - 1, 1) * 1e3, math.nan),
                            "e2e_ms": e2e, "completed": np.isfinite(done)}}
