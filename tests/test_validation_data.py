"""Checks against the measured testbed data in ../shared (skipped when it is absent)."""
import numpy as np

from conftest import needs_shared
from sacmodel.measured import compare_runs, latest_per_backend, load_microbench, load_runs, mape_table
from sacmodel.systems import fetch_latency_us

pytestmark = needs_shared


def test_microbench_mape_per_backend_within_10_percent():
    pts = latest_per_backend(load_microbench())
    for b in ("dram", "cxl", "rdma"):
        errs = [abs(fetch_latency_us("sac-testbed", b, topk=p.topk, entry_bytes=p.entry_bytes) / p.mean_us - 1)
                for p in pts if p.backend == b]
        assert len(errs) == 18 and 100 * np.mean(errs) <= 10.0, b


def test_runs_load_with_their_configuration():
    runs = load_runs()
    assert len(runs) == 33 and {r.system for r in runs} == {"dram", "cxl", "rdma"}
    r = next(r for r in runs if r.file.startswith("p2_14_cxl2"))
    assert (r.context, r.concurrency, r.output, r.requests, r.cxl_devices) == (32768, 96, 1024, 768, 2)


def test_calibration_runs_in_sample_error():
    """In-sample fit quality on the calibration runs (held-out errors are in validation/report.md)."""
    table = mape_table(compare_runs("sac-testbed", load_runs()))
    for s, row in table.items():
        assert row["tbt_mean_ms"] <= 10 and row["output_throughput_tok_s"] <= 10, s
        assert row["ttft_mean_ms"] <= 25 and row["feasibility_right"] == 100, s


def test_cold_rounds_prefill_error():
    """Round 1 of every run prefills the prompt from scratch: TTFT is the prefill model (prefill_eff fitted)."""
    runs = load_runs(round_=1)
    assert all(not r.prefix_cached and r.concurrency == 8 for r in runs)
    table = mape_table(compare_runs("sac-testbed", runs))
    assert table["dram"]["ttft_mean_ms"] <= 10 and table["cxl"]["ttft_mean_ms"] <= 10
    for s, row in table.items():
        assert row["tbt_mean_ms"] <= 10 and row["ttft_mean_ms"] <= 25, s
