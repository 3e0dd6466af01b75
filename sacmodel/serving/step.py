"""Step model: how long one scheduler iteration of the data-parallel ranks takes, as sympy expressions.

SGLang runs the ranks of a server in lockstep: every iteration each rank prepares its batch on the CPU, then
all ranks run one forward together (their attention apart, the MLPs over all their tokens at once, joined by
collectives over NVLink). An iteration on a GPU therefore lasts

    T = layers x (n_kernels x t_graph_kernel + n_coll x t_collective)   the fixed floor of a CUDA-graph step
      + collective bytes / NVLink + MLPs and LM head (all tokens)       what every rank shares
      + max over ranks of the rank's own part                           attention, HiSparse, prefill chunks
      + max over ranks of the rank's RDMA prefix fetches                rdma only (blocks the rank's scheduler)

and an iteration without a CUDA graph (a prefill, or a decode batch above the captured sizes) launches its kernels
from Python one by one: each small kernel then costs the CPU's launch time ``t_launch`` instead of its in-graph
time (``eager``: layers x n_kernels x (t_launch - t_graph_kernel) more). Every kernel's cost is
the GPU's numbers (FLOP/s of the weights' precision, HBM bandwidth, NVLink) over an efficiency of its class.

Parallelism: attention runs over groups of ``attn_tp`` = tp / dp GPUs (heads split; MLA's one latent read whole by
every GPU of the group, GQA's KV heads split); the MLPs over all ``tp`` GPUs (expert parallelism moves whole
experts: the same bytes per GPU, plus the busiest group's excess).

A rank's own part is one of (every term is named in :func:`rank_terms` and :func:`prefill_terms`):

- decode of ``b`` requests: projections, the lightning indexer over their ``L`` keys (in HBM), attention over
  ``k`` entries (the top-k for DSA, all ``L`` for dense attention; its KV read at ``decode_attn_eff``: FlashMLA's
  ``hbm_eff`` for MLA, the paged kernel's ``gqa_decode_eff`` for GQA), and for HiSparse pools (dram, cxl, rdma after
  its copy) the machinery it adds: the CPU preparation of the step, which HiSparse serialises with the GPU
  (``t_hs`` per step), per-request work (``t_hs_req``), and per layer one swap-in kernel copying the step's
  misses from the pool (:func:`sacmodel.serving.costs.swap_in_time`, over the topology route shared by the ranks;
  the engine splits a shared route by the ranks' demands, :func:`sacmodel.serving.costs.fair_share_finish`);
- a chunk of ``P`` prompt tokens after ``H`` already in the KV (a prefix hit's uncached tail, or a chunk of a
  cold prompt): projections, the causal indexer, attention on SGLang's path for the chunk (dense multi-head or
  absorbed; sparse or dense).

Cold staging (HiSparse pools): a request staged without a host-pool entry for its prefix (a prompt prefilled
from scratch, or a prefix hit whose entry is not found) backs its whole prompt up to the pool; the copy kernel
holds the rank's GPU, so the iteration that runs while it copies lasts that much longer (the ranks' backups
share the GPU-to-pool route).

Prefix fetch of the RDMA pool (per request of ``N`` prompt tokens, on the rank's scheduler thread): a CPU
gather, the RDMA READs into the staging buffer over the rank's NIC, a CPU transpose and a CPU scatter into
the host pool (``stage_passes`` single-threaded copies at ``stage_copy_bw``) plus the bytes over the NIC share.
"""
from __future__ import annotations

import builtins
import hashlib
import inspect
import math

from functools import lru_cache
from pathlib import Path

from ..util.files import write_text
from ..util.lazy import lazy_module
from .costs import swap_in_time, sym

sp = lazy_module("sympy")     # only to build the expressions: predictions run the generated code

RANK_TERMS = ("attn_proj", "indexer", "attention", "hisparse", "swap", "rdma_topk")
SHARED_TERMS = ("fixed", "comm", "dense_mlp", "moe", "lm_head", "a2a_imbalance", "tbo_overlap")
PREFILL_TERMS = ("hisparse_admit", "prefill_proj", "prefill_indexer", "prefill_attention", "prefill_decompress")
FETCH_TERMS = ("stage_copy", "nic")


