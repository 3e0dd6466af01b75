"""How the constants fitted on the SAC testbed carry over to another machine.

A constant fitted on the testbed (8 x H20, 4-bit AWQ weights, SGLang with DP attention) is a fact about one
kind of thing; :data:`RULES` says which, and so how it transfers:

- **host CPU** (Python launch of an eager kernel, HiSparse's per-step work, the tokenizer, the scheduler's
  copies): carried over unchanged; a host with a faster or slower CPU scales them by its single-thread speed.
- **GPU kernel floor** (``t_graph_kernel``, a small kernel's time inside a CUDA graph): a latency (the graph's
  launch gap and a small kernel's memory round trips), not a throughput: it does not shrink with more SMs. It
  belongs to the GPU generation: carried over within Hopper (the testbed's H20 is a Hopper part) times the
  Hopper factor fitted on the H200 runs' lowest-concurrency TPOT (:data:`GRAPH_KERNEL_SCALE`); Blackwell takes
  Hopper's (no published Blackwell figure; a latency, so no SM or bandwidth scaling).
- **kernel efficiency** (fractions of a peak: ``compute_eff``, ``prefill_eff``, ``moe_eff``): a property of the
  kernel class on a GPU generation and weight format. Within the testbed's class it carries over; otherwise it
  comes from :data:`KERNEL_EFFICIENCY` (each class with its source in :data:`KERNEL_SOURCES`: published GEMM
  rates, or fitted on ``shared/data/external`` and reported before and after in the validation report), else
  it is carried over and the scenario says so. The class is the kernel SGLang runs by default (DeepGEMM for FP8
  block-scale GEMMs); a server that runs FlashInfer's TRT-LLM FP8 GEMM instead on Blackwell (``fp8_gemm_backend``,
  DeepGEMM off) prefills at that kernel's published rate (:data:`FLASHINFER_FP8_GEMM_RATE`).
- **engine version** (``moe_prefill_eff``, the routed experts' GEMMs in prefill: SGLang's Triton fused MoE under
  TP, a kernel apart from the DeepGEMM dense linears): the class's ``prefill_eff``, except for FP8 weights on
  Hopper under an SGLang release before the fused MoE's TMA down projection and its tuned H200 configurations
  (:func:`moe_prefill_factor`, the one version rule, read from the run's ``engine_version``). Under DeepEP's
  normal kernels the routed experts run DeepGEMM's grouped contiguous GEMM instead, a published kernel
  (:func:`deepep_moe_prefill_eff`).
- **published kernel** (``hbm_eff``: FlashMLA's dense decode against HBM; ``sparse_prefill_eff``: its sparse
  prefill against the BF16 peak; ``prefill_attn_eff``: the dense prefill attention kernels per generation,
  :data:`PREFILL_ATTN_EFF`; ``gqa_decode_eff``: the paged decode attention of GQA models per generation and
  page size, :data:`PAGED_DECODE_EFF`): a vendor's or a kernel author's measurement of the kernel, not fitted.
- **workload** (the score process of the top-k selection): carried over; it belongs to the model and prompts.
- **interconnect** (``t_collective``): carried over between NVLink generations (a small collective's latency is
  set by synchronisation, not bandwidth).
- **server** (``launch_overlap``, ``t_launch``, ``t_request``): a built machine runs stock SGLang, whose eager
  launches overlap the GPU's work (1; the testbed's fork adds them, 0), ``t_launch`` read from the same
  measurement under that rule (:data:`T_LAUNCH_OVERLAPPED`), and the public harnesses' path outside the engine
  (:data:`PUBLIC_REQUEST_PATH`) in place of the testbed's same-host client.
"""
from __future__ import annotations

from functools import lru_cache

from ..util.names import FP8_GEMM_BACKENDS, release
from .gpus import GPUSpec, get_gpu

TESTBED = "sac-testbed"
TESTBED_GPU = "h20"
TESTBED_WEIGHTS = "awq-int4"

