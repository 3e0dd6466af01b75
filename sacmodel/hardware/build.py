"""Describe a machine in a few words: :func:`scenario` builds a scenario from the GPU and model catalogs and
SGLang's defaults, with every number's source, and carries the testbed's fitted constants over by their
transfer rules (:mod:`sacmodel.hardware.transfer`).

The result is a :class:`~sacmodel.hardware.topology.Topology` that every function taking a scenario accepts;
:func:`scenario_yaml` writes the same scenario as a YAML file a user can edit.
"""
from __future__ import annotations

import math
import numbers
from types import SimpleNamespace
from typing import Any

from .gpus import GPUSpec, get_gpu
from .models import ModelError, get_model
from .sizing import (VLLM_BLOCK, VLLM_FRONT_END, VLLM_GPU_MEMORY_UTILIZATION, VLLM_GRAPH_TOKENS,
                     vllm_batch_defaults)
from .sizing import (GIB, MIB, RUNTIME_RESERVE, WEIGHT_BYTES, chunked_prefill_default, cuda_graph_max_bs_default,
                     ep_load_skew, kv_cell_bytes, kv_dtype_default, kv_pool_tokens, mem_fraction_default,
                     reserved_mib, fp8_block_refusal, sglang_refusal, weights_per_gpu)
from ..util.names import ENGINES, FP8_GEMM_BACKENDS, release
from .topology import LIMITS as TOPOLOGY_LIMITS
from .topology import Topology, TopologyError
from .rules import (CUDA_GRAPH_MAX_BS, _check_choice, _check_flag, _check_int, _is_bool,  # noqa: F401
                    check_parallel, ep_settings)

SGLANG = "SGLang 0.5.9 default"
VLLM = "vLLM V1 default (vllm-project/vllm at 00024d31)"
POOLS = ("cxl", "rdma")
TESTBED = "sac-testbed"


def _num(value: str, source: str) -> dict:
    """A number with its source (a bare count stays a number in the YAML)."""
    try:
        v: Any = int(value)
    except ValueError:
        v = value
    return {"value": v, "source": source}


def _check_fraction(name: str, v) -> float:
    if _is_bool(v) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)) or not 0 < float(v) < 1:
        raise TopologyError(f"scenario: {name} must be in (0, 1), got {v!r}"[:300])
    return float(v)


def _optional_int(name: str, v, hi: int) -> int | None:
    return None if v is None else _check_int(name, v, 1, hi)