def _roof(flops, hbm_bytes, peak, eff, heff=None):
    heff = sym("hbm_eff", "dimensionless", "achieved fraction of HBM bandwidth") if heff is None else heff
    return sp.Max(flops / (peak * eff), hbm_bytes / (sym("hbm_bw", "byte/second", "GPU HBM bandwidth") * heff))


def _common():
    return dict(
        layers=sym("layers", "dimensionless", "transformer layers"),
        wb=sym("w_bytes", "byte", "bytes per weight parameter of the linear layers (with their scales)"),
        tp=sym("tp", "dimensionless", "GPUs of the server: the MoE and dense MLPs are split over all of them"),
        atp=sym("attn_tp", "dimensionless", "GPUs of one attention group (tp / dp): heads split over them"),
        p16=sym("peak_bf16", "FLOP/second", "GPU peak BF16 FLOP/s"),
        p8=sym("peak_fp8", "FLOP/second", "GPU peak FP8 FLOP/s"),
        pw=sym("peak_w", "FLOP/second", "GPU peak FLOP/s of GEMMs with these weights (FP8: FP8; BF16, AWQ: BF16)"),
        eff=sym("compute_eff", "dimensionless", "achieved fraction of peak FLOP/s in decode"),
        peff=sym("prefill_eff", "dimensionless", "achieved fraction of peak FLOP/s in prefill and extend"),
        fu=sym("flop_unit", "FLOP", "one FLOP"),
        P_rep=sym("p_attn_rep", "dimensionless", "attention params per layer every GPU of a group holds whole"),
        P_split=sym("p_attn_split", "dimensionless", "attention params per layer split over the attention group"),
        f_ix=sym("f_index", "FLOP", "indexer FLOPs per key per layer"),
        f_at=sym("f_attn", "FLOP", "attention FLOPs per entry per layer on one GPU (its heads)"),
        ikb=sym("index_key_bytes", "byte", "indexer key bytes per token per layer"),
        eb=sym("entry_bytes", "byte", "main KV entry bytes per token per layer (what a pool stores)"),
        rb=sym("kv_read_bytes", "byte", "KV bytes one GPU reads per entry per layer (MLA: the whole latent; "
                                        "GQA: its KV heads)"),
        k=sym("k_attn", "dimensionless", "entries the attention reads per layer: min(topk, L), or L if dense"),
    )


def _attn_weights(c):
    """Attention weights one GPU reads per layer (params)."""
    return c["P_rep"] + c["P_split"] / c["atp"]


@lru_cache(maxsize=1)
def rank_terms() -> dict[str, sp.Expr]:
    """Seconds of a rank's decode part with ``b`` requests of mean context ``L`` and ``M`` misses per layer."""
    c = _common()
    b = sym("b", "dimensionless", "decoding requests on the rank")
    L = sym("L", "dimensionless", "mean context of the rank's requests (tokens)")
    M = sym("M", "dimensionless", "entries the rank's requests miss per layer (sum over requests)")
    M_max = sym("M_max", "dimensionless", "entries the rank's request with the most misses misses per layer")
    hs = sym("hs_on", "dimensionless", "1 for HiSparse pools (dram, cxl, rdma), else 0")
    swap_on = sym("swap_on", "dimensionless", "1 if the context does not fit the device buffer, else 0")
    sw = swap_in_time("sw_").subs({sym("sw_ctas", "dimensionless"): b, sym("sw_bytes", "byte"): M * c["eb"],
                                   sym("sw_max_bytes", "byte"): M_max * c["eb"]})
    on = sym("rdma_topk_on", "dimensionless", "1 for rdma-topk, else 0")
    ops = sym("rdma_ops_per_miss", "dimensionless", "RDMA READs per missed entry (rdma-topk)")
    nbytes = sym("rdma_bytes_per_miss", "byte", "bytes RDMA-read per missed entry (rdma-topk)")
    share = sym("rdma_share", "dimensionless", "share of the NICs one rank gets")
    rdma = on * M * (ops * sym("rdma_op_cost", "second", "NIC per-operation cost")
                     + nbytes / sym("pf_rate", "byte/second", "NIC rate of the rank's NICs")) / share
    w = _attn_weights(c)
    return {
        "attn_proj": _roof(c["fu"] * 2 * b * c["layers"] * w, c["wb"] * c["layers"] * w, c["pw"], c["eff"]),
        "indexer": b * c["layers"] * sp.Max(c["f_ix"] * L / (c["p8"] * c["eff"]),
                                             c["ikb"] * L / (sym("hbm_bw", "byte/second") * sym("hbm_eff"))),
        "attention": b * c["layers"] * _roof(c["f_at"] * c["k"], c["rb"] * c["k"], c["p16"], c["eff"], sym(
            "decode_attn_eff", "dimensionless", "achieved fraction of HBM bandwidth of the decode attention's KV read "
            "(MLA: FlashMLA's hbm_eff; GQA: the paged kernel's gqa_decode_eff)")),
        "hisparse": hs * (sym("t_hs", "second", "HiSparse CPU preparation per step, serialised with the GPU")
                          + b * sym("t_hs_req", "second", "HiSparse work per request per step")),
        "swap": swap_on * c["layers"] * sw,
        "rdma_topk": c["layers"] * rdma,
    }