# constant -> (kind, rule in words)
RULES: dict[str, tuple[str, str]] = {
    "t_graph_kernel": ("GPU kernel floor", "per GPU generation (a latency, not scaled by SMs): the testbed's "
                                           "Hopper value x GRAPH_KERNEL_SCALE"),
    "t_collective": ("interconnect", "carried over (NVLink synchronisation latency)"),
    "t_launch": ("server", "sgl-project/sglang#12160 read under the machine's launch rule (T_LAUNCH_OVERLAPPED)"),
    "launch_overlap": ("server", "1 on a built machine (stock SGLang launches asynchronously); the testbed's fork 0"),
    "compute_eff": ("kernel efficiency", "carried over within the kernel class (decode attention and GEMV)"),
    "prefill_eff": ("kernel efficiency", "per GPU generation and weight format: KERNEL_EFFICIENCY, else carried; "
                                         "FlashInfer's FP8 GEMM on Blackwell: FLASHINFER_FP8_GEMM_RATE"),
    "moe_eff": ("kernel efficiency", "per GPU generation and weight format: KERNEL_EFFICIENCY, else carried"),
    "hbm_eff": ("published kernel", "carried over (a published kernel measurement, not fitted)"),
    "sparse_prefill_eff": ("published kernel", "carried over (a published kernel measurement, the same fraction of "
                                               "the BF16 peak on Hopper and Blackwell)"),
    "prefill_attn_eff": ("published kernel", "per GPU generation: PREFILL_ATTN_EFF (FlashAttention-3, FlashMLA)"),
    "moe_prefill_eff": ("engine version", "the class's prefill_eff; FP8 on Hopper under SGLang before "
                                          "TRITON_MOE_TMA_VERSION: divided by TRITON_MOE_PRE_TMA (moe_prefill_factor); "
                                          "under DeepEP's normal kernels DeepGEMM's grouped GEMM, DEEPGEMM_GROUPED_EFF "
                                          "(deepep_moe_prefill_eff)"),
    "gqa_decode_eff": ("published kernel", "per GPU generation and page size: PAGED_DECODE_EFF (FlashAttention-3 "
                                           "on Hopper, FlashInfer on Blackwell); GQA models only"),
    "t_hs": ("host CPU", "carried over (HiSparse's per-step Python work)"),
    "t_hs_req": ("host CPU", "carried over (HiSparse's per-request work)"),
    "t_hs_admit": ("host CPU", "carried over (HiSparse's admission work per request)"),
    "t_token": ("host CPU", "carried over (the tokenizer's time per prompt token)"),
    "t_request": ("server", "the public harnesses' path outside the engine (PUBLIC_REQUEST_PATH)"),
    "stage_copy_bw": ("host CPU", "carried over (one CPU thread's copy bandwidth)"),
    "score_correlation": ("workload", "carried over (the model's top-k selection drift)"),
    "drift_settling": ("workload", "carried over"),
    "settling_steps": ("workload", "carried over"),
    "t_kernel": ("GPU kernel floor", "carried over (fixed cost of the gather/swap-in kernel: launch and sync)"),
    "outstanding_lines": ("GPU kernel floor", "carried over (loads in flight of the gather kernel)"),
}

# Dense prefill attention (multi-head over decompressed keys, MLA's absorbed dense form, GQA's flash attention),
# a fraction of the BF16 peak per GPU generation: (value, source)
PREFILL_ATTN_EFF: dict[str, tuple[float, str]] = {
    "hopper": (0.63, "FlashAttention-3 (Shah et al., arXiv 2407.08608, figure 'Attention forward speed, head dim 128 "
                     "(H100 80GB SXM5)'): 565-648 TFLOP/s over 1K-16K, 625 at 2K, of the H100's 989 = 0.63 "
                     "(FlashMLA's dense MLA 660 of 989 on H800 = 0.67, deepseek-ai/FlashMLA README)"),
    "blackwell": (0.649, "deepseek-ai/FlashMLA README (066b5ba): the SM100 dense MHA prefill kernel reaches 1,460 "
                         "TFLOP/s forward on B200, of 2,250 = 0.649"),
}

# Decode attention of GQA models (Qwen3, Llama) reads each request's KV from a paged cache, a fraction of HBM per
# GPU generation and page size: (smallest page size of the class, value, source), ascending. A server's page size
# takes the class of the largest smallest-page at or below it. MLA models decode with FlashMLA at ``hbm_eff``
# instead, and the weights' reads keep ``hbm_eff`` too. Which kernel runs: SGLang v0.5.5 (server_args.py
# _handle_attention_backend_compatibility at 303cc957e) picks "fa3" for Qwen3ForCausalLM, LlamaForCausalLM and the
# other is_fa3_default_architecture models on Hopper, "flashinfer" on Blackwell, with page size 1
# (_handle_page_size); vLLM V1 runs its FLASH_ATTN backend in 16-token blocks, FlashAttention-3 on SM90
# (vllm/attention/utils/fa_utils.py get_flash_attn_version: "if hopper default to FA3"), and FlashInfer's
# decode on SM100 [not checked here; the Blackwell class below is FlashInfer's].
_FA3_PAGED = ("FlashAttention-3's paged decode on H100 SXM (Dao-AILab/flash-attention#1572, TheRainstorm, "
              "2025-04-11: batch 16, 32 heads, page size 8, CUDA graphs): 1,796 GB/s at 2,000 tokens and 1,849 at "
              "4,000 of 3,350 = 0.54-0.55 (1,226 at 128 tokens); FA3 gathers a small page's KV rows one address a row "
              "(cp.async, row addresses sharded over the load threads, the scheme FA4 took over in "
              "Dao-AILab/flash-attention#2104), so SGLang's page 1 and vLLM's 16-token blocks read in the same class "
              "[MHA measured; GQA's KV heads are read by the same paged loads]")
