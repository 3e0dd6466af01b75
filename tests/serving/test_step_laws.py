"""The step model's terms (:mod:`sacmodel.serving.step`) on round numbers worked by hand, and the engine's reduced
forms (:mod:`sacmodel.serving.engine.stepmodel`) against the expressions they reduce.

The single-request tests of test_serving.py compare the engine with closed forms built from the same expressions,
so a wrong expression moves both; here each term is computed by hand from its definition (a roofline of FLOPs over
peak x efficiency against bytes over HBM bandwidth x efficiency, 2 FLOPs per weight per token), and causal pair
counts are counted position by position."""
import math

import numpy as np
import pytest

from sacmodel.hardware.build import scenario
from sacmodel.serving import step
from sacmodel.serving.config import resolve
from sacmodel.serving.engine import Model
from sacmodel.serving.engine.misses import cumulative_misses
from sacmodel.serving.engine.stepmodel import MLA_CHUNKED_PREFIX

# round numbers (SI); the attention group holds w = p_attn_rep + p_attn_split / attn_tp = 1e6 + 4e6 / 2 = 3e6
# params per layer; peak x efficiency: FP8/weights 2e15 x 0.5 = 1e15, BF16 1e15 x 0.5 = 5e14; HBM 4e12 x 0.5
V = dict(layers=10.0, w_bytes=1.0, tp=4.0, attn_tp=2.0, peak_bf16=1e15, peak_fp8=2e15, peak_w=2e15, compute_eff=0.5,
         prefill_eff=0.25, flop_unit=1.0, p_attn_rep=1e6, p_attn_split=4e6, f_index=1000.0, f_attn=2000.0,
         index_key_bytes=100.0, entry_bytes=600.0, kv_read_bytes=500.0, k_attn=2048.0, hbm_bw=4e12, hbm_eff=0.5,
         decode_attn_eff=0.5,
         b=8.0, L=1000.0, M=100.0, M_max=50.0, hs_on=1.0, swap_on=1.0, sw_bw=1e10, sw_lat=1e-6, swap_inflight=8192.0,
         t_kernel=1e-5, t_hs=1e-3, t_hs_req=1e-4, rdma_topk_on=1.0, rdma_ops_per_miss=1.0, rdma_bytes_per_miss=600.0,
         rdma_op_cost=1e-6, pf_rate=1e10, rdma_share=0.5,
         N=64.0, N_d=64.0, S=64.0, coll_bytes=1e4, link_bw=4e11, dense_layers=2.0, moe_layers=8.0, p_dense_mlp=1e8,
         n_shared=1.0, p_expert=4e7, e_active=8.0, n_experts=256.0, ep=1.0, ep_imbalance=0.0, moe_eff=0.8,
         mlp_eff=0.5, moe_mlp_eff=0.5, p_head=1e9, head_bytes=2.0, n_kernels=20.0, t_graph_kernel=2e-6, n_coll=3.0, t_collective=1e-5,
         P=5.0, H=3.0, mha_on=0.0, dense_on=0.0, index_on=1.0, admit_on=1.0, t_hs_admit=2e-3, f_mha=3000.0,
         p_kvb=1e7, t_launch=5e-6, N_f=1000.0, nic_bw=1e10, stage_copy_bw=5e9, stage_passes=3.0, N_b=2000.0,
         bk_bw=2e10, t_token=1e-6, t_request=0.2, sparse_prefill_eff=0.625, prefill_attn_eff=0.4, tbo=0.0, a2a_share=0.0,
         ep_skew=1.0, tbo_routed=0.0, a2a_lat_share=0.0,
         dense_split=4.0, shared_split=4.0, gemm_share=1.0, proj_gemm_share=1.0)


def ev(group, **kw):
    return step.evaluate(group, dict(V, **kw))


def test_term_names_are_the_builders_keys():
    assert tuple(step.rank_terms()) == step.RANK_TERMS and tuple(step.shared_terms()) == step.SHARED_TERMS
    assert tuple(step.prefill_terms()) == step.PREFILL_TERMS and tuple(step.fetch_terms()) == step.FETCH_TERMS