def scenario(gpu: str, *, gpus: int = 8, model: str = "deepseek-v3.2", weights: str = "fp8",
             kv_dtype: str = "auto", dp: int = 1, tp: int | None = None, ep: int = 1,
             mem_fraction: float | None = None, chunked_prefill: int | None = None,
             max_total_tokens: int | None = None, max_running_requests: int | None = None,
             scheduler_recv_interval: int | None = None, piecewise_cuda_graph: bool = False,
             pool: str | None = None, cxl_devices: int | None = None, rdma_nics: int | None = None,
             transfer: str = "fitted", engine: str = "sglang", moe_a2a: str = "none", deepep_mode: str = "auto",
             two_batch_overlap: bool = False, ep_redundant: int = 0,
             cuda_graph_max_bs: int | None = None, fp8_gemm_backend: str = "auto",
             moe_dense_tp: int | None = None,
             engine_version: str | None = None) -> Topology:
    """A scenario of ``gpus`` x ``gpu`` serving ``model`` with SGLang.

    ``weights``: fp8, bf16, awq-int4 or fp4 (Blackwell only); ``kv_dtype``: auto (SGLang's rule: BF16 on Hopper,
    FP8 for DeepSeek sparse attention on Blackwell), bf16 or fp8; ``dp``: data-parallel attention groups (1:
    tensor-parallel attention over all GPUs); ``tp``: tensor-parallel size (default ``gpus``); ``ep``: expert-
    parallel size (a mixture-of-experts model only). More GPUs than one host holds (the GPU's ``host_gpus``,
    8) make a server over several hosts: its collectives cross the hosts' NICs (``nics_per_gpu`` x ``nic_rate``
    of the GPU catalog). ``scheduler_recv_interval``: SGLang's ``--scheduler-recv-interval`` (the scheduler
    takes in new requests after that many decode iterations; 1, the default, every iteration).
    ``piecewise_cuda_graph``: run prefill batches of up to SGLang's ``piecewise_cuda_graph_max_tokens`` as
    piecewise CUDA graphs (SGLang's default from v0.5.10 on where it applies; off in v0.5.9, whose defaults the
    rest follows). Unset server settings take SGLang's defaults for the machine. ``pool``: ``cxl`` and/or
    ``rdma`` (comma-separated) to add a KV pool like the testbed's, with ``cxl_devices`` / ``rdma_nics``
    members (only with their pool; one host). ``transfer``: how the testbed's constants carry over
    (:mod:`sacmodel.hardware.transfer`): "fitted" (the kernel efficiencies measured for the GPU generation and
    weights, where known) or "rules" (the rules alone). ``engine``: "sglang" (the default) or "vllm": vLLM V1's
    scheduler (mixed prefill and decode batches under ``max_num_batched_tokens``, which ``chunked_prefill``
    sets; ``max_running_requests`` is its ``max_num_seqs``) with vLLM's defaults (16-token KV blocks,
    ``gpu_memory_utilization`` 0.9, its batch defaults for the GPU:
    :func:`sacmodel.hardware.sizing.vllm_batch_defaults`).

    Expert parallelism over the hosts' network (SGLang ``--moe-a2a-backend deepep``): ``moe_a2a="deepep"``
    replaces the MoE layers' gather and scatter of the tokens by DeepEP's dispatch and combine
    (:func:`sacmodel.hardware.sizing.a2a_groups`), ``deepep_mode`` ``normal`` (a prefill server's kernels; no
    CUDA graph), ``low_latency`` (a decode server's) or ``auto`` (SGLang's default: normal kernels for batches
    that prefill, low-latency ones for decode batches); ``two_batch_overlap``: SGLang's
    ``--enable-two-batch-overlap`` (the step's two micro-batches overlap communication with computation,
    :func:`sacmodel.serving.step.tbo_hidden`); ``ep_redundant``:
    ``--ep-num-redundant-experts`` (EPLB's replicas: routed experts + replicas must divide by ``ep``; each GPU
    holds its share of them); ``cuda_graph_max_bs``: ``--cuda-graph-max-bs`` (it sizes DP attention's reserve);
    ``moe_dense_tp``: ``--moe-dense-tp-size`` (1: the dense layers run data-parallel, each rank its own tokens
    with the whole weights, and need no collective; None, the default: split over all GPUs like the attention).
    ``fp8_gemm_backend``: SGLang's ``--fp8-gemm-backend`` for FP8 block-scale GEMMs: ``auto`` (DeepGEMM, JIT
    DeepGEMM being on by default), ``deep_gemm``, or ``flashinfer_trtllm`` (FlashInfer's TRT-LLM GEMM, Blackwell
    only; what SGLang runs with ``SGLANG_ENABLE_JIT_DEEPGEMM=0``): it sets the prefill GEMM rate
    (:func:`sacmodel.hardware.transfer.fp8_gemm_efficiency`). ``engine_version``: the SGLang release the server
    runs (e.g. "0.5.3"; None: the present one): it sets the routed experts' prefill rate where a release's
    kernels differ (:func:`sacmodel.hardware.transfer.moe_prefill_factor`).

    A machine SGLang would not run, or whose weights leave no room for a KV pool, raises ``ValueError``
    (:class:`~sacmodel.hardware.topology.TopologyError`) naming the argument, its value and the rule.
    """
    from .scenarios import load_topology
    return load_topology(scenario_dict(gpu, gpus=gpus, model=model, weights=weights, kv_dtype=kv_dtype, dp=dp,
                                       tp=tp, ep=ep, mem_fraction=mem_fraction, chunked_prefill=chunked_prefill,
                                       max_total_tokens=max_total_tokens,
                                       max_running_requests=max_running_requests,
                                       scheduler_recv_interval=scheduler_recv_interval,
                                       piecewise_cuda_graph=piecewise_cuda_graph, pool=pool,
                                       cxl_devices=cxl_devices, rdma_nics=rdma_nics, transfer=transfer,
                                       engine=engine,
                                       moe_a2a=moe_a2a, deepep_mode=deepep_mode,
                                       two_batch_overlap=two_batch_overlap, ep_redundant=ep_redundant,
                                       cuda_graph_max_bs=cuda_graph_max_bs, fp8_gemm_backend=fp8_gemm_backend,
                                       moe_dense_tp=moe_dense_tp, engine_version=engine_version))