def _busiest_experts(Nd):
    """Routed experts the busiest expert-parallel group touches for ``Nd`` distinct tokens, times ``ep``.

    Each token picks ``e`` of ``R`` experts; a group of R/ep experts sees on average mu = (R/ep) p of them,
    p = 1 - (1 - e/R)^Nd, and the busiest of ``ep`` groups about mu + sigma sqrt(2 ln ep) (binomial spread;
    at most all R/ep). With ep = 1 it is R p, the expected distinct experts."""
    R, e = sym("n_experts", "dimensionless", "routed experts"), sym("e_active", "dimensionless", "experts per token")
    ep = sym("ep", "dimensionless", "expert-parallel groups (whole experts per group)")
    imb = sym("ep_imbalance", "dimensionless", "sqrt(2 ln ep): the busiest group's spread in standard deviations")
    p = 1 - (1 - e / R) ** Nd
    mu = R / ep * p
    return ep * sp.Min(R / ep, mu + imb * sp.sqrt(mu * (1 - p)))


@lru_cache(maxsize=1)
def shared_terms() -> dict[str, sp.Expr]:
    """Seconds of the parts all ranks share in an iteration over ``N`` tokens (decode + extend + prefill).

    The fixed GPU floor of a CUDA-graph iteration (``n_kernels`` kernels per layer, ``n_coll`` collectives),
    the collectives' bytes over NVLink, and the MLPs split over all ``tp`` GPUs: dense layers and shared experts
    read whole; routed experts read once per distinct expert the ``N_d`` distinct tokens route to (requests that
    share a prompt and position produce the same token); the LM head over the iteration's ``S`` sequences.
    """
    c = _common()
    N = sym("N", "dimensionless", "tokens of the iteration over all ranks")
    Nd = sym("N_d", "dimensionless", "distinct tokens among them (requests of one prompt at one position "
                                      "produce the same token and route to the same experts)")
    S = sym("S", "dimensionless", "sequences whose next token the iteration computes (LM head rows)")
    e = sym("e_active", "dimensionless", "experts per token")
    n_sh = sym("n_shared", "dimensionless", "shared experts")
    P_exp = sym("p_expert", "dimensionless", "params per expert")
    P_mlp = sym("p_dense_mlp", "dimensionless", "dense MLP params per layer")
    l_moe, l_dense = sym("moe_layers", "dimensionless", "MoE layers"), sym("dense_layers", "dimensionless", "dense-MLP layers")
    meff = sym("mlp_eff", "dimensionless", "compute efficiency of this iteration")
    # the MoE layers' GEMMs under two-batch overlap run on the SMs DeepEP's normal kernels leave (1 otherwise);
    # the dense layers run before the overlap, the LM head after it, on all SMs
    gs = sym("gemm_share", "dimensionless", "share of the SMs the MoE layers' GEMMs run on (sizing.tbo_gemm_share)")
    dense = l_dense * P_mlp + l_moe * n_sh * P_exp
    # the weights each GPU reads: split over tp, or whole where SGLang runs them data-parallel
    dense_w = (l_dense * P_mlp / sym("dense_split", "dimensionless", "GPUs the dense layers' MLP weights are split "
                                     "over: tp, 1 with --moe-dense-tp-size 1")
               + l_moe * n_sh * P_exp / sym("shared_split", "dimensionless", "GPUs the shared experts' weights are "
                                            "split over: tp, 1 under DeepEP"))
    vh = sym("p_head", "dimensionless", "LM head params (vocab x hidden)")
    floor_coll = (sym("n_coll", "dimensionless", "collectives per layer (all-reduce, all-gather, reduce-scatter)")
                  * sym("t_collective", "second", "latency of one small NVLink collective"))
    floor = (sym("n_kernels", "dimensionless", "GPU kernels per layer in a decode iteration")
             * sym("t_graph_kernel", "second", "GPU time of one small kernel in a CUDA-graph decode iteration")
             + floor_coll)
    tbo = sym("tbo", "dimensionless", "1 with two-batch overlap (SGLang --enable-two-batch-overlap), else 0")
    # two micro-batches each read the experts their half of the tokens route to
    experts = (1 - tbo) * _busiest_experts(Nd) + tbo * 2 * _busiest_experts(Nd / 2)
    terms = {
        "fixed": c["layers"] * floor * (1 + tbo),
        "comm": c["layers"] * N * sym("coll_bytes", "byte", "collective bytes per token per layer per GPU")
        / sym("link_bw", "byte/second", "NVLink bandwidth per GPU per direction"),
        "dense_mlp": _roof(c["fu"] * 2 * N * (l_dense * P_mlp + l_moe * n_sh * P_exp / gs) / c["tp"], c["wb"] * dense_w,
                           c["pw"], meff),
        # the busiest GPU computes ep_skew x the mean of the routed tokens (all of them under TP: skew 1)
        # the routed experts' grouped GEMMs are a kernel of their own (SGLang's Triton fused MoE under TP), with
        # their own compute efficiency in prefill (moe_prefill_eff; decode: compute_eff, as the other GEMMs)
        "moe": _roof(c["fu"] * 2 * N * l_moe * e * P_exp * _skew() / (c["tp"] * gs), c["wb"] * l_moe * P_exp * experts
                     / c["tp"], c["pw"], sym("moe_mlp_eff", "dimensionless", "compute efficiency of the routed "
                                                                             "experts' GEMMs in this iteration"),
                     sym("moe_eff", "dimensionless", "achieved fraction of HBM bandwidth of the grouped MoE GEMM")),
        "lm_head": _roof(c["fu"] * 2 * S * vh / c["tp"], sym("head_bytes", "byte", "bytes per LM head param")
                         * vh / c["tp"], c["p16"], meff),
    }
    terms["a2a_imbalance"] = terms["comm"] * a2a_excess(N, e)
    # two-batch overlap hides DeepEP's calls (not the dense layers' collectives: those layers run before the
    # overlapped ones) behind the shared experts, and in prefill the routed experts too (tbo_routed); the ranks'
    # attention hides what is left (Model.joined). Only the MoE layers overlap (SGLang: "dense layer TBO not yet
    # implemented"), so what cannot overlap is one MoE layer's part of a micro-batch
    # each micro-batch's calls are in flight for their latency too (the floor counts it twice under TBO)
    a2a = (terms["comm"] * sym("a2a_share", "dimensionless") + terms["a2a_imbalance"]
           + 2 * c["layers"] * floor_coll * sym("a2a_lat_share", "dimensionless", "share of the collectives' "
                                                "latency (n_coll x t_collective) that is DeepEP's dispatch and combine"))
    shared_experts = _roof(c["fu"] * 2 * N * l_moe * n_sh * P_exp / (c["tp"] * gs),
                           c["wb"] * l_moe * n_sh * P_exp / sym("shared_split", "dimensionless"), c["pw"], meff)
    terms["tbo_overlap"] = -tbo * tbo_hidden(shared_experts + tbo_routed() * terms["moe"], a2a, l_moe)
    return terms