def test_rank_terms_by_hand():
    t = ev("rank")
    # projections: 2 x 8 x 10 x 3e6 = 4.8e8 FLOP / 1e15 = 4.8e-7 s  <  10 x 3e6 bytes / 2e12 = 1.5e-5 s
    assert t["attn_proj"] == pytest.approx(1.5e-5, rel=1e-12)
    # indexer: per request and layer max(1000 x 1000 / 1e15, 100 x 1000 / 2e12) = 5e-8 s; x 8 x 10
    assert t["indexer"] == pytest.approx(4e-6, rel=1e-12)
    # attention over 2048 entries: max(2000 x 2048 / 5e14, 500 x 2048 / 2e12) = 5.12e-7 s; x 8 x 10
    assert t["attention"] == pytest.approx(4.096e-5, rel=1e-12)
    assert t["hisparse"] == pytest.approx(1e-3 + 8 * 1e-4, rel=1e-12)
    # swap-in per layer: 1e-5 + 1e-6 + max(6e4 B / min(1e10, 8 x 8192 / 1e-6), 3e4 x 1e-6 / 8192) = 1.7e-5 s
    assert t["swap"] == pytest.approx(10 * 1.7e-5, rel=1e-12)
    # rdma-topk: 100 misses x (1e-6 + 600 / 1e10) / 0.5 share, per layer
    assert t["rdma_topk"] == pytest.approx(10 * 100 * (1e-6 + 6e-8) / 0.5, rel=1e-12)
    off = ev("rank", hs_on=0.0, swap_on=0.0, rdma_topk_on=0.0)
    assert off["hisparse"] == off["swap"] == off["rdma_topk"] == 0.0


def test_rank_terms_in_the_compute_bound_regime():
    t = ev("rank", b=10_000.0, L=1e6, k_attn=1e6, kv_read_bytes=1.0, index_key_bytes=1e-3)
    assert t["attn_proj"] == pytest.approx(2 * 1e4 * 10 * 3e6 / 1e15, rel=1e-12)           # 6e-4 > 1.5e-5
    assert t["indexer"] == pytest.approx(1e4 * 10 * 1000 * 1e6 / 1e15, rel=1e-12)          # FLOPs bound
    assert t["attention"] == pytest.approx(1e4 * 10 * 2000 * 1e6 / 5e14, rel=1e-12)


def test_swap_in_is_paced_by_its_busiest_request_when_it_dominates():
    t = ev("rank", M=1.0, M_max=1e5)                 # 6e8 bytes of one block at 8192 B per microsecond
    assert t["swap"] == pytest.approx(10 * (1e-5 + 1e-6 + 6e7 * 1e-6 / 8192), rel=1e-12)


def test_shared_terms_by_hand():
    t = ev("shared")
    assert t["fixed"] == pytest.approx(10 * (20 * 2e-6 + 3 * 1e-5), rel=1e-12)
    assert t["comm"] == pytest.approx(10 * 64 * 1e4 / 4e11, rel=1e-12)
    dense = 2 * 1e8 + 8 * 1 * 4e7                    # dense MLP layers and the MoE layers' shared expert
    assert t["dense_mlp"] == pytest.approx(max(2 * 64 * dense / 4 / 1e15, dense / 4 / 2e12), rel=1e-12)
    experts = 256 * (1 - (1 - 8 / 256) ** 64)        # distinct experts 64 distinct tokens route to (ep = 1)
    assert t["moe"] == pytest.approx(max(2 * 64 * 8 * 8 * 4e7 / 4 / 1e15, 8 * 4e7 * experts / 4 / (4e12 * 0.8)),
                                     rel=1e-12)
    assert t["lm_head"] == pytest.approx(max(2 * 64 * 1e9 / 4 / 5e14, 2 * 1e9 / 4 / 2e12), rel=1e-12)
    # the dense layers and shared experts whole on each GPU (--moe-dense-tp-size 1, DeepEP): 5.2e8 bytes each
    whole = ev("shared", dense_split=1.0, shared_split=1.0)
    assert whole["dense_mlp"] == pytest.approx(max(2 * 64 * dense / 4 / 1e15, dense / 2e12), rel=1e-12)


