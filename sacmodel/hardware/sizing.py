"""SGLang's sizing rules (v0.5.9, ``python/sglang/srt/server_args.py`` and ``model_executor/model_runner.py``):
the server settings it picks when they are not given, the weights one GPU holds, and the KV pool it allocates.

Sizes in bytes, memory "MiB" as ``nvidia-smi`` reports it. Every rule names the SGLang function it follows (read
in the v0.5.9 wheel; the testbed's fork, branched from upstream main of 2026-04-01, has the same rules).
"""
from __future__ import annotations

import math

from .models import ModelSpec

MIB, GIB = float(1 << 20), float(1 << 30)
# weights of the linear layers: bytes per parameter, with their scales
WEIGHT_BYTES = {
    "fp8": 1.0 + 4.0 / (128 * 128),   # FP8 e4m3, one fp32 scale per 128 x 128 block (DeepSeek's checkpoints)
    "bf16": 2.0,
    "awq-int4": 0.5 + 4.0 / 128,      # 4-bit AWQ, group 128 with fp16 scale and zero (the testbed's checkpoint)
    "fp4": 0.5 + 1.0 / 16,            # NVFP4: fp8 scale per 16 values
}
HEAD_BYTES = 2.0                      # embeddings and the LM head stay BF16 in these checkpoints
# GPU memory taken before SGLang measures what is free (CUDA context, NCCL and custom all-reduce buffers): the
# testbed's logs show 93.5 GiB free of an H20's 95.6 GiB after "Init torch distributed ends"
RUNTIME_RESERVE = 2.07 * GIB


def chunked_prefill_default(memory_mib: float) -> int:
    """``chunked_prefill_size`` when unset, by GPU memory (``_handle_gpu_memory_settings``), before DP division."""
    gib = memory_mib / 1024
    return 2048 if gib < 35 else 4096 if gib < 60 else 8192 if gib < 160 else 16384


# vLLM V1's engine defaults (vllm-project/vllm at 00024d31: vllm/engine/arg_utils.py get_batch_defaults for the
# OpenAI API server; vllm/config/cache.py block_size 16, gpu_memory_utilization 0.9; CompilationConfig's largest
# CUDA-graph capture size 512)
VLLM_BLOCK = 16
VLLM_GPU_MEMORY_UTILIZATION = 0.9
VLLM_GRAPH_TOKENS = 512


def vllm_batch_defaults(memory_mib: float, gpu_name: str) -> tuple[int, int]:
    """vLLM's ``(max_num_batched_tokens, max_num_seqs)`` for its OpenAI API server when unset
    (``EngineArgs.get_batch_defaults``): 8192 and 1024 on a GPU of at least 70 GiB that is not an A100 (H100,
    H200, B200, MI300x), else 2048 and 256."""
    if memory_mib >= 70 * 1024 and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def cuda_graph_max_bs_default(memory_mib: float, tp: int) -> int:
    """``cuda_graph_max_bs`` when unset (``_handle_gpu_memory_settings``)."""
    gib = memory_mib / 1024
    if gib < 20:
        return 8
    if gib < 35:
        return 24 if tp < 4 else 80
    if gib < 60:
        return 32 if tp < 4 else 160
    if gib < 160:
        return 256 if tp < 4 else 512
    return 512


def reserved_mib(memory_mib: float, *, tp: int, dp: int, chunk: int, cuda_graph_max_bs: int) -> tuple[float, float]:
    """(all, DP attention's share) of the MiB SGLang reserves before ``mem_fraction_static``
    (``_handle_gpu_memory_settings``): activations of a chunk, CUDA graphs and the distributed runtime, and under
    DP attention the buffers that gather every rank's tokens (3 x cuda_graph_max_bs x dp, 1.5 x more above a
    graph batch of 300); at least 10 GiB on a GPU of more than 60 GiB."""
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * cuda_graph_max_bs + 1024 * tp / 8
    dp_part = 0.0
    if dp > 1:                                         # DP attention gathers every rank's tokens
        dp_part = 3 * cuda_graph_max_bs * dp
        if cuda_graph_max_bs > 300:
            dp_part += 1.5 * cuda_graph_max_bs * dp
    reserved += dp_part
    if memory_mib > 60 * 1024:
        reserved = max(reserved, 10240)
    return reserved, dp_part