_FLASHINFER_SM100 = ("FlashInfer's paged batch decode on Blackwell (vllm-project/vllm#19825, 2025-07-09, "
                     "benchmark_trtllm_decode_attention.py: 64 query / 8 KV heads of 128, BF16, 16-token blocks): 256 "
                     "sequences of uniform random length up to 2,048 (about 1.07 GB of KV) in 0.191 ms = 5.6 TB/s of "
                     "8 = 0.70 (its TRT-LLM decode kernel 0.174 ms, 0.77); FlashInfer gathers small pages with "
                     "cp.async row loads made for page size 1 (flashinfer-ai/flashinfer#1474, yzh119), so SGLang's "
                     "page 1 is in the same class [assumed: no published page-1 figure on SM100]; FA4's SM100 paged "
                     "decode (Dao-AILab/flash-attention#2104, GQA 32/4, 64K) read 2.32 / 3.90 / 4.37 / 5.26 TB/s at "
                     "pages 1 / 8 / 32 / 128 before that PR and about 5 TB/s (0.63) at any page size after")
PAGED_DECODE_EFF: dict[str, tuple[tuple[int, float, str], ...]] = {
    "hopper": ((1, 0.55, _FA3_PAGED),),
    "blackwell": ((1, 0.70, _FLASHINFER_SM100),),
}


def paged_decode_eff(arch: str, page: int) -> tuple[float, str] | None:
    """(fraction of HBM bandwidth, source) of the paged decode attention of a GQA model on GPU generation ``arch``
    with pages of ``page`` tokens: the class of :data:`PAGED_DECODE_EFF` whose smallest page is the largest at or
    below ``page``. None: no published figure for the generation (``hbm_eff`` is carried)."""
    classes = PAGED_DECODE_EFF.get(arch)
    if not classes or page < classes[0][0]:
        return None
    fits = [c for c in classes if c[0] <= page]
    _, value, source = fits[-1]
    return value, source


# Kernel efficiencies of a GPU generation and weight format other than the testbed's. Keys: (architecture,
# weights) -> {constant: value}; each class's source in KERNEL_SOURCES. FITTED_CLASSES were fitted on
# shared/data/external (the only constants fitted off the testbed; the report shows before and after).
_HOPPER_FP8 = {"prefill_eff": 0.201, "moe_eff": 0.749}
# aiconfigurator's measured DeepGEMM FP8 block GEMMs at prefill shapes run 1.9-2.4x (about 2.15x) faster on B200
# than on H200, whose FP8 peaks differ by 4500 / 1979 = 2.27: the same shapes reach 2.15 / 2.27 = 0.947 of Hopper's
# fraction of the peak
B200_GEMM_RATIO = 2.15 / (4500 / 1979)
_BLACKWELL_FP8 = {"prefill_eff": _HOPPER_FP8["prefill_eff"] * B200_GEMM_RATIO, "moe_eff": _HOPPER_FP8["moe_eff"]}
# A BF16 prefill is the FP8 class's whole forward with its GEMMs at the BF16 rate. The fitted FP8 fraction is a
# whole-forward rate W8 (DeepGEMM's block-scale GEMMs and everything else a prefill runs: norms, activations,
# RoPE, the small kernels), so per FLOP an FP8 prefill takes 1/W8 = 1/G8 (its GEMMs at their measured rate G8) +
# a remainder that does not depend on the weights' format. A BF16 prefill takes its GEMMs at their measured rate
# G16 and the same remainder: 1/W16 = 1/W8 - 1/G8 + 1/G16, so W16 <= W8 wherever G16 <= G8, and an FP8 prefill is
# never priced slower than a BF16 one. (FP8's activation quantisation kernels are in the remainder too, so this
# prices BF16 on the slow side by their share [not separated: no published split].) G8, G16: aiconfigurator's
# measured GEMM tables (ai-dynamo/aiconfigurator 095f58a5, aic-core/src/aiconfigurator_core/systems/data/<gpu>/
# gemm/sglang/0.5.9/gemm_perf.parquet, SGLang 0.5.9's kernels: gemm_dtype "fp8_block", DeepGEMM, and
# "bfloat16"), the median rate over the 1,020 shapes with M = 1,024 / 2,048 / 4,096 / 8,192 tokens and N, K >=
# 1,024: h200_sxm (the GPU of the Hopper FP8 fit) 1,083 and 679 TFLOP/s (median per-shape ratio 0.631; h100_sxm
# 1,141 and 716), b200_sxm 1,680 and 1,387 (DeepGEMM's SM100 kernels are slow at M = 1,024).
PREFILL_GEMM_RATE: dict[str, dict[str, float]] = {"hopper": {"fp8": 1083e12, "bf16": 679e12},
                                                  "blackwell": {"fp8": 1680e12, "bf16": 1387e12}}