def test_the_routed_experts_take_their_own_rate_by_hand():
    """The MoE term's compute runs at ``moe_mlp_eff`` (FP8 peak 2e15 x 0.125), the dense MLP's still at
    ``mlp_eff``; 16,384 tokens are compute-bound at both rates (the weights take 8 x 4e7 x 256 / 4 / 3.2e12 =
    6.4 ms)."""
    t, base = ev("shared", N=16384.0, N_d=16384.0, moe_mlp_eff=0.125), ev("shared", N=16384.0, N_d=16384.0)
    assert t["moe"] == pytest.approx(2 * 16384 * 8 * 8 * 4e7 / 4 / (2e15 * 0.125), rel=1e-12)
    assert t["moe"] == pytest.approx(4 * base["moe"], rel=1e-12) and t["dense_mlp"] == base["dense_mlp"]


def test_two_batch_overlap_by_hand():
    """Two-batch overlap (SGLang's operations_strategy.py): each micro-batch launches its own kernels and
    collectives (the floor twice) and reads the experts its half of the tokens routes to. DeepEP's calls (here
    half of the collectives' seconds, 10 x 512 x 1e5 / 4e11 x 0.5 = 6.4e-4 s, and half of their latency, which
    each micro-batch spends in flight: 2 x 10 x 3 x 1e-5 x 0.5 = 3e-4 s) hide behind the shared experts (8 MoE
    layers x 4e7 params: max(2 x 512 x 3.2e8 / 4 / 1e15, 3.2e8 / 4 / 2e12) = 8.192e-5 s) in decode, and behind
    the routed experts too in prefill, but for one MoE layer's part of one micro-batch (1 - 1 / (2 x 8)); the dense
    layers' collectives, the dense MLP and the LM head hide nothing."""
    kw = dict(N=512.0, N_d=512.0, S=512.0, coll_bytes=1e5, a2a_share=0.5, a2a_lat_share=0.5)
    off, on = ev("shared", **kw), ev("shared", tbo=1.0, **kw)
    assert on["fixed"] == pytest.approx(2 * off["fixed"], rel=1e-12)
    half = 256 * (1 - (1 - 8 / 256) ** 256)
    moe = max(2 * 512 * 8 * 8 * 4e7 / 4 / 1e15, 8 * 4e7 * 2 * half / 4 / 3.2e12)
    assert on["moe"] == pytest.approx(moe, rel=1e-12)
    assert on["tbo_overlap"] == pytest.approx(-8.192e-5 * (1 - 1 / 16), rel=1e-12)
    prefill = ev("shared", tbo=1.0, tbo_routed=1.0, **kw)
    assert prefill["tbo_overlap"] == pytest.approx(-min(8.192e-5 + moe, 6.4e-4 + 3e-4) * (1 - 1 / 16),
                                                   rel=1e-12)
    assert off["tbo_overlap"] == 0.0
    # without DeepEP (no share of the collectives' seconds or latency) nothing is in flight between the stages
    assert ev("shared", tbo=1.0, **dict(kw, a2a_share=0.0, a2a_lat_share=0.0))["tbo_overlap"] == 0.0


def test_the_busiest_receiver_of_deepeps_all_to_all_by_hand():
    """64 tokens x 8 copies over ep = 8 GPUs: mu = 64 copies per GPU, the busiest about mu + 2 sqrt(mu) = 80, so
    the all-to-all (half of the collectives' seconds here) lasts 2 / sqrt(64) = 25% longer: comm x 0.5 x 0.25.
    No all-to-all adds nothing; with no copies (e = 0) the term stays finite."""
    t = ev("shared", a2a_share=0.5, ep=8.0, ep_imbalance=2.0)
    assert t["a2a_imbalance"] == pytest.approx(t["comm"] * 0.5 * 2 / math.sqrt(64 * 8 / 8), rel=1e-12)
    assert ev("shared", a2a_share=0.0, ep=8.0, ep_imbalance=2.0)["a2a_imbalance"] == 0.0
    assert math.isfinite(ev("shared", a2a_share=0.5, ep=8.0, ep_imbalance=2.0, e_active=0.0)["a2a_imbalance"])


