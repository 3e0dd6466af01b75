"""Checks against the measured testbed data in ../shared (skipped when it is absent).

The shared runs come in two splits (the manifest's ``split`` column): ``calibration-1`` (33 runs the
constants were fitted to) and ``release-2`` (33 runs of the dimensions the first split lacks).
"""
import csv

import numpy as np
import pytest
from measured_data import SHARED, needs_shared

from sacmodel.data.microbench import latest_per_backend, load_microbench
from sacmodel.data.records import DataError
from sacmodel.data.runs import closed_loop_releases, load_runs
from sacmodel.fit.compare import compare_runs, mape_table
from sacmodel.serving.systems import fetch_latency_us

pytestmark = needs_shared
MANIFEST = SHARED / "sac-testbed" / "manifest.csv"


def manifest_rows():
    with MANIFEST.open() as fh:
        return {r["file"]: r for r in csv.DictReader(fh)}


def test_microbench_mape_per_backend_within_10_percent():
    pts = latest_per_backend(load_microbench())
    for b in ("dram", "cxl", "rdma"):
        errs = [abs(fetch_latency_us("sac-testbed", b, topk=p.topk, entry_bytes=p.entry_bytes) / p.mean_us - 1)
                for p in pts if p.backend == b]
        assert len(errs) == 18 and 100 * np.mean(errs) <= 10.0, b


def test_runs_follow_the_manifest_splits():
    rows = manifest_rows()
    runs = load_runs()
    assert len(runs) == len(rows) and {r.file for r in runs} == set(rows)
    for split in ("calibration-1", "release-2"):
        part = load_runs(split=split)
        assert {r.file for r in part} == {f for f, row in rows.items() if row["split"] == split}
        assert all(r.split == split for r in part)
    cal = load_runs(split="calibration-1")
    assert len(cal) == 33 and {r.system for r in cal} == {"dram", "cxl", "rdma"}
    assert {r.output for r in cal} == {1024} and {r.device_buffer for r in cal} == {4096}
    r = next(r for r in cal if r.file.startswith("p2_14_cxl2"))
    assert (r.context, r.concurrency, r.output, r.requests, r.cxl_devices) == (32768, 96, 1024, 768, 2)
    with pytest.raises(DataError, match="unknown split"):
        load_runs(split="release-3")


def test_release_2_slices_read_from_the_manifest():
    rows = manifest_rows()
    rel = {r.file: r for r in load_runs(split="release-2")}
    assert len(rel) == 33 and {r.system for r in rel.values()} == {"dram", "cxl", "rdma", "gpu"}
    for f, r in rel.items():
        row = rows[f]
        assert (r.context, r.concurrency, r.requests) == (int(row["context"]), int(row["concurrency"]),
                                                          int(row["requests"]))
        assert r.num_success == int(row["num_success"]) and r.max_total_tokens == int(row["max_total_tokens"])
        assert r.device_buffer == (int(row["device_buffer"]) if row["device_buffer"] else None)
        assert r.server_log is not None and r.server_log.is_absolute() and r.server_log.exists()
    assert {r.device_buffer for r in rel.values() if r.system == "gpu"} == {None}
    assert sorted(r.output for r in rel.values() if r.file.startswith("rdma_0417-p3")) == [2048, 4096, 8192]
    assert sum(r.failed for r in rel.values()) == 1


def test_variable_outputs_are_read_not_the_maximum():
    """high_con_0505 draws each output uniformly in 0..1024: Run.output is the mean of the drawn lengths."""
    rows = manifest_rows()
    var = [r for r in load_runs(split="release-2") if r.variable_output]
    assert len(var) == 10
    for r in var:
        assert (r.output_min, r.output_max) == (0, 1024)
        assert r.outputs is not None and len(r.outputs) == r.requests
        assert r.outputs.min() >= 0 and r.outputs.max() <= 1024
        assert r.output == int(rows[r.file]["output"])
        if not r.failed:   # the manifest's mean of the drawn lengths; a few requests stop early (RDMA runs)
            assert r.outputs.mean() == pytest.approx(r.output, rel=0.02)
        assert "out=0:1024" in r.key()
    fixed = next(r for r in load_runs(split="calibration-1"))
    assert not fixed.variable_output and fixed.output_min == fixed.output_max == fixed.output


