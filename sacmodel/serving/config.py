"""A resolved configuration: scenario, model, KV-cache system, the server's settings and the numbers of the
step model (:mod:`sacmodel.serving.step`) that do not change during a run.

Settings follow what the measured server ran (its ``server_args`` line): ``kv_dtype`` (SGLang sets BF16 for
DeepSeek DSA on Hopper, 1152 B entries), ``page_tokens`` 64, ``prefill_chunk`` per rank (SGLang divides the
chunked-prefill size by the DP size under DP attention), ``max_total_tokens`` (the physical device KV pool
per rank, which HiSparse device buffers draw from), ``max_running_requests``, ``device_buffer`` slots
(+ ``buffer_extra_slots`` for the newest tokens), ``host_to_device_ratio`` (host pool = ratio x device pool).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..hardware.models import ModelSpec, entry_bytes, model_of
from ..hardware.sizing import (HEAD_BYTES, attention_split, decode_kernels, ep_load_skew, fabric_scale, gemm_precision,
                               layer_comm, sglang_refusal, tbo_gemm_share)
from ..hardware.scenarios import as_topology, is_builtin
from ..hardware.topology import LIMITS as TOPOLOGY_LIMITS
from ..hardware.topology import Topology, TopologyError, with_pool_size
from .systems import check_system, swap_paths

POOL_SYSTEMS = ("dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk")
# the GPU buffer + LRU machinery (rdma-topk: the what-if that RDMA-reads its misses instead of swapping them in)
HISPARSE_SYSTEMS = ("dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk")
# FlashMLA's sparse prefill kernel reaches up to 640 of the H800's 989 BF16 TFLOP/s (constants.md 1c): what a
# scenario written before ``sparse_prefill_eff`` was a constant of its own gets
SPARSE_PREFILL_EFF = 0.647
FETCH_SYSTEMS = ("rdma", "cxl-prefetch")                         # copy the whole prompt before decoding
SWAP_POOL = {"dram": "dram", "cxl": "cxl", "rdma": "dram", "cxl-prefetch": "dram", "rdma-topk": "dram"}


class ConfigError(ValueError):
    """A workload or configuration the model cannot take (bad argument values)."""


class PositionError(ConfigError):
    """A request longer than the model's maximum position: no configuration of the hardware can serve it."""


def system_uses(system: str, pool: str) -> bool:
    return pool in {"cxl": {"cxl"}, "cxl-prefetch": {"cxl", "dram"}, "rdma": {"rdma", "dram"},
                    "rdma-topk": {"rdma"}, "dram": {"dram"}, "gpu": set()}[system]


def _setting(topo: Topology, name: str, default: float) -> float:
    return topo.param(name) if topo.has_param(name) else default