def scenario_dict(gpu: str, *, gpus: int = 8, model: str = "deepseek-v3.2", weights: str = "fp8",
                  kv_dtype: str = "auto", dp: int = 1, tp: int | None = None, ep: int = 1,
                  mem_fraction: float | None = None, chunked_prefill: int | None = None,
                  max_total_tokens: int | None = None, max_running_requests: int | None = None,
                  scheduler_recv_interval: int | None = None, piecewise_cuda_graph: bool = False,
                  pool: str | None = None, cxl_devices: int | None = None, rdma_nics: int | None = None,
                  transfer: str = "fitted", engine: str = "sglang", moe_a2a: str = "none", deepep_mode: str = "auto",
                  two_batch_overlap: bool = False, ep_redundant: int = 0,
                  cuda_graph_max_bs: int | None = None, fp8_gemm_backend: str = "auto",
                  moe_dense_tp: int | None = None,
                  engine_version: str | None = None) -> dict:
    """The scenario of :func:`scenario` as a schema-version-1 mapping (what :func:`scenario_yaml` writes)."""
    g = get_gpu(gpu)
    try:
        m = get_model(model)
    except ModelError as exc:
        raise TopologyError(f"scenario: model: {exc}") from None
    gpus = _check_int("gpus", gpus)
    tp, dp, ep = _check_int("tp", gpus if tp is None else tp), _check_int("dp", dp), _check_int("ep", ep)
    weights = _check_choice("weights", weights, tuple(WEIGHT_BYTES))
    kv_dtype = _check_choice("kv_dtype", kv_dtype, ("auto", "bf16", "fp8"))
    transfer = _check_choice("transfer", transfer, ("fitted", "rules"))
    engine = _check_choice("engine", engine, ENGINES)
    fp8_gemm_backend = _fp8_gemm_backend(g, weights, fp8_gemm_backend)
    engine_version = _engine_version(engine_version)
    pools = _pools(pool)
    n_cxl = _pool_size("cxl_devices", cxl_devices, "cxl", pools)
    n_rdma = _pool_size("rdma_nics", rdma_nics, "rdma", pools)
    ep_parts = ep_settings(m, tp=tp, dp=dp, ep=ep, moe_a2a=moe_a2a, deepep_mode=deepep_mode,
                            two_batch_overlap=two_batch_overlap, ep_redundant=ep_redundant,
                            moe_dense_tp=moe_dense_tp)
    _check_machine(g, m, gpus=gpus, tp=tp, dp=dp, ep=ep, weights=weights, pools=pools,
                   redundant=ep_parts["ep_redundant"])
    given = [k for k in ("moe_a2a", "two_batch_overlap", "ep_redundant", "moe_dense_tp")
             if ep_parts[k] not in ("none", False, 0, None)] + (["deepep_mode"] if ep_parts["deepep_mode"] != "auto" else [])
    if engine == "vllm" and engine_version:
        raise TopologyError("scenario: engine_version names an SGLang release (the kernels it ran); the vLLM engine "
                            "does not take one: drop it or use engine='sglang'")
    if engine == "vllm" and given:
        raise TopologyError(f"scenario: {given[0]} is SGLang's setting (DeepEP, two-batch overlap, EPLB as SGLang runs "
                            "them); the vLLM engine does not model them: use engine='sglang'")
    kv = kv_dtype_default(m, g.sm_version) if kv_dtype == "auto" else kv_dtype
    name = f"{g.name}x{gpus}-{m.name}-{weights}" + (f"-dp{dp}" if dp > 1 else "") + (f"-ep{ep}" if ep > 1 else "")
    hosts = -(-gpus // g.host_gpus)
    serving = _serving(g, m, weights, kv, tp=tp, dp=dp, ep=ep, kv_dtype_given=kv_dtype != "auto",
                       mem_fraction=mem_fraction, chunked_prefill=chunked_prefill,
                       max_total_tokens=max_total_tokens, max_running_requests=max_running_requests,
                       scheduler_recv_interval=scheduler_recv_interval, piecewise_cuda_graph=piecewise_cuda_graph,
                       pool_sizes={name: n for name, n, p in (("cxl_devices", n_cxl, "cxl"),
                                                              ("rdma_nics", n_rdma, "rdma")) if p in pools},
                       cuda_graph_max_bs=cuda_graph_max_bs)
    serving.update(_ep_serving(ep_parts))
    serving.update(_skew_serving(m, ep, g.host_gpus, ep_parts["ep_redundant"]))
    if fp8_gemm_backend != "auto":
        serving["fp8_gemm_backend"] = _num(fp8_gemm_backend, "given (SGLang --fp8-gemm-backend; "
                                                             "SGLANG_ENABLE_JIT_DEEPGEMM=0 gives flashinfer_trtllm "
                                                             "on Blackwell)")
    if engine == "vllm":
        _vllm_serving(serving, g, dp=dp, chunked_prefill=chunked_prefill, mem_fraction=mem_fraction,
                      max_running_requests=max_running_requests)
    _check_fits(g, m, serving, tp=tp, dp=dp, chunk=chunked_prefill or chunked_prefill_default(g.memory_mib))
    why = fp8_block_refusal(m, tp=tp, ep=ep, weights=weights)     # SGLang's weight loader, after its memory rules
    if why:
        raise TopologyError(f"scenario: tp={tp}, ep={ep}, weights='fp8': {why}")
    data: dict[str, Any] = {
        "schema_version": 1, "name": name, "model": model,
        "description": f"{gpus} x {g.name.upper()} serving {m.name} ({weights} weights, {kv} KV, TP{tp}"
                       + (f", DP{dp} attention" if dp > 1 else "") + (f", EP{ep}" if ep > 1 else "")
                       + (f", {hosts} hosts of {g.host_gpus} GPUs" if hosts > 1 else "")
                       + f") with {'vLLM' if engine == 'vllm' else 'SGLang'}; built by sacmodel.scenario()",
        "nodes": _nodes(g, gpus, pools, n_cxl or 2, n_rdma or 2),
        "links": _links(g, gpus, pools),
        "pools": {"dram": [f"dram{i}" for i in range(2 * hosts)], **({"cxl": ["cxl_dev"]} if "cxl" in pools else {}),
                  **({"rdma": ["nic"]} if "rdma" in pools else {})},
        "serving": serving,
    }
    from .transfer import calibration_for
    # the release selects the Triton fused MoE's kernels; with DeepEP SGLang runs DeepGEMM's grouped GEMM instead
    # (fp8.py at a4a3d8239), which no release rule moves: its published rate (transfer.deepep_moe_prefill_eff)
    data["calibration"] = calibration_for(g, m, weights=weights, dp=dp, fitted=transfer == "fitted",
                                          fp8_gemm_backend=fp8_gemm_backend,
                                          engine_version=engine_version if moe_a2a == "none" else None,
                                          page=int(serving["page_tokens"]["value"]), moe_a2a=moe_a2a,
                                          deepep_mode=deepep_mode)
    return data


def _engine_version(version) -> str | None:
    """The engine release, checked once here: None, "unknown", or a release number such as 0.5.3."""
    try:
        return release(version)
    except ValueError:
        raise TopologyError(f"scenario: engine_version must be a release such as '0.5.3', got {version!r}"[:300]) \
            from None


def _fp8_gemm_backend(g: GPUSpec, weights: str, backend) -> str:
    """SGLang's FP8 GEMM backend, checked: FlashInfer's TRT-LLM FP8 GEMM needs Blackwell (SGLang raises at
    start-up otherwise: fp8_utils.py _dispatch_explicit_backend)."""
    backend = _check_choice("fp8_gemm_backend", backend, FP8_GEMM_BACKENDS)
    if backend == "flashinfer_trtllm" and weights == "fp8" and g.arch != "blackwell":
        raise TopologyError(f"scenario: fp8_gemm_backend=flashinfer_trtllm needs a Blackwell GPU (SGLang: "
                            f"'FlashInfer FP8 GEMM requires Blackwell GPUs'), got {g.name}")
    return backend


def _pools(pool) -> tuple[str, ...]:
    if pool is None or pool == "":
        return ()
    if isinstance(pool, str):
        names = tuple(p.strip() for p in pool.split(","))
    elif isinstance(pool, (list, tuple)) and all(isinstance(p, str) for p in pool):
        names = tuple(p.strip() for p in pool)
    else:
        raise TopologyError(f"scenario: pool must be 'cxl', 'rdma' or 'cxl,rdma', got {pool!r}"[:300])
    bad = [p for p in names if p not in POOLS]
    if bad:
        raise TopologyError(f"scenario: pool must be cxl and/or rdma, got {bad[0]!r}"[:300])
    return names


def _pool_size(name: str, v, pool: str, pools) -> int | None:
    """A pool's member count: only with its pool (``cxl_devices`` sizes the CXL pool), 1 .. the pool limit."""
    if v is None:
        return None
    n = _check_int(name, v, 1, TOPOLOGY_LIMITS["pool_members"])
    if pool not in pools:
        raise TopologyError(f"scenario: {name}={n} sizes the {pool} pool, but the machine has none "
                            f"(add pool='{pool}', --pool {pool})")
    return n


def _check_machine(g: GPUSpec, m, *, gpus: int, tp: int, dp: int, ep: int, weights: str, pools,
                   redundant: int = 0) -> None:
    """What SGLang would refuse, or what the built machine cannot be: the parallel sizes (:func:`check_parallel`),
    FP4 kernels only on Blackwell, pools on one host."""
    check_parallel(m, gpus=gpus, tp=tp, dp=dp, ep=ep, redundant=redundant)
    if weights == "fp4" and (g.sm_version < 100 or not g.flops_fp4):
        raise TopologyError(f"scenario: weights='fp4' needs FP4 tensor cores (Blackwell, SM100): SGLang's FP4 "
                            f"(NVFP4) kernels do not run on {g.name} (SM{g.sm_version}); use fp8 or awq-int4")
    if gpus > g.host_gpus:
        if gpus % g.host_gpus:
            raise TopologyError(f"scenario: gpus={gpus} spans hosts of {g.host_gpus} {g.name.upper()} GPUs (one "
                                f"NVLink domain each): give a multiple of {g.host_gpus}, or at most {g.host_gpus}")
        if pools:
            raise TopologyError(f"scenario: pool={','.join(pools)!r} with gpus={gpus}: the built KV pools attach "
                                f"to one host of {g.host_gpus} GPUs; a pool shared by {gpus // g.host_gpus} hosts "
                                f"is not modelled (use at most {g.host_gpus} GPUs, or write a scenario file)")


def _ep_serving(p: dict) -> dict:
    """The serving entries of :func:`ep_settings` (none when expert parallelism runs without DeepEP)."""
    out = {}
    if p["moe_a2a"] == "deepep":
        out["moe_a2a"] = _num("deepep", "given (SGLang --moe-a2a-backend deepep)")
        out["deepep_mode"] = _num(p["deepep_mode"], "given (--deepep-mode)" if p["deepep_mode"] != "auto" else
                                  f"{SGLANG} --deepep-mode auto: normal kernels for batches that prefill, "
                                  "low-latency ones for decode batches")
    if p["two_batch_overlap"]:
        out["two_batch_overlap"] = _num("1", "given (SGLang --enable-two-batch-overlap)")
    if p["ep_redundant"]:
        out["ep_redundant"] = _num(str(p["ep_redundant"]), "given (SGLang --ep-num-redundant-experts, EPLB)")
    if p.get("moe_dense_tp") == 1:
        out["moe_dense_tp"] = _num("1", "given (SGLang --moe-dense-tp-size 1)")
    return out


def _skew_serving(m, ep: int, host_gpus: int, redundant: int) -> dict:
    """The busiest GPU's routed-expert load over the mean, per phase, with its source, where an expert-parallel
    group spans hosts (:func:`sacmodel.hardware.sizing.ep_load_skew`; none inside one host: uniform routing)."""
    if ep <= host_gpus or not m.routed_experts:
        return {}
    out = {}
    for name, phase in (("ep_load_skew", "decode"), ("ep_load_skew_prefill", "prefill")):
        v, src = ep_load_skew(ep, host_gpus, redundant > 0, phase)
        out[name] = _num(f"{v:.6g}", src)
    return out


def _check_fits(g: GPUSpec, m, serving: dict, *, tp: int, dp: int, chunk: int) -> None:
    """Refuse a machine whose weights leave no KV pool: SGLang's ``profile_max_num_token`` gives
    ``mem_fraction`` x (memory - runtime reserve) - weights, and the server stops when that holds no page."""
    mf = float(serving["mem_fraction"]["value"])
    memory = g.memory_mib * MIB
    weights = weights_per_gpu(m, float(serving["weight_bytes_per_param"]["value"]), tp=tp, dp=dp,
                              redundant=int(serving.get("ep_redundant", {"value": 0})["value"]))
    kv = serving["kv_dtype"]["value"]
    cell = kv_cell_bytes(m, m.kv_bytes(kv), max(1, tp // dp))
    page = int(serving["page_tokens"]["value"])
    if kv_pool_tokens(memory, mf, weights, cell, page) >= page:
        return
    room = (memory - RUNTIME_RESERVE) * mf
    why = ""
    if serving["mem_fraction"]["source"] != "given":
        reserved, dp_part = reserved_mib(g.memory_mib, tp=tp, dp=dp, chunk=chunk,
                                         cuda_graph_max_bs=int(serving["cuda_graph_max_bs"]["value"]))
        why = (f"; mem_fraction is SGLang's default after {reserved:,.0f} MiB reserved"
               + (f", {dp_part:,.0f} MiB of it for DP attention with dp={dp}" if dp_part else ""))
    raise TopologyError(
        f"scenario: {m.name} does not fit on {tp} x {g.name.upper()}: its {serving['weights']['value']} weights "
        f"take {weights / GIB:.1f} GiB per GPU, above mem_fraction {mf:g} x ({g.memory_mib:,} MiB - SGLang's "
        f"runtime reserve {RUNTIME_RESERVE / GIB:.2f} GiB) = {room / GIB:.1f} GiB, so no KV pool is left "
        f"(weights + reserve > the static memory{why}); use more GPUs, smaller weights or a larger mem_fraction")


def _gpu_fields(g: GPUSpec) -> dict:
    src = g.sources
    fields = {
        "hbm_capacity": _num(f"{g.memory_bytes / 1e9:g} GB", src["memory"]),
        "hbm_bandwidth": _num(f"{g.hbm_bandwidth / 1e12:g} TB/s", src["hbm_bandwidth"]),
        "flops_bf16": _num(f"{g.flops_bf16 / 1e12:g} TFLOP/s", src["flops"]),
        "flops_fp8": _num(f"{g.flops_fp8 / 1e12:g} TFLOP/s", src["flops"]),
        "nvlink_bandwidth": _num(f"{g.nvlink_bandwidth / 1e9:g} GB/s", src["nvlink"] + " [derived: per direction]"),
        "memory_reported": _num(f"{g.memory_mib} MiB", src["memory_mib"]),
        "sms": _num(str(g.sms), src["sms"]),
        "nvlink_domain": _num(str(g.host_gpus), src["host_gpus"]),
        "nics_per_gpu": _num(f"{g.nics_per_gpu:g}", src["nics_per_gpu"]),
        "nic_rate": _num(f"{g.nic_rate * 8 / 1e9:g} Gbit/s", src["nic_rate"]),
        "nic_latency": _num(f"{g.nic_latency * 1e6:g} us", src["nic_latency"]),
    }
    if g.flops_fp4:
        fields["flops_fp4"] = _num(f"{g.flops_fp4 / 1e12:g} TFLOP/s", src["flops"])
    return fields


def _socket_groups(g: GPUSpec, gpus: int) -> list[tuple[str, int, int]]:
    """(node id, GPUs, socket index) of each GPU group: per host of ``host_gpus`` GPUs, half on each socket
    (one GPU: one group). Host 0 keeps the names gpu_s0 / gpu_s1 and sockets 0 / 1; host h, gpu_h{h}s{i} and
    sockets 2h + i."""
    groups = []
    for h in range(-(-gpus // g.host_gpus)):
        k = min(g.host_gpus, gpus - h * g.host_gpus)
        half = max(1, k // 2)
        for i, n in ((0, half), (1, k - half)):
            if n > 0:
                groups.append((f"gpu_s{i}" if h == 0 else f"gpu_h{h}s{i}", n, 2 * h + i))
    return groups


def _nodes(g: GPUSpec, gpus: int, pools, cxl_devices: int, rdma_nics: int) -> list[dict]:
    fields = _gpu_fields(g)
    nodes = [{"id": gid, "kind": "gpu", "count": n, **fields} for gid, n, _ in _socket_groups(g, gpus)]
    host = "[assumed] a two-socket host like the SAC testbed's (sac-system.md): "
    for i in range(2 * -(-gpus // g.host_gpus)):
        nodes.append({"id": f"rc{i}", "kind": "cpu_root_complex"})
        nodes.append({"id": f"dram{i}", "kind": "host_dram",
                      "capacity": _num("1 TB", host + "2 TB DDR5 over two sockets"),
                      "bandwidth": _num("358 GB/s", host + "8 x DDR5-5600 channels per socket [derived]"),
                      "latency": _num("100 ns", "constants.md 2b local DDR round trip 'sub-100 ns'")})
    if "cxl" in pools:
        nodes += [{"id": "cxl_adapter0", "kind": "cxl_adapter"}, {"id": "cxl_adapter1", "kind": "cxl_adapter"},
                  {"id": "cxl_switch", "kind": "cxl_switch"},
                  {"id": "cxl_dev", "kind": "cxl_device", "count": cxl_devices,
                   "capacity": _num("1 TB", "constants.md 2a: CXL 2.0 memory modules up to 512 GB-1 TB"),
                   "bandwidth": _num("22.5 GB/s", "sac-system.md (Beluga arXiv 2511.20172): about 22.5 GB/s per "
                                                  "device"),
                   "latency": _num("750 ns", "sac-system.md (Beluga): 64 B access about 750 ns")}]
    if "rdma" in pools:
        nodes += [{"id": "nic", "kind": "rdma_nic", "count": rdma_nics,
                   "rate": _num("100 Gbit/s", "sac-system.md: ConnectX-7 100 Gb/s NICs as on the testbed"),
                   "op_cost": _num("0.446 us", "fitted on the sac-testbed micro-benchmark (rdma_total), carried "
                                               "over: a property of the NIC")},
                  {"id": "remote_pool", "kind": "remote_memory",
                   "capacity": _num("1 TB", "sac-system.md RDMA baseline: loopback into host memory")}]
    return nodes


def _links(g: GPUSpec, gpus: int, pools) -> list[dict]:
    """PCIe from each GPU group to its socket, DDR to each socket's DRAM, UPI between a host's sockets (the
    hosts' network carries only collectives: :func:`sacmodel.hardware.sizing.collective_rates`)."""
    pcie = _num(f"{g.host_link_bandwidth / 1e9:g} GB/s", g.sources["host_link"])
    lat = _num("473 ns", "fitted on the sac-testbed micro-benchmark (one-way GPU <-> root complex over PCIe 5.0), "
                         "carried over: PCIe Gen5 as on the testbed")
    links = [{"from": gid, "to": f"rc{sock}", "protocol": "pcie5", "bandwidth": pcie, "latency": lat}
             for gid, _, sock in _socket_groups(g, gpus)]
    ddr = _num("358 GB/s", "[derived] 8 x DDR5-5600 channels")
    sockets = 2 * -(-gpus // g.host_gpus)
    links += [{"from": f"rc{i}", "to": f"dram{i}", "protocol": "ddr5", "bandwidth": ddr} for i in range(sockets)]
    links += [{"from": f"rc{i}", "to": f"rc{i + 1}", "protocol": "upi",
               "bandwidth": _num("160 GB/s", "[assumed] 4 x UPI 2.0 at 20 GT/s, as the testbed's Xeon 8575C"),
               "latency": _num("60 ns", "constants.md 2b: remote-socket hop of the order of the CXL adder")}
              for i in range(0, sockets, 2)]
    if "cxl" in pools:
        for i in (0, 1):
            links.append({"from": f"rc{i}", "to": f"cxl_adapter{i}", "protocol": "pcie5",
                          "bandwidth": _num("33 GB/s", "sac-system.md (Beluga): CPU to CXL per adapter 33 GB/s write"),
                          "bandwidth_reverse": _num("46 GB/s", "sac-system.md (Beluga): 46 GB/s read"),
                          "per_flow_bandwidth": _num("26 GB/s", "sac-system.md (Beluga): GPU to CXL about 26 GB/s")})
            links.append({"from": f"cxl_adapter{i}", "to": "cxl_switch", "protocol": "cxl2",
                          "bandwidth": _num("63 GB/s", "constants.md 2a PCIe 5.0 x16 raw per direction")})
        links.append({"from": "cxl_switch", "to": "cxl_dev", "protocol": "cxl2",
                      "bandwidth": _num("31.5 GB/s", "constants.md 2a PCIe 5.0 x8 raw per direction")})
    if "rdma" in pools:
        links.append({"from": "rc0", "to": "nic", "protocol": "pcie5",
                      "bandwidth": _num("63 GB/s", "constants.md 3 ConnectX-7 host interface PCIe Gen5 x16")})
        links.append({"from": "nic", "to": "remote_pool", "protocol": "rdma",
                      "bandwidth": _num("100 Gbit/s", "sac-system.md: 100 Gb/s NICs"),
                      "latency": _num("2 us", "constants.md 3 (RDMA READ round trip order)")})
    return links


def _serving(g: GPUSpec, m, weights: str, kv: str, *, tp: int, dp: int, ep: int, kv_dtype_given: bool,
             mem_fraction, chunked_prefill, max_total_tokens, max_running_requests, pool_sizes: dict,
             scheduler_recv_interval=None, piecewise_cuda_graph=False, cuda_graph_max_bs=None) -> dict:
    """The serving settings, SGLang's defaults where not given; ``pool_sizes``: the members of each pool the
    machine has (None: 2, as the testbed)."""
    chunk0 = chunked_prefill_default(g.memory_mib)
    cgmb = _optional_int("cuda_graph_max_bs", cuda_graph_max_bs, CUDA_GRAPH_MAX_BS)
    cgmb_given = cgmb is not None
    cgmb = cgmb if cgmb_given else cuda_graph_max_bs_default(g.memory_mib, tp)
    s = {
        "tp": _num(str(tp), "given" if tp else SGLANG),
        "dp": _num(str(dp), "given: DP attention groups" if dp > 1 else "given: tensor-parallel attention"),
        "ep": _num(str(ep), "given" if ep > 1 else f"{SGLANG} (ep_size=1)"),
        "weights": _num(weights, "given"),
        "weight_bytes_per_param": _num(f"{WEIGHT_BYTES[weights]:.6g}", f"[derived] {weights} weights with "
                                                                       "their scales (sacmodel.hardware.sizing)"),
        "kv_dtype": _num(kv, "given" if kv_dtype_given else f"{SGLANG}: kv_cache_dtype=auto for {m.name} on SM"
                                                              f"{g.sm_version}"),
        "page_tokens": _num("64" if m.sparse else "1", f"{SGLANG}: page size 64 for DeepSeek DSA, else 1"),
        "cuda_graph_max_bs": _num(str(cgmb), "given" if cgmb_given else f"{SGLANG} for {g.memory_mib} MiB and tp={tp}"),
        "max_prefill_tokens": _num("16384", f"{SGLANG} (max_prefill_tokens)"),
    }
    chunked_prefill = _optional_int("chunked_prefill", chunked_prefill, 1 << 24)
    if chunked_prefill is None:
        per_rank = chunk0 // dp
        s["prefill_chunk"] = _num(str(per_rank), f"{SGLANG}: chunked_prefill_size {chunk0} for {g.memory_mib} MiB"
                                  + (f", divided by dp={dp} under DP attention" if dp > 1 else ""))
    else:
        if chunked_prefill < dp:
            raise TopologyError(f"scenario: chunked_prefill={chunked_prefill} is below dp={dp}: SGLang divides it "
                                "among the DP attention ranks, and each needs at least one token")
        s["prefill_chunk"] = _num(str(chunked_prefill // dp),
                                  "given" + (f" (chunked_prefill_size {chunked_prefill} / dp={dp})" if dp > 1 else ""))
    s["mem_fraction"] = _mem_fraction(g, mem_fraction, tp=tp, dp=dp, chunk=chunked_prefill or chunk0, cgmb=cgmb)
    for name, hi, why in (("max_total_tokens", 1 << 31, "given"),
                          ("max_running_requests", 1 << 20, "given (per data-parallel rank)")):
        v = _optional_int(name, {"max_total_tokens": max_total_tokens,
                                 "max_running_requests": max_running_requests}[name], hi)
        if v is not None:
            s[name] = _num(str(v), why)
    if scheduler_recv_interval is not None:
        n = _check_int("scheduler_recv_interval", scheduler_recv_interval, 1, 1 << 16)
        why = sglang_refusal(m, dp, recv_interval=n)
        if why:
            raise TopologyError(f"scenario: scheduler_recv_interval={n} {why}")
        s["scheduler_recv_interval"] = _num(str(n), "given (SGLang --scheduler-recv-interval)")
    if _check_flag("piecewise_cuda_graph", piecewise_cuda_graph):
        why = sglang_refusal(m, dp, piecewise_graph=True)
        if why:
            raise TopologyError(f"scenario: piecewise_cuda_graph: {why}")
        n, why = (2048, "2048 for an MLA backend") if m.kind == "mla" else (
            int(s["prefill_chunk"]["value"]), "chunked_prefill_size")
        s["piecewise_cuda_graph_max_tokens"] = _num(str(n), f"given: piecewise CUDA graph on; SGLang v0.5.12's "
                                                            f"piecewise_cuda_graph_max_tokens default ({why})")
    for name, n in pool_sizes.items():
        s[name] = _num(str(n or 2), "given" if n else "as the testbed")
    if m.sparse:                                     # HiSparse settings of the testbed's fork
        for k, v, why in (("device_buffer", "4096", "hisparse_config device_buffer_size=4096"),
                          ("buffer_extra_slots", "64", "one page of newest-token slots"),
                          ("host_to_device_ratio", "2", "host pool = 2 x device pool")):
            s[k] = _num(v, f"as on the SAC testbed (server logs: {why})")
    return s


def _vllm_serving(s: dict, g: GPUSpec, *, dp: int, chunked_prefill, mem_fraction, max_running_requests) -> None:
    """The settings of a vLLM V1 server in place of SGLang's (``s`` is rewritten): the engine, its token budget
    per iteration (``max_num_batched_tokens``, kept as ``prefill_chunk``: each data-parallel engine has its own
    scheduler, so it is not divided by dp), ``max_num_seqs``, 16-token KV blocks, ``gpu_memory_utilization`` and
    CUDA graphs up to 512 tokens (full graphs for decode-only batches, piecewise ones for mixed batches)."""
    tokens, seqs = vllm_batch_defaults(g.memory_mib, g.name)
    src = f"{VLLM}: get_batch_defaults for {g.memory_mib:,} MiB ({g.name})"
    s["engine"] = _num("vllm", "given")
    s["prefill_chunk"] = _num(str(chunked_prefill), "given (max_num_batched_tokens)") if chunked_prefill \
        else _num(str(tokens), f"{src}: max_num_batched_tokens")
    if max_running_requests is None:
        s["max_running_requests"] = _num(str(seqs), f"{src}: max_num_seqs")
    s["page_tokens"] = _num(str(VLLM_BLOCK), f"{VLLM}: block_size")
    if mem_fraction is None:
        s["mem_fraction"] = _num(f"{VLLM_GPU_MEMORY_UTILIZATION:g}", f"{VLLM}: gpu_memory_utilization")
    s["cuda_graph_max_bs"] = _num(str(VLLM_GRAPH_TOKENS), f"{VLLM}: largest CUDA-graph capture size")
    s["piecewise_cuda_graph_max_tokens"] = _num(str(VLLM_GRAPH_TOKENS), f"{VLLM}: piecewise CUDA graphs of "
                                                                         "mixed batches up to the capture size")
    for name, (_value, raw, source) in VLLM_FRONT_END.items():        # the API server's request path
        s[name] = _num(raw, source)


def _mem_fraction(g: GPUSpec, given, *, tp: int, dp: int, chunk: int, cgmb: int) -> dict:
    """``mem_fraction_static``: the given one, or SGLang's default for the GPU, refused with the reserve that
    takes the whole GPU when it comes out not positive (DP attention's buffers grow with dp)."""
    if given is not None:
        return _num(f"{_check_fraction('mem_fraction', given):g}", "given")
    mf = mem_fraction_default(g.memory_mib, tp=tp, dp=dp, chunk=chunk, cuda_graph_max_bs=cgmb)
    if mf <= 0:
        reserved, dp_part = reserved_mib(g.memory_mib, tp=tp, dp=dp, chunk=chunk, cuda_graph_max_bs=cgmb)
        why = (f"{dp_part:,.0f} MiB of it for DP attention with dp={dp} (3 x cuda_graph_max_bs {cgmb} x dp"
               + (", and 1.5 x more above a graph batch of 300)" if cgmb > 300 else ")")) if dp_part else \
            "for activations, CUDA graphs and the runtime"
        raise TopologyError(f"scenario: dp={dp}: SGLang's default mem_fraction_static would be {mf:g}: it reserves "
                            f"{reserved:,.0f} MiB of the {g.memory_mib:,} MiB of a {g.name.upper()}, {why}, and SGLang "
                            "stops at start ('Not enough memory'); give mem_fraction or a smaller cuda_graph_max_bs, "
                            "or use a smaller dp")
    return _num(f"{mf:g}", f"{SGLANG}: mem_fraction_static for {g.memory_mib} MiB, tp={tp}, dp={dp}")


def scenario_yaml(**kw) -> str:
    """:func:`scenario_dict` as YAML text, every number with its unit and source."""
    import copy

    import yaml

    class _Dumper(yaml.SafeDumper):          # every entry written out in full (no &anchors / *aliases)
        def ignore_aliases(self, data):
            return True
    data = copy.deepcopy(scenario_dict(**kw))
    head = ("# Built by sacmodel.scenario(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ").\n"
            "# Edit any number; keep its source up to date. Load with --scenario FILE.\n")
    return head + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def follow_parallelism(topo: Topology, was_dp: int) -> None:
    """Re-derive, for the scenario's present ``tp`` and ``dp`` (``was_dp`` before the change), the serving
    settings SGLang derives from them at launch: the per-rank ``prefill_chunk`` (chunked_prefill_size, given or
    its default, divided among the DP attention ranks) and, where the scenario took SGLang's default (its
    source says so), ``cuda_graph_max_bs`` (by tp) and ``mem_fraction`` (its reserve grows with dp); a given
    ``mem_fraction`` is kept. The planners that set tp and dp (``plan --vary dp``, ``predict --set dp=N``,
    ``pareto --dp``) then run what ``--dp N`` builds. Edits ``topo`` in place (copy it first)."""
    s = topo.serving
    gpu = topo.graph.nodes[topo.gpus[0]] if topo.gpus else {}
    mib = gpu.get("memory_reported", gpu.get("hbm_capacity", 0)) / MIB
    default = lambda k: k in s and str(s[k].source).startswith(SGLANG)  # noqa: E731
    tp, dp = int(topo.param("tp")), int(topo.param("dp"))
    if "prefill_chunk" in s and not default("prefill_chunk") and dp != was_dp:
        total = int(s["prefill_chunk"].value) * was_dp            # the launch value, before SGLang divides it
        s["prefill_chunk"].value = float(max(1, total // dp))
        s["prefill_chunk"].source = f"chunked_prefill_size {total}" + (f" / dp={dp}" if dp > 1 else "")
    if mib:
        _follow_defaults(topo, mib, tp, dp, default)
    topo._routes.clear()


def _follow_defaults(topo: Topology, mib: float, tp: int, dp: int, default) -> None:
    """:func:`follow_parallelism`'s settings that took SGLang's default (``default(name)``) on a GPU of ``mib``
    MiB, derived again for ``tp`` and ``dp``."""
    s = topo.serving
    chunk0 = chunked_prefill_default(mib)
    if default("cuda_graph_max_bs"):
        s["cuda_graph_max_bs"].value = float(cuda_graph_max_bs_default(mib, tp))
        s["cuda_graph_max_bs"].source = f"{SGLANG} for {mib:.0f} MiB and tp={tp}"
    if default("prefill_chunk"):
        s["prefill_chunk"].value = float(chunk0 // dp)
        s["prefill_chunk"].source = (f"{SGLANG}: chunked_prefill_size {chunk0} for {mib:.0f} MiB"
                                     + (f", divided by dp={dp} under DP attention" if dp > 1 else ""))
    if default("mem_fraction"):
        chunk = chunk0 if default("prefill_chunk") else int(topo.param("prefill_chunk")) * dp
        gpu_mem = SimpleNamespace(memory_mib=int(round(mib)), name="gpu")       # what _mem_fraction reads
        fixed = _mem_fraction(gpu_mem, None, tp=tp, dp=dp, chunk=chunk, cgmb=int(topo.param("cuda_graph_max_bs")))
        s["mem_fraction"].value, s["mem_fraction"].source = float(fixed["value"]), fixed["source"]
