"""Calibrating a machine on its own benchmark runs: result files made here from a prediction with known constants
(SGLang bench_serving JSONL, vLLM bench serve JSON with per-request arrays) give the constants back; what the
runs cannot identify stays transferred and is named; the calibrated scenario carries its provenance and band,
and moves to another GPU by the transfer rules."""
import json
import math

import numpy as np
import pytest

from sacmodel.data.bench import load_bench_file
from sacmodel.fit.machine import (MACHINE_CONSTANTS, apply_constants, calibrated_scenario_dict, carry,
                                  cross_validate, fit_machine, is_calibrated, jacobian, predict_bench,
                                  transferred_values, write_calibrated)
from sacmodel.hardware.build import scenario
from sacmodel.hardware.scenarios import load_topology

MACHINE = {"gpu": "h200", "gpus": 8, "tp": 8, "model": "deepseek-r1"}
TRUE = {"t_request": 0.120, "t_graph_kernel": 5.0e-6, "moe_eff": 0.70}
NAMES = ["t_request", "t_graph_kernel", "moe_eff"]


@pytest.fixture(scope="module")
def base():
    kw = dict(MACHINE)
    return scenario(kw.pop("gpu"), **kw)


def sglang_line(isl, osl, conc, n) -> dict:
    return {"backend": "sglang", "dataset_name": "random", "request_rate": math.inf, "max_concurrency": conc,
            "random_input_len": isl, "random_output_len": osl, "random_range_ratio": 1.0, "num_prompts": n,
            "duration": 1.0, "completed": n, "output_throughput": 1.0, "mean_ttft_ms": 1.0, "mean_tpot_ms": 1.0}