def mem_fraction_default(memory_mib: float, *, tp: int, dp: int, chunk: int, cuda_graph_max_bs: int) -> float:
    """``mem_fraction_static`` when unset: what is left after a reserve for activations, CUDA graphs and the
    distributed runtime (:func:`reserved_mib`; ``chunk`` is the undivided chunked-prefill size). Not positive when
    the reserve takes the whole GPU (the caller says which part)."""
    reserved, _ = reserved_mib(memory_mib, tp=tp, dp=dp, chunk=chunk, cuda_graph_max_bs=cuda_graph_max_bs)
    return round((memory_mib - reserved) / memory_mib, 3)


def kv_dtype_default(model: ModelSpec, sm_version: int) -> str:
    """``kv_cache_dtype="auto"``: FP8 for DeepSeek sparse attention on SM100 and newer, BF16 on Hopper and for
    dense models (``_set_default_nsa_kv_cache_dtype``; the testbed's logs: 'Setting KV cache dtype to bfloat16 for
    DeepSeek DSA on SM9 device')."""
    return "fp8" if model.sparse and sm_version >= 100 else "bf16"


def attention_split(model: ModelSpec, attn_tp: int) -> tuple[float, float]:
    """(replicated, split) attention parameters of one layer: what every GPU of an attention group holds whole,
    and what it holds 1/attn_tp of (MLA: q_a, kv_a and the indexer are replicated; q_b, kv_b and o are split by
    heads; GQA: KV heads are split until there is one per GPU, then replicated)."""
    h, n = model.hidden, model.heads
    if model.kind == "mla":
        q_a = h * model.q_lora_rank if model.q_lora_rank else 0
        q_in = model.q_lora_rank or h
        q_b = q_in * n * (model.qk_nope_dim + model.qk_rope_dim)
        kv_a = h * (model.kv_lora_rank + model.qk_rope_dim)
        kv_b = model.kv_lora_rank * n * (model.qk_nope_dim + model.v_head_dim)
        o = n * model.v_head_dim * h
        index = (q_in * model.index_heads * model.index_head_dim + h * model.index_head_dim
                 + h * model.index_heads) if model.sparse else 0
        return float(q_a + kv_a + index), float(q_b + kv_b + o)
    q = h * n * model.head_dim
    o = n * model.head_dim * h
    kv_per_gpu = 2 * h * model.head_dim * max(1.0, model.kv_heads / attn_tp)   # K and V heads one GPU keeps
    return 0.0, float(q + o + kv_per_gpu * attn_tp)