def tbo_routed():
    """1 where one micro-batch's routed experts run while the other's dispatch or combine is in flight (SGLang's
    prefill strategy), 0 where they do not (its decode strategy): :func:`tbo_hidden`."""
    return sym("tbo_routed", "dimensionless", "1 when two-batch overlap hides DeepEP's calls behind the other "
                                              "micro-batch's routed experts (prefill), 0 in decode")


def _skew():
    return sym("ep_skew", "dimensionless", "the busiest GPU's routed-expert tokens over the mean, beyond uniform "
                                           "routing (1: uniform; sacmodel.hardware.sizing.ep_load_skew)")


def a2a_excess(N, e):
    """The busiest GPU's excess over the mean of what DeepEP's dispatch and combine deliver, as a share of the
    all-to-all's time: each of the ``N`` tokens' ``e`` copies lands on one of ``ep`` GPUs (uniform routing, what
    a perfect balancer gives), so a GPU receives mu = N e / ep copies on average and the busiest about
    mu + sqrt(2 ln ep) sqrt(mu); real routing's skew (``ep_skew``, the busiest GPU's load over the mean) scales
    that; the call ends when the busiest has received (and sent back) its copies."""
    ep = sym("ep", "dimensionless")
    imb = sym("ep_imbalance", "dimensionless")
    share = sym("a2a_share", "dimensionless", "share of the collectives' seconds that is DeepEP's all-to-all")
    # at least one copy (e = 0: a dense model)
    return share * (_skew() * (1 + imb / sp.sqrt(sp.Max(N * e / ep, 1))) - 1)


