"""A machine in a few words: the GPU catalog, SGLang's sizing rules, the scenarios ``sacmodel.scenario`` builds, and
the transfer rules of the testbed's constants."""
import math

import pytest
import yaml

import sacmodel
from sacmodel.hardware.build import scenario, scenario_dict, scenario_yaml
from sacmodel.hardware.gpus import GPUError, get_gpu, gpu_catalog
from sacmodel.hardware.models import get_model
from sacmodel.hardware.scenarios import load_topology
from sacmodel.hardware.sizing import (attention_split, collectives, cuda_graph_max_bs_default, decode_kernels,
                                      kv_cell_bytes, kv_dtype_default, mem_fraction_default, weights_per_gpu)
from sacmodel.hardware.topology import TopologyError
from sacmodel.hardware.transfer import (GRAPH_KERNEL_SCALE, KERNEL_EFFICIENCY, PUBLIC_REQUEST_PATH, RULES,
                                       transferred)
from sacmodel.serving.config import resolve


def test_the_catalog_has_the_gpus_the_issue_names_with_sources():
    assert {"h20", "h100", "h200", "b200"} <= set(gpu_catalog())
    for name in gpu_catalog():
        g = get_gpu(name)
        assert g.flops_fp8 >= g.flops_bf16 > 0 and g.hbm_bandwidth > 0 and g.sms > 0
        assert {"memory", "hbm_bandwidth", "flops", "nvlink", "sms"} <= set(g.sources)
    assert get_gpu("H200-SXM") is get_gpu("h200")
    with pytest.raises(GPUError, match="unknown GPU 'a100'"):
        get_gpu("a100")


def test_sglang_defaults_by_hand():
    """SGLang 0.5.9's rules (server_args.py): H200 (143,771 MiB) at tp 8 reserves 512 + 1.5 x 8192 + 2 x 512 +
    1024 = 14,848 MiB, at least 10,240: mem_fraction_static 0.897; under DP8 attention 3 x 512 x 8 + 1.5 x 512 x 8
    more: 0.769. cuda_graph_max_bs is 512 from 80 GiB up at tp >= 4, 256 below tp 4."""
    assert mem_fraction_default(143771, tp=8, dp=1, chunk=8192, cuda_graph_max_bs=512) == round(
        (143771 - 14848) / 143771, 3) == 0.897
    assert mem_fraction_default(143771, tp=8, dp=8, chunk=8192, cuda_graph_max_bs=512) == round(
        (143771 - 14848 - 12288 - 6144) / 143771, 3)
    assert cuda_graph_max_bs_default(143771, 8) == 512 and cuda_graph_max_bs_default(81559, 2) == 256


def test_kv_dtype_auto_follows_sglang():
    v32, r1 = get_model("deepseek-v3.2"), get_model("deepseek-r1")
    assert kv_dtype_default(v32, 90) == "bf16" and kv_dtype_default(v32, 100) == "fp8"
    assert kv_dtype_default(r1, 100) == "bf16"           # dense MLA keeps the model's dtype


def test_testbed_weights_and_pool_match_its_logs():
    """The testbed's logs: 50.37 GiB of weights per GPU (4-bit AWQ, DP attention) and 78,324 B per KV token. Under
    DP attention every GPU holds the whole BF16 token embedding (1.73 GiB; SGLang's ``embed_tokens`` with
    ``enable_tp=not is_dp_attention_enabled()``): 50.61 GiB; split over the 8 GPUs it came to 49.10 (-2.5%)."""
    m = get_model("deepseek-v3.2")
    w = weights_per_gpu(m, 0.5 + 4 / 128, tp=8, dp=8) / 2 ** 30
    assert w == pytest.approx(50.37, rel=0.01)
    assert kv_cell_bytes(m, m.kv_bytes("bf16"), 1) == 78324


