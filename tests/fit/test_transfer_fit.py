"""Measured runs of other machines: reading them, predicting them on their own machine and client, and the
kernel-efficiency fit (the only constants fitted off the testbed)."""
import math
from pathlib import Path

import numpy as np
import pytest

from sacmodel.data.external import INFERENCEX_CLIENT, load_external_runs
from sacmodel.data.records import DataError
from sacmodel.fit.transfer import (EFFICIENCY_BOUNDS, efficiency_residuals, errors, external_requests,
                                   fit_kernel_efficiency, prompt_pairs,
                                   predict_external)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "external" / "h200-deepseek-r1-sglang-tp8.csv"
CHECKS = Path(__file__).resolve().parents[2] / "validation" / "data" / "external_checks.csv"
needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/external is absent")


def test_checks_file_reads_with_a_source_for_every_run():
    runs = load_external_runs(CHECKS)
    assert len(runs) >= 15 and all(r.source and "/" in r.source for r in runs)
    assert {r.gpu for r in runs} >= {"h200", "b200"} and any(r.model == "deepseek-v3.2" for r in runs)


@needs_shared
def test_the_shared_file_takes_the_inferencex_client():
    runs = load_external_runs(SHARED)
    assert len(runs) == 15
    r = runs[0]
    assert (r.range_ratio, r.requests, r.mem_fraction, r.chunked_prefill) == (
        INFERENCEX_CLIENT["range_ratio"], 10 * r.concurrency, 0.82, 32768)


