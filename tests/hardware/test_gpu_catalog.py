"""The GPU catalog against the datasheets it cites (issue 36, item 6: tests that catch realistic bugs in
``hardware/gpus.py``): sizes in GB of 10^9 bytes, NVLink per direction half the bidirectional figure, FP8
twice BF16 (dense), and the catalog's figures reaching a built machine."""
import pytest

import sacmodel
from sacmodel.hardware.gpus import CATALOG

# datasheet figures, by hand (constants.md §4): memory in GB, NVLink both directions in GB/s, BF16 dense TFLOP/s
DATASHEET = {"h20": (96, 900, 148), "h100": (80, 900, 989), "h800": (80, 400, 989), "h200": (141, 900, 989),
             "b200": (180, 1800, 2250)}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_each_gpu_is_its_datasheet_in_si_units(name):
    g = CATALOG[name]
    mem_gb, nvlink_both_gb_s, bf16_tflops = DATASHEET[name]
    assert g.memory_bytes == mem_gb * 1e9                      # GB, not GiB (180 GiB would be 193.3e9 bytes)
    assert g.nvlink_bandwidth == nvlink_both_gb_s / 2 * 1e9    # per direction: half the bidirectional figure
    assert g.flops_bf16 == bf16_tflops * 1e12
    # dense FP8 is twice dense BF16 (the datasheets round: 989 and 1,979 TFLOP/s)
    assert g.flops_fp8 == pytest.approx(2 * g.flops_bf16, rel=1e-3)
    assert (g.flops_fp4 is not None) == (g.arch == "blackwell")
    if g.flops_fp4 is not None:
        assert g.flops_fp4 == 2 * g.flops_fp8


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_a_built_machine_carries_the_catalogs_figures(name):
    t = sacmodel.scenario(name, model="llama-3.1-8b", weights="bf16", gpus=1)
    d = t.node(t.gpus[0])
    g = CATALOG[name]
    assert d["hbm_capacity"] == g.memory_bytes and d["flops_bf16"] == g.flops_bf16
    assert d["nvlink_bandwidth"] == g.nvlink_bandwidth