def tbo_hidden(compute, comm, layers):
    """Seconds of communication (or computation) that two-batch overlap hides.

    SGLang's TBO (python/sglang/srt/two_batch_overlap.py and operations_strategy.py, added in 0d477880,
    "Support overlapping two batches", #4068; the LMSYS deployment of 2025-05-05 ran its branch) splits the
    batch in two micro-batches and runs the MoE layers' operations of both as interleaved stages on one
    compute stream, while DeepEP's dispatch and combine of one micro-batch are in flight (low-latency mode:
    RDMA in the background, received by a hook; normal mode: on DeepEP's own SMs). A call is hidden behind
    what the GPU computes between its send and its receive:

    - decode (``tbo_delta_stages=2``, five stages a layer): A's dispatch behind A's shared experts and B's
      attention projections; A's combine behind B's attention core and gate; B's likewise behind A's next
      layer. The routed experts of one micro-batch run while nothing of the other is in flight.
    - prefill (``tbo_delta_stages=0``, three stages a layer): A's dispatch behind B's attention; B's dispatch
      behind A's routed experts; the combines behind B's routed experts and both shared experts.

    The dense layers (first_k_dense_replace) run before the overlapped layers and the LM head after them, so
    neither hides anything. Summed over a step, the hidden part is the smaller of the communication and the
    computation it can hide behind, less what cannot overlap: the first micro-batch's first block and the last
    one's last, one layer's part of a micro-batch, min(compute, comm) / (2 ``layers``, the overlapped ones). (Per call the window can
    be shorter than the call while another window is longer; the sum is exact when every call outlasts its
    window, the communication-bound case, or none does.)"""
    return sp.Min(compute, comm) * (1 - 1 / (2 * sp.Max(layers, 1)))


def tbo_factor(layers: float) -> float:
    """The share of min(compute, comm) two-batch overlap hides over ``layers`` overlapped layers (at least one;
    :func:`tbo_hidden`)."""
    return 1.0 - 1.0 / (2.0 * max(layers, 1.0))