def test_routing_skew_scales_the_busiest_gpus_moe_flops_and_its_all_to_all_by_hand():
    """The busiest GPU gets ep_skew = 1.5 times the mean routed tokens: its MoE FLOPs grow by 1.5 (the weights
    it reads do not: the same experts), and the all-to-all lasts until it has received 1.5 x (mu + 2 sqrt(mu))
    copies: comm x 0.5 x (1.5 x 1.25 - 1). A skew of 1 is uniform routing (the test above)."""
    big = dict(N=1e4, N_d=1e4, S=1e4)                     # compute-bound MoE: its FLOPs decide
    t0, t = ev("shared", **big), ev("shared", ep_skew=1.5, **big)
    assert t["moe"] == pytest.approx(1.5 * 2 * 1e4 * 8 * 8 * 4e7 / 4 / 1e15, rel=1e-12) == pytest.approx(1.5 * t0["moe"])
    one = ev("shared", N=1.0, N_d=1.0, ep_skew=1.5)       # one token: weight reads decide, no skew
    assert one["moe"] == pytest.approx(8 * 4e7 * 8 / 4 / 3.2e12, rel=1e-12)
    a = ev("shared", a2a_share=0.5, ep=8.0, ep_imbalance=2.0, ep_skew=1.5)
    assert a["a2a_imbalance"] == pytest.approx(a["comm"] * 0.5 * (1.5 * (1 + 2 / math.sqrt(64)) - 1), rel=1e-12)
    # without DeepEP the tokens reach every GPU by all-gather: no receiver is busier
    assert ev("shared", a2a_share=0.0, ep=8.0, ep_imbalance=2.0, ep_skew=1.5)["a2a_imbalance"] == 0.0


def test_the_moe_layers_gemms_on_the_sms_deepep_leaves_by_hand():
    """Under two-batch overlap with DeepEP's normal kernels SGLang runs DeepGEMM on the SMs DeepEP leaves
    (operations_strategy.py: deep_gemm_num_sms = SMs - 20): on an H100's 132 SMs, 112 / 132 of them. The MoE
    layers' compute-bound GEMMs (routed and shared experts) take 132 / 112 as long; the dense layers (before the
    overlap) and the LM head (after it) keep all SMs; weight reads are not slowed."""
    from sacmodel.hardware.sizing import tbo_gemm_share
    assert tbo_gemm_share(132, "normal") == pytest.approx(112 / 132, rel=1e-12)
    assert tbo_gemm_share(132, "low_latency") == 1.0 and tbo_gemm_share(0, "normal") == 1.0
    big = dict(N=1e4, N_d=1e4, S=1e4)
    t0, t = ev("shared", **big), ev("shared", gemm_share=112 / 132, **big)
    assert t["moe"] == pytest.approx(t0["moe"] * 132 / 112, rel=1e-12)
    flops = 2 * 1e4 * (2 * 1e8 + 8 * 4e7 * 132 / 112) / 4 / 1e15      # dense layers at all SMs, shared experts not
    assert t["dense_mlp"] == pytest.approx(flops, rel=1e-12) and t["lm_head"] == t0["lm_head"]
    one = ev("shared", N=1.0, N_d=1.0, gemm_share=0.5)                 # one token: weight reads decide
    assert one["moe"] == pytest.approx(8 * 4e7 * 8 / 4 / 3.2e12, rel=1e-12)