def test_mla_latent_is_replicated_and_gqa_heads_split():
    """MLA keeps one latent whole on every GPU of an attention group; GQA splits its KV heads until one per GPU."""
    r1, qwen = get_model("deepseek-r1"), get_model("qwen3-32b")
    assert kv_cell_bytes(r1, 1152, 8) == kv_cell_bytes(r1, 1152, 1) == 61 * 1152
    full = kv_cell_bytes(qwen, qwen.kv_bytes("bf16"), 1)
    assert kv_cell_bytes(qwen, qwen.kv_bytes("bf16"), 2) == full / 2
    assert kv_cell_bytes(qwen, qwen.kv_bytes("bf16"), 16) == full / 8        # 8 KV heads: one per GPU at most
    rep, split = attention_split(r1, 8)
    assert rep > 0 and split > rep and rep + split == pytest.approx(r1.attn_params() - 0, rel=1e-12)


def test_collectives_of_each_parallelism():
    """TP attention: an all-reduce after attention and one after the MLP; DP attention: an all-gather and a
    reduce-scatter; a single GPU: none. Bytes per token per layer per GPU: 2 (n - 1) / n of a BF16 row per
    all-reduce, (n - 1) / n per all-gather or reduce-scatter."""
    m = get_model("deepseek-r1")
    row = 2 * m.hidden
    assert collectives(m, 8, 1) == (2, pytest.approx(2 * 2 * 7 / 8 * row))
    assert collectives(m, 8, 8) == (2, pytest.approx(2 * 7 / 8 * row))
    assert collectives(m, 1, 1) == (0, 0.0)
    assert decode_kernels(get_model("deepseek-v3.2")) > decode_kernels(m) > decode_kernels(get_model("qwen3-32b"))


def test_dp_attention_prefills_gather_and_scatter_by_all_reduce():
    """An iteration that prefills under DP attention pads to the sum of the ranks' tokens (SGLang's
    DpPaddingMode.SUM_LEN for any extend batch): the gather all-reduces a zeroed buffer of every rank's tokens and
    the MLP's output is all-reduced before each rank copies its slice, twice the bytes of the all-gather and
    reduce-scatter a decode step runs (2 x 2 x 7/8 of a BF16 row against 2 x 7/8 at TP8); TP attention's
    all-reduces are the same either way; the built machine prices its prefills with them."""
    from sacmodel.hardware.sizing import collective_groups
    m = get_model("deepseek-r1")
    row = 2 * m.hidden
    pre = collective_groups(m, 8, 8, prefill=True)
    assert [g[2] for g in pre] == ["allreduce", "allreduce"]
    assert sum(g[1] for g in pre) == pytest.approx(2 * 2 * 7 / 8 * row)
    assert sum(g[1] for g in collective_groups(m, 8, 8)) == pytest.approx(2 * 7 / 8 * row)
    assert collective_groups(m, 8, 1, prefill=True) == collective_groups(m, 8, 1)
    from sacmodel.serving.config import static_values
    v = static_values(resolve(sacmodel.scenario("h200", dp=8), "gpu"))
    assert v["coll_bytes_prefill"] == pytest.approx(2 * v["coll_bytes"])


def test_scenario_builds_what_every_function_accepts():
    t = sacmodel.scenario("h200", gpus=8, model="deepseek-r1", weights="fp8")
    cfg = resolve(t, "gpu")
    assert (cfg.tp, cfg.dp, cfg.attn_tp, cfg.weights, cfg.graph_bs) == (8, 1, 8, "fp8", 512)
    assert cfg.prefill_chunk == 8192 and cfg.max_total_tokens > 600_000
    p = sacmodel.predict(t, "gpu", context=1024, output=128, concurrency=4)
    assert p.feasible and 0 < p.tbt_mean_ms < p.ttft_mean_ms
    dp = sacmodel.scenario("h200", dp=8)
    assert resolve(dp, "gpu").prefill_chunk == 1024            # the chunk divided by the DP size


def test_a_two_h100_qwen3_32b_server_holds_its_reported_pool():
    """llm-d reports a 307K-token pool for Qwen3-32B on 2 x H100 (TP2, memory use 0.9): the pool SGLang sizes is
    of that order, not infeasible."""
    t = scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", mem_fraction=0.9)
    n = resolve(t, "gpu").max_total_tokens
    assert 0.9 * 307_000 < n < 1.15 * 307_000


