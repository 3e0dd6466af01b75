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

# vLLM's request path outside the engine core (engine="vllm"), each term (seconds, source):
# - the API server's tokenizer (AsyncMicrobatchTokenizer, vllm/utils/async_utils.py at 007e04ac): one thread
#   (ThreadPoolExecutor(max_workers=1)) runs the encode calls; its batcher takes the first queued prompt, waits
#   batch_wait_timeout_s = 2 ms (or until max_batch_size = 32 prompts) for more, then tokenizes the batch. The
#   work per prompt token is t_token, the same fast tokenizer as SGLang's.
# - the output handler (AsyncLLM.output_handler, vllm/v1/engine/async_llm.py at 00080ee1): one coroutine on the
#   API server's event loop pulls each EngineCoreOutputs (one per engine step) and runs
#   OutputProcessor.process_outputs over its requests (incremental detokenisation, stop checks, a RequestOutput
#   pushed to each request's stream). Its cost: vllm-project/vllm#6913 measured the same per-step work in V0's
#   _process_model_outputs at 0.2 ms for a batch of 1 and 3.4 ms for 32 (Llama3-70B, 4 x H100): 0.103 ms per
#   request and 0.097 ms per message.
# - one event loop for both (vllm/entrypoints/openai/serving_chat.py at 003fe593, create_chat_completion and
#   chat_completion_stream_generator; async_llm.py output_handler): uvicorn's single asyncio loop parses each
#   request, validates it (pydantic ChatCompletionRequest), renders the chat template (_preprocess_chat ->
#   apply_hf_chat_template, synchronous), sets the request up (SamplingParams, Processor.process_inputs,
#   EngineCoreRequest, the zmq send to the engine core), and on the same loop the output handler processes
#   every engine step and each request's stream generator builds and writes its SSE chunk. Only the encode call
#   leaves the loop (the tokenizer thread). So a burst's intake and the outputs queue behind one another; the
#   engine core (its own process) never waits for them and keeps stepping.
#   vllm_intake_request: the loop's time to take one request in, vllm-project/vllm#21139 (V1 frontend, 96
#   concurrent requests): the preprocessing time per request, "almost always > 12 ms" (12.4-14.3 ms logged);
#   its lower end, as the work (queueing only adds). Bound: the logged 15 ms. Transfer: per request on one API
#   server process, whatever the GPU or model; with --api-server-count k (vllm_api_servers) each of the k
#   processes takes its share of the requests; the PR's prompts and frontend are not stated, so the chat
#   template's share is not separated from the rest (completions requests take the same figure).
#   vllm_stream_chunk: one streamed chunk of one request (the pydantic response models and model_dump_json),
#   vllm-project/vllm#52875: 7.50 us per frame (Python 3.12, pydantic 2.13), added to each request output.
VLLM_FRONT_END: dict[str, tuple[float, str, str]] = {
    "vllm_tokenizer_wait": (2e-3, "2 ms", "vllm-project/vllm vllm/utils/async_utils.py at 007e04ac: "
                            "AsyncMicrobatchTokenizer batch_wait_timeout_s 0.002 (max_batch_size 32, one thread)"),
    "vllm_output_message": (0.097e-3, "0.097 ms", "vllm-project/vllm#6913: V0 _process_model_outputs 0.2 ms at "
                            "batch 1 and 3.4 ms at batch 32 (Llama3-70B, 4 x H100), less the per-request part"),
    "vllm_output_request": (0.103e-3, "0.103 ms", "vllm-project/vllm#6913: (3.4 - 0.2) ms / 31 requests, the "
                            "per-request part of one step's output processing (detokenise, RequestOutput)"),
    "vllm_intake_request": (12e-3, "12 ms", "vllm-project/vllm#21139: V1 frontend preprocessing per request "
                            "almost always > 12 ms (12.4-14.3 ms at 96 concurrent requests), on the API server's "
                            "event loop (serving_chat.py at 003fe593)"),
    "vllm_stream_chunk": (7.5e-6, "7.5 us", "vllm-project/vllm#52875: 7.50 us to render one streamed "
                          "completions frame (pydantic models + model_dump_json), per request output"),
    "vllm_api_servers": (1, "1", "vllm-project/vllm vllm/entrypoints/cli/serve.py (v0.11): --api-server-count "
                         "default 1, one API server process"),
}
VLLM_TOKENIZER_BATCH = 32        # AsyncMicrobatchTokenizer max_batch_size (vllm/utils/async_utils.py at 007e04ac)


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


