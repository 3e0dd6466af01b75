import json
import math
import subprocess
import sys

import pytest
from measured_data import needs_shared

from sacmodel.cli import main


def run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_microbench_json(capsys):
    rc, out, _ = run(capsys, "microbench", "--backend", "cxl", "--topk", "2048", "--json")
    d = json.loads(out)
    assert rc == 0 and d["backend"] == "cxl" and 40 < d["latency_us"] < 200


def test_predict_and_compare(capsys, tmp_path):
    rc, out, _ = run(capsys, "predict", "--system", "dram", "--context", "32K", "--concurrency", "16", "--json")
    assert rc == 0 and json.loads(out)["context"] == 32768
    plot = tmp_path / "c.png"
    rc, out, _ = run(capsys, "compare", "--contexts", "16K,64K", "--concurrency", "8", "--plot", str(plot))
    assert rc == 0 and "cxl/rdma" in out and "64K" in out and plot.stat().st_size > 1000


def test_no_cold_staging_is_the_steady_state(capsys):
    """The first wave of a cxl run waits for the ranks' cold backups unless the prompt's entry exists."""
    args = ("predict", "--system", "cxl", "--context", "32K", "--concurrency", "64", "--requests", "64",
            "--output", "64", "--json")
    rc, out, _ = run(capsys, *args)
    cold = json.loads(out)
    rc2, out, _ = run(capsys, *args, "--no-cold-staging")
    warm = json.loads(out)
    assert rc == rc2 == 0 and cold["config"]["cold_staging"] and not warm["config"]["cold_staging"]
    assert cold["breakdown"]["cold_backup_s"] > 0 == warm["breakdown"]["cold_backup_s"]
    assert cold["ttft_mean_ms"] > warm["ttft_mean_ms"]


def test_a_machine_whose_weights_do_not_fit_is_refused_with_the_rule(capsys):
    """DeepSeek-V3 in BF16 does not fit two H100s: the machine is refused (SGLang would not start), the rule named."""
    rc, out, err = run(capsys, "predict", "--gpu", "h100", "--gpus", "2", "--model", "deepseek-v3", "--weights",
                       "bf16", "--system", "gpu", "--context", "8K")
    assert rc == 2 and "does not fit on 2 x H100" in err and "weights + reserve" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_oversubscribed_prediction_is_served_by_queueing(capsys):
    """192 requests whose outputs outgrow the device pool wait in the queue: served, slowly."""
    rc, out, _ = run(capsys, "predict", "--system", "gpu", "--context", "128K", "--concurrency", "192",
                     "--output", "8K", "--json")
    d = json.loads(out)
    assert rc == 0 and d["feasible"] and d["success_fraction"] == 1.0 and d["ttft_mean_ms"] > 60_000


@pytest.mark.parametrize("args,msg", [
    (["predict", "--system", "cxl", "--context", "32K", "--scenario", "nope"], "unknown scenario"),
    (["predict", "--system", "cxl", "--context", "32K", "--device-buffer", "1024"], "device_buffer=1024"),
    (["validate", "/no/such/run.json"], "no such file"),
])
def test_bad_input_exit_2_with_message(capsys, args, msg):
    rc, _, err = run(capsys, *args)
    assert rc == 2 and msg in err and "Traceback" not in err