def weights_per_gpu(model: ModelSpec, weight_bytes: float, *, tp: int, dp: int = 1) -> float:
    """Bytes of weights on one GPU: attention split over the attention group (tp / dp GPUs), experts, dense
    MLPs and the LM head split over all tp GPUs (expert parallelism moves whole experts, the same bytes per GPU).

    Kept in BF16 whatever the checkpoint: embeddings, LM head and MoE router gates, and for MLA the absorbed
    ``w_kc``/``w_vc`` copies of kv_b (``DeepseekV2AttentionMLA`` post_load_weights). Checked against the testbed:
    50.4 GiB per GPU in its logs ('Load weight end ... mem usage=50.37 GB', 4-bit AWQ, DP attention)."""
    attn_tp = max(1, tp // dp)
    rep, split = attention_split(model, attn_tp)
    attn = model.layers * (rep + split / attn_tp)
    gates = model.moe_layers * model.hidden * model.routed_experts
    mlp_all = (model.params_total() - model.layers * model.attn_params() - 2 * model.vocab * model.hidden
               - gates)
    bf16 = (2 * model.vocab * model.hidden + gates) / tp
    if model.kind == "mla":                           # w_kc and w_vc: BF16 copies of kv_b, split by heads
        bf16 += model.layers * model.kv_lora_rank * model.heads * (model.qk_nope_dim + model.v_head_dim) / attn_tp
    return weight_bytes * (attn + mlp_all / tp) + HEAD_BYTES * bf16


def kv_cell_bytes(model: ModelSpec, entry_bytes: float, attn_tp: int) -> float:
    """Bytes of one token of the KV pool on one GPU (``get_cell_size_per_token``): MLA's latent is replicated
    on every GPU; GQA keeps its share of the KV heads; DSA adds the indexer key."""
    if model.kind == "mla":
        per_layer = entry_bytes
    else:
        per_layer = entry_bytes * max(1.0, model.kv_heads / attn_tp) / model.kv_heads
    return model.layers * (per_layer + model.index_key_bytes)


def kv_pool_tokens(memory_bytes: float, mem_fraction: float, weights: float, cell: float, page: int) -> int:
    """Tokens of the KV pool one rank allocates (``profile_max_num_token``): mem_fraction of the memory free
    before the weights load, minus the weights, in cells, rounded down to a page (0: nothing fits)."""
    free = memory_bytes - RUNTIME_RESERVE
    n = int((free * mem_fraction - weights) // cell)
    return max(0, n // page * page)


def max_running_default(pool_tokens: int, context_len: int) -> int:
    """``max_running_requests`` per rank when unset: the request pool SGLang sizes from the KV pool (between 2048
    and 4096 slots), at most half the KV tokens (``ModelRunner.init_memory_pool``, v0.5.9)."""
    estimate = min(max(int(pool_tokens / max(context_len, 1) * 512), 2048), 4096)
    return max(1, min(pool_tokens // 2, estimate))


def new_token_ratio_default(dp_attention: bool, conservativeness: float = 1.0) -> tuple[float, float, float]:
    """(initial, minimum, decay per decode step) of the scheduler's new-token ratio (``Scheduler.__init__``):
    0.7 x conservativeness (x 0.3 under DP attention), its minimum 0.14 x that, reached over 600 steps."""
    init = min(0.7 * conservativeness * (0.3 if dp_attention else 1.0), 1.0)
    lo = init * 0.14
    return init, lo, (init - lo) / 600


def graph_sizes(max_bs: int) -> list[int]:
    """Decode batch sizes SGLang captures CUDA graphs for (``_generate_cuda_graph_batch_sizes``)."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 497, 16)) + list(range(512, max_bs + 1, 32))
    return [s for s in sizes if s <= max_bs] or [1]



# ---- what one decode layer launches and exchanges (SGLang's DeepSeek and Llama/Qwen forwards) ----------------
def decode_kernels(model: ModelSpec) -> int:
    """GPU kernels one layer of a decode step runs, counted from SGLang's forward (``deepseek_v2.py``,
    ``qwen3.py``/``llama.py``; v0.5.9) [estimated]: norms, projections, RoPE, cache store, attention, and the MLP
    (router, top-k, the fused MoE's two grouped GEMMs, activation quantisation, sum) or the dense MLP; a DSA
    layer adds the indexer (projections, key norm and quantisation, key store, FP8 logits, top-k)."""
    attention = 13 if model.kind == "mla" else 8
    indexer = 9 if model.sparse else 0
    mlp = 10 if model.routed_experts else 4
    return attention + indexer + mlp


def piecewise_graph_applies(model: ModelSpec, dp: int) -> bool:
    """Whether SGLang (v0.5.10-0.5.12) can run a prefill as a piecewise CUDA graph: not with DP attention, not
    for DeepSeek sparse attention (server_args.py ``_handle_piecewise_cuda_graph`` turns it off there)."""
    return dp == 1 and not model.sparse


def sglang_refusal(model: ModelSpec, dp: int, *, recv_interval: int = 1, piecewise_graph: bool = False) -> str | None:
    """Why SGLang will not run these settings (None if it will): the recv skipper with DP attention (it asserts
    against it), a piecewise CUDA graph where it turns the graph off. The caller names the setting."""
    if recv_interval > 1 and dp > 1:
        return f"needs tensor-parallel attention (dp=1): SGLang refuses it with DP attention (dp={dp})"
    if piecewise_graph and not piecewise_graph_applies(model, dp):
        return "SGLang runs no piecewise CUDA graph " + (
            f"with DP attention (dp={dp})" if dp > 1 else f"for {model.name} (DeepSeek sparse attention)")
    return None


def idle_eager_kernels(model: ModelSpec) -> int:
    """Launches per layer of an IDLE batch, which a DP-attention rank with no request of its own runs in lockstep
    while another rank's batch runs without a CUDA graph [estimated]: attention returns at once for no tokens
    (``deepseek_v2.py``), so the layer norm and the MLP part of :func:`decode_kernels` are left."""
    return 1 + (10 if model.routed_experts else 4)


def piecewise_eager_kernels(model: ModelSpec) -> int:
    """Launches per layer a prefill still makes from Python under SGLang's piecewise CUDA graph (the graph
    stops at each layer's attention op, ``unified_attention_with_output``, which runs eagerly) [estimated]: the
    KV-cache store, the attention kernel, and the replay of the next captured piece."""
    return 3


def collective_groups(model: ModelSpec, tp: int, dp: int) -> list[tuple[int, float]]:
    """(GPUs taking part, bytes per token per layer each GPU sends) of each collective of one layer of SGLang's
    parallel forward.

    Tensor-parallel attention (dp = 1): an all-reduce after the attention output and one after the MLP, over all
    tp GPUs. DP attention: the ranks' tokens are all-gathered before the MLP and reduce-scattered after it (over
    all tp GPUs), plus an all-reduce inside an attention group of more than one GPU (tp / dp GPUs). A ring
    all-reduce moves 2 (n - 1) / n of the data per GPU, an all-gather or a reduce-scatter (n - 1) / n
    (activations in BF16)."""
    row = 2.0 * model.hidden
    attn_tp = max(1, tp // dp)
    groups: list[tuple[int, float]] = []
    if dp > 1:
        if attn_tp > 1:
            groups.append((attn_tp, 2 * (attn_tp - 1) / attn_tp * row))
        groups += [(tp, (tp - 1) / tp * row)] * 2
    elif tp > 1:
        groups += [(tp, 2 * (tp - 1) / tp * row)] * 2
    return groups


def collectives(model: ModelSpec, tp: int, dp: int) -> tuple[int, float]:
    """(collectives per layer, bytes per token per layer each GPU sends) of :func:`collective_groups`."""
    groups = collective_groups(model, tp, dp)
    return len(groups), sum((b for _, b in groups), 0.0)


def collective_rates(groups: list[tuple[int, float]], *, domain: int, nvlink_bw: float, nic_bw: float,
                     t_collective: float, net_latency: float) -> tuple[float, float]:
    """(bandwidth B/s, latency s) per collective of a layer, averaged so that ``bytes / bandwidth`` and
    ``count x latency`` give the layer's totals (bytes per GPU as :func:`collective_groups` counts them).

    A collective inside one NVLink domain (``domain`` GPUs, one host) runs at ``nvlink_bw`` per GPU and direction
    and takes ``t_collective``. One over n > domain GPUs spans ceil(n / domain) hosts. NCCL splits it into one
    ring per channel and spreads the channels over the host's NICs; each ring leaves a host once, so a host sends
    as many bytes across as one GPU's share of the collective, spread over all its NICs: the bus bandwidth is
    ``domain`` x ``nic_bw`` (the NICs of one host; ``nic_bw`` is NICs per GPU x rate), capped by NVLink
    [derived; nccl-tests#290: 46-48 GB/s of bus bandwidth per 400 Gb/s NIC]. Its latency grows by
    ``net_latency`` per level of the tree NCCL builds across the hosts (ceil(log2 hosts) levels) [assumed: NCCL
    picks its tree algorithm for small messages across hosts]."""
    if not groups:
        return nvlink_bw, t_collective
    total = sum(b for _, b in groups)
    across = min(nvlink_bw, domain * nic_bw)
    seconds, extra = 0.0, 0.0
    for n, nbytes in groups:
        hosts = math.ceil(n / domain)
        seconds += nbytes / (across if hosts > 1 else nvlink_bw)
        extra += net_latency * math.ceil(math.log2(hosts)) if hosts > 1 else 0.0
    bw = total / seconds if seconds > 0 else nvlink_bw
    return bw, t_collective + extra / len(groups)


def gemm_precision(weights: str) -> str:
    """The tensor-core precision GEMMs with these weights run at: FP8 blocks on FP8 cores, FP4 on FP4, AWQ's 4-bit
    weights dequantised to BF16 (Marlin kernels), BF16 as is."""
    return {"fp8": "fp8", "fp4": "fp4"}.get(weights, "bf16")