@dataclass
class Config:
    """Scenario + system + resources, with the server settings that bound the run (all per rank)."""
    topo: Topology
    model: ModelSpec
    system: str
    cxl_devices: int
    rdma_nics: int
    device_buffer: int
    dp: int
    max_total_tokens: int
    max_running_requests: int
    prefill_chunk: int
    page: int
    limits: dict = field(default_factory=dict)       # why max_total_tokens is what it is
    tp: int = 1                                      # GPUs of the server
    ep: int = 1                                      # expert-parallel groups
    graph_bs: int = 512                              # largest decode batch per rank run as a CUDA graph
    weights: str = "bf16"                            # precision of the linear layers' weights
    recv_interval: int = 1                           # decode iterations between the scheduler's receives
    pcg_tokens: int = 0                              # prefill batches up to this many tokens run as piecewise
                                                     # CUDA graphs (attention eager); 0: every prefill eager
    engine: str = "sglang"                           # the server's scheduler: "sglang" or "vllm"
    max_prefill_tokens: int = 16384                  # SGLang --max-prefill-tokens (default 16384): a prefill
                                                     # batch admits no further request once its new tokens reach
                                                     # it (PrefillAdder.rem_input_tokens), whatever the chunk

    @property
    def attn_tp(self) -> int:
        """GPUs of one attention group (tp / dp)."""
        return max(1, self.tp // self.dp)

    @property
    def hisparse(self) -> bool:
        return self.system in HISPARSE_SYSTEMS

    @property
    def pool(self) -> bool:
        return self.system in POOL_SYSTEMS

    @property
    def buffer_alloc(self) -> int:
        """Physical device slots a long request holds: its buffer plus the newest-token slots."""
        return self.device_buffer + int(_setting(self.topo, "buffer_extra_slots", self.page))

    @property
    def entry_bytes(self) -> float:
        return entry_bytes(self.topo, self.model)

    @property
    def token_bytes(self) -> float:
        """Main KV bytes of one token over all layers (what a pool stores and an RDMA fetch moves)."""
        return self.entry_bytes * self.model.layers


def resolve(scenario, system: str, *, cxl_devices=None, device_buffer=None, rdma_nics=None,
            max_total_tokens=None, max_running_requests=None) -> Config:
    """Bind a scenario and system; resource counts and server settings default to the scenario's."""
    topo = as_topology(scenario)
    check_system(system)
    model = model_of(topo)
    dp = int(topo.param("dp"))
    if dp < 1 or dp > len(topo.gpus):
        raise TopologyError(f"{topo.name}: dp={dp} but the scenario has {len(topo.gpus)} GPUs")
    tp = int(_setting(topo, "tp", dp))
    ep = int(_setting(topo, "ep", 1))
    if tp % dp or tp % ep:
        raise TopologyError(f"{topo.name}: dp={dp} and ep={ep} must divide tp={tp}")
    if system in POOL_SYSTEMS and not model.sparse:
        raise ConfigError(f"system {system!r} keeps the KV in a pool and loads each step's top-k entries: it "
                          f"needs a sparse-attention model; {model.name} has dense attention (use 'gpu')")

    def positive(v, name, default):
        n = default if v is None else v
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n != int(n) or n < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
        return int(n)

    def count(v, name, pool):
        nonlocal topo
        n = positive(v, name, int(topo.param(name)) if topo.has_param(name) else 1)
        if n > TOPOLOGY_LIMITS["pool_members"]:      # as the CLI and a scenario file bound it
            raise ConfigError(f"{name}={n}: a pool has at most {TOPOLOGY_LIMITS['pool_members']} members")
        have = len(topo.pools.get(pool, []))
        if system_uses(system, pool) and n > have:
            if not have:                              # name the file (or scenario), as the reader does
                where = topo.name if topo.path is None or is_builtin(topo.path) else topo.path
                raise ConfigError(f"{where}: system {system!r} reads a {pool} pool, which the scenario does not "
                                  f"have (no pools.{pool}); add one (--pool {pool} on a machine built with --gpu, "
                                  f"pool={pool!r} in sacmodel.scenario()) or choose another system")
            topo = with_pool_size(topo, pool, n)     # planned additions, cloned from the first member
        return n
    buf = positive(device_buffer, "device_buffer", int(_setting(topo, "device_buffer", 4096)))
    if system in POOL_SYSTEMS and buf < model.topk:
        # the scenario's own setting: name the file (or scenario) and field, as the scenario reader does
        where = topo.name if topo.path is None or is_builtin(topo.path) else topo.path
        what = "device_buffer" if device_buffer is not None else f"{where}: serving.device_buffer"
        raise ConfigError(f"{what}={buf} is smaller than the top-k ({model.topk}): one step's selection "
                          "must fit the GPU buffer")
    page = int(_setting(topo, "page_tokens", 64))
    n_cxl, n_rdma = count(cxl_devices, "cxl_devices", "cxl"), count(rdma_nics, "rdma_nics", "rdma")
    cfg = Config(topo, model, system, n_cxl, n_rdma,
                 buf, dp, (None if max_total_tokens is None and not topo.has_param("max_total_tokens")
                      else positive(max_total_tokens, "max_total_tokens", _setting_int(topo, "max_total_tokens"))),
                 positive(max_running_requests, "max_running_requests",
                          int(_setting(topo, "max_running_requests", 2048))),
                 int(_setting(topo, "prefill_chunk", 8192 // dp)), page, tp=tp, ep=ep,
                 graph_bs=int(_setting(topo, "cuda_graph_max_bs", 512)), weights=weights_of(topo),
                 recv_interval=int(_setting(topo, "scheduler_recv_interval", 1)),
                 pcg_tokens=int(_setting(topo, "piecewise_cuda_graph_max_tokens", 0)), engine=engine_of(topo),
                 max_prefill_tokens=int(_setting(topo, "max_prefill_tokens", 16384)))
    if cfg.engine == "vllm" and cfg.hisparse:
        raise ConfigError(f"{topo.name}: system {system!r} runs HiSparse, a fork of SGLang; a vLLM instance keeps "
                          "its KV in HBM: use system 'gpu' (or engine sglang)")
    for setting, why in () if cfg.engine == "vllm" else ((f"scheduler_recv_interval={cfg.recv_interval}",
                          sglang_refusal(model, dp, recv_interval=cfg.recv_interval)),
                         (f"piecewise_cuda_graph_max_tokens={cfg.pcg_tokens}:",
                          sglang_refusal(model, dp, piecewise_graph=cfg.pcg_tokens > 0))):
        if why:
            raise ConfigError(f"{topo.name}: {setting} {why}")
    cfg.max_total_tokens, cfg.limits = _effective_pool(cfg)
    if max_running_requests is None and not topo.has_param("max_running_requests"):
        from ..hardware.sizing import max_running_default
        cfg.max_running_requests = max_running_default(cfg.max_total_tokens, model.max_position or 163840)
    return cfg


def _text(topo: Topology, name: str, default: str) -> str:
    """A text setting of the scenario's serving section (``moe_a2a``, ``deepep_mode``), else ``default``."""
    return topo.serving[name].raw if name in topo.serving else default


def deepep_modes(topo: Topology) -> tuple[str, str]:
    """(decode, prefill) kernels of DeepEP under SGLang's ``--deepep-mode``: ``auto`` runs the low-latency
    kernels for decode batches and the normal ones for batches that prefill; ``normal`` or ``low_latency``
    runs one kind for both."""
    mode = _text(topo, "deepep_mode", "auto")
    return ("low_latency" if mode != "normal" else "normal"), ("normal" if mode != "low_latency" else "low_latency")


def cuda_graph_off(topo: Topology) -> bool:
    """SGLang runs no CUDA graph with DeepEP's normal kernels for decode (``--deepep-mode normal``: they are not
    graph-capturable; sgl-project/sglang#4767)."""
    return _text(topo, "moe_a2a", "none") == "deepep" and _text(topo, "deepep_mode", "auto") == "normal"


def engine_of(topo: Topology) -> str:
    """The scenario's serving engine (``serving.engine``; SGLang when unset)."""
    return topo.serving["engine"].raw if "engine" in topo.serving else "sglang"


def as_engine(cfg: Config, engine: str) -> Config:
    """``cfg`` served by ``engine`` instead (a cluster file's instance ``engine:`` on a host scenario written for
    the other one): the engine's own defaults for the GPU (:func:`sacmodel.hardware.sizing.vllm_batch_defaults`,
    16-token blocks, its memory share) replace the host's server settings; the hardware and the kernels stay."""
    if engine == cfg.engine:
        return cfg
    if engine != "vllm":
        raise ConfigError(f"engine {engine!r}: an instance on a vLLM host scenario can only run vLLM")
    from dataclasses import replace
    from ..hardware.sizing import (VLLM_BLOCK, VLLM_GPU_MEMORY_UTILIZATION, VLLM_GRAPH_TOKENS, kv_cell_bytes,
                                   kv_pool_tokens, vllm_batch_defaults, weights_per_gpu)
    if cfg.hisparse:
        raise ConfigError(f"engine vllm: system {cfg.system!r} runs HiSparse, a fork of SGLang; use system 'gpu'")
    t, m = cfg.topo, cfg.model
    gpu = t.node(t.gpus[0])
    memory = gpu.get("memory_reported", gpu["hbm_capacity"])
    tokens, seqs = vllm_batch_defaults(memory / 2**20, str(gpu.get("model", t.name)))
    weights = weights_per_gpu(m, t.param("weight_bytes_per_param"), tp=cfg.tp, dp=cfg.dp)
    pool = kv_pool_tokens(memory, VLLM_GPU_MEMORY_UTILIZATION, weights, kv_cell_bytes(m, cfg.entry_bytes, cfg.attn_tp),
                          VLLM_BLOCK)
    return replace(cfg, engine="vllm", page=VLLM_BLOCK, prefill_chunk=tokens, max_running_requests=seqs,
                   max_total_tokens=pool, graph_bs=VLLM_GRAPH_TOKENS, pcg_tokens=VLLM_GRAPH_TOKENS, recv_interval=1,
                   limits={"setting": None, "profiled": pool})


VLLM_FRONT_TERMS = ("vllm_tokenizer_wait", "vllm_output_message", "vllm_output_request", "vllm_intake_request",
                    "vllm_stream_chunk")


def vllm_front_end(topo: Topology) -> tuple[float, ...]:
    """vLLM's API-server terms (s), in :class:`~sacmodel.serving.engine.vllm_front.VLLMFrontEnd`'s order: the
    tokenizer's batch wait, the output handler's time per engine-core message and per request in it, the event
    loop's time to take a request in, and to stream one chunk of a request: the scenario's settings of those
    names, else vLLM's own (:data:`sacmodel.hardware.sizing.VLLM_FRONT_END`, with sources)."""
    from ..hardware.sizing import VLLM_FRONT_END
    return tuple(_setting(topo, name, VLLM_FRONT_END[name][0]) for name in VLLM_FRONT_TERMS)


def vllm_api_servers(topo: Topology) -> int:
    """vLLM's API server processes (``vllm serve --api-server-count``): the scenario's ``vllm_api_servers``,
    else vLLM's default, 1."""
    from ..hardware.sizing import VLLM_FRONT_END
    return int(_setting(topo, "vllm_api_servers", VLLM_FRONT_END["vllm_api_servers"][0]))


def _setting_int(topo: Topology, name: str) -> int | None:
    return int(topo.param(name)) if topo.has_param(name) else None


def weights_of(topo: Topology) -> str:
    """The weights' precision: the ``weights`` setting, else read from ``weight_bytes_per_param``."""
    if "weights" in topo.serving:
        return topo.serving["weights"].raw
    wb = topo.param("weight_bytes_per_param")
    return "bf16" if wb >= 1.5 else "fp8" if wb >= 0.9 else "awq-int4"


def profiled_pool(cfg: Config) -> int:
    """KV tokens one rank's pool holds as SGLang sizes it (``profile_max_num_token``): ``mem_fraction`` of the GPU
    memory free before the weights load, less the weights one GPU holds, in cells of every layer's KV."""
    from ..hardware.sizing import kv_cell_bytes, kv_pool_tokens, weights_per_gpu
    t, m = cfg.topo, cfg.model
    gpu = t.node(t.gpus[0])
    memory = gpu.get("memory_reported", gpu["hbm_capacity"])
    weights = weights_per_gpu(m, t.param("weight_bytes_per_param"), tp=cfg.tp, dp=cfg.dp,
                              redundant=int(_setting(t, "ep_redundant", 0)))
    cell = kv_cell_bytes(m, cfg.entry_bytes, cfg.attn_tp)
    return kv_pool_tokens(memory, t.param("mem_fraction"), weights, cell, cfg.page)


def _effective_pool(cfg: Config) -> tuple[int, dict]:
    """The device pool the server actually allocates per rank: the setting, capped by the host pool.

    HiSparse sizes its host pool at ``host_to_device_ratio`` x the device pool; on a CXL pool each rank gets an
    equal partition of its device's mapped bytes, and the server lowers ``max_total_tokens`` to fit it.
    """
    t = cfg.topo
    profiled = profiled_pool(cfg)
    limits = {"setting": cfg.max_total_tokens, "profiled": profiled}
    # SGLang takes the smaller of the profiled pool and the setting (a larger setting only warns)
    n = profiled if cfg.max_total_tokens is None else min(cfg.max_total_tokens, profiled)
    if cfg.system in ("cxl",):
        ratio = _setting(t, "host_to_device_ratio", 2.0)
        devs = t.pools["cxl"][:cfg.cxl_devices]
        ranks_per_dev = math.ceil(cfg.dp / len(devs))
        mapped = min(t.node(d)["capacity"] for d in devs)
        if t.has_param("cxl_map_bytes"):
            mapped = min(mapped, t.param("cxl_map_bytes"))
        cap = int(mapped / ranks_per_dev / (ratio * cfg.token_bytes))
        limits["cxl_partition"] = cap
        if cap < n:
            n = cap // cfg.page * cfg.page
    return n, limits


# ---- numbers of the step model ----------------------------------------------------------------------
def static_values(cfg: Config) -> dict[str, float]:
    """Values of every symbol of :mod:`sacmodel.serving.step` that is fixed for the configuration."""
    t, m = cfg.topo, cfg.model
    v = dict(_model_values(cfg), **_gpu_values(cfg))
    hs = cfg.hisparse
    v.update(
        w_bytes=t.param("weight_bytes_per_param"), tp=float(cfg.tp), attn_tp=float(cfg.attn_tp), ep=float(cfg.ep),
        ep_imbalance=math.sqrt(2 * math.log(cfg.ep)), compute_eff=t.param("compute_eff"),
        hbm_eff=t.param("hbm_eff"), prefill_eff=t.param("prefill_eff"), moe_eff=t.param("moe_eff"),
        sparse_prefill_eff=t.param("sparse_prefill_eff") if t.has_param("sparse_prefill_eff")
        else SPARSE_PREFILL_EFF,
        t_graph_kernel=t.param("t_graph_kernel"), t_collective=t.param("t_collective"),
        t_launch=t.param("t_launch"), launch_overlap=_setting(t, "launch_overlap", 1.0),
        prefill_attn_eff=_setting(t, "prefill_attn_eff", t.param("prefill_eff")),
        moe_prefill_eff=_setting(t, "moe_prefill_eff", t.param("prefill_eff")), flop_unit=1.0, hs_on=1.0 if hs else 0.0,
        decode_attn_eff=decode_attention_eff(cfg),
        t_hs=t.param("t_hs") if hs else 0.0, t_hs_req=t.param("t_hs_req") if hs else 0.0,
        t_hs_admit=_setting(t, "t_hs_admit", 0.0) if hs else 0.0,
        t_kernel=t.param("t_kernel"),
        swap_inflight=_setting(t, "swap_block_threads", 1024) * _setting(t, "swap_load_bytes", 8.0),
        t_request=t.param("t_request"), t_token=t.param("t_token"),
        rdma_topk_on=1.0 if cfg.system == "rdma-topk" else 0.0, rdma_share=1.0 / cfg.dp,
        stage_passes=_setting(t, "stage_passes", 4.0),
        stage_copy_bw=t.param("stage_copy_bw") if cfg.system == "rdma" else 1.0,
    )
    v["n_kernels"] = float(decode_kernels(m))
    gpu = t.node(t.gpus[0])        # beyond one NVLink domain, collectives cross the hosts' NICs
    domain = int(gpu.get("nvlink_domain", len(t.gpus)))
    dense_dp = _setting(t, "moe_dense_tp", 0.0) == 1.0
    comm = dict(tp=cfg.tp, dp=cfg.dp, ep=cfg.ep, a2a=_text(t, "moe_a2a", "none"), domain=domain, dense_dp=dense_dp,
                nvlink_bw=v["link_bw"], nic_bw=gpu.get("nics_per_gpu", 1.0) * gpu.get("nic_rate", v["link_bw"]),
                t_collective=v["t_collective"], nic_latency=gpu.get("nic_latency", 0.0),
                scale=fabric_scale(gpu.get("net_allreduce_time"), domain))
    decode_mode, prefill_mode = deepep_modes(t)
    v.update(layer_comm(m, deepep_mode=decode_mode, **comm))
    pre = layer_comm(m, deepep_mode=prefill_mode, prefill=True, **comm)
    # an iteration that prefills runs DeepEP's prefill kernels (Model.shared picks these)
    v["coll_bytes_prefill"], v["t_collective_prefill"] = pre["coll_bytes"], pre["t_collective"]
    v["a2a_share_prefill"], v["a2a_lat_share_prefill"] = pre["a2a_share"], pre["a2a_lat_share"]
    # the SMs DeepGEMM keeps under two-batch overlap (Model.shared sets gemm_share in the iterations it splits)
    on = comm["a2a"] == "deepep" and cfg.ep > 1
    v["gemm_share"] = 1.0
    v["tbo_gemm_share"], v["tbo_gemm_share_prefill"] = (
        tbo_gemm_share(float(gpu.get("sms", 0.0) or 0.0), mode) if on else 1.0 for mode in (decode_mode, prefill_mode))
    v["tbo"] = _setting(t, "two_batch_overlap", 0.0)
    # a prefill's attention projections in the MoE layers share the overlapped region's SMs too (step.prefill_terms)
    v["proj_gemm_share"] = v["tbo_gemm_share_prefill"] if v["tbo"] > 0.0 else 1.0
    # GPUs the dense layers' and the shared experts' weights are split over: all (tp) unless the dense layers run
    # data-parallel (--moe-dense-tp-size 1) and, under DeepEP, the shared experts (SGLang builds them with
    # tp_size=1 then: "disable tp for shared experts when enable deepep moe", deepseek_v2.py at 0d477880)
    v["dense_split"] = 1.0 if dense_dp else float(cfg.tp)
    v["shared_split"] = 1.0 if comm["a2a"] == "deepep" and cfg.ep > 1 else float(cfg.tp)
    v["ep_skew"], v["ep_skew_prefill"] = (ep_skew(cfg, phase) for phase in ("decode", "prefill"))
    nics = t.pools.get("rdma", [])
    if nics:
        nic = t.node(nics[0])
        v.update(pf_rate=nic["rate"] * cfg.rdma_nics, rdma_op_cost=nic["op_cost"] / cfg.rdma_nics)
    else:
        v.update(pf_rate=1.0, rdma_op_cost=0.0)
    # rdma-topk reads each missed entry (one READ of one entry), or its whole KV page: the steady misses are a
    # small share of a long context's pages, so two misses rarely share a page and each costs a page read
    page_reads = t.serving["rdma_topk_granularity"].raw == "page" if "rdma_topk_granularity" in t.serving else False
    v["rdma_ops_per_miss"], v["rdma_bytes_per_miss"] = 1.0, v["entry_bytes"] * (cfg.page if page_reads else 1)
    return v


def decode_attention_eff(cfg: Config) -> float:
    """Fraction of HBM bandwidth at which a decode step reads the KV its attention reads: FlashMLA's ``hbm_eff``
    for MLA (DSA's sparse reads included), the scenario's ``gqa_decode_eff`` for a GQA model's paged kernel
    (:data:`sacmodel.hardware.transfer.PAGED_DECODE_EFF`, set by a built machine for its GPU and page size), else
    ``hbm_eff`` carried."""
    t = cfg.topo
    if cfg.model.kind == "mla":
        return t.param("hbm_eff")
    return _setting(t, "gqa_decode_eff", t.param("hbm_eff"))


def ep_skew(cfg: Config, phase: str) -> float:
    """The busiest GPU's routed-expert load over the mean in ``phase`` ("prefill" or "decode"): the scenario's
    ``ep_load_skew`` / ``ep_load_skew_prefill``, else LMSYS's published figure for the expert-parallel group
    (:func:`sacmodel.hardware.sizing.ep_load_skew`; EPLB where the scenario has redundant experts)."""
    name = "ep_load_skew_prefill" if phase == "prefill" else "ep_load_skew"
    t = cfg.topo
    if t.has_param(name):
        return float(t.param(name))
    if cfg.ep <= 1 or not cfg.model.routed_experts:
        return 1.0
    domain = int(t.node(t.gpus[0]).get("nvlink_domain", len(t.gpus)))
    return ep_load_skew(cfg.ep, domain, _setting(t, "ep_redundant", 0) > 0, phase)[0]


def _gpu_values(cfg: Config) -> dict[str, float]:
    """The GPU's rates: peak FLOP/s (and that of the weights' GEMMs), HBM and NVLink bandwidth."""
    gpu = cfg.topo.node(cfg.topo.gpus[0])
    peaks = {"bf16": gpu["flops_bf16"], "fp8": gpu["flops_fp8"], "fp4": gpu.get("flops_fp4") or gpu["flops_fp8"]}
    return dict(peak_bf16=gpu["flops_bf16"], peak_fp8=gpu["flops_fp8"], peak_w=peaks[gemm_precision(cfg.weights)],
                hbm_bw=gpu["hbm_bandwidth"], link_bw=gpu.get("nvlink_bandwidth", 450e9))


def _model_values(cfg: Config) -> dict[str, float]:
    """The model's sizes as one GPU of an attention group of ``attn_tp`` sees them."""
    m, atp = cfg.model, cfg.attn_tp
    rep, split = attention_split(m, atp)
    eb = cfg.entry_bytes
    heads = m.heads / atp
    if m.kind == "mla":
        read = eb
        f_mha = 2.0 * heads * (m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim)
        p_kvb = m.kv_lora_rank * heads * (m.qk_nope_dim + m.v_head_dim)
    else:
        read = eb * max(1.0, m.kv_heads / atp) / m.kv_heads
        f_mha, p_kvb = 4.0 * heads * m.head_dim, 0.0
    return dict(
        # EPLB's replicas are expert slots of their own (weights read where their tokens land)
        layers=float(m.layers), p_attn_rep=rep, p_attn_split=split,
        n_experts=float(max(m.routed_experts, 1) + _setting(cfg.topo, "ep_redundant", 0)),
        e_active=float(m.experts_per_token if m.routed_experts else 0), n_shared=float(m.shared_experts),
        p_expert=m.expert_params(), p_dense_mlp=m.dense_mlp_params(), moe_layers=float(m.moe_layers),
        dense_layers=float(m.layers - m.moe_layers), p_head=float(m.vocab * m.hidden), head_bytes=HEAD_BYTES,
        f_index=m.flops_indexer(1.0), f_attn=m.flops_sparse_attn(1.0) / atp, f_mha=f_mha, p_kvb=p_kvb,
        index_key_bytes=m.index_key_bytes, entry_bytes=eb, kv_read_bytes=read)


def swap_route(cfg: Config, active_ranks: int) -> tuple[float, float]:
    """(bandwidth share B/s, load latency s) of the busiest rank's swap-in route with ``active_ranks`` gathering."""
    return _swap_route(cfg.topo, cfg.system, cfg.cxl_devices, max(1, min(active_ranks, cfg.dp)))


def _swap_route(topo: Topology, system: str, devices: int, active: int) -> tuple[float, float]:
    key = ("swap", system, devices, active)         # cached with the scenario's routes
    if key not in topo._routes:
        topo._routes[key] = _swap_route_uncached(topo, system, devices, active)
    return topo._routes[key]


def _swap_route_uncached(topo: Topology, system: str, devices: int, active: int) -> tuple[float, float]:
    pool = SWAP_POOL.get(system)
    if pool is None:
        return 1.0, 1e-6
    paths = swap_paths(topo, pool, active_ranks=active, n_devices=devices if pool == "cxl" else None)
    worst = min(paths, key=lambda p: p.bandwidth)
    return worst.bandwidth, worst.latency


def fetch_bandwidth(cfg: Config, ranks: tuple[int, ...]) -> dict[int, float]:
    """NIC bandwidth (B/s) each of the ``ranks`` fetching at once gets: max-min over NIC, root complex, DRAM.

    Rank r reads through NIC ``r mod rdma_nics`` (SGLang's rank interleaving) into its socket's host DRAM.
    """
    return dict(zip(ranks, _fetch_bw(cfg.topo, cfg.rdma_nics, tuple(sorted(ranks)))))


def _fetch_bw(topo: Topology, nics: int, ranks: tuple[int, ...]) -> list[float]:
    key = ("fetch", nics, ranks)
    if key not in topo._routes:
        topo._routes[key] = _fetch_bw_uncached(topo, nics, ranks)
    return topo._routes[key]


def _fetch_bw_uncached(topo: Topology, nics: int, ranks: tuple[int, ...]) -> list[float]:
    remote = topo.nodes_of("remote_memory")
    if not remote or not topo.pools.get("rdma"):
        raise TopologyError(f"{topo.name}: the rdma system needs an rdma pool and a remote_memory node")
    flows = []
    for r in ranks:
        nic = topo.pool_for(r, "rdma", nics)
        dram = topo.pool_for(r, "dram")
        flows.append((remote[0], dram, nic))
    paths = []
    for src, dst, nic in flows:
        a, b = topo.route(src, nic), topo.route(nic, dst)
        paths.append(a + b[1:])
    from ..hardware.topology import water_fill
    demand = [topo.flow_cap(p) for p in paths]
    return water_fill([topo.resources(p) for p in paths], demand, topo.capacity)


def backup_bandwidth(cfg: Config, ranks: tuple[int, ...]) -> dict[int, float]:
    """Write bandwidth (B/s) each of the ``ranks`` gets when they copy from their GPUs into the host pool at
    once (max-min share of the GPU-to-pool routes: PCIe to host DRAM, or the CXL adapters, switch and
    devices)."""
    key = ("backup", cfg.system, cfg.cxl_devices, tuple(sorted(ranks)))
    topo = cfg.topo
    if key not in topo._routes:
        from ..hardware.topology import max_min_share
        pool = SWAP_POOL[cfg.system]
        n = cfg.cxl_devices if pool == "cxl" else None
        flows = [(topo.gpus[r], topo.pool_for(r, pool, n)) for r in key[3]]
        topo._routes[key] = dict(zip(key[3], max_min_share(topo, flows)))
    return {r: topo._routes[key][r] for r in ranks}


# ---- the score process of the workload ------------------------------------------------------------
def score_constants(cfg: Config) -> tuple[float, float, float]:
    """The score process's constants: ``score_correlation``, ``drift_settling`` and ``settling_steps`` (see
    :func:`score_correlation`); the miss curves are a function of these and of the configuration."""
    t = cfg.topo
    return t.param("score_correlation"), _setting(t, "drift_settling", 0.0), _setting(t, "settling_steps", 1.0)


def score_correlation(cfg: Config, age):
    """Lag-1 correlation of the indexer scores at request age ``age`` (decode steps since admission).

    The query drifts fastest right after admission and settles: 1 - phi(a) = (1 - phi_inf)(1 + A e^(-a/tau)),
    at most 1, with phi_inf = ``score_correlation``, A = ``drift_settling`` and tau = ``settling_steps``.
    """
    import numpy as np
    phi, a_, tau = score_constants(cfg)
    # at most fully decorrelated (phi >= 0): a fresh query every step is as far as the drift can go
    return np.maximum(1.0 - (1.0 - phi) * (1.0 + a_ * np.exp(-np.asarray(age, dtype=float) / tau)), 0.0)