def bf16_class(fp8: dict[str, float], gpu_name: str) -> dict[str, float]:
    """The BF16 kernel class of ``gpu_name``'s generation from its FP8 class ``fp8``: ``prefill_eff`` (a fraction
    of the BF16 peak) whose absolute rate W16 keeps the FP8 whole forward's format-independent remainder and
    swaps its GEMMs' rate for BF16's (:data:`PREFILL_GEMM_RATE`): 1/W16 = 1/W8 - 1/G8 + 1/G16, W8 = the FP8
    fraction x the FP8 peak (FLOP/s)."""
    g = get_gpu(gpu_name)
    rates = PREFILL_GEMM_RATE[g.arch]
    w8 = fp8["prefill_eff"] * g.flops_fp8
    w16 = 1.0 / (1.0 / w8 - 1.0 / rates["fp8"] + 1.0 / rates["bf16"])
    return {"prefill_eff": w16 / g.flops_bf16}


KERNEL_EFFICIENCY: dict[tuple[str, str], dict[str, float]] = {
    ("hopper", "fp8"): dict(_HOPPER_FP8),
    ("hopper", "bf16"): bf16_class(_HOPPER_FP8, "h200"),
    ("blackwell", "fp8"): dict(_BLACKWELL_FP8),
    ("blackwell", "bf16"): bf16_class(_BLACKWELL_FP8, "b200"),
}
# the BF16 classes follow the fitted FP8 ones, so they are fitted too (the report's "before" carries the testbed's)
FITTED_CLASSES = {("hopper", "fp8"), ("blackwell", "fp8"), ("hopper", "bf16"), ("blackwell", "bf16")}
KERNEL_EFFICIENCY_SOURCE = ("fitted: kernel efficiencies of FP8 DeepSeek-R1 on 8 x H200 (SGLang 0.5.9, TP8), the 15 "
                            "runs of shared/data/external/h200-deepseek-r1-sglang-tp8.csv, in stages: the kernel floor "
                            "on the TPOT of the lowest concurrency, moe_eff on that of the highest, prefill_eff on what "
                            "an 8K prompt adds to the TTFT of a 1K one (sacmodel.fit.transfer.fit_kernel_efficiency)")
KERNEL_SOURCES: dict[tuple[str, str], str] = {
    ("hopper", "fp8"): KERNEL_EFFICIENCY_SOURCE,
    ("hopper", "bf16"): "prefill_eff: the Hopper FP8 fit's whole forward (0.201 of 1,979 TFLOP/s) with its GEMMs at "
                        "the BF16 rate, the rest kept: 1/W16 = 1/W8 - 1/G8 + 1/G16, G8 1,083 and G16 679 TFLOP/s, the "
                        "median DeepGEMM FP8 block-scale and BF16 GEMM rates at prefill shapes (M 1K-8K, N, K >= 1K) "
                        "in aiconfigurator's measured H200 tables (ai-dynamo/aiconfigurator 095f58a5, systems/data/"
                        "h200_sxm/gemm/sglang/0.5.9); a lone torch BF16 GEMM reaches 0.63-0.72 of the peak "
                        "(vllm-project/vllm#23280), a whole forward less",
    ("blackwell", "bf16"): "prefill_eff: the Blackwell FP8 class's whole forward with its GEMMs at the BF16 rate, the "
                           "rest kept (bf16_class): G8 1,680 and G16 1,387 TFLOP/s, the median DeepGEMM FP8 block-scale "
                           "and BF16 GEMM rates at prefill shapes in aiconfigurator's measured B200 tables "
                           "(ai-dynamo/aiconfigurator 095f58a5, systems/data/b200_sxm/gemm/sglang/0.5.9)",
    ("blackwell", "fp8"): "prefill_eff: the Hopper FP8 fit x 0.947, aiconfigurator's measured DeepGEMM FP8 GEMMs at "
                          "prefill shapes 1.9-2.4x faster on B200 than H200 (ai-dynamo/aiconfigurator systems data) over "
                          "the peak ratio 2.27; moe_eff: [assumed: Hopper FP8's fraction of HBM; no published Blackwell "
                          "grouped-GEMM weight-read rate found]",
}
# The FP8 block-scale GEMMs SGLang runs (its --fp8-gemm-backend; server_args fp8_gemm_runner_backend): "auto"
# picks DeepGEMM where JIT DeepGEMM is on (SGLANG_ENABLE_JIT_DEEPGEMM, on by default on SM90 and SM100), else
# FlashInfer's TRT-LLM groupwise GEMM on Blackwell (fp8_utils.py _dispatch_auto_backend at v0.5.9). The Blackwell
# FP8 class above is DeepGEMM's. FlashInfer's TRT-LLM backend of gemm_fp8_nt_groupwise (FP32 block scales)
# reaches a plateau at prefill shapes that no fraction of the DeepGEMM class gives:
FLASHINFER_FP8_GEMM_RATE = 440e12      # FLOP/s on SM100
# the spread of its published rates at prefill shapes (M = 1,024-4,096 tokens; sgl-project/sglang#13528): 295 TFLOP/s
# (M 1,024, N 576, K 7,168: 28.7 us) to 533 (M 4,096, N 576: 63.5 us); the large-N plateau above lies within
FLASHINFER_FP8_GEMM_RANGE = (295e12, 533e12)
FLASHINFER_FP8_GEMM_SOURCE = (
    "published kernel: FlashInfer's gemm_fp8_nt_groupwise(backend='trtllm'), the GEMM SGLang runs for FP8 block-scale "
    "linears on Blackwell with DeepGEMM off, levels off at 404-443 TFLOP/s for M = 256-2048, N = 24576, K = 7168 "
    "(223.5 / 826 / 1,633 us; DeepGEMM 71 / 146 / 260 us on the same shapes) on GB200 "
    "(sgl-project/sglang#13528, benchmark/kernels/deepseek/benchmark_deepgemm_fp8_gemm_blackwell.py); FP8 "
    "blockwise GEMMs slower than FP16 torch.linear on B200 (flashinfer-ai/flashinfer#2146): 440 TFLOP/s of the "
    "GPU's FP8 peak, taken for every prefill GEMM (the flashinfer_trtllm MoE runs TRT-LLM's kernels with the same "
    "FP32 block scales [assumed: no published B200 rate of it at prefill sizes])")