def measured_file(path, truth, shapes):
    """bench_serving JSONL whose means are the engine's prediction on ``truth`` (read back to get the
    workload exactly as the fit will see it)."""
    path.write_text("".join(json.dumps(sglang_line(*s)) + "\n" for s in shapes))
    lines = []
    for s, run in zip(shapes, load_bench_file(path)):
        p = predict_bench(truth, run)
        lines.append({**sglang_line(*s), "mean_ttft_ms": p["ttft"], "mean_tpot_ms": p["tpot"],
                      "output_throughput": p["throughput"]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return load_bench_file(path)


def test_two_runs_give_back_the_constants_they_were_made_with(base, tmp_path):
    truth = apply_constants(base, TRUE)
    runs = measured_file(tmp_path / "results.jsonl", truth, [(1024, 128, 1, 3), (1024, 128, 64, 128)])
    f = fit_machine(base, runs, NAMES)
    assert set(f.fitted) == set(NAMES)
    for n, v in TRUE.items():          # started at the transferred 60 ms, 3.7 us, 0.75: each far beyond 2 sd
        assert f.values[n] == pytest.approx(v, rel=0.08), (n, f.values[n])
        assert 0 < f.sd[n] < 0.5
    assert f.rms < 0.02 and all(abs(e) < 0.03 for r in f.errors for e in r.values())


def test_a_lone_low_load_run_leaves_the_moe_rate_transferred_and_says_what_pins_it(base, tmp_path):
    truth = apply_constants(base, TRUE)
    runs = measured_file(tmp_path / "one.jsonl", truth, [(1024, 128, 1, 3)])
    f = fit_machine(base, runs, NAMES)
    assert "moe_eff" not in f.fitted and f.values["moe_eff"] == base.param("moe_eff")
    assert "concurrency 64" in f.unidentified["moe_eff"]
    assert f.unidentified["moe_eff"].endswith("checked: with such a run added these runs identify it")
    assert "t_request" in f.fitted and f.values["t_request"] == pytest.approx(TRUE["t_request"], rel=0.15)


def test_vllm_detailed_json_from_a_prediction_reads_back_the_same_workload(base, tmp_path):
    truth = apply_constants(base, TRUE)
    n, rng = 24, np.random.default_rng(3)
    ins, outs = rng.integers(500, 1500, n), rng.integers(20, 60, n)
    doc = {"date": "x", "endpoint_type": "openai", "backend": "openai", "model_id": "deepseek-ai/DeepSeek-R1",
           "num_prompts": n, "request_rate": "inf", "max_concurrency": 8, "duration": 1.0, "completed": n,
           "failed": 0, "output_throughput": 1.0, "mean_ttft_ms": 1.0, "mean_tpot_ms": 1.0,
           "input_lens": ins.tolist(), "output_lens": outs.tolist(), "ttfts": [0.1] * n,
           "itls": [[0.01] * (o - 1) for o in outs]}
    p = tmp_path / "vllm.json"
    p.write_text(json.dumps(doc))
    (run,) = load_bench_file(p)
    pred = predict_bench(truth, run)
    doc.update(ttfts=[pred["ttft"] / 1e3] * n, itls=[[pred["tpot"] / 1e3] * (o - 1) for o in outs],
               output_throughput=pred["throughput"])
    p.write_text(json.dumps(doc))
    (run,) = load_bench_file(p)
    assert run.per_request and list(run.input_lens) == ins.tolist()
    again = predict_bench(truth, run)
    assert again["ttft"] == pytest.approx(run.ttft_mean_ms, rel=1e-6)
    assert again["tpot"] == pytest.approx(run.tpot_mean_ms, rel=1e-6)


def test_the_calibrated_scenario_has_provenance_its_band_and_carries_to_b200(base, tmp_path):
    truth = apply_constants(base, TRUE)
    runs = measured_file(tmp_path / "results.jsonl", truth, [(1024, 128, 1, 3), (1024, 128, 64, 128)])
    J = jacobian(base, runs, NAMES, transferred_values(base, NAMES))
    f = fit_machine(base, runs, NAMES, jac=J)
    cv = cross_validate(base, runs, NAMES, J)
    assert set(cv["band"]) == {"ttft", "tpot", "throughput"} and len(cv["errors"]) == 2
    out = tmp_path / "mine.yaml"
    write_calibrated(out, calibrated_scenario_dict(MACHINE, f, runs, cv))
    topo = load_topology(out)
    assert is_calibrated(topo)
    src = topo.calibration["t_request"].source
    assert src.startswith("calibrated: 2 runs") and "results.jsonl:2" in src and "leave-one-run-out error" in src
    assert topo.param("t_request") == pytest.approx(f.values["t_request"], rel=1e-4)
    assert "not identified" not in src and topo.calibration["prefill_eff"].source.startswith("calibrated") is False
    iv = f.interval["t_request"]
    assert "bootstrap over runs: 68% " in src and f"{iv['p16']:.4g}-{iv['p84']:.4g}" in src

    from sacmodel.serving.bands import own_band
    band, basis = own_band(topo)
    assert band["ttft"] == pytest.approx(100 * cv["band"]["ttft"], abs=0.06) and "leave-one-run-out" in basis

    kw = {k: v for k, v in MACHINE.items() if k != "gpu"}
    b200 = carry(topo, "b200", kw)
    rules_h200, rules_b200 = scenario("h200", **kw), scenario("b200", **kw)
    assert b200.param("t_request") == topo.param("t_request")                       # software: kept
    for n in ("t_graph_kernel", "moe_eff"):                          # calibrated kernel: moved by the rules
        moved = topo.param(n) * rules_b200.param(n) / rules_h200.param(n)
        lo, hi = MACHINE_CONSTANTS[n].lo, MACHINE_CONSTANTS[n].hi
        assert b200.param(n) == pytest.approx(min(max(moved, lo), hi), rel=1e-9)
    assert b200.param("prefill_eff") == rules_b200.param("prefill_eff")             # not calibrated: B200's rule
    # the in-graph floor is a latency Blackwell shares with Hopper; Blackwell's FP8 GEMMs are Hopper's x 0.947
    assert b200.param("t_graph_kernel") == pytest.approx(topo.param("t_graph_kernel"))
    assert b200.param("prefill_eff") != topo.param("prefill_eff")
    assert not is_calibrated(b200) and "carried to b200" in b200.calibration["t_request"].source


def test_a_run_the_fit_cannot_follow_is_named():
    from sacmodel.fit.machine import MachineFit
    f = MachineFit({}, {}, [], {}, {}, [], 0.1, ["a.jsonl:1", "a.jsonl:2"],
                   [{"ttft": 0.05, "tpot": -0.01}, {"ttft": -0.45, "tpot": 0.19}])
    assert f.warnings() == ["a.jsonl:2: ttft -45% after the fit"]


def test_one_gauss_newton_step_is_the_exact_leave_one_out_fit_of_a_linear_model():
    from sacmodel.fit.machine import MachineFit, _one_step
    rng = np.random.default_rng(0)
    J = rng.normal(size=(6, 2))
    y = rng.normal(scale=0.1, size=6)
    names = ["moe_eff", "prefill_eff"]
    x_full = np.linalg.lstsq(J, y, rcond=None)[0] + np.log([0.6, 0.4])    # residual J (x - x0) - y
    fit = MachineFit({n: float(np.exp(x)) for n, x in zip(names, x_full)}, {}, names, {}, {}, [], 0.0, [], [],
                     jac=J, resid=J @ (x_full - np.log([0.6, 0.4])) - y)
    keep = np.arange(2, 6)
    got = _one_step(fit, J[keep], names, keep)
    want = np.linalg.lstsq(J[keep], y[keep], rcond=None)[0] + np.log([0.6, 0.4])
    assert [got[n] for n in names] == pytest.approx(np.exp(want).tolist(), rel=1e-9)


def test_a_calibration_refuses_more_requests_than_it_can_simulate_before_simulating_any(base, tmp_path, capsys):
    """Fuzzing (issue 36): a bench_serving line of 100,000 completed requests at concurrency 1 (within a run's
    limit) made `calibrate` simulate 100,000 requests at every step of its fit: 4-20 s each, minutes in all. The
    runs' requests are bounded together (MAX_CALIBRATION_REQUESTS, 10,000), the file and line named, at once."""
    import time

    from sacmodel.cli import main
    p = tmp_path / "big.jsonl"
    p.write_text(json.dumps(sglang_line(16, 2, 1, 100_000)) + "\n")
    t0 = time.perf_counter()
    assert main(["calibrate", str(p), "--gpu", "h200", "--gpus", "8", "--tp", "8", "--model", "deepseek-r1",
                 "--dry-run"]) == 2
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "big.jsonl:1: 100,000 requests" in err and "at most 10,000" in err
    # the bound is on the runs together: two runs of 6,000 are refused, naming the total
    p.write_text(json.dumps(sglang_line(16, 2, 1, 6000)) + "\n" + json.dumps(sglang_line(16, 4, 1, 6000)) + "\n")
    with pytest.raises(ValueError, match=r"6,000 requests \(12,000 over the 2 runs\)"):
        fit_machine(base, load_bench_file(p), NAMES)


def test_the_run_a_lone_low_load_run_names_pins_the_moe_rate(base, tmp_path):
    """The advice is checked: the run the lone run's fit names for moe_eff (its probe shape) identifies it."""
    truth = apply_constants(base, TRUE)
    isl, osl, conc = MACHINE_CONSTANTS["moe_eff"].probe
    assert f"concurrency {conc}" in MACHINE_CONSTANTS["moe_eff"].pins
    runs = measured_file(tmp_path / "two.jsonl", truth, [(1024, 128, 1, 3), (isl, osl, conc, conc)])
    f = fit_machine(base, runs, NAMES)
    assert "moe_eff" in f.fitted and f.values["moe_eff"] == pytest.approx(0.70, rel=0.08)


def test_a_constant_no_run_can_move_is_named_as_such(base, tmp_path):
    """DeepSeek-R1 TP8 on H200: the step model's decode attention and projections are bandwidth-bound at every
    context here, so compute_eff binds nowhere and its named run (32K prompts at concurrency 64) does not move
    it: the fit says so instead of sending the user to run it."""
    from sacmodel.fit.machine import probe_moves
    truth = apply_constants(base, TRUE)
    runs = measured_file(tmp_path / "r.jsonl", truth, [(1024, 128, 1, 3), (1024, 128, 64, 128)])
    assert not probe_moves(base, runs[0], "compute_eff") and probe_moves(base, runs[0], "moe_eff")
    f = fit_machine(base, runs, NAMES + ["compute_eff"])
    assert f.unidentified["compute_eff"].startswith("no run: ") and "do not depend on it" in f.unidentified["compute_eff"]


def test_the_bootstrap_over_runs_of_a_linear_model_has_the_width_of_resampling_and_repeatability():
    """One constant, one row per run, J = 1: a draw moves log(value) by minus the mean of its runs' residuals
    plus their remeasurement noise, so the 68% interval's half-width is sqrt((var(r) + NOISE^2) / n) in log
    units (hand-computed), centred on the fit; and the same runs give the same interval (seeded)."""
    from types import SimpleNamespace

    from sacmodel.fit.machine import NOISE, MachineFit, bootstrap
    n = 40
    r = np.random.default_rng(3).normal(0.0, 0.1, size=n)
    r -= r.mean()                                  # at the solution: the residuals' mean step is zero
    fit = MachineFit({"moe_eff": 0.6}, {}, ["moe_eff"], {}, {}, [], 0.0, [], [], jac=np.ones((n, 1)), resid=r)
    runs = [SimpleNamespace(ttft_mean_ms=math.nan, tpot_mean_ms=10.0, output_tok_s=math.nan)] * n
    iv = bootstrap(fit, runs, draws=2000)
    half = math.log(iv["moe_eff"]["p84"] / iv["moe_eff"]["p16"]) / 2
    assert half == pytest.approx(math.sqrt((r.var() + NOISE ** 2) / n), rel=0.1)
    assert math.sqrt(iv["moe_eff"]["p16"] * iv["moe_eff"]["p84"]) == pytest.approx(0.6, rel=0.01)
    assert bootstrap(fit, runs, draws=2000) == iv and iv["moe_eff"]["draws"] == 2000


def test_a_kernel_below_the_peak_moves_the_prefill_range_to_its_own_rate():
    """A server on FlashInfer's TRT-LLM FP8 GEMM (B200, DeepGEMM off) prefills within that kernel's published
    rates at prefill shapes, 295-533 TFLOP/s of B200's 4,500 (sgl-project/sglang#13528: 28.7 us for M 1,024, N
    576, K 7,168; 63.5 us for M 4,096), not 0.2-0.9 of the peak; on DeepGEMM (the default) the range is the
    tensor-core peak's; a calibrated scenario carries the backend."""
    from sacmodel.fit.machine import constant_range, machine_of
    fi = scenario("b200", model="deepseek-r1", fp8_gemm_backend="flashinfer_trtllm")
    lo, hi = constant_range(fi, "prefill_eff")
    assert lo * 4500e12 == pytest.approx(2 * 1024 * 576 * 7168 / 28.7e-6, rel=0.01)
    assert hi * 4500e12 == pytest.approx(2 * 4096 * 576 * 7168 / 63.5e-6, rel=0.01)
    assert lo < fi.param("prefill_eff") < hi                         # the transferred value: the large-N plateau
    c = MACHINE_CONSTANTS["prefill_eff"]
    assert constant_range(scenario("b200", model="deepseek-r1"), "prefill_eff") == (c.lo, c.hi)
    assert constant_range(fi, "moe_eff") == (MACHINE_CONSTANTS["moe_eff"].lo, MACHINE_CONSTANTS["moe_eff"].hi)
    assert machine_of(fi)["fp8_gemm_backend"] == "flashinfer_trtllm"


def test_a_flashinfer_calibration_carried_to_hopper_runs_deepgemm_there():
    """A B200 calibrated with FlashInfer's FP8 GEMM carried to an H200: SGLang has no such kernel on Hopper and
    runs DeepGEMM, so the target is the H200's default machine and the calibrated prefill rate moves by the ratio
    of the two machines' transferred rates (DeepGEMM's Hopper class over FlashInfer's 440 / 4,500)."""
    from sacmodel.fit.machine import machine_of
    from sacmodel.hardware.params import with_params
    fi = scenario("b200", model="deepseek-r1", fp8_gemm_backend="flashinfer_trtllm")
    cal = with_params(fi, {"prefill_eff": 0.11})
    cal.calibration["prefill_eff"].source = "calibrated: by hand"
    out = carry(cal, "h200", machine_of(fi))
    h200 = scenario("h200", model="deepseek-r1")
    assert "fp8_gemm_backend" not in out.serving
    assert out.param("prefill_eff") == pytest.approx(0.11 * h200.param("prefill_eff") / fi.param("prefill_eff"),
                                                     rel=1e-4)


def test_prefill_slower_than_the_dense_floor_is_fitted_as_the_routed_experts_rate(tmp_path):
    """Runs made with the routed experts at 0.06 of the peak (SGLang's Triton fused MoE far below the class):
    prefill_eff stops at its published floor, 0.2, and the experts' own rate stands in for it, given back within
    its wider range; unfitted, the experts' rate follows prefill_eff (apply_constants)."""
    from sacmodel.fit.machine import TAKES_OVER, constant_range
    base = scenario("h200", model="deepseek-r1", engine_version="0.5.3")
    truth = apply_constants(base, {"moe_prefill_eff": 0.06})
    runs = measured_file(tmp_path / "slow.jsonl", truth, [(8192, 16, 1, 2), (8192, 16, 8, 8)])
    f = fit_machine(base, runs, ["prefill_eff"])
    assert TAKES_OVER["prefill_eff"] == "moe_prefill_eff" and f.fitted == ["moe_prefill_eff"]
    assert constant_range(base, "moe_prefill_eff")[0] < 0.06 < constant_range(base, "prefill_eff")[0]
    assert f.values["moe_prefill_eff"] == pytest.approx(0.06, rel=0.1)
    assert f.values["prefill_eff"] == base.param("prefill_eff")
    moved = apply_constants(base, {"prefill_eff": 0.4})
    assert moved.param("moe_prefill_eff") == pytest.approx(0.4 * 0.8, rel=1e-9)