@pytest.mark.parametrize("coll_bytes", [1e2, 1e4, 1e6, 1e8])
@pytest.mark.parametrize("routed", [0.0, 1.0])
def test_two_batch_overlap_lies_between_the_larger_part_and_the_sum(coll_bytes, routed):
    """A law: with overlap, DeepEP's calls and the computation they hide behind last together at least the larger
    and at most their sum, whichever dominates: the overlap never slows the step and never hides more than the
    smaller part."""
    t = ev("shared", N=512.0, N_d=512.0, S=512.0, tbo=1.0, coll_bytes=coll_bytes, a2a_share=0.8, tbo_routed=routed,
           a2a_lat_share=0.5)
    shared_experts = max(2 * 512 * 8 * 4e7 / 4 / 1e15, 8 * 4e7 / 4 / 2e12)
    compute = shared_experts + routed * t["moe"]
    comm = 0.8 * t["comm"] + t["a2a_imbalance"] + 2 * 10 * 3 * 1e-5 * 0.5
    both = compute + comm + t["tbo_overlap"]
    assert max(compute, comm) <= both <= compute + comm


def test_lm_head_in_the_compute_bound_regime_and_moe_over_all_tokens():
    t = ev("shared", S=1e5, N=1e4, N_d=1.0)
    assert t["lm_head"] == pytest.approx(2 * 1e5 * 1e9 / 4 / 5e14, rel=1e-12)
    assert t["moe"] == pytest.approx(2 * 1e4 * 8 * 8 * 4e7 / 4 / 1e15, rel=1e-12)          # FLOPs of all tokens
    one = ev("shared", N=1.0, N_d=1.0)
    assert one["moe"] == pytest.approx(8 * 4e7 * 8 / 4 / 3.2e12, rel=1e-12)                 # one token: 8 experts


@pytest.mark.parametrize("nd,ep,imb", [(16.0, 8.0, 2.0), (1.0, 4.0, 1.5), (1e4, 8.0, 2.0)])
def test_busiest_expert_group_by_hand(nd, ep, imb):
    """Each of R = 256 experts is touched with p = 1 - (1 - 8/256)^Nd; a group of R/ep sees mu = (R/ep) p on average
    and its busiest about mu + imb sqrt(mu (1 - p)), at most all R/ep: ep groups read ep times that."""
    t = ev("shared", N=64.0, N_d=nd, ep=ep, ep_imbalance=imb)
    p = 1 - (1 - 8 / 256) ** nd
    mu = 256 / ep * p
    busiest = ep * min(256 / ep, mu + imb * math.sqrt(mu * (1 - p)))
    assert t["moe"] == pytest.approx(8 * 4e7 * busiest / 4 / 3.2e12, rel=1e-12)


def _pairs(P, H):
    return sum(q for q in range(H + 1, H + P + 1))                 # each query sees every key up to itself


def _sparse(P, H, k):
    return sum(min(k, q) for q in range(H + 1, H + P + 1))         # ... at most k of them


@pytest.mark.parametrize("P,H,k", [(5, 3, 4), (3, 0, 4), (4, 0, 4), (7, 10, 4), (2, 1, 3)])
def test_prefill_terms_count_causal_pairs_position_by_position(P, H, k):
    kw = dict(P=float(P), H=float(H), k_attn=float(k))
    sparse = ev("prefill", **kw)
    assert sparse["prefill_indexer"] == pytest.approx(10 * 1000 * _pairs(P, H) / (2e15 * 0.25), rel=1e-12)
    # the sparse kernel (FlashMLA) at its own efficiency, the dense paths at the dense prefill kernels'
    # (prefill_attn_eff, 0.4 here), neither at the GEMMs' prefill_eff
    assert sparse["prefill_attention"] == pytest.approx(10 * 2000 * _sparse(P, H, k) / (1e15 * 0.625), rel=1e-12)
    assert ev("prefill", prefill_eff=0.5, **kw)["prefill_attention"] == sparse["prefill_attention"]
    dense = ev("prefill", dense_on=1.0, index_on=0.0, **kw)
    assert dense["prefill_indexer"] == 0.0
    assert dense["prefill_attention"] == pytest.approx(10 * 2000 * _pairs(P, H) / (1e15 * 0.4), rel=1e-12)
    assert ev("prefill", dense_on=1.0, index_on=0.0, sparse_prefill_eff=0.1, **kw)["prefill_attention"] == \
        dense["prefill_attention"]
    assert ev("prefill", dense_on=1.0, index_on=0.0, prefill_eff=0.5, **kw)["prefill_attention"] == \
        dense["prefill_attention"]
    mha = ev("prefill", mha_on=1.0, **kw)
    assert mha["prefill_attention"] == pytest.approx(10 * 3000 * _pairs(P, H) / (1e15 * 0.4), rel=1e-12)
    assert mha["prefill_decompress"] == pytest.approx(10 * 2 * H * 1e7 / (2e15 * 0.25), rel=1e-12)
    assert sparse["prefill_decompress"] == 0.0