def test_a_bad_row_names_its_file_and_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text(CHECKS.read_text().splitlines()[0] + "\n" +
                 CHECKS.read_text().splitlines()[1].replace(",1024,", ",lots,", 1) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: column '(isl|osl)' is not a number"):
        load_external_runs(p)


def test_the_fp8_gemm_backend_column_reaches_the_scenario(tmp_path):
    """InferenceX's B200 servers run with JIT DeepGEMM off (dsr1_fp8_b200.sh: SGLANG_ENABLE_JIT_DEEPGEMM=false):
    the checks say so, their machines prefill at FlashInfer's FP8 GEMM rate; a value SGLang lacks is refused."""
    b200 = [r for r in load_external_runs(CHECKS) if r.gpu == "b200"]
    assert b200 and all(r.fp8_gemm_backend == "flashinfer_trtllm" for r in b200)
    assert all(r.fp8_gemm_backend == "auto" for r in load_external_runs(CHECKS) if r.gpu != "b200")
    from sacmodel.fit.transfer import external_scenario
    assert external_scenario(b200[0]).param("prefill_eff") == pytest.approx(440 / 4500, rel=1e-5)
    lines = CHECKS.read_text().splitlines()
    p = tmp_path / "bad.csv"
    p.write_text(lines[0] + "\n" + lines[1].replace(",flashinfer_trtllm,", ",cublas,", 1) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: column 'fp8_gemm_backend' must be one of"):
        load_external_runs(p)


def test_published_ttft_percentiles_are_read_and_checked(tmp_path):
    """Where a source publishes the TTFT's median and p99 the checks carry them (ms); a median above the p99 or a
    negative one names the file, line and column; an empty cell is 'not published'."""
    runs = {r.id: r for r in load_external_runs(CHECKS)}
    assert (runs["ix0160"].ttft_median_ms, runs["ix0160"].ttft_p99_ms) == (545.36, 7271.35)
    assert all(r.ttft_median_ms <= r.ttft_mean_ms * 1.2 and r.ttft_median_ms < r.ttft_p99_ms
               for r in runs.values() if math.isfinite(r.ttft_median_ms))
    assert math.isnan(runs["tt356-2k"].ttft_median_ms)
    lines = CHECKS.read_text().splitlines()
    row = next(x for x in lines if x.startswith("ix0160,"))
    for bad, msg in ((row.replace(",545.36,7271.35,", ",7300,7271.35,"), "'ttft_median_ms' .* is above 'ttft_p99_ms'"),
                     (row.replace(",545.36,7271.35,", ",-5,7271.35,"), "'ttft_median_ms' must be positive")):
        p = tmp_path / "bad.csv"
        p.write_text(lines[0] + "\n" + bad + "\n")
        with pytest.raises(DataError, match=r"bad\.csv:2: column " + msg):
            load_external_runs(p)


def test_published_tpot_percentiles_are_read_and_checked(tmp_path):
    """The TPOT's median and p99 over requests, where a source prints them (gpustack's 32K burst on one H100:
    212.59 and 326.36 ms; InferenceX's benchmarks.json in seconds, stored in ms), are read like the TTFT's; a
    median above the p99 names the file, line and column."""
    runs = {r.id: r for r in load_external_runs(CHECKS)}
    assert (runs["gsq14-32k"].tpot_median_ms, runs["gsq14-32k"].tpot_p99_ms) == (212.59, 326.36)
    assert runs["ix0160"].tpot_median_ms == pytest.approx(21.804) and runs["ix0160"].tpot_p99_ms > 21.804
    assert math.isnan(runs["tt356-2k"].tpot_median_ms)
    published = [r for r in runs.values() if math.isfinite(r.tpot_median_ms)]
    assert len(published) >= 20 and all(r.tpot_median_ms <= r.tpot_p99_ms for r in published)
    lines = CHECKS.read_text().splitlines()
    row = next(x for x in lines if x.startswith("gsq14-32k,"))
    p = tmp_path / "bad.csv"
    p.write_text(lines[0] + "\n" + row.replace(",212.59,326.36,", ",400,326.36,") + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: column 'tpot_median_ms' .* is above 'tpot_p99_ms'"):
        load_external_runs(p)


def test_predicted_tpot_percentiles_are_the_requests_spread():
    """A burst of 32K prompts on one H100 runs in waves of the few requests its pool holds, prefilled one after
    another: the first of a wave waits for the others' prefills, the last does not, so the TPOTs spread; the
    median and p99 are numpy's percentiles of the same requests' TPOTs as the mean."""
    r = next(x for x in load_external_runs(CHECKS) if x.id == "gsq14-32k")
    p = predict_external(r)
    assert p["tpot_median_ms"] < p["tpot_p99_ms"]
    assert p["tpot_p99_ms"] > 1.5 * p["tpot_mean_ms"] > 0


def test_predicted_percentiles_come_from_the_same_requests_as_the_mean():
    """The median and p99 a check is compared on are numpy's percentiles of the simulated requests' TTFTs, the
    same requests whose mean is the TTFT mean: median <= p99, and the mean lies between the extremes."""
    r = next(x for x in load_external_runs(CHECKS) if x.id == "ix0151")
    p = predict_external(r)
    assert 0 < p["ttft_median_ms"] < p["ttft_p99_ms"]
    assert p["ttft_median_ms"] != pytest.approx(p["ttft_mean_ms"], rel=1e-6)     # a distribution, not the mean


def test_vllm_checks_build_vllm_servers(tmp_path):
    """The vLLM servers' checks name their engine: their machines are vLLM V1 servers (16-token blocks, vLLM's
    token budget); an engine sacmodel does not model is refused with the file, line and column."""
    vfile = CHECKS.with_name("external_checks_vllm.csv")
    runs = load_external_runs(vfile)
    assert runs and all(r.engine == "vllm" and r.ttft_median_ms < r.ttft_p99_ms for r in runs)
    from sacmodel.fit.transfer import external_scenario
    topo = external_scenario(runs[0])
    assert topo.param("page_tokens") == 16 and topo.param("prefill_chunk") == 8192
    assert all(r.engine == "sglang" for r in load_external_runs(CHECKS))
    lines = vfile.read_text().splitlines()
    p = tmp_path / "bad.csv"
    p.write_text(lines[0] + "\n" + lines[1].replace(",vllm,", ",trtllm,", 1) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: column 'engine' must be one of"):
        load_external_runs(p)


def test_the_client_draws_lengths_in_its_range():
    r = load_external_runs(CHECKS)[0]
    reqs = external_requests(r)
    assert len(reqs) == r.requests
    assert reqs.context.min() >= int(r.isl * r.range_ratio) and reqs.context.max() <= r.isl
    assert (reqs.cached == 0).all() and (reqs.arrival == 0).all()


def test_a_check_is_predicted_served_and_compared():
    r = next(x for x in load_external_runs(CHECKS) if x.gpu == "h200" and x.model == "deepseek-r1")
    p = predict_external(r)
    assert p["feasible"] and math.isfinite(p["ttft_mean_ms"]) and 0 < p["tpot_mean_ms"] < p["ttft_mean_ms"]
    e = errors(r, p)
    assert e["tpot"] == pytest.approx(p["tpot_mean_ms"] / r.tpot_mean_ms - 1)
    assert abs(e["tpot"]) < 0.3                       # the check this file exists for: near, not far


def test_the_saturation_runs_are_served_not_infeasible():
    """500 x 4K/200 and 100 x 32K/100 on 8 x H200 with DP attention: the server queued and served them all."""
    for r in load_external_runs(CHECKS):
        if r.model == "deepseek-v3.2":
            assert predict_external(r)["feasible"], r.id


@needs_shared
def test_the_kernel_efficiency_fit_stays_in_its_bounds_and_improves_the_fit():
    runs = load_external_runs(SHARED)[::5]                   # three runs: quick
    vals = fit_kernel_efficiency(runs)
    for k, v in vals.items():
        lo, hi = EFFICIENCY_BOUNDS[k]
        assert lo <= v <= hi
    assert prompt_pairs(runs) == [(0, 2)]                    # 1K/1K and 8K/1K at concurrency 4
    before = efficiency_residuals(runs, [predict_external(r, transfer="rules") for r in runs])
    after = efficiency_residuals(runs, [predict_external(r, transfer="rules", values=vals) for r in runs])
    assert len(after) == 4 and float(np.sum(after ** 2)) <= float(np.sum(before ** 2)) + 1e-9


def test_the_efficiencies_see_tpot_and_what_a_longer_prompt_adds_to_the_ttft():
    """Two runs that differ only in the prompt make one pair; the residuals are each run's TPOT log ratio and
    the log ratio of the TTFT difference (by hand), so a constant offset in both TTFTs changes nothing."""
    import dataclasses
    r = load_external_runs(CHECKS)[0]
    short, long_ = dataclasses.replace(r, isl=1024, ttft_mean_ms=200.0, tpot_mean_ms=10.0), \
        dataclasses.replace(r, isl=8192, ttft_mean_ms=500.0, tpot_mean_ms=12.0)
    other = dataclasses.replace(r, isl=8192, concurrency=r.concurrency + 1)      # another concurrency: no pair
    runs = [long_, other, short]
    assert prompt_pairs(runs) == [(2, 0)]
    preds = [{"feasible": True, "ttft_mean_ms": t, "tpot_mean_ms": p} for t, p in ((420.0, 13.0), (1.0, 1.0),
                                                                                     (100.0, 9.0))]
    res = efficiency_residuals(runs, preds)
    assert res == pytest.approx([math.log(13 / 12), math.log(1.0 / other.tpot_mean_ms), math.log(9 / 10),
                                 math.log((420 - 100) / (500 - 200))])
    shifted = [dict(p, ttft_mean_ms=p["ttft_mean_ms"] + 80.0) for p in preds]
    assert efficiency_residuals(runs, shifted) == pytest.approx(res)


@needs_shared
def test_the_floor_and_the_moe_rate_are_fitted_on_separate_evidence():
    """The kernel floor on the lowest-concurrency TPOTs (concurrency 4 of the H200 runs), moe_eff on the highest
    (64), prefill_eff on the TTFT pairs: no run pins two of them; each bound is a published range (moe_eff
    0.5-0.77 of HBM), and the shipped Hopper FP8 values lie inside them."""
    from sacmodel.fit.transfer import _stage_runs
    from sacmodel.hardware.transfer import GRAPH_KERNEL_SCALE, KERNEL_EFFICIENCY
    runs = load_external_runs(SHARED)
    floor, moe = _stage_runs(runs, "t_graph_kernel_scale"), _stage_runs(runs, "moe_eff")
    assert {r.concurrency for r in floor} == {4} and {r.concurrency for r in moe} == {64}
    assert not set(map(id, floor)) & set(map(id, moe))
    assert EFFICIENCY_BOUNDS["moe_eff"] == (0.5, 0.77)
    shipped = dict(KERNEL_EFFICIENCY[("hopper", "fp8")], t_graph_kernel_scale=GRAPH_KERNEL_SCALE["hopper"])
    for k, v in shipped.items():
        lo, hi = EFFICIENCY_BOUNDS[k]
        assert lo <= v <= hi, k


def test_a_burst_runs_in_lockstep_waves_until_a_request_ends_early():
    """32K prompts on one H100 (gsq14-32k's machine and client), 30 of them with 20 output tokens: the pool holds
    n of them, prefilled one after another, and a wave's requests end on the same step, so the request prefilled
    first waits for the n - 1 others' prefills and the last for none. If one request of the first wave ends
    early, its slots admit a prompt of the next wave while the others decode: they wait for that prefill, and
    the waves no longer end together."""
    from sacmodel.fit.transfer import external_scenario
    from sacmodel.serving.config import resolve
    from sacmodel.serving.engine.workload import Requests
    from sacmodel.serving.predict import simulate
    r = next(x for x in load_external_runs(CHECKS) if x.id == "gsq14-32k")
    cfg = resolve(external_scenario(r), "gpu")
    n_wave = int(cfg.max_total_tokens // (32000 + 20))
    assert 2 <= n_wave < 30
    out = np.full(30, 20)

    def run(o):
        p = simulate(cfg, Requests(np.zeros(30), np.full(30, 32000), o, np.zeros(30), lead=0), 30)
        ttft = np.asarray(p.per_request["ttft_ms"])
        return ttft, ttft + np.asarray(p.per_request["tbt_ms"]) * (o - 1)     # all sent at 0
    ttft, done = run(out)
    wave = np.argsort(ttft)[:n_wave]
    assert np.ptp(done[wave]) < 1e-6 * done[wave].max()                       # they end on the same step
    assert np.sum(ttft < done[wave].min()) == n_wave                          # no one else started before
    short = out.copy()
    short[wave[0]] = 5                                                        # the first prefilled ends early
    ttft2, done2 = run(short)
    others = wave[1:]
    mid = (ttft2 > ttft2[others].max()) & (ttft2 < done2[others].min())
    assert mid.sum() >= 1                                                     # a prompt prefilled mid-wave
    assert np.all(done2[others] > done[others])                               # the others waited for it