@pytest.mark.parametrize("kw,msg", [
    (dict(gpu="a100"), "unknown GPU"),
    (dict(gpu="h200", weights="int3"), "weights must be one of"),
    (dict(gpu="h200", kv_dtype="fp16"), "kv_dtype must be"),
    (dict(gpu="h200", dp=3), "dp=3 must divide tp=8"),
    (dict(gpu="h200", gpus=0), "gpus must be a whole number"),
    (dict(gpu="h200", model="no-such-model"), "model"),
    (dict(gpu="h200", mem_fraction=1.5), "mem_fraction must be in"),
    (dict(gpu="h200", pool="nvme"), "pool must be cxl and/or rdma"),
    (dict(gpu="h200", transfer="guess"), "transfer must be"),
])
def test_bad_machines_are_refused_with_a_clear_line(kw, msg):
    with pytest.raises((TopologyError, GPUError), match=msg):
        scenario(**kw)


def test_weights_that_do_not_fit_are_refused_by_the_rule():
    """DeepSeek-V3 in BF16 on 2 x H100: about 627 GiB of weights per GPU, above the 64.7 GiB SGLang leaves."""
    with pytest.raises(ValueError, match=r"does not fit on 2 x H100: its bf16 weights take 62\d\.\d GiB per GPU.*"
                                         r"weights \+ reserve > the static memory"):
        scenario("h100", gpus=2, model="deepseek-v3", weights="bf16")


def test_the_yaml_written_loads_to_the_same_scenario(tmp_path):
    text = scenario_yaml(gpu="b200", dp=8, pool="cxl")
    path = tmp_path / "b200.yaml"
    path.write_text(text)
    data = yaml.safe_load(text)
    assert "&id" not in text and "*id" not in text                  # written out in full, no aliases
    assert all("source" in v for v in data["serving"].values())
    a, b = load_topology(path), scenario("b200", dp=8, pool="cxl")
    for name in ("t_graph_kernel", "prefill_eff", "mem_fraction", "prefill_chunk", "cuda_graph_max_bs"):
        assert a.param(name) == pytest.approx(b.param(name), rel=1e-6), name
    assert sacmodel.predict(a, "cxl", context=32768, output=128, concurrency=8).feasible


def test_transfer_rules_by_hand():
    """The in-graph kernel floor is a latency of the GPU generation: carried over unscaled by SMs (the testbed's
    H20 is a Hopper part; an H200 and a B200 alike), times the Hopper factor once fitted; host CPU constants
    carry over unchanged; a built machine overlaps its launches (t_launch = 82.6 ms / 1,403 kernels,
    sgl-project/sglang#12160) and takes the public harnesses' request path; Hopper FP8 efficiencies come from
    the fitted table, Hopper BF16 from it with its GEMMs at the measured BF16 rate, dense prefill attention from
    published figures."""
    base = load_topology("sac-testbed")
    rules = transferred(get_gpu("h200"), "fp8", fitted=False)
    assert rules["t_graph_kernel"][0] == pytest.approx(base.param("t_graph_kernel"), rel=1e-12)
    for name in ("t_hs", "t_token", "stage_copy_bw"):
        assert rules[name][0] == base.param(name) and RULES[name][0] == "host CPU"
    assert rules["t_launch"][0] == pytest.approx(82.6e-3 / 1403) and rules["launch_overlap"][0] == 1.0
    assert base.param("launch_overlap") == 0.0                              # the testbed's fork adds them
    assert rules["t_request"][0] == PUBLIC_REQUEST_PATH == pytest.approx(0.060)
    assert rules["prefill_eff"][0] == base.param("prefill_eff")            # the rules alone: carried over
    for name in ("hbm_eff", "sparse_prefill_eff"):                         # published kernel figures: as they are
        assert rules[name] == (base.param(name), RULES[name][1]) and RULES[name][0] == "published kernel"
    assert rules["prefill_attn_eff"][0] == pytest.approx(625 / 989, abs=0.005)   # FlashAttention-3 on H100
    fitted = transferred(get_gpu("h200"), "fp8")
    eff = KERNEL_EFFICIENCY[("hopper", "fp8")]
    assert fitted["prefill_eff"][0] == eff["prefill_eff"] and fitted["moe_eff"][0] == eff["moe_eff"]
    assert fitted["t_graph_kernel"][0] == pytest.approx(rules["t_graph_kernel"][0] * GRAPH_KERNEL_SCALE["hopper"])
    b200 = transferred(get_gpu("b200"), "fp8")
    assert b200["t_graph_kernel"][0] == fitted["t_graph_kernel"][0]        # latency-bound: not 148 SMs' share
    assert b200["prefill_eff"][0] == pytest.approx(eff["prefill_eff"] * 2.15 / (4500 / 1979))
    assert b200["prefill_attn_eff"][0] == pytest.approx(1460 / 2250, abs=0.001)  # FlashMLA's SM100 MHA
    assert b200["moe_eff"][0] == eff["moe_eff"] and "assumed" in b200["moe_eff"][1]   # no Blackwell figure
    assert b200["compute_eff"][0] == base.param("compute_eff") and "carried over" in b200["compute_eff"][1]
    assert transferred(get_gpu("h100"), "bf16")["prefill_eff"][0] == \
        pytest.approx(KERNEL_EFFICIENCY[("hopper", "bf16")]["prefill_eff"])      # by hand: test_bf16_class.py
    same = transferred(get_gpu("h20"), "awq-int4")                         # the testbed's own class
    server = {"t_graph_kernel", "t_launch", "launch_overlap", "t_request"}
    assert all(v[0] == pytest.approx(base.param(k)) for k, v in same.items() if k not in server)
    assert "prefill_attn_eff" not in same                                  # its dense attention: its prefill_eff