def test_prefill_projections_and_admission_by_hand():
    t = ev("prefill", P=1e5)
    assert t["prefill_proj"] == pytest.approx(2 * 1e5 * 10 * 3e6 / (2e15 * 0.25), rel=1e-12)    # compute bound
    assert ev("prefill", P=1.0)["prefill_proj"] == pytest.approx(10 * 3e6 / 2e12, rel=1e-12)     # weights bound
    # under two-batch overlap the 8 MoE layers' projections run on half the SMs, the 2 dense layers' on all:
    # 2 / 10 + 8 / 10 x 2 = 1.8 times the compute; the weights' reads do not move
    assert ev("prefill", P=1e5, proj_gemm_share=0.5)["prefill_proj"] == pytest.approx(1.8 * t["prefill_proj"],
                                                                                      rel=1e-12)
    assert ev("prefill", P=1.0, proj_gemm_share=0.5)["prefill_proj"] == pytest.approx(10 * 3e6 / 2e12, rel=1e-12)
    assert t["hisparse_admit"] == 2e-3
    assert ev("prefill", admit_on=0.0)["hisparse_admit"] == ev("prefill", hs_on=0.0)["hisparse_admit"] == 0.0


def test_eager_fetch_staging_and_front_end_terms_by_hand():
    assert ev("eager")["launch"] == pytest.approx(10 * 20 * (5e-6 - 2e-6), rel=1e-12)
    assert ev("eager", t_launch=1e-6)["launch"] == 0.0              # launching faster than the graph: no cost
    f = ev("fetch")
    nbytes = 1000 * 10 * 600
    assert f["stage_copy"] == pytest.approx(nbytes * 3 / 5e9, rel=1e-12)
    assert f["nic"] == pytest.approx(nbytes / 1e10, rel=1e-12)
    assert ev("staging")["cold_backup"] == pytest.approx(2000 * 10 * 600 / 2e10, rel=1e-12)
    assert ev("front") == pytest.approx({"tokenize": 1000 * 1e-6, "request": 0.2}, rel=1e-12)


def test_evaluate_names_the_missing_symbols():
    with pytest.raises(KeyError, match="missing value.*: N_b, bk_bw"):
        step.evaluate("staging", {"entry_bytes": 1.0, "layers": 1.0})


# ---- the engine's reduced forms ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cxl_model():
    return Model(resolve("sac-testbed", "cxl"))


@pytest.mark.parametrize("b,active,L,M,M_max,swap", [(1, 1, 20000.0, 300.0, 300.0, True),
                                                    (8, 8, 40000.0, 900.0, 2048.0, True),
                                                    (4, 2, 1500.0, 0.0, 0.0, False),
                                                    (3, 8, 3000.0, 50.0, 2048.0, True)])
def test_rank_time_equals_the_sum_of_its_terms(cxl_model, b, active, L, M, M_max, swap):
    """a + c L + max(g M, h M_max) - d (k - L) below the top-k is exact: piecewise linear in L, M and M_max."""
    terms = cxl_model.rank_terms(b, active, L, M, swap, M_max)
    assert cxl_model.rank_time(b, active, L, M, swap, M_max) == pytest.approx(sum(terms.values()), rel=1e-9)