def weights_per_gpu(model: ModelSpec, weight_bytes: float, *, tp: int, dp: int = 1, redundant: int = 0) -> float:
    """Bytes of weights on one GPU: attention and the token embedding split over the attention group (tp / dp
    GPUs), experts, dense MLPs and the LM head split over all tp GPUs (expert parallelism moves whole experts, the
    same bytes per GPU). Under DP attention each rank embeds its own tokens, so the embedding is not split over
    the tp GPUs: SGLang builds ``embed_tokens`` with ``enable_tp=not is_dp_attention_enabled()`` (v0.5.6
    7ae368efd ``models/deepseek_v2.py``; whole on every GPU, 1.85 GB for DeepSeek's 129,280 x 7,168 in BF16), from
    sgl-project/sglang#17403 (2026-01-20) split over the attention-TP group, the same when dp = tp [a partial DP
    before #17403 held it whole: not modelled]. Without DP attention the group is all tp GPUs, as before.

    Kept in BF16 whatever the checkpoint: embeddings, LM head and MoE router gates, and for MLA the absorbed
    ``w_kc``/``w_vc`` copies of kv_b (``DeepseekV2AttentionMLA`` post_load_weights). Checked against the testbed:
    50.4 GiB per GPU in its logs ('Load weight end ... mem usage=50.37 GB', 4-bit AWQ, DP attention).
    ``redundant``: EPLB's replicas of routed experts (``--ep-num-redundant-experts``), spread over the GPUs."""
    attn_tp = max(1, tp // dp)
    rep, split = attention_split(model, attn_tp)
    attn = model.layers * (rep + split / attn_tp)
    gates = model.moe_layers * model.hidden * model.routed_experts
    mlp_all = (model.params_total() - model.layers * model.attn_params() - 2 * model.vocab * model.hidden
               - gates)
    bf16 = model.vocab * model.hidden / attn_tp + (model.vocab * model.hidden + gates) / tp   # embedding; head, gates
    if model.kind == "mla":                           # w_kc and w_vc: BF16 copies of kv_b, split by heads
        bf16 += model.layers * model.kv_lora_rank * model.heads * (model.qk_nope_dim + model.v_head_dim) / attn_tp
    replicas = model.moe_layers * redundant * model.expert_params()   # EPLB's redundant experts, over all GPUs
    return weight_bytes * (attn + (mlp_all + replicas) / tp) + HEAD_BYTES * bf16


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


FP8_BLOCK = 128     # FP8 block quantisation of DeepSeek-V3/R1's checkpoints: weight_block_size [128, 128]


def fp8_block_refusal(model: ModelSpec, *, tp: int, ep: int, weights: str) -> str | None:
    """Why SGLang will not load these FP8 block-quantised experts (None if it will): each GPU holds
    moe_intermediate / (tp / ep) columns of every expert's gate and up projections (tensor parallelism inside the
    MoE, ``tp / ep`` GPUs per expert), and the FP8 linear method refuses a share that is not a whole number of
    128-wide blocks ("The output_size of gate's and up's weight = 64 is not divisible by weight quantization
    block_n = 128": sgl-project/sglang python/sglang/srt/layers/quantization/fp8.py, ``validate_block_quant_shapes``;
    vLLM has the same check). DeepSeek's 2,048-wide experts: TP16 keeps 128 (one block, no fallback), TP32 64.
    Only routed experts are checked: a dense MLP's FP8 checkpoint may not be block-quantised (per-channel Llama
    FP8), and DeepSeek's three dense layers follow ``--moe-dense-tp-size``, which is not modelled."""
    if weights != "fp8" or not model.routed_experts:
        return None
    moe_tp = max(1, tp // max(ep, 1))
    share = model.moe_intermediate / moe_tp
    if share == int(share) and int(share) % FP8_BLOCK == 0:
        return None
    return (f"SGLang refuses FP8 block-quantised experts split into shares that are not whole 128-wide blocks: "
            f"{model.name}'s {model.moe_intermediate}-wide experts over tp / ep = {moe_tp} GPUs leave {share:g} "
            f"per GPU ('The output_size of gate's and up's weight = {share:g} is not divisible by weight "
            f"quantization block_n = {FP8_BLOCK}', fp8.py); split experts over at most "
            f"{max(1, model.moe_intermediate // FP8_BLOCK)} GPUs (a larger ep) or use bf16 weights")


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


def collective_groups(model: ModelSpec, tp: int, dp: int, prefill: bool = False) -> list[tuple[int, float, str]]:
    """(GPUs taking part, bytes per token per layer each GPU sends, NCCL collective) of each collective of one
    layer of SGLang's parallel forward.

    Tensor-parallel attention (dp = 1): an all-reduce after the attention output and one after the MLP, over all
    tp GPUs. DP attention: the ranks' tokens are all-gathered before the MLP and reduce-scattered after it (over
    all tp GPUs), plus an all-reduce inside an attention group of more than one GPU (tp / dp GPUs). An iteration
    that prefills (``prefill``) pads to the sum of the ranks' tokens instead (SGLang's DpPaddingMode.SUM_LEN for
    any extend batch, layers/dp_attention.py v0.5.6-v0.5.12): each rank writes its tokens into a zeroed buffer of
    all of them, which is all-reduced (_dp_gather_via_all_reduce), and the MLP's output is all-reduced before each
    rank copies its slice out (communicator.py _scatter_hidden_states: reduce-scatter only when padded to the
    max length): two all-reduces over all tp GPUs. A ring all-reduce moves 2 (n - 1) / n of the data per GPU, an
    all-gather or a reduce-scatter (n - 1) / n (activations in BF16)."""
    row = 2.0 * model.hidden
    attn_tp = max(1, tp // dp)
    groups: list[tuple[int, float, str]] = []
    if dp > 1:
        if attn_tp > 1:
            groups.append((attn_tp, 2 * (attn_tp - 1) / attn_tp * row, "allreduce"))
        if prefill:
            groups += [(tp, 2 * (tp - 1) / tp * row, "allreduce")] * 2
        else:
            groups += [(tp, (tp - 1) / tp * row, "allgather"), (tp, (tp - 1) / tp * row, "reducescatter")]
    elif tp > 1:
        groups += [(tp, 2 * (tp - 1) / tp * row, "allreduce")] * 2
    return groups


def collectives(model: ModelSpec, tp: int, dp: int) -> tuple[int, float]:
    """(collectives per layer, bytes per token per layer each GPU sends) of :func:`collective_groups`."""
    groups = collective_groups(model, tp, dp)
    return len(groups), sum((g[1] for g in groups), 0.0)


# ---- NCCL's latency model (NVIDIA/nccl src/graph/tuning.cc at 5067397c, ncclTunerConstantsDefaults) ---------
# microseconds per (algorithm, protocol): the base latency of a collective, and the latency of one step over
# NVLink inside a host and over the network between hosts
NCCL_BASE_US = {("tree", "ll"): 6.8, ("tree", "ll128"): 14.0, ("tree", "simple"): 8.4,
                ("ring", "ll"): 6.6, ("ring", "ll128"): 14.0, ("ring", "simple"): 8.4}
NCCL_NVLINK_US = {("tree", "ll"): 0.6, ("tree", "ll128"): 1.25, ("tree", "simple"): 4.0,
                  ("ring", "ll"): 0.6, ("ring", "ll128"): 1.9, ("ring", "simple"): 3.4}
NCCL_NET_US = {("tree", "ll"): 5.0, ("tree", "ll128"): 8.5, ("tree", "simple"): 14.0,
               ("ring", "ll"): 2.7, ("ring", "ll128"): 4.0, ("ring", "simple"): 14.0}
NCCL_NET_OVERHEAD_US = 1.0     # getNetOverhead on an x86 Intel host (2.0 on AMD), x 3 for the Simple protocol


def nccl_latency(coll: str, algo: str, proto: str, ranks: int, nodes: int) -> float:
    """Seconds of NCCL's latency term for one collective (``ncclTopoTuneModel``; the bandwidth term apart).

    A ring all-reduce takes 2 (ranks - 1) steps, an all-gather or reduce-scatter ranks - 1; 2 (nodes - 1) (or
    nodes - 1) of them cross the network, the rest cost at least the network overhead of a step once the ring
    leaves a host. A tree all-reduce goes up and down: 2 x (ranks / nodes - 1 NVLink steps + log2(nodes)
    network levels). With one GPU per host the network step is the tree's. All-gather and reduce-scatter have no
    tree (``ncclInvalid``)."""
    if coll not in ("allreduce", "allgather", "reducescatter"):
        raise ValueError(f"nccl_latency: unknown collective {coll!r}")
    if algo == "tree" and coll != "allreduce":
        return math.inf
    key = (algo, proto)
    lat = NCCL_BASE_US[key]
    intra = NCCL_NVLINK_US[key]
    inter = NCCL_NET_US[("tree", proto) if ranks == nodes else key]
    if algo == "ring":
        steps = 2 * (ranks - 1) if coll == "allreduce" else ranks - 1
        if nodes > 1:
            intra = max(intra, NCCL_NET_OVERHEAD_US * (3 if proto == "simple" else 1))
        inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if coll == "allreduce" else nodes - 1)
        lat += (steps - inter_steps) * intra + inter_steps * inter
    else:
        lat += 2 * ((ranks // nodes - 1) * intra + int(math.log2(nodes)) * inter)
    return lat * 1e-6


def nccl_small_latency(coll: str, ranks: int, nodes: int) -> float:
    """Seconds of the quickest of NCCL's algorithms and protocols for a message small enough that latency
    decides (NCCL picks the least ``ncclTopoGetAlgoTime``): LL on the tree or the ring."""
    return min(nccl_latency(coll, a, p, ranks, nodes) for a in ("tree", "ring") for p in ("ll", "ll128", "simple"))


def fabric_scale(measured: float | None, domain: int) -> float:
    """How much slower than NCCL's own latency model a fabric's small collectives run: ``measured`` (s), the time
    nccl-tests' ``all_reduce_perf`` reports for a small (8 B-16 KB) all-reduce over two full hosts of ``domain``
    GPUs on this fabric, over NCCL's model of that all-reduce (:func:`nccl_small_latency`); 1 when not measured.

    Published runs of two hosts of 8 x H100 (checks of the rule, not defaults): NCCL prints its own estimate of
    25.2 us for a 128 B all-reduce and nccl-tests measures 61.6 us (75.4 us at 4 KB against 25.9), a factor of 2.4
    to 2.9 (NVIDIA/nccl#1453); GCP A3 Mega (GPUDirect-TCPXO, 8 x 200 Gb/s) measures 123-139 us from 8 B to 16 KB
    (lessizzmore/create-a3mega-ztan-fork, ztan-NCCL-test-result), 4.9-5.5 x. Transfer rule: every collective
    across hosts of that fabric keeps this ratio to NCCL's model of it (ranks, hosts, algorithm)."""
    if not measured:
        return 1.0
    return measured / nccl_small_latency("allreduce", 2 * domain, 2)


def cross_host_latency(coll: str, ranks: int, hosts: int, *, t_collective: float, scale: float = 1.0) -> float:
    """Seconds of the latency of one small collective over ``ranks`` GPUs on ``hosts`` hosts (more than one):
    NCCL's model of it (:func:`nccl_small_latency`) x the fabric's ``scale`` (:func:`fabric_scale`), never below
    ``t_collective``, the same collective inside one host: a collective that leaves a host still takes its
    NVLink steps inside it."""
    return max(t_collective, scale * nccl_small_latency(coll, ranks, hosts))


def collective_parts(coll: str, *, ranks: int, domain: int, nvlink_bw: float, nic_bw: float, t_collective: float,
                     scale: float = 1.0) -> tuple[float, float]:
    """(latency s, bandwidth B/s per GPU) of one collective over ``ranks`` GPUs.

    Inside one NVLink domain (``ranks`` <= ``domain``): SGLang's custom all-reduce, ``t_collective`` and
    ``nvlink_bw``. Across hosts SGLang runs NCCL (its custom all-reduce is disabled once a group spans nodes:
    ``CustomAllreduce.__init__``, sgl-project/sglang python/sglang/srt/distributed/device_communicators/
    custom_all_reduce.py): :func:`cross_host_latency`, and the bus bandwidth of one host's NICs, ``domain`` x
    ``nic_bw`` (NCCL's rings each leave a host once and spread over its NICs), capped by NVLink [derived;
    nccl-tests#290: 46-48 GB/s of bus bandwidth per 400 Gb/s NIC]."""
    hosts = math.ceil(ranks / domain)
    if hosts <= 1:
        return t_collective, nvlink_bw
    return (cross_host_latency(coll, ranks, hosts, t_collective=t_collective, scale=scale),
            min(nvlink_bw, domain * nic_bw))


def collective_time(coll: str, nbytes: float, **kw) -> float:
    """Seconds of one collective that moves ``nbytes`` per GPU (as :func:`collective_groups` counts them: 2 (n -
    1) / n of the message for a ring all-reduce, (n - 1) / n for an all-gather or a reduce-scatter): latency +
    bytes / bandwidth of :func:`collective_parts` (its keywords)."""
    lat, bw = collective_parts(coll, **kw)
    return lat + nbytes / bw


def collective_rates(groups: list[tuple[int, float, str]], *, domain: int, nvlink_bw: float, nic_bw: float,
                     t_collective: float, scale: float = 1.0) -> tuple[float, float]:
    """(bandwidth B/s, latency s) per collective of a layer, averaged so that ``bytes / bandwidth`` and
    ``count x latency`` give the layer's totals of :func:`collective_time` over its collectives (bytes per GPU
    as :func:`collective_groups` counts them; ``scale``: :func:`fabric_scale`)."""
    if not groups:
        return nvlink_bw, t_collective
    total = sum(g[1] for g in groups)
    seconds, latency = 0.0, 0.0
    for n, nbytes, coll in groups:
        lat, bw = collective_parts(coll, ranks=n, domain=domain, nvlink_bw=nvlink_bw, nic_bw=nic_bw,
                                   t_collective=t_collective, scale=scale)
        seconds += nbytes / bw
        latency += lat
    bw = total / seconds if seconds > 0 else nvlink_bw
    return bw, latency / len(groups)


# ---- expert parallelism over DeepEP (deepseek-ai/DeepEP README at 567632dd, H800 + ConnectX-7 400 Gb/s) --------
# achieved fraction of one 400 Gb/s NIC (~50 GB/s) per GPU: normal kernels (NVLink forwarding, 4096 tokens) at
# EP64 dispatch 51 / combine 50 GB/s; low-latency kernels (pure RDMA, 128 tokens) at EP64 43 / 46 GB/s; inside
# one host the normal kernels reach 153 / 158 GB/s of the H800's ~160 GB/s NVLink
DEEPEP_RDMA_EFF = {"normal": (1.0, 1.0), "low_latency": (43 / 50, 46 / 50)}
# SMs DeepEP's normal kernels hold (deep_ep Buffer.num_sms, 20 by default): under two-batch overlap SGLang runs
# DeepGEMM on the rest ("deep_gemm_num_sms = total_num_sms - DeepEPConfig.num_sms", operations_strategy.py at
# 0d477880, #4068); the low-latency kernels hold none while their data is in flight
DEEPEP_NORMAL_SMS = 20


def tbo_gemm_share(sms: float, mode: str) -> float:
    """Share of the GPU's SMs DeepGEMM's GEMMs run on in an iteration that two-batch overlap splits while DeepEP's
    ``mode`` kernels run beside them: (sms - 20) / sms for the normal kernels (prefill), 1 for the low-latency
    ones (decode) or a GPU of unknown SMs."""
    if mode != "normal" or not sms or sms <= DEEPEP_NORMAL_SMS:
        return 1.0
    return (sms - DEEPEP_NORMAL_SMS) / sms
DEEPEP_NVLINK_EFF = (153 / 160, 158 / 160)


def deepep_bytes(model: ModelSpec) -> tuple[float, float]:
    """(dispatch, combine) bytes of one token's copy to one expert: FP8 activations with one fp32 scale per 128
    values out, BF16 back (DeepEP's V3 setting)."""
    return model.hidden * (1.0 + 4.0 / 128), 2.0 * model.hidden


def remote_copies(model: ModelSpec, ep: int, domain: int, mode: str) -> tuple[float, float]:
    """(copies over the network, copies over NVLink) one token sends per MoE layer under DeepEP.

    Its ``e`` experts lie on random GPUs of ``ep`` (``hosts`` = ep / domain hosts): the low-latency kernels
    send one copy per expert, (hosts - 1) / hosts of them to another host; the normal kernels send one copy per
    other host the token's experts are on (1 - (1 - 1/hosts)^e of each, NVLink forwarding inside it) and one
    per expert over NVLink."""
    e = model.experts_per_token
    hosts = max(1, math.ceil(ep / domain))
    local = e * (min(ep, domain) - 1) / ep
    if mode == "low_latency":
        return e * (hosts - 1) / hosts, local
    return (hosts - 1) * (1 - (1 - 1 / hosts) ** e), e * (min(ep, domain) - 1) / min(ep, domain)


def a2a_groups(model: ModelSpec, *, tp: int, ep: int, domain: int, mode: str, nvlink_bw: float, nic_bw: float,
               nic_latency: float, t_collective: float) -> list[tuple[float, float, float]]:
    """(calls per layer, seconds per token of the iteration, latency s) of DeepEP's dispatch and combine, averaged
    over all layers (only the MoE layers run them).

    Each GPU dispatches its 1/tp share of the iteration's tokens; a call lasts as long as the slower of its
    network part (the copies to other hosts at DeepEP's achieved share of the GPU's NICs) and its NVLink part,
    plus one network latency (``nic_latency``) when it crosses hosts, else ``t_collective``."""
    moe_share = model.moe_layers / model.layers
    remote, local = remote_copies(model, ep, domain, mode)
    hosts = math.ceil(ep / domain)
    out = []
    for i, nbytes in enumerate(deepep_bytes(model)):
        net = remote * nbytes / (nic_bw * DEEPEP_RDMA_EFF[mode][i]) if hosts > 1 else 0.0
        nvl = local * nbytes / (nvlink_bw * DEEPEP_NVLINK_EFF[i])
        out.append((moe_share, moe_share * max(net, nvl) / tp, nic_latency if hosts > 1 else t_collective))
    return out


def layer_comm(model: ModelSpec, *, tp: int, dp: int, ep: int, a2a: str, deepep_mode: str, domain: int,
               nvlink_bw: float, nic_bw: float, t_collective: float, nic_latency: float,
               scale: float = 1.0, prefill: bool = False, dense_dp: bool = False) -> dict[str, float]:
    """The step model's communication symbols of one layer: ``n_coll`` collectives (averaged over layers),
    ``coll_bytes`` per token per GPU at ``link_bw``, ``t_collective`` each, ``a2a_share``, the share of
    those seconds that is DeepEP's dispatch and combine (whose busiest receiver sets their length), and
    ``a2a_lat_share``, the share of the collectives' latency (``n_coll`` x ``t_collective``) that is theirs
    (in flight while the other micro-batch computes, under two-batch overlap).

    Without an all-to-all backend, the collectives of :func:`collective_groups` at :func:`collective_rates`.
    With DeepEP (``a2a="deepep"``, SGLang's ``--moe-a2a-backend deepep``), the MoE layers replace the gather and
    scatter of the tokens by DeepEP's dispatch and combine (:func:`a2a_groups`); the dense layers keep them.
    ``scale``: the fabric's small collectives over NCCL's model of them (:func:`fabric_scale`).
    ``prefill``: an iteration that prefills (DP attention's gather and scatter by all-reduce). ``dense_dp``:
    SGLang's ``--moe-dense-tp-size 1`` under DP attention over all GPUs: the dense layers' MLP runs on each
    rank's own tokens (communicator.py: ScatterMode.SCATTERED), so those layers run no collective."""
    groups = collective_groups(model, tp, dp, prefill)
    bw, lat = collective_rates(groups, domain=domain, nvlink_bw=nvlink_bw, nic_bw=nic_bw, t_collective=t_collective,
                               scale=scale)
    nbytes = sum(g[1] for g in groups)
    dense_share = 0.0 if dense_dp else 1 - model.moe_layers / model.layers
    if a2a != "deepep" or not model.routed_experts or ep <= 1:
        share = 1.0 if not dense_dp else model.moe_layers / model.layers    # the layers that gather
        return {"n_coll": share * len(groups), "coll_bytes": share * nbytes, "link_bw": bw, "t_collective": lat,
                "a2a_share": 0.0, "a2a_lat_share": 0.0}
    calls = a2a_groups(model, tp=tp, ep=ep, domain=domain, mode=deepep_mode, nvlink_bw=nvlink_bw, nic_bw=nic_bw,
                       nic_latency=nic_latency, t_collective=t_collective)
    n = dense_share * len(groups) + sum(c for c, _, _ in calls)
    seconds = dense_share * nbytes / bw + sum(s for _, s, _ in calls)
    latency = dense_share * len(groups) * lat + sum(c * t for c, _, t in calls)
    # keep coll_bytes a byte count: the all-to-all's seconds per token expressed at NVLink's rate
    a2a = sum(s for _, s, _ in calls)
    a2a_lat = sum(c * t for c, _, t in calls)
    return {"n_coll": n, "coll_bytes": seconds * nvlink_bw, "link_bw": nvlink_bw, "t_collective": latency / n,
            "a2a_share": a2a / seconds if seconds > 0 else 0.0,
            "a2a_lat_share": a2a_lat / latency if latency > 0 else 0.0}


# ---- expert-load skew: the busiest GPU's routed-expert tokens over the mean (SGLang's EPLB "balancedness" is its
# inverse: mean over max tokens per GPU, sglang/srt/eplb) -------------------------------------------------------
# LMSYS, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs" (2025-05-05,
# lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md at 2db4e404): prefill at 16,384 tokens per GPU and
# 4,096-token prompts, EP32, runs at 50,302 tokens/s per node with its EPLB placement (in-distribution statistics)
# and 59,337 with "simulated perfect EPLB" (random routing: the model's uniform routing); EPLB itself gives a
# speed-up of 1.49x in prefill and 2.54x in decode over no balancer ("Ablation Study: EPLB").
LMSYS_EP = ("LMSYS 'Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs' "
            "(2025-05-05, blog/2025-05-05-large-scale-ep.md@2db4e404)")
EPLB_RESIDUAL = 59337 / 50302          # 1.180: the whole step's slow-down of EPLB's placement against perfect balance
EPLB_SPEEDUP = {"prefill": 1.49, "decode": 2.54}


def ep_load_skew(ep: int, domain: int, eplb: bool, phase: str) -> tuple[float, str]:
    """(ratio, source) of the busiest GPU's routed-expert tokens over the mean, beyond what uniform routing
    spreads (:func:`sacmodel.serving.step.a2a_excess` prices that): it multiplies the busiest GPU's MoE FLOPs and
    what DeepEP's dispatch and combine deliver to it.

    From LMSYS's published throughputs at EP32-EP72 (:data:`LMSYS_EP`), read as lower bounds (they slow the whole
    step, of which the MoE and its all-to-all are a part): with EPLB (``eplb``: redundant experts placed from
    statistics, SGLang's ``--ep-num-redundant-experts``) 59,337 / 50,302 = 1.18 in prefill, the same assumed in
    decode; without a balancer 1.18 x EPLB's speed-up, 1.49 (prefill) and 2.54 (decode). They apply where the
    expert-parallel group spans hosts (``ep`` > ``domain``), the scale they were measured at (the imbalance grows
    with the EP size, LMSYS's simulation); inside one host 1 (no published figure: uniform routing).

    ``eplb`` stands for a placement balanced from statistics, which the scenario says by its redundant experts
    (LMSYS ran 32 of them with ``--init-expert-location`` from in-distribution statistics); SGLang keeps
    ``--enable-eplb`` / ``--init-expert-location`` apart from ``--ep-num-redundant-experts``, and redundant
    experts placed trivially balance nothing: such a deployment sets ``ep_load_skew`` itself."""
    if ep <= domain:
        return 1.0, (f"[assumed] uniform routing inside one host (EP{ep}): LMSYS's imbalance figures are at "
                     "EP32-EP72 across hosts")
    if eplb:
        src = (f"{LMSYS_EP}: prefill at EP32 with EPLB 50,302 tok/s per node against 59,337 with simulated perfect "
               "EPLB, 59,337 / 50,302 [lower bound]" + ("" if phase == "prefill" else "; decode [assumed] as prefill"))
        return EPLB_RESIDUAL, src
    return EPLB_RESIDUAL * EPLB_SPEEDUP[phase], (
        f"{LMSYS_EP}: no balancer, EPLB's {phase} speed-up {EPLB_SPEEDUP[phase]}x over EPLB's residual 59,337 / "
        "50,302 [lower bound]")


def gemm_precision(weights: str) -> str:
    """The tensor-core precision GEMMs with these weights run at: FP8 blocks on FP8 cores, FP4 on FP4, AWQ's 4-bit
    weights dequantised to BF16 (Marlin kernels), BF16 as is."""
    return {"fp8": "fp8", "fp4": "fp4"}.get(weights, "bf16")