def _flashinfer(weights: str, backend: str) -> bool:
    if backend not in FP8_GEMM_BACKENDS:
        raise ValueError(f"fp8_gemm_backend must be one of {', '.join(FP8_GEMM_BACKENDS)}, got {backend!r}"[:300])
    return backend == "flashinfer_trtllm" and weights == "fp8"


def prefill_gemm_range(flops_fp8: float, weights: str, backend: str) -> tuple[float, float] | None:
    """The range of ``prefill_eff`` (fractions of the GPU's FP8 peak ``flops_fp8``, FLOP/s) when the prefill
    GEMMs run a kernel whose published rates lie below the peak: FlashInfer's TRT-LLM FP8 GEMM with FP8 weights,
    :data:`FLASHINFER_FP8_GEMM_RANGE` (the spread of its rates at prefill shapes, as the tensor-core range spans
    the published block-FP8 GEMMs). None: the tensor cores' range holds."""
    if _flashinfer(weights, backend) and flops_fp8 > 0:
        lo, hi = FLASHINFER_FP8_GEMM_RANGE
        return min(1.0, lo / flops_fp8), min(1.0, hi / flops_fp8)
    return None


def fp8_gemm_efficiency(gpu: GPUSpec, weights: str, backend: str) -> tuple[float, str] | None:
    """(``prefill_eff``, source) where SGLang's FP8 GEMM backend sets it apart from the GPU's kernel class: FP8
    weights on Blackwell with FlashInfer's TRT-LLM GEMM (DeepGEMM off), at that kernel's published rate at large
    prefill GEMMs (:data:`FLASHINFER_FP8_GEMM_RATE`). None: the class's value stands."""
    if _flashinfer(weights, backend) and gpu.arch == "blackwell":
        return min(1.0, FLASHINFER_FP8_GEMM_RATE / gpu.flops_fp8), FLASHINFER_FP8_GEMM_SOURCE
    return None


