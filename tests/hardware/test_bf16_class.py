"""The BF16 kernel classes (issue 32 item 4): a BF16 prefill is the same generation's fitted FP8 whole forward with
its GEMMs at the measured BF16 rate and the rest kept, so no GPU prefills BF16 faster than FP8."""
import pytest

import sacmodel
from sacmodel.hardware.gpus import CATALOG, get_gpu
from sacmodel.hardware.transfer import (FITTED_CLASSES, KERNEL_EFFICIENCY, KERNEL_SOURCES, PREFILL_GEMM_RATE,
                                        bf16_class, transferred)


def test_the_bf16_classes_by_hand():
    """Hopper: the FP8 fit's 0.201 x 1,979 = 397.8 TFLOP/s whole forward; its GEMMs at aiconfigurator's H200 median
    1,083 TFLOP/s (DeepGEMM FP8 block) swapped for 679 (BF16): 1 / (1/397.8 - 1/1083 + 1/679) = 326.4 TFLOP/s, 0.330
    of the H100's 989. Blackwell: 0.201 x 2.15 / (4,500 / 1,979) x 4,500 = 855.2 TFLOP/s; B200 medians 1,680 and
    1,387: 772.2 TFLOP/s, 0.343 of 2,250. A class moved without its source fails here."""
    assert PREFILL_GEMM_RATE == {"hopper": {"fp8": 1083e12, "bf16": 679e12},
                                 "blackwell": {"fp8": 1680e12, "bf16": 1387e12}}
    hopper = KERNEL_EFFICIENCY[("hopper", "bf16")]["prefill_eff"]
    assert hopper * 989 == pytest.approx(1 / (1 / (0.201 * 1979) - 1 / 1083 + 1 / 679), rel=1e-9)
    assert hopper == pytest.approx(0.3301, abs=1e-4)
    blackwell = KERNEL_EFFICIENCY[("blackwell", "bf16")]["prefill_eff"]
    w8 = 0.201 * 2.15 / (4500 / 1979) * 4500
    assert w8 == pytest.approx(855.2, abs=0.1)
    assert blackwell * 2250 == pytest.approx(1 / (1 / w8 - 1 / 1680 + 1 / 1387), rel=1e-9)
    assert blackwell * 2250 == pytest.approx(772.2, abs=0.1)
    for arch, gpu in (("hopper", "h200"), ("blackwell", "b200")):
        src = KERNEL_SOURCES[(arch, "bf16")]
        assert "aiconfigurator" in src and f"{gpu}_sxm" in src
        assert (arch, "bf16") in FITTED_CLASSES                  # they follow a fitted class


def test_equal_gemm_rates_keep_the_fp8_whole_forward(monkeypatch):
    """The rule's limit: were BF16 GEMMs as fast as FP8's, a BF16 prefill would take the FP8 forward's absolute
    rate; a slower BF16 GEMM only lowers it."""
    h200 = get_gpu("h200")
    fp8 = {"prefill_eff": 0.201}
    slower = bf16_class(fp8, "h200")["prefill_eff"] * h200.flops_bf16
    monkeypatch.setitem(PREFILL_GEMM_RATE, "hopper", {"fp8": 1083e12, "bf16": 1083e12})
    assert bf16_class(fp8, "h200")["prefill_eff"] * h200.flops_bf16 == pytest.approx(0.201 * h200.flops_fp8)
    assert slower < 0.201 * h200.flops_fp8


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
