"""The routed experts' prefill GEMMs as a kernel of their own (``moe_prefill_eff``) and the one SGLang-release
rule that sets their rate (:func:`sacmodel.hardware.transfer.moe_prefill_factor`)."""
from pathlib import Path

import pytest

from sacmodel.data.external import load_external_runs
from sacmodel.data.records import DataError
from sacmodel.hardware.build import scenario
from sacmodel.hardware.topology import TopologyError
from sacmodel.hardware.transfer import DEEPGEMM_GROUPED_EFF, TRITON_MOE_PRE_TMA, deepep_moe_prefill_eff, moe_prefill_factor
from sacmodel.serving.config import resolve
from sacmodel.serving.engine.stepmodel import Model

CHECKS = Path(__file__).resolve().parents[2] / "validation" / "data" / "external_checks.csv"


def test_the_pre_tma_slowdown_by_hand():
    """#10567: 8.8% lower TTFT with the experts 0.44 of the prefill: they ran 1 / (1 - 0.2) = 1.25 x longer."""
    assert TRITON_MOE_PRE_TMA == pytest.approx(1.25, rel=1e-12)
    factor, source = moe_prefill_factor("hopper", "fp8", "0.5.3")
    assert factor == pytest.approx(0.8, rel=1e-12) and "sgl-project/sglang#10567" in source
    h200 = scenario("h200", model="deepseek-r1", engine_version="0.5.3")
    assert h200.param("moe_prefill_eff") == pytest.approx(0.8 * h200.param("prefill_eff"), rel=1e-6)


@pytest.mark.parametrize("arch, weights, version", [
    ("hopper", "fp8", "0.5.9"), ("hopper", "fp8", "0.5.12"), ("hopper", "fp8", None), ("hopper", "fp8", "unknown"),
    ("blackwell", "fp8", "0.5.3"), ("hopper", "bf16", "0.5.3")])
def test_the_rule_holds_only_for_fp8_on_hopper_before_0_5_9(arch, weights, version):
    assert moe_prefill_factor(arch, weights, version) is None


def test_the_slower_experts_cost_exactly_their_share_of_a_prefill():
    """Law: the release moves the MoE term alone, by the factor (compute-bound at 8,192 tokens), and no other."""
    old, new = (Model(resolve(scenario("h200", model="deepseek-r1", engine_version=v), "gpu")) for v in ("0.5.3", "0.5.9"))
    t_old, t_new = old.shared_terms(8192, True), new.shared_terms(8192, True)
    assert t_old["moe"] == pytest.approx(TRITON_MOE_PRE_TMA * t_new["moe"], rel=1e-9)
    assert all(t_old[k] == pytest.approx(t_new[k], rel=1e-12) for k in t_new if k != "moe")
    # a decode step runs no prefill GEMM: the release does not move it
    assert old.shared(64, False) == pytest.approx(new.shared(64, False), rel=1e-12)


def test_a_lower_expert_rate_never_shortens_a_prefill():
    topo = scenario("h200", model="deepseek-r1")
    from sacmodel.hardware.params import with_params
    times = [Model(resolve(with_params(topo, {"moe_prefill_eff": e}), "gpu")).shared(4096, True)
             for e in (0.05, 0.1, 0.2, 0.4, 0.78)]
    assert all(a >= b for a, b in zip(times, times[1:])) and times[0] > times[-1]


def test_the_checks_carry_their_release_to_the_scenario():
    runs = {r.id: r for r in load_external_runs(CHECKS)}
    assert runs["gsr1-2k"].engine_version == "0.5.3" and runs["ix0361"].engine_version == "0.5.12"
    assert runs["tt356-2k"].engine_version is None                       # "unknown"
    from sacmodel.fit.transfer import external_scenario
    old, new = external_scenario(runs["gsr1-2k"]), external_scenario(runs["ix0361"])
    assert old.param("moe_prefill_eff") < old.param("prefill_eff") == new.param("moe_prefill_eff")