@lru_cache(maxsize=1)
def prefill_terms() -> dict[str, sp.Expr]:
    """Seconds of a rank prefilling ``P`` prompt tokens after ``H`` already in its KV (one chunk).

    Attention takes one of SGLang's paths (``mha_on`` chosen per chunk by :mod:`sacmodel.serving.engine.stepmodel`):
    dense multi-head attention over decompressed keys (MLA with no prefix or a long one, DSA below 2048 tokens;
    a prefix is first decompressed through kv_b), or the absorbed form over the latent (sparse over the
    top-k for DSA, dense otherwise). The indexer scores every earlier key unless the short dense path runs.
    The sparse kernel (FlashMLA's, SGLang's ``nsa_prefill_backend``) runs at its own published efficiency,
    ``sparse_prefill_eff``; the dense attention paths at the dense prefill kernels' own, ``prefill_attn_eff``;
    the GEMMs and the indexer at ``prefill_eff``.
    """
    c = _common()
    P = sym("P", "dimensionless", "prompt tokens prefilled in this chunk")
    H = sym("H", "dimensionless", "prompt tokens already in the KV before the chunk")
    mha = sym("mha_on", "dimensionless", "1 when the chunk runs dense multi-head attention, else 0")
    dense_on = sym("dense_on", "dimensionless", "1 for dense attention (every earlier key), 0 for sparse top-k")
    idx_on = sym("index_on", "dimensionless", "1 when the indexer scores the chunk's keys, else 0")
    k = c["k"]
    pairs = P * H + P * (P + 1) / 2

    def entries_upto(x):   # sum over positions i = 1..x of min(k, i)
        return sp.Piecewise((x * (x + 1) / 2, x <= k), (k * (k + 1) / 2 + (x - k) * k, True))
    absorbed = dense_on * pairs + (1 - dense_on) * (entries_upto(H + P) - entries_upto(H))
    w = _attn_weights(c)
    f_mha = sym("f_mha", "FLOP", "dense multi-head attention FLOPs per (query, key) pair per layer on one GPU")
    p_kvb = sym("p_kvb", "dimensionless", "kv_b params per layer on one GPU (decompresses an MLA prefix)")
    admit = sym("admit_on", "dimensionless", "1 for the chunk that admits a request into HiSparse, else 0")
    # under two-batch overlap the MoE layers' attention projections (DeepGEMM's FP8 GEMMs) run on the SMs DeepEP's
    # normal kernels leave, as their experts do: SGLang sets DeepGEMM's SM count for the whole overlapped region
    # (two_batch_overlap.py _model_forward_tbo: configure_deep_gemm_num_sms); the dense layers run before it
    share = sym("proj_gemm_share", "dimensionless", "share of the SMs the MoE layers' attention projections run on "
                                                    "in a prefill (sizing.tbo_gemm_share under two-batch overlap, else 1)")
    slow = 1 + sym("moe_layers", "dimensionless") / c["layers"] * (1 / share - 1)
    return {
        "hisparse_admit": admit * sym("hs_on", "dimensionless") * sym(
            "t_hs_admit", "second", "HiSparse's CPU work to admit a request (per-layer tail copies, GPU syncs)"),
        "prefill_proj": _roof(c["fu"] * 2 * P * c["layers"] * w * slow, c["wb"] * c["layers"] * w, c["pw"], c["peff"]),
        "prefill_indexer": idx_on * c["layers"] * c["f_ix"] * pairs / (c["p8"] * c["peff"]),
        "prefill_attention": c["layers"] * (mha * f_mha * pairs + (1 - mha) * dense_on * c["f_at"] * absorbed)
        / (c["p16"] * sym("prefill_attn_eff", "dimensionless", "achieved fraction of peak BF16 FLOP/s of the dense "
                          "prefill attention kernels (FlashAttention-3 on Hopper, FlashMLA's SM100 MHA on Blackwell)"))
        + c["layers"] * (1 - mha) * (1 - dense_on) * c["f_at"] * absorbed
        / (c["p16"] * sym("sparse_prefill_eff", "dimensionless",
                          "achieved fraction of peak BF16 FLOP/s of the sparse MLA prefill kernel (FlashMLA)")),
        "prefill_decompress": mha * c["layers"] * c["fu"] * 2 * H * p_kvb / (c["pw"] * c["peff"]),
    }


