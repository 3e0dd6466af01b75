"""The BF16 kernel classes (issue 32 item 4): a BF16 prefill is the same generation's fitted FP8 whole-forward rate
at the BF16 GEMMs' measured share of the FP8 GEMMs' speed, so no GPU prefills BF16 faster than FP8."""
import pytest

import sacmodel
from sacmodel.hardware.gpus import CATALOG, get_gpu
from sacmodel.hardware.transfer import (BF16_FP8_GEMM_RATIO, FITTED_CLASSES, KERNEL_EFFICIENCY, KERNEL_SOURCES,
                                        transferred)


def test_the_bf16_classes_by_hand():
    """Hopper: 0.201 (the FP8 fit) x 2 (1,979 over 989 TFLOP/s) x 0.631 (aiconfigurator's H200 tables, SGLang 0.5.9:
    median BF16 over DeepGEMM FP8 block GEMM rate at M 1K-8K, N, K >= 1K) = 0.2537 of the BF16 peak, 251 TFLOP/s on
    an H100; Blackwell: 0.201 x 2.15 / (4,500 / 1,979) x 2 x 0.826 (the B200 tables) = 0.3140, 706 TFLOP/s on a
    B200. A class moved without its source fails here."""
    assert BF16_FP8_GEMM_RATIO == {"hopper": 0.631, "blackwell": 0.826}
    assert KERNEL_EFFICIENCY[("hopper", "bf16")]["prefill_eff"] == pytest.approx(0.201 * 2 * 0.631, rel=1e-12)
    assert KERNEL_EFFICIENCY[("hopper", "bf16")]["prefill_eff"] == pytest.approx(0.2537, abs=1e-4)
    b = KERNEL_EFFICIENCY[("blackwell", "bf16")]["prefill_eff"]
    assert b == pytest.approx(0.201 * 2.15 / (4500 / 1979) * 2 * 0.826, rel=1e-12)
    assert b * 2250 == pytest.approx(706, abs=1)
    for arch in ("hopper", "blackwell"):
        src = KERNEL_SOURCES[(arch, "bf16")]
        assert "aiconfigurator" in src and f"{BF16_FP8_GEMM_RATIO[arch]}" in src
        assert (arch, "bf16") in FITTED_CLASSES                  # they follow a fitted class


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_fp8_prefills_at_least_as_fast_as_bf16_on_every_gpu(name):
    """The law: on each GPU of the catalog whose generation has both classes, the FP8 class's absolute prefill rate
    (fraction x FP8 peak) is at least the BF16 class's (fraction x BF16 peak)."""
    g = get_gpu(name)
    if (g.arch, "fp8") not in KERNEL_EFFICIENCY or (g.arch, "bf16") not in KERNEL_EFFICIENCY:
        pytest.skip(f"no FP8 and BF16 classes for {g.arch}")
    fp8 = transferred(g, "fp8")["prefill_eff"][0] * g.flops_fp8
    bf16 = transferred(g, "bf16")["prefill_eff"][0] * g.flops_bf16
    assert fp8 >= bf16 > 0


def test_a_bf16_machine_carries_its_class_and_the_rules_alone_do_not():
    """A built BF16 machine prefills at its class (fitted) and at the testbed's carried value with the rules alone
    (the class follows a fitted one); the Blackwell BF16 class no longer inherits the H20 AWQ value."""
    base = sacmodel.scenario("h100", gpus=1, model="qwen3-14b", weights="bf16", transfer="rules")
    fitted = sacmodel.scenario("h100", gpus=1, model="qwen3-14b", weights="bf16")
    assert fitted.param("prefill_eff") == pytest.approx(KERNEL_EFFICIENCY[("hopper", "bf16")]["prefill_eff"], rel=1e-5)
    assert base.param("prefill_eff") == pytest.approx(sacmodel.load_topology("sac-testbed").param("prefill_eff"))
    b200 = sacmodel.scenario("b200", gpus=1, model="qwen3-14b", weights="bf16")
    assert b200.param("prefill_eff") == pytest.approx(KERNEL_EFFICIENCY[("blackwell", "bf16")]["prefill_eff"],
                                                      rel=1e-5)