def test_flashinfer_fp8_gemm_sets_blackwell_prefill_at_its_published_rate():
    """SGLang with JIT DeepGEMM off runs FlashInfer's TRT-LLM FP8 block-scale GEMM on Blackwell, which levels off at
    about 440 TFLOP/s at prefill shapes (sgl-project/sglang#13528): 440 / 4,500 of a B200's FP8 peak, fitted or
    not (a published kernel figure); DeepGEMM (SGLang's default) keeps the class's value; Hopper has no such
    kernel (SGLang refuses it); BF16 weights run no FP8 GEMM."""
    from sacmodel.hardware.topology import TopologyError
    b200 = get_gpu("b200")
    for fitted in (True, False):
        fi = transferred(b200, "fp8", fitted=fitted, fp8_gemm_backend="flashinfer_trtllm")["prefill_eff"]
        assert fi[0] == pytest.approx(440 / 4500) and "sgl-project/sglang#13528" in fi[1]
    default = transferred(b200, "fp8")["prefill_eff"][0]
    assert transferred(b200, "fp8", fp8_gemm_backend="deep_gemm")["prefill_eff"][0] == default
    assert default == pytest.approx(KERNEL_EFFICIENCY[("blackwell", "fp8")]["prefill_eff"])
    assert transferred(b200, "bf16", fp8_gemm_backend="flashinfer_trtllm")["prefill_eff"][0] == \
        transferred(b200, "bf16")["prefill_eff"][0]
    s = sacmodel.scenario("b200", model="deepseek-r1", fp8_gemm_backend="flashinfer_trtllm")
    assert s.param("prefill_eff") == pytest.approx(440 / 4500, rel=1e-5)
    with pytest.raises(TopologyError, match="flashinfer_trtllm needs a Blackwell GPU"):
        sacmodel.scenario("h200", model="deepseek-r1", fp8_gemm_backend="flashinfer_trtllm")
    with pytest.raises(TopologyError, match="fp8_gemm_backend must be one of"):
        sacmodel.scenario("b200", model="deepseek-r1", fp8_gemm_backend="cublas")


def test_a_floor_of_small_kernels_does_not_shrink_with_sms():
    """A B200 (148 SMs) has the same in-graph kernel floor as an H200 (132): the rule that scaled it by SMs put
    B200's floor below H200's."""
    h, b = (sacmodel.scenario(g, model="deepseek-r1") for g in ("h200", "b200"))
    assert b.param("t_graph_kernel") == h.param("t_graph_kernel")