def test_a_bad_release_is_one_clear_line(tmp_path):
    with pytest.raises(TopologyError, match=r"engine_version must be a release such as '0.5.3', got 'latest'"):
        scenario("h200", model="deepseek-r1", engine_version="latest")
    lines = CHECKS.read_text().splitlines()
    row = next(i for i, x in enumerate(lines) if x.startswith("gsr1-2k,"))
    p = tmp_path / "bad.csv"
    p.write_text(lines[0] + "\n" + lines[row].replace(",0.5.3,", ",v-next,", 1) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: column 'engine_version' must be a release such as 0.5.3"):
        load_external_runs(p)


def test_the_release_rule_leaves_deepep_experts_alone():
    """With DeepEP SGLang runs the routed experts on DeepGEMM's grouped GEMM, not the Triton fused MoE whose
    kernels a release selects: an old release moves the TP server's expert rate, not the DeepEP one's."""
    from sacmodel.hardware.build import scenario
    ep = dict(gpus=16, model="deepseek-r1", tp=16, dp=16, ep=16, moe_a2a="deepep")
    assert scenario("h200", **ep, engine_version="0.5.3").param("moe_prefill_eff") == \
        scenario("h200", **ep).param("moe_prefill_eff")
    tp = scenario("h200", gpus=8, model="deepseek-r1", tp=8, engine_version="0.5.3")
    assert tp.param("moe_prefill_eff") < tp.param("prefill_eff")


def test_an_sglang_release_is_refused_for_a_vllm_server():
    """engine_version selects SGLang's kernels: a vLLM server is refused one, in one line naming the field."""
    import pytest
    from sacmodel.hardware.build import scenario
    from sacmodel.hardware.topology import TopologyError
    with pytest.raises(TopologyError, match="engine_version names an SGLang release"):
        scenario("h100", gpus=1, model="qwen3-14b", engine="vllm", engine_version="0.5.3")


def test_deepgemm_grouped_rate_by_hand():
    """DeepGEMM's README (H800): gate-up 1,346 TFLOP/s (twice the down's FLOPs), down 1,214: the pair at
    3 / (2 / 1346 + 1 / 1214) = 1,298.9 TFLOP/s, of the 1,979 FP8 peak 0.6564."""
    assert DEEPGEMM_GROUPED_EFF["hopper"] == pytest.approx(1298.94 / 1979, rel=1e-4)
    eff, source = deepep_moe_prefill_eff("hopper", "fp8", "deepep", "auto")
    assert eff == pytest.approx(0.6564, rel=1e-3) and "sgl-project/sglang#5626" in source


@pytest.mark.parametrize("arch, weights, a2a, mode", [
    ("hopper", "fp8", "none", "auto"), ("hopper", "fp8", "deepep", "low_latency"), ("hopper", "bf16", "deepep", "auto"),
    ("blackwell", "fp8", "deepep", "normal")])
def test_the_grouped_rate_holds_only_under_deepeps_normal_kernels_with_fp8_on_hopper(arch, weights, a2a, mode):
    assert deepep_moe_prefill_eff(arch, weights, a2a, mode) is None


def test_a_deepep_prefill_server_prices_its_experts_at_deepgemms_grouped_rate():
    """EP32 with DeepEP's normal (or auto) kernels: the routed experts at DeepGEMM's grouped rate, the dense GEMMs at
    the class's prefill_eff; low-latency kernels only and TP servers keep the class's rate (the rule is DeepEP's)."""
    ep = dict(gpus=32, model="deepseek-v3", dp=32, ep=32, moe_a2a="deepep", mem_fraction=0.85)
    for mode in ("auto", "normal"):
        t = scenario("h100", deepep_mode=mode, **ep)
        assert t.param("moe_prefill_eff") == pytest.approx(DEEPGEMM_GROUPED_EFF["hopper"], rel=1e-5)
        assert t.param("prefill_eff") == pytest.approx(0.201)
    ll = scenario("h100", deepep_mode="low_latency", **ep)
    assert ll.param("moe_prefill_eff") == pytest.approx(ll.param("prefill_eff"), rel=1e-6)
    tp = scenario("h200", gpus=8, model="deepseek-v3", tp=8)
    assert tp.param("moe_prefill_eff") == pytest.approx(tp.param("prefill_eff"), rel=1e-6)