def test_calibration_runs_in_sample_error():
    """In-sample fit quality on the calibration runs (held-out errors are in validation/report.md)."""
    comps = compare_runs("sac-testbed", load_runs(split="calibration-1"))
    table = mape_table(comps)
    for s, row in table.items():
        assert row["tbt_mean_ms"] <= 10 and row["output_throughput_tok_s"] <= 10, s
        assert row["feasibility_right"] == 100, s
        # RDMA TTFT is predicted but not fitted (its first tokens wait for the next batch's prefix copies); it moves
        # with the fit's split of the other pools' first-token time between t_request and t_hs_admit, which their
        # runs barely constrain (25.0% at 117 / 15.4 ms, 24.4% at 120 / 12.1 ms): 26% guards against regressions
        assert row["ttft_mean_ms"] <= 26, s


def test_cold_rounds_prefill_error():
    """Round 1 of every run prefills the prompt from scratch: TTFT is the prefill model (prefill_eff fitted)."""
    runs = load_runs(split="calibration-1", round_=1)
    assert len(runs) == 33 and all(not r.prefix_cached and r.concurrency == 8 for r in runs)
    table = mape_table(compare_runs("sac-testbed", runs))
    assert table["dram"]["ttft_mean_ms"] <= 10 and table["cxl"]["ttft_mean_ms"] <= 10
    for s, row in table.items():
        # cold-round CXL TBT rises with the context faster than the model (-6% at 16K to -16% at 128K, a gap
        # stated in validation/report.md); 12% guards the rest against regressions
        assert row["tbt_mean_ms"] <= 12 and row["ttft_mean_ms"] <= 25, s


def test_variable_output_steps_cover_the_high_concurrency_runs_only():
    from sacmodel.fit.calibrate import variable_output_steps
    runs = load_runs()
    obs = variable_output_steps(runs)
    files = {o.run.file for o in obs}
    expected = {r.file for r in runs if r.output_min != r.output_max and r.system in ("dram", "cxl") and not r.failed}
    assert files == expected and files                        # rdma, fixed outputs and the failed run left out
    assert all(o.weight >= 8 and 0.02 < o.step_s < 1.0 for o in obs)
    for f in files:                                           # a rank decoding more requests steps slower
        mine = sorted((o.b, o.step_s) for o in obs if o.run.file == f)
        assert mine[-1][0] >= 14 and mine[-1][1] > 1.5 * mine[0][1]


def test_per_request_ttfts_are_read_and_agree_with_the_run_mean():
    runs = [r for r in load_runs() if r.ttfts is not None and not r.failed]
    assert len(runs) >= 60
    for r in runs:
        assert len(r.ttfts) == r.requests, r.file
        assert np.nanmean(r.ttfts) == pytest.approx(r.metrics["ttft_mean_ms"], rel=0.01), r.file


def test_closed_loop_send_times_are_reconstructed_from_the_latencies():
    runs = [r for r in load_runs() if r.latencies is not None and not r.failed and r.requests > r.concurrency]
    assert len(runs) >= 50
    for r in runs:
        c = r.concurrency
        rel = closed_loop_releases(r.latencies, c)
        done = rel + r.latencies / 1e3
        assert np.all(rel[:c] == 0) and np.all(rel[c:] > 0), r.file
        # each later request leaves exactly when an earlier one completes, and never more than c are in flight
        assert np.all(np.isin(rel[c:], done)), r.file
        t = np.sort(rel)
        for x in t[c::max(1, len(t) // 16)]:
            assert np.sum((rel <= x) & (done > x)) <= c, r.file
        # the run's mean end-to-end latency agrees with the per-request latencies read
        assert np.mean(r.latencies) == pytest.approx(r.metrics["e2e_mean_ms"], rel=0.01), r.file