@lru_cache(maxsize=1)
def eager_terms() -> dict[str, sp.Expr]:
    """Seconds an iteration without a CUDA graph (a prefill, or a decode batch above the captured sizes) adds:
    each kernel is launched from Python one by one, so its floor is the CPU's launch time instead of its
    in-graph time (the GEMMs and attention take longer than either and are counted by the other terms)."""
    c = _common()
    tg = sym("t_graph_kernel", "second")
    return {"launch": c["layers"] * sym("n_kernels", "dimensionless")
            * (sp.Max(tg, sym("t_launch", "second", "CPU time to launch one kernel of an eager forward (Python and "
                                                     "driver)")) - tg)}


def eager_iteration(gpu):
    """Seconds of an iteration without a CUDA graph whose GPU work (its in-graph floor included) is ``gpu``: the
    CPU launches the ``layers x n_kernels`` kernels at ``t_launch`` each while the GPU runs those launched before,
    max(gpu + t_launch, n t_launch + t_graph_kernel); ``launch_overlap`` (0-1) blends it with the launches added,
    gpu + :func:`eager_terms` (the form of :meth:`sacmodel.serving.engine.stepmodel.Model.overlapped`)."""
    c = _common()
    tl, tg = sym("t_launch", "second"), sym("t_graph_kernel", "second")
    f = sym("launch_overlap", "dimensionless", "1: eager launches overlap the GPU's work; 0: added to it")
    n = c["layers"] * sym("n_kernels", "dimensionless")
    both = sp.Max(gpu + tl, n * tl + tg)
    return f * both + (1 - f) * (gpu + sum(eager_terms().values()))


@lru_cache(maxsize=1)
def fetch_terms() -> dict[str, sp.Expr]:
    """Seconds to bring a request's prompt of ``N_f`` tokens from the RDMA pool into the host pool."""
    c = _common()
    N = sym("N_f", "dimensionless", "prompt tokens of the fetched request")
    nbytes = N * c["layers"] * c["eb"]
    return {
        "stage_copy": nbytes * sym("stage_passes", "dimensionless", "single-threaded CPU copies of the fetched KV")
        / sym("stage_copy_bw", "byte/second", "single-thread CPU copy bandwidth of the scheduler"),
        "nic": nbytes / sym("nic_bw", "byte/second", "NIC bandwidth share of the fetching rank"),
    }


@lru_cache(maxsize=1)
def staging_terms() -> dict[str, sp.Expr]:
    """Seconds of a cold staging backup: a request staged without a host-pool entry for its prefix backs its
    whole prompt (``N_b`` tokens) up from the GPU to the pool with a GPU copy kernel, at the rank's share of
    the GPU-to-pool route."""
    c = _common()
    N = sym("N_b", "dimensionless", "prompt tokens of the cold-staged request")
    return {"cold_backup": N * c["layers"] * c["eb"]
            / sym("bk_bw", "byte/second", "GPU-to-pool write bandwidth share of the rank")}


@lru_cache(maxsize=1)
def front_end_terms() -> dict[str, sp.Expr]:
    """Seconds a request spends outside the engine: serialised tokenisation and the rest of the path."""
    L = sym("L", "dimensionless")
    return {"tokenize": L * sym("t_token", "second", "front-end time per prompt token (tokeniser, serialised)"),
            "request": sym("t_request", "second", "request latency outside the engine, not serialised")}


# ---- compiled forms -------------------------------------------------------------------------------
BUILDERS = {"rank": rank_terms, "shared": shared_terms, "prefill": prefill_terms, "eager": eager_terms,
            "fetch": fetch_terms, "staging": staging_terms, "front": front_end_terms}
GENERATED = Path(__file__).with_name("step_generated.py")
_SOURCES = ("costs.py", "step.py")            # the modules whose code builds the expressions