@pytest.mark.parametrize("n,prefill,d,s", [(64, False, None, None), (64, False, 1, None), (1000, True, 40, 3),
                                           (1, True, None, 1), (5000, False, 5000, 5000)])
def test_shared_part_equals_the_sum_of_its_terms(cxl_model, n, prefill, d, s):
    terms = cxl_model.shared_terms(n, prefill, d, s)
    assert cxl_model.shared(n, prefill, d, s) == pytest.approx(sum(terms.values()), rel=1e-12)


def test_identical_tokens_read_their_experts_once(cxl_model):
    """64 requests of one prompt at one position route to the same experts: the MoE reads fewer weights than for
    64 distinct tokens, and the LM head still computes 64 rows."""
    same, apart = cxl_model.shared_terms(64, False, 1), cxl_model.shared_terms(64, False, 64)
    assert same["moe"] < apart["moe"] and same["lm_head"] == apart["lm_head"]
    assert cxl_model.shared(64, False, 1) < cxl_model.shared(64, False, 64) == cxl_model.shared(64, False)
    assert cxl_model.shared(64, True, 64, 1) < cxl_model.shared(64, True, 64, 64)        # one row of the head


def test_prefill_attention_path_of_a_sparse_model():
    """DSA: dense MHA while the sequence is within the top-k (not with HiSparse), the indexer only past it."""
    gpu, cxl = Model(resolve("sac-testbed", "gpu")), Model(resolve("sac-testbed", "cxl"))
    assert gpu.cfg.model.topk == 2048
    v = gpu.prefill_values(100, 1948)                 # 2048 tokens: within the top-k
    assert (v["mha_on"], v["index_on"], v["dense_on"], v["k_attn"], v["admit_on"]) == (1.0, 0.0, 0.0, 2048, 0.0)
    v = gpu.prefill_values(100, 1949, first=True)     # one past it
    assert (v["mha_on"], v["index_on"], v["k_attn"], v["admit_on"]) == (0.0, 1.0, 2048, 1.0)
    v = cxl.prefill_values(100, 0)
    assert (v["mha_on"], v["index_on"], v["k_attn"]) == (0.0, 0.0, 100)
    assert gpu.prefill(100, 0) < gpu.prefill(100, 1949)


def test_prefill_attention_path_of_dense_mla():
    """Dense MLA: multi-head attention with no prefix or one of 8192 tokens or more, absorbed in between."""
    m = Model(resolve(scenario("h200", model="deepseek-r1", weights="fp8"), "gpu"))
    assert m.cfg.model.kind == "mla" and not m.cfg.model.sparse
    for H, mha in ((0, 1.0), (1, 0.0), (MLA_CHUNKED_PREFIX - 1, 0.0), (MLA_CHUNKED_PREFIX, 1.0)):
        v = m.prefill_values(64, H)
        assert (v["mha_on"], v["dense_on"], v["index_on"], v["k_attn"]) == (mha, 1.0, 0.0, 1.0), H


def test_trace_miss_curves_are_computed_on_the_page_grid():
    cfg = resolve("sac-testbed", "cxl")
    m = Model(cfg, context_grid=64)
    assert m.misses(20_030, 10) == pytest.approx(cumulative_misses(cfg, 20_032, 10), rel=1e-15)   # 313 x 64
    assert m.misses(19_990, 10) == pytest.approx(cumulative_misses(cfg, 19_968, 10), rel=1e-15)   # 312 x 64
    assert m.misses(50, 10) == pytest.approx(cumulative_misses(cfg, 50, 10))                       # below the grid
    assert np.array_equal(Model(cfg).misses(20_030, 10), cumulative_misses(cfg, 20_030, 10))