# SGLang runs the routed experts of an FP8 block-quantised DeepSeek under TP (no DeepEP) as its Triton fused MoE
# (Fp8MoEMethod.create_moe_runner: DeepGEMM's grouped GEMM only with DeepEP or Mooncake all-to-all; v0.5.3
# a4a3d8239 python/sglang/srt/layers/quantization/fp8.py:1006-1010, the same rule at v0.5.9). Its prefill rate
# moved between releases: the TMA down projection with its own tuned configuration (sgl-project/sglang#10567,
# merged 2025-10-28, after v0.5.3) takes effect on H200 only with the H200 E=257 N=256 configurations for
# Triton 3.5.1 that carry a ``_down`` file with USE_TMA (sgl-project/sglang#17965, 2026-01-31). Before them an
# H200 falls back to the Triton 3.3.1 configuration, no down-projection file and no TMA (v0.5.3: Triton 3.4.0
# with torch 2.8.0; v0.5.6: Triton 3.5.1 with torch 2.9.1; fused_moe_triton_config.py get_moe_configs). v0.5.9
# (released after 2026-02-07 [assumed from the install docs, sgl-project/sglang#18409]) ships both.
TRITON_MOE_TMA_VERSION = "0.5.9"
# #10567 measured, with those kernels on the same E=257 N=256 FP8 shapes (8 x H20, DeepSeek TP8), the mean TTFT
# of 1.5K-3.5K-token prompts 8.5-9.0% lower (8.8%); the routed experts are 0.44 of such a prefill on 8 x H20
# (this model: 176 of 396 ms at 2K), so they ran 1 / (1 - 0.088 / 0.44) = 1.25 x longer without them
TRITON_MOE_PRE_TMA = 1.0 / (1.0 - 0.088 / 0.44)
TRITON_MOE_SOURCE = ("published: SGLang's Triton fused MoE without the TMA down projection and the H200 tuned "
                     "configurations (before v0.5.9) runs the routed experts' prefill GEMMs 1.25 x longer: "
                     "sgl-project/sglang#10567 (8.8% lower TTFT at 1.5K-3.5K prompts, E=257 N=256 FP8, 8 x H20) over "
                     "the experts' 0.44 of such a prefill; the H200 configurations: sgl-project/sglang#17965")


def moe_prefill_factor(arch: str, weights: str, engine_version: str | None) -> tuple[float, str] | None:
    """(factor on the class's ``prefill_eff``, source) that gives ``moe_prefill_eff``, the routed experts'
    prefill GEMMs, under SGLang release ``engine_version`` (e.g. "0.5.3"; None or "unknown": the present one):
    1 / :data:`TRITON_MOE_PRE_TMA` for FP8 weights on Hopper before :data:`TRITON_MOE_TMA_VERSION`. None: the
    class's rate holds. A version that does not parse raises ``ValueError`` naming it (:func:`release`, the
    rule the scenario's edge already checked)."""
    from packaging.version import Version
    if release(engine_version) is None or arch != "hopper" or weights != "fp8":
        return None
    old = Version(engine_version) < Version(TRITON_MOE_TMA_VERSION)
    return (1.0 / TRITON_MOE_PRE_TMA, TRITON_MOE_SOURCE) if old else None


# Under DeepEP (SGLang's --moe-a2a-backend deepep, --enable-deepep-moe in May 2025) the routed experts are not the
# Triton fused MoE above: with DeepEP's normal kernels (a prefill) SGLang permutes the tokens DeepEP delivers into
# DeepGEMM's contiguous layout and runs m_grouped_gemm_fp8_fp8_bf16_nt_contiguous for the gate-up and the down
# projection (DeepEPMoE.forward_deepgemm_contiguous, sgl-project/sglang#5626, acc816d8a, 2025-05-08, with JIT
# DeepGEMM on: SGL_ENABLE_JIT_DEEPGEMM=1 in sgl-project/sglang#6017's commands, the default on SM90 later; the
# same kernel at v0.5.3 a4a3d8239, fp8.py: DeepGEMM's grouped GEMM with DeepEP or Mooncake all-to-all). Its
# published rate (deepseek-ai/DeepGEMM README at 989c9e3, 2025-04-09, H800 SXM5, whose FP8 tensor cores are the
# H100 SXM's, 1,979 TFLOP/s dense): 4-8 groups of 4,096-8,192 rows at DeepSeek-V3's expert shapes, 1,346 TFLOP/s
# for the gate-up (N 4,096, K 7,168) and 1,214 for the down projection (N 7,168, K 2,048). The gate-up has twice
# the down's FLOPs, so an expert's pair runs at 3 / (2 / 1,346 + 1 / 1,214) = 1,299 TFLOP/s: 0.656 of the peak
# (the SMs DeepEP's normal kernels hold under two-batch overlap are the step model's gemm_share, apart).
DEEPGEMM_GROUPED = {"gate_up": 1346e12, "down": 1214e12, "peak": 1979e12}
DEEPGEMM_GROUPED_EFF = {"hopper": 3.0 / (2.0 / DEEPGEMM_GROUPED["gate_up"] + 1.0 / DEEPGEMM_GROUPED["down"])
                        / DEEPGEMM_GROUPED["peak"]}
DEEPGEMM_GROUPED_SOURCE = (
    "published kernel: DeepGEMM's grouped contiguous FP8 GEMM, which SGLang runs for the routed experts with DeepEP's "
    "normal kernels (DeepEPMoE.forward_deepgemm_contiguous, sgl-project/sglang#5626), at DeepSeek-V3's expert shapes "
    "on H800: 1,346 TFLOP/s gate-up (N 4096, K 7168), 1,214 down (N 7168, K 2048), 4-8 groups of 4,096-8,192 rows "
    "(deepseek-ai/DeepGEMM README at 989c9e3): 1,299 for the pair, of 1,979 = 0.656")