def test_bad_yaml_and_bad_flag_from_the_shell(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nname: [unclosed\n")
    r = subprocess.run([sys.executable, "-m", "sacmodel.cli", "predict", "--system", "cxl", "--context", "32K",
                        "--scenario", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "bad.yaml" in r.stderr and "line" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "sacmodel.cli", "predict", "--system", "quantum", "--context", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_broken_run_file(capsys, tmp_path):
    p = tmp_path / "p_cxl2_ctx32k.json"
    p.write_text('{"config": {"target_input_tokens": 1}, ')
    rc, _, err = run(capsys, "validate", str(p))
    assert rc == 2 and "p_cxl2_ctx32k.json" in err and "line 1" in err


def test_validate_reads_sglang_bench_serving_results(capsys, tmp_path):
    p = tmp_path / "bench_cxl2_ctx32k.json"
    p.write_text(json.dumps({
        "backend": "sglang", "dataset_name": "random", "max_concurrency": 16, "completed": 128,
        "num_prompts": 128, "random_input_len": 32768, "random_output_len": 512,
        "total_input_tokens": 128 * 32768, "total_output_tokens": 128 * 512, "mean_ttft_ms": 500.0,
        "mean_tpot_ms": 45.0, "mean_itl_ms": 45.0, "output_throughput": 330.0, "mean_e2e_latency_ms": 23500.0}))
    rc, out, _ = run(capsys, "validate", str(p), "--json")
    d = json.loads(out)
    r = d["runs"][0]
    assert rc == 0 and r["system"] == "cxl" and r["context"] == 32768 and r["concurrency"] == 16
    assert r["output"] == 512 and abs(r["error_pct"]["tbt_mean_ms"]) < 50


def test_validate_reads_the_jsonl_bench_serving_writes(capsys, tmp_path):
    """SGLang's --output-file appends one run per line and writes an unset request_rate as Infinity: calibrate
    read such a file, validate refused it ('Infinity is not a number JSON allows'). The random dataset's
    lengths are uniform in [ratio x L, L]: the comparison takes their mean prompt and draws the outputs."""
    run1 = {"backend": "sglang", "dataset_name": "random", "request_rate": math.inf, "max_concurrency": 4,
            "random_input_len": 1024, "random_output_len": 256, "random_range_ratio": 0.5, "completed": 16,
            "duration": 20.0, "mean_ttft_ms": 250.0, "mean_tpot_ms": 10.0, "output_throughput": 350.0}
    run2 = {**run1, "max_concurrency": 16, "completed": 64, "mean_ttft_ms": 400.0, "mean_tpot_ms": 14.0}
    p = tmp_path / "results.jsonl"
    p.write_text(json.dumps(run1) + "\n" + json.dumps(run2) + "\n")
    assert "Infinity" in p.read_text()
    rc, out, err = run(capsys, "validate", str(p), "--system", "gpu", "--gpu", "h200", "--model", "deepseek-r1",
                       "--json")
    assert rc == 0, err
    runs = json.loads(out)["runs"]
    assert [r["file"] for r in runs] == ["results.jsonl:1", "results.jsonl:2"]
    assert [r["context"] for r in runs] == [768, 768] and [r["concurrency"] for r in runs] == [4, 16]   # (512+1024)/2
    assert runs[0]["measured"]["ttft_mean_ms"] == 250.0 and runs[1]["measured"]["tbt_mean_ms"] == 14.0
    p.write_text(json.dumps({**run1, "request_rate": 2.0}) + "\n")
    rc, out, err = run(capsys, "validate", str(p), "--system", "gpu", "--gpu", "h200", "--model", "deepseek-r1")
    assert rc == 2 and "results.jsonl:1: request_rate 2/s" in err and len(err.strip().splitlines()) == 1


def test_winner_map_command(capsys, tmp_path):
    out = tmp_path / "m.png"
    rc, text, _ = run(capsys, "winner-map", "--unloaded", "--systems", "cxl,cxl-prefetch", "--metric", "e2e", "--x",
                      "context=8K:256K:12", "--y", "output=64:32K:12", "--plot", str(out), "--json")
    d = json.loads(text)
    assert rc == 0 and out.stat().st_size > 1000 and sum(d["counts"].values()) == 144 and d["model"] == "unloaded"
    # rows are contexts, columns outputs: at the longest context a short output favours loading in place (SAC),
    # a long one amortises the up-front copy; at 8K the copy is cheap whatever the output
    assert d["winner"][-1][0] == "cxl" and d["winner"][-1][-1] == "cxl-prefetch"
    assert d["winner"][0] == ["cxl-prefetch"] * 12


def test_winner_map_names_equal_systems_together(capsys):
    """Equal values are no win: 'best system: cxl at 4 points' became 'cxl=rdma equal at 4 points'."""
    rc, text, _ = run(capsys, "winner-map", "--unloaded", "--systems", "cxl,rdma", "--metric", "ttft", "--x",
                      "context=8K:64K:2", "--y", "output=64:1K:2", "--json")
    d = json.loads(text)
    assert rc == 0 and d["counts"] == {"cxl": 0, "rdma": 0} and d["equal"] == 4
    assert d["winner"] == [["cxl=rdma"] * 2] * 2
    rc, text, _ = run(capsys, "winner-map", "--unloaded", "--systems", "cxl,rdma", "--metric", "ttft", "--x",
                      "context=8K:64K:2", "--y", "output=64:1K:2")
    assert "best system: cxl at 0 points, rdma at 0 points, cxl=rdma equal at 4 points" in text


@pytest.mark.parametrize("args,msg", [
    pytest.param(["calibrate", "--params", "warp_factor", "--dry-run"], "cannot fit 'warp_factor'",
                 marks=needs_shared),  # calibrate reads the shared runs before it looks at the parameters
    (["sweep", "--system", "cxl", "--grid", "context"], "NAME=LO:HI:N"),
    (["sweep", "--system", "cxl", "--grid", "sw_bw=1GB/s:5GB/s:3"], "give context="),
    (["breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--vary", "link:gpu.latency", "--lo", "5 GB",
      "--hi", "1 us", "--context", "32K"], "not a time"),
    (["plan", "--system", "cxl", "--context", "32K", "--slo", "speed=3"], "unknown SLO metric"),
    (["replay", "/no/trace.jsonl"], "no such file"),
])
def test_more_bad_input_exits_2(capsys, args, msg):
    rc, _, err = run(capsys, *args)
    assert rc == 2 and msg in err and "Traceback" not in err


def test_calibrate_from_prior(capsys):
    """--from-prior starts the fitted constants from their a-priori values (refused for the micro-benchmark
    constants, which have none)."""
    rc, _, err = run(capsys, "calibrate", "--microbench", "--from-prior", "--dry-run")
    assert rc == 2 and "no a-priori values" in err


@needs_shared
def test_calibrate_from_prior_fits_from_the_middle_of_the_range(capsys):
    from measured_data import SHARED
    runs = SHARED / "sac-testbed" / "runs"
    files = [str(runs / f) for f in ("p2_08_dram_ctx32k_conc8_r2fix1k_n64.json", "p2_10_dram_ctx32k_conc32_r2fix1k_n256.json")]
    rc, out, _ = run(capsys, "calibrate", *files, "--params", "t_request", "--from-prior", "--dry-run", "--json")
    d = json.loads(out)
    assert rc == 0 and d["written_to"] is None and 0.0 <= d["params"]["t_request"] <= 0.5


def test_an_exact_prompt_by_default_and_a_drawn_tail_on_request(capsys):
    exact = json.loads(run(capsys, "predict", "--system", "cxl", "--context", "16K", "--concurrency", "8",
                           "--requests", "16", "--json")[1])
    drawn = json.loads(run(capsys, "predict", "--system", "cxl", "--context", "16K", "--concurrency", "8",
                           "--requests", "16", "--drawn-tail", "--draws", "3", "--json")[1])
    assert exact["spread"] == {} and drawn["spread"]["draws"] == 3
    # a 16K prompt of whole pages recomputes its last page; drawn tails of 1..64 tokens average less
    assert drawn["ttft_mean_ms"] < exact["ttft_mean_ms"]
