"""Issue 36 (Price tables): prices per GPU model and per GB of memory, each sourced or marked assumed; tables
checked (known keys, no key twice, finite positive prices, every part the plan needs named); costs by hand."""
import pytest
import yaml

import sacmodel
from sacmodel.cli import main
from sacmodel.planning.plan import configuration_cost, plan
from sacmodel.planning.pricing import KNOWN, PriceError, gpu_model, prices


def table(tmp_path, rows: dict, name="p.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump({"parts": {k: {"usd_per_hour": v} for k, v in rows.items()}}))
    return p


def test_the_built_in_table_prices_each_gpu_model_and_memory_per_gb_with_a_source():
    t = prices()
    for part in ("gpu_h20", "gpu_h100", "gpu_h200", "gpu_b200", "dram_gb", "cxl_gb"):
        assert part in t and t[part]["source"].strip()
    for part, row in t.items():
        assert part in KNOWN and 0 < row["usd_per_hour"] < 100
        assert "[assumed]" in row["source"] or any(w in row["source"] for w in ("constants.md", "http", ".ai/", ".com"))
    # a newer, larger GPU does not rent for less: H100 <= H200 <= B200
    assert t["gpu_h100"]["usd_per_hour"] <= t["gpu_h200"]["usd_per_hour"] <= t["gpu_b200"]["usd_per_hour"]


@pytest.mark.parametrize("gpu", ["h20", "h100", "h800", "h200", "b200"])
def test_each_catalog_gpu_is_priced_by_its_own_row(gpu):
    t = sacmodel.scenario(gpu, model="llama-3.1-70b", weights="bf16")     # fits 8 of every catalog GPU
    assert gpu_model(t) == gpu
    c = configuration_cost(t, "gpu")
    # tp = 8 GPUs on the server, whatever its dp
    assert c == {f"gpu_{gpu}": pytest.approx(8 * prices()[f"gpu_{gpu}"]["usd_per_hour"]),
                 "total": pytest.approx(8 * prices()[f"gpu_{gpu}"]["usd_per_hour"])}


def test_costs_by_hand_on_the_testbed(tmp_path):
    p = table(tmp_path, {"gpu": 1.0, "dram_gb": 0.001, "cxl_gb": 0.002, "cxl_adapter": 0.5, "cxl_switch": 0.25,
                         "rdma_nic": 0.125})
    # 8 GPUs; dram: the 2 TB host pool = 2,000 GB; cxl: 3 devices of 1 TB = 3,000 GB, 2 adapters, 1 switch;
    # rdma: 2 NICs and the 1 TB remote pool
    assert configuration_cost("sac-testbed", "gpu", price_table=p)["total"] == pytest.approx(8.0)
    assert configuration_cost("sac-testbed", "dram", price_table=p)["total"] == pytest.approx(8 + 2.0)
    assert configuration_cost("sac-testbed", "cxl", cxl_devices=3, price_table=p)["total"] == pytest.approx(
        8 + 6.0 + 1.0 + 0.25)
    assert configuration_cost("sac-testbed", "rdma", price_table=p)["total"] == pytest.approx(8 + 0.25 + 1.0)


@pytest.mark.parametrize("text,names", [
    ("parts:\n  gpu: {usd_per_hour: 3.0}\n  gpu: {usd_per_hour: 4.0}\n", ("line 3", "'gpu' given twice")),
    ("parts:\n  gpu: {usd_per_hour: 3.0}\n  gpux: {usd_per_hour: 4.0}\n", ("parts.gpux", "unknown part")),
    ("parts:\n  gpu: {usd_per_hour: 1.0e+308}\n", ("parts.gpu.usd_per_hour", "at most 1e+06")),
    ("parts:\n  gpu: {usd_per_hour: .nan}\n", ("parts.gpu.usd_per_hour",)),
    ("parts:\n  gpu: {usd_per_hour: 0}\n", ("parts.gpu.usd_per_hour", "above 0")),
    ("parts:\n  gpu: {usd_per_hour: -2}\n", ("parts.gpu.usd_per_hour",))])
def test_bad_tables_are_refused_naming_file_and_key(tmp_path, capsys, text, names):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(PriceError) as e:
        prices(p)
    assert "bad.yaml" in str(e.value) and all(n in str(e.value) for n in names)
    assert main(["plan", "--system", "gpu", "--context", "8K", "--slo", "tbt_mean_ms=500", "--prices", str(p)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_prices_in_scientific_notation_are_numbers(tmp_path):
    """PyYAML reads 2e-4 and 1e3 as text (YAML 1.1 floats need a dot and a signed exponent): a per-GB price
    written so was refused with "must be a number ..., got '2e-4'"."""
    p = tmp_path / "sci.yaml"
    p.write_text("parts:\n  gpu: {usd_per_hour: 2.5e0}\n  dram_gb: {usd_per_hour: 2e-4}\n"
                 "  cxl_gb: {usd_per_hour: 1E-3}\n")
    assert {k: v["usd_per_hour"] for k, v in prices(p).items()} == {"gpu": 2.5, "dram_gb": 2e-4, "cxl_gb": 1e-3}
    assert configuration_cost("sac-testbed", "dram", price_table=p)["total"] == pytest.approx(8 * 2.5 + 2000 * 2e-4)


def test_a_gpu_only_table_prices_a_gpu_plan_and_names_every_missing_part_of_a_cxl_plan(tmp_path, capsys):
    p = table(tmp_path, {"gpu": 3.0})
    wl = dict(context=8192, output=16, concurrency=2, requests=4)
    r = plan("sac-testbed", "gpu", workload=wl, slo={"tbt_mean_ms": 1000}, vary="dp", max_value=8, price_table=p)
    assert r.found and r.cost_usd_per_hour["gpu"] == pytest.approx(3.0 * r.value)
    with pytest.raises(PriceError, match=r"the table has no cxl_gb, cxl_adapter, cxl_switch"):
        plan("sac-testbed", "cxl", workload=wl, slo={"tbt_mean_ms": 1000}, price_table=p)
    assert main(["plan", "--system", "gpu", "--context", "8K", "--concurrency", "2", "--requests", "4",
                 "--slo", "tbt_mean_ms=1000", "--vary", "dp", "--prices", str(p)]) == 0
    import re
    out = capsys.readouterr().out
    dp = int(re.search(r"smallest dp meeting the SLO: (\d+)", out).group(1))
    assert f"(gpu {3.0 * dp:.2f})" in out


def test_a_models_own_row_wins_over_the_generic_gpu_row_and_per_gb_over_per_device(tmp_path):
    p = table(tmp_path, {"gpu": 1.0, "gpu_h20": 5.0, "cxl_gb": 0.001, "cxl_device": 100.0, "cxl_adapter": 0.5,
                         "cxl_switch": 0.25})
    c = configuration_cost("sac-testbed", "cxl", cxl_devices=2, price_table=p)
    # the testbed's GPUs are H20s: 8 x 5; 2 TB of CXL priced by the GB (2,000 x 0.001), not 2 devices x 100
    assert c == {"gpu_h20": pytest.approx(40.0), "cxl_gb": pytest.approx(2.0), "cxl_adapter": pytest.approx(1.0),
                 "cxl_switch": pytest.approx(0.25), "total": pytest.approx(43.25)}
    old = table(tmp_path, {"gpu": 1.0, "cxl_device": 100.0, "cxl_adapter": 0.5, "cxl_switch": 0.25}, "old.yaml")
    assert configuration_cost("sac-testbed", "cxl", cxl_devices=2, price_table=old)["cxl_device"] == 200.0


def test_planned_pool_sizes_are_priced_at_the_planned_count(tmp_path):
    """A plan varying the pool prices what it plans: 4 RDMA NICs on the testbed (its scenario has 2) are 4 NICs;
    3 CXL devices of 1 TB are 3,000 GB."""
    p = table(tmp_path, {"gpu": 1.0, "dram_gb": 0.001, "cxl_gb": 0.002, "cxl_adapter": 0.5, "cxl_switch": 0.25,
                         "rdma_nic": 0.125})
    assert configuration_cost("sac-testbed", "rdma", rdma_nics=4, price_table=p)["rdma_nic"] == pytest.approx(0.5)
    assert configuration_cost("sac-testbed", "rdma", rdma_nics=1, price_table=p)["rdma_nic"] == pytest.approx(0.125)
    assert configuration_cost("sac-testbed", "cxl", cxl_devices=3, price_table=p)["cxl_gb"] == pytest.approx(6.0)


def test_a_table_without_the_gpus_row_names_the_catalog_models_row(tmp_path):
    """The testbed's GPUs are H20s: a table with neither gpu_h20 nor gpu asks for gpu_h20 (its own row), not the
    generic one."""
    p = table(tmp_path, {"gpu_h100": 2.0, "dram_gb": 0.001})
    with pytest.raises(PriceError, match=r"the table has no gpu_h20 \(add it"):
        configuration_cost("sac-testbed", "dram", price_table=p)