def deepep_moe_prefill_eff(arch: str, weights: str, moe_a2a: str, deepep_mode: str) -> tuple[float, str] | None:
    """(``moe_prefill_eff``, source) of the routed experts' prefill GEMMs under DeepEP's normal kernels
    (``moe_a2a`` "deepep", ``deepep_mode`` "auto" or "normal": SGLang's prefill batches run them): DeepGEMM's
    grouped contiguous GEMM at its published rate, :data:`DEEPGEMM_GROUPED_EFF`, for FP8 weights on a generation
    with a published figure (Hopper). None: no such rule (the Triton fused MoE's, :func:`moe_prefill_factor`)."""
    if moe_a2a != "deepep" or deepep_mode == "low_latency" or weights != "fp8" or arch not in DEEPGEMM_GROUPED_EFF:
        return None
    return DEEPGEMM_GROUPED_EFF[arch], DEEPGEMM_GROUPED_SOURCE


# the in-graph kernel floor per GPU generation: a factor on the testbed's (H20, Hopper) t_graph_kernel, fitted on
# the H200 runs' lowest-concurrency TPOT; Blackwell takes Hopper's
GRAPH_KERNEL_SCALE: dict[str, float] = {"hopper": 0.603}
GRAPH_KERNEL_SOURCE = ("fitted on the TPOT of the lowest-concurrency runs of shared/data/external (8 x H200, "
                       "concurrency 4); a latency, so Blackwell takes Hopper's [no published Blackwell figure]")

# sgl-project/sglang#12160: a one-token DeepSeek-V3 forward takes 82.6 ms eager (61 layers x 23 kernels) and
# 23.1 ms as a CUDA graph. Launched asynchronously, the GPU's 23.1 ms hides behind the launches, so each costs
# the CPU 82.6 ms / 1,403 (with launches added to the GPU work, as the testbed's fork runs, 48.6 us).
T_LAUNCH_OVERLAPPED = 82.6e-3 / (61 * 23)
# The path outside the engine a public benchmark harness measures at low load (HTTP request and SSE stream,
# the tokenizer manager, ZMQ hops to the scheduler and back through the detokenizer, the client itself)
PUBLIC_REQUEST_PATH = 0.060
PUBLIC_REQUEST_PATH_SOURCE = (
    "a priori: public harnesses' low-load path outside the engine, 60-80 ms (issue 32; InferenceX's B300 and B200 "
    "hosts reach a lone 1K prompt's first token in 71 and 160 ms with the same script, InferenceX-app "
    "benchmarks.json), of which SGLang's own server path (http_server.py, tokenizer_manager.py, ZMQ to the "
    "scheduler, detokenizer_manager.py at v0.5.9) is about 7 ms on one host (tenstorrent/tt-inference-server#3560: "
    "a mock 2.6 ms forward, median TTFT 9.5 ms): most of it is the harness and its host; the lower end")


@lru_cache(maxsize=1)
def _testbed_calibration() -> dict:
    from .scenarios import as_topology
    t = as_topology(TESTBED)
    return {k: (p.value, p.raw, p.source) for k, p in t.calibration.items()}


def _testbed_sms() -> int:
    return get_gpu(TESTBED_GPU).sms


def _efficiencies(gpu: GPUSpec, weights: str, fitted: bool) -> tuple[dict, str]:
    """(the kernel-efficiency table of ``gpu``'s class, its source): the published classes always, the fitted
    ones only with ``fitted``."""
    key = (gpu.arch, weights)
    if key in KERNEL_EFFICIENCY and (fitted or key not in FITTED_CLASSES):
        return KERNEL_EFFICIENCY[key], KERNEL_SOURCES[key]
    return {}, ""