def test_every_testbed_constant_has_a_transfer_rule():
    base = load_topology("sac-testbed")
    assert set(base.calibration) <= set(RULES)


def test_scenario_dict_names_the_machine():
    d = scenario_dict("h200", model="deepseek-r1", dp=1)
    assert d["name"] == "h200x8-deepseek-v3-fp8" and "H200" in d["description"]
    assert math.isclose(float(d["serving"]["weight_bytes_per_param"]["value"]), 1 + 4 / 128 ** 2, rel_tol=1e-5)


def test_paged_gqa_decode_a_larger_page_never_reads_slower():
    """Law: within each GPU generation's published classes (pages of 1 to 256 tokens), a GQA model's paged decode
    attention reads at a fraction of HBM that never falls as the page grows, inside (0, 1]; below the smallest
    published page there is no figure. Hopper's is FlashAttention-3's (0.55: 1.8 TB/s of 3.35 on H100,
    flash-attention#1572), Blackwell's FlashInfer's (0.70: 5.6 TB/s of 8, vllm#19825)."""
    from sacmodel.hardware.transfer import PAGED_DECODE_EFF, paged_decode_eff
    assert set(PAGED_DECODE_EFF) == {"hopper", "blackwell"}
    for arch in PAGED_DECODE_EFF:
        values = [paged_decode_eff(arch, page)[0] for page in range(1, 257)]
        assert all(0 < v <= 1 for v in values)
        assert all(a <= b for a, b in zip(values, values[1:])), arch
        assert paged_decode_eff(arch, 0) is None
    assert paged_decode_eff("hopper", 1)[0] == pytest.approx(1849 / 3350, abs=0.01)
    assert paged_decode_eff("blackwell", 16)[0] == pytest.approx(5.6 / 8, abs=0.01)
    assert paged_decode_eff("ampere", 16) is None


def test_built_gqa_machine_carries_its_paged_decode_rate():
    """A built machine serving a GQA model carries ``gqa_decode_eff`` for its GPU and its engine's page size
    (SGLang's 1 token, vLLM's 16-token blocks), with its source; vLLM's larger blocks never read slower; an MLA
    model carries none (FlashMLA's hbm_eff), and hbm_eff itself (the weights' reads) is unchanged."""
    sg = scenario("h100", gpus=1, model="qwen3-14b", weights="fp8")
    vl = scenario("h100", gpus=1, model="qwen3-14b", weights="bf16", engine="vllm")
    assert sg.param("gqa_decode_eff") == pytest.approx(0.55) and sg.param("hbm_eff") == pytest.approx(0.9)
    assert "flash-attention#1572" in sg.calibration["gqa_decode_eff"].source
    assert "pages of 1 tokens" in sg.calibration["gqa_decode_eff"].source
    assert "pages of 16 tokens" in vl.calibration["gqa_decode_eff"].source
    assert vl.param("gqa_decode_eff") >= sg.param("gqa_decode_eff")
    assert scenario("b200", gpus=1, model="qwen3-8b").param("gqa_decode_eff") == pytest.approx(0.70)
    assert not scenario("h200", model="deepseek-r1").has_param("gqa_decode_eff")


def test_a_tp_below_the_gpus_names_the_instances_it_means():
    # a newcomer's --gpus 8 --tp 4 --dp 2 (SGLang's two TP4 replicas): refused by the one-server rule, and the
    # line says how to ask for it (instances of 4 GPUs, one or a cluster of two)
    from sacmodel.hardware.topology import TopologyError
    with pytest.raises(TopologyError, match=r"tp=4 must equal gpus=8 .*2 servers of tp=4 are 2 instances: "
                                            r"gpus=4 here, or a cluster of 2 instances \(replay --instances 2\)"):
        scenario("h200", gpus=8, tp=4, dp=2)
    with pytest.raises(TopologyError) as e:             # no such hint where the sizes do not divide
        scenario("h200", gpus=8, tp=3, dp=1)
    assert "instances" not in str(e.value)