def test_bulk_prefix_copy_runs_at_the_cxl_devices_bandwidth():
    """cxl-prefetch copies the prompt over the scenario's two CXL devices (22.5 GB/s each) at once."""
    cfg = resolve("sac-testbed", "cxl-prefetch")
    m = Model(cfg)
    assert cfg.cxl_devices == 2 and m.pf_dma_bw() == pytest.approx(2 * 22.5e9)
    assert m.fetch(32768, 0.0) == pytest.approx(32768 * cfg.token_bytes / 45e9, rel=1e-12)


def test_a_scenario_written_before_sparse_prefill_eff_gets_flashmla_s_published_figure():
    import copy

    from sacmodel.hardware.scenarios import load_topology
    from sacmodel.serving.config import SPARSE_PREFILL_EFF, static_values
    t = copy.deepcopy(load_topology("sac-testbed"))
    assert t.param("sparse_prefill_eff") == SPARSE_PREFILL_EFF == pytest.approx(640 / 989, abs=5e-4)
    del t.calibration["sparse_prefill_eff"]
    assert static_values(resolve(t, "cxl"))["sparse_prefill_eff"] == SPARSE_PREFILL_EFF


def test_decode_attention_reads_its_kv_at_the_attention_kernels_rate():
    """The decode attention's KV read runs at ``decode_attn_eff`` alone: halving it doubles the memory-bound
    attention term (500 B x 2048 entries at 4e12 x 0.25 = 1.024e-6 s, x 8 requests x 10 layers), and ``hbm_eff``
    (the weights' reads, the indexer's keys) leaves it as it is while it moves the projections."""
    base = ev("rank")
    slow = ev("rank", decode_attn_eff=0.25)
    assert slow["attention"] == pytest.approx(8 * 10 * 500 * 2048 / (4e12 * 0.25), rel=1e-12)
    assert slow["attn_proj"] == base["attn_proj"] and slow["indexer"] == base["indexer"]
    other = ev("rank", hbm_eff=0.25)
    assert other["attention"] == base["attention"] and other["attn_proj"] > base["attn_proj"]


def test_gqa_decode_step_on_h100_at_fa3s_paged_rate():
    """Qwen3-14B (40 layers, 8 KV heads of 128, BF16 KV: 8 x 128 x 2 x 2 = 4,096 B per token per layer) on one
    H100 (3.35 TB/s) served by SGLang (page size 1, FlashAttention-3): 32 requests of 4,096 tokens read
    32 x 40 x 4,096 x 4,096 B = 21.47 GB at 0.55 of the HBM (flash-attention#1572's 1.8 TB/s) = 11.65 ms of
    attention, where FlashMLA's 0.9 would say 7.12 ms; the weights' reads keep hbm_eff."""
    import sacmodel
    from sacmodel.serving.config import static_values
    cfg = resolve(sacmodel.scenario("h100", gpus=1, model="qwen3-14b", weights="fp8"), "gpu")
    v = dict(static_values(cfg), b=32.0, L=4096.0, M=0.0, M_max=0.0, swap_on=0.0, k_attn=4096.0, sw_bw=1.0, sw_lat=1e-6)
    assert cfg.page == 1 and v["kv_read_bytes"] == 4096 and v["hbm_bw"] == pytest.approx(3.35e12)
    assert v["decode_attn_eff"] == pytest.approx(0.55) and v["hbm_eff"] == pytest.approx(0.9)
    t = step.evaluate("rank", v)
    assert t["attention"] == pytest.approx(32 * 40 * 4096 * 4096 / (3.35e12 * 0.55), rel=1e-9)
    assert t["attention"] == pytest.approx(11.65e-3, rel=1e-3)
    mla = static_values(resolve(sacmodel.scenario("h200", model="deepseek-r1"), "gpu"))
    assert mla["decode_attn_eff"] == mla["hbm_eff"] == pytest.approx(0.9)       # MLA decodes with FlashMLA
    dsa = static_values(resolve("sac-testbed", "gpu"))
    assert dsa["decode_attn_eff"] == dsa["hbm_eff"]                                # so does the testbed's DSA