class Compiled:
    """A group of expressions as numeric functions (scalar calls) with their argument order ``names``.

    ``funcs[term](*args)`` and ``total(*args)`` take the values of ``names`` in order (:meth:`args`);
    ``uses[term]``: the names its expression contains (a term does not change with the others).
    """

    def __init__(self, group: str, names: tuple[str, ...], funcs: dict, total, uses: dict):
        self.group, self.names, self.funcs, self.total, self.uses = group, names, funcs, total, uses

    @classmethod
    def lambdified(cls, group: str) -> "Compiled":
        exprs = BUILDERS[group]()
        names = _arg_names(exprs)
        syms = [sp.Symbol(n, positive=True) for n in names]
        uses = {k: frozenset(x.name for x in e.free_symbols) for k, e in exprs.items()}
        return cls(group, names, {k: sp.lambdify(syms, e, modules="math") for k, e in exprs.items()},
                   sp.lambdify(syms, sum(exprs.values()), modules="math"), uses)

    @property
    def exprs(self) -> dict:
        """The sympy expressions (built on demand)."""
        return BUILDERS[self.group]()

    def args(self, values: dict) -> list:
        return [values[n] for n in self.names]


def _arg_names(exprs: dict) -> tuple[str, ...]:
    return tuple(s.name for s in sorted(sum(exprs.values()).free_symbols, key=lambda s: s.name))


def source_hash() -> str:
    """SHA-256 of the modules that build the expressions: the generated code is current iff it matches."""
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update(Path(__file__).with_name(name).read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def _generated():
    """The generated module if it was made from the present expressions, else None (then sympy builds them)."""
    try:
        from . import step_generated as g
    except ImportError:
        return None
    return g if getattr(g, "SOURCE_HASH", None) == source_hash() else None


@lru_cache(maxsize=None)
def compiled(group: str) -> Compiled:
    g = _generated()
    if g is None:
        return Compiled.lambdified(group)
    names, terms, uses = g.GROUPS[group]
    return Compiled(group, names, {k: getattr(g, f"{group}__{k}") for k in terms}, getattr(g, f"{group}__total"),
                    {k: frozenset(u) for k, u in zip(terms, uses)})


def generate(path: str | Path = GENERATED) -> Path:
    """Write the lambdified step expressions as a Python module (``python -m sacmodel.serving.step``).

    Predictions import that module instead of building and lambdifying the expressions with sympy (about 1.5 s
    of start-up). It records :func:`source_hash`; when costs.py or step.py change it is ignored until
    regenerated (a test fails meanwhile).
    """
    lines = ['"""Generated by ``python -m sacmodel.serving.step`` from the expressions of sacmodel/serving/step.py. Do not edit."""',
             "# flake8: noqa", "", "{imports}", f"SOURCE_HASH = {source_hash()!r}", "", "GROUPS = {"]
    defs, used = [], set()
    for group in BUILDERS:
        c = Compiled.lambdified(group)
        uses = tuple(tuple(sorted(c.uses[k])) for k in c.funcs)
        lines.append(f"    {group!r}: ({c.names!r}, {tuple(c.funcs)!r}, {uses!r}),")
        for term, f in [*c.funcs.items(), ("total", c.total)]:
            unknown = {n for n in f.__code__.co_names if not hasattr(builtins, n) and not hasattr(math, n)}
            if unknown:
                raise RuntimeError(f"generated code of {group}.{term} needs names outside math: {unknown}")
            used |= {n for n in f.__code__.co_names if hasattr(math, n) and not hasattr(builtins, n)}
            src = inspect.getsource(f).replace("def _lambdifygenerated(", f"def {group}__{term}(", 1)
            defs += ["", "", src.rstrip()]
    lines.append("}")
    imports = f"from math import {', '.join(sorted(used))}\n" if used else ""
    text = "\n".join(lines).replace("{imports}\n", imports) + "\n" + "\n".join(defs) + "\n"
    path = Path(path)
    compile(text, str(path), "exec")           # check it before anything is written
    write_text(path, text)
    return path


def evaluate(group: str, values: dict) -> dict[str, float]:
    """Seconds of each term of ``group`` for the given symbol values (missing symbols raise KeyError)."""
    c = compiled(group)
    missing = [n for n in c.names if n not in values]
    if missing:
        raise KeyError(f"missing value(s) for symbol(s): {', '.join(missing)}")
    a = c.args(values)
    return {k: float(fn(*a)) for k, fn in c.funcs.items()}


if __name__ == "__main__":
    print(f"wrote {generate()}")