def transferred(gpu: GPUSpec, weights: str, *, fitted: bool = True, fp8_gemm_backend: str = "auto",
                engine_version: str | None = None, moe_a2a: str = "none",
                deepep_mode: str = "auto") -> dict[str, tuple[float, str]]:
    """Each testbed constant's value (SI) on ``gpu`` with ``weights``, with the rule that gave it, and the
    constants a built machine adds (``launch_overlap``, ``prefill_attn_eff``, ``moe_prefill_eff``).

    ``fitted=False``: the rules and published figures alone (what the report calls "before"); True: with the
    classes fitted on other machines' runs (:data:`FITTED_CLASSES`, :data:`GRAPH_KERNEL_SCALE`).
    ``fp8_gemm_backend``: SGLang's FP8 GEMM backend (:func:`fp8_gemm_efficiency`; a published kernel figure,
    so it holds under both). ``engine_version``: SGLang's release, for the routed experts' prefill GEMMs
    (``moe_prefill_eff``, :func:`moe_prefill_factor`; where no rule applies, the class's ``prefill_eff``).
    ``moe_a2a``, ``deepep_mode``: the server's all-to-all backend and DeepEP's mode; under DeepEP's normal kernels
    the routed experts run DeepGEMM's grouped GEMM (:func:`deepep_moe_prefill_eff`), which no release rule moves."""
    cal = _testbed_calibration()
    same_class = gpu.arch == get_gpu(TESTBED_GPU).arch and weights == TESTBED_WEIGHTS
    eff, eff_source = ({}, "") if same_class else _efficiencies(gpu, weights, fitted)
    out = {}
    for name, (value, _raw, _src) in cal.items():
        kind, rule = RULES.get(name, ("other", "carried over"))
        if name == "t_graph_kernel":
            scale = GRAPH_KERNEL_SCALE.get("hopper", 1.0) if fitted else 1.0
            value *= scale
            rule = (f"the testbed's (a Hopper H20) x {scale:.3g}, " + GRAPH_KERNEL_SOURCE) if fitted else \
                "carried over (a latency: the testbed's H20 is a Hopper part; not scaled by SMs)"
        elif name == "t_launch":
            value, rule = T_LAUNCH_OVERLAPPED, "sgl-project/sglang#12160: 82.6 ms / (61 x 23) kernels, launched " \
                                               "while the GPU runs (launch_overlap 1)"
        elif name == "launch_overlap":
            value, rule = 1.0, RULES[name][1]
        elif name == "t_request":
            value, rule = PUBLIC_REQUEST_PATH, PUBLIC_REQUEST_PATH_SOURCE
        elif name in eff:
            value, rule = eff[name], eff_source
        elif kind == "kernel efficiency" and not same_class:
            rule = f"carried over from the testbed ({TESTBED_GPU}, {TESTBED_WEIGHTS}) [no measured {gpu.arch} " \
                   f"{weights} machine]"
        out[name] = (value, rule)
    gemm = fp8_gemm_efficiency(gpu, weights, fp8_gemm_backend)
    if gemm:
        out["prefill_eff"] = gemm
    if not same_class:
        # a built machine carries the routed experts' rate as a constant of its own (calibrate fits it apart)
        moe = moe_prefill_factor(gpu.arch, weights, engine_version)
        value, rule = out["prefill_eff"]
        out["moe_prefill_eff"] = (deepep_moe_prefill_eff(gpu.arch, weights, moe_a2a, deepep_mode)
                                  or ((value * moe[0], f"{moe[1]}; x {value:.4g}, {rule}") if moe else
                                      (value, f"the class's prefill_eff ({rule})")))
    out.setdefault("launch_overlap", (1.0, RULES["launch_overlap"][1]))
    if not same_class and gpu.arch in PREFILL_ATTN_EFF:
        out["prefill_attn_eff"] = PREFILL_ATTN_EFF[gpu.arch]
    return out


def calibration_for(gpu: GPUSpec, model, *, weights: str, dp: int, fitted: bool = True,
                    fp8_gemm_backend: str = "auto", engine_version: str | None = None, page: int = 1,
                    moe_a2a: str = "none", deepep_mode: str = "auto") -> dict:
    """The ``calibration:`` section of a built scenario: every testbed constant transferred, with its source; a
    GQA model's paged decode attention (``gqa_decode_eff``) from :func:`paged_decode_eff` for the server's page
    size ``page`` (tokens)."""
    del dp                   # the rules do not depend on it (kernel counts and collectives are structural)
    cal = _testbed_calibration()
    out = {}
    for name, (value, rule) in transferred(gpu, weights, fitted=fitted, fp8_gemm_backend=fp8_gemm_backend,
                                           engine_version=engine_version, moe_a2a=moe_a2a,
                                           deepep_mode=deepep_mode).items():
        raw_unit = cal[name][1].split()[1:] if name in cal and cal[name][1] else []
        out[name] = {"value": _format(value, " ".join(raw_unit)),
                     "source": f"sac-testbed, transferred to {gpu.name.upper()} ({rule})"}
    paged = paged_decode_eff(gpu.arch, page) if getattr(model, "kind", "mla") != "mla" else None
    if paged:
        out["gqa_decode_eff"] = {"value": _format(paged[0], ""),
                                 "source": f"published kernel, {gpu.arch} with pages of {page} tokens ({paged[1]})"}
    return out


_SCALE = {"": 1.0, "us": 1e-6, "ms": 1e-3, "ns": 1e-9, "s": 1.0, "GB/s": 1e9, "steps": 1.0}


def _format(value: float, unit: str) -> str:
    scale = _SCALE.get(unit)
    if scale is None:
        return repr(float(value))
    return f"{value / scale:.6g} {unit}".strip()
