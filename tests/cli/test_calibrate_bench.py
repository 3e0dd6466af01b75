"""``sacmodel calibrate FILE... --gpu ... --out mine.yaml`` on benchmark result files: the scenario it writes is
taken by predict, compare, plan and pareto, and carried by --gpu; hostile files exit 2 with one line and leave
the user's files as they were."""
import json
import math
import time

import pytest

from sacmodel.cli.app import main
from sacmodel.hardware.scenarios import load_topology

MACHINE = ["--gpu", "h200", "--gpus", "8", "--tp", "8", "--model", "deepseek-r1"]
RUN = {"backend": "sglang", "dataset_name": "random", "request_rate": math.inf, "random_input_len": 1024,
       "random_output_len": 128, "random_range_ratio": 1.0, "duration": 10.0}


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def results(tmp_path):
    """Two runs as a public H200 harness measured them (TTFT with its request path, TPOT of R1 TP8)."""
    p = tmp_path / "results.jsonl"
    p.write_text(json.dumps({**RUN, "max_concurrency": 1, "completed": 3, "output_throughput": 95.0,
                             "mean_ttft_ms": 240.0, "mean_tpot_ms": 9.9}) + "\n" +
                 json.dumps({**RUN, "max_concurrency": 64, "completed": 128, "output_throughput": 2100.0,
                             "mean_ttft_ms": 420.0, "mean_tpot_ms": 29.0}) + "\n")
    return p


def test_calibrate_writes_a_scenario_every_planning_command_takes(capsys, tmp_path, results):
    out = tmp_path / "mine.yaml"
    t0 = time.perf_counter()
    rc, o, e = run(capsys, "calibrate", str(results), *MACHINE, "--out", str(out), "--json")
    assert rc == 0, e
    assert time.perf_counter() - t0 < 60          # the 30 s, with room for a loaded test machine
    d = json.loads(o)
    rows = {r["constant"]: r for r in d["constants"]}
    assert rows["t_request"]["state"] == "fitted" and 0.05 < rows["t_request"]["value"] < 0.3
    assert rows["compute_eff"]["state"].startswith("not identified: transferred; pinned by")
    topo = load_topology(out)
    assert topo.calibration["t_request"].source.startswith("calibrated: 2 runs")
    rc, o, e = run(capsys, "predict", "--scenario", str(out), "--system", "gpu", "--context", "1K",
                   "--output", "128", "--concurrency", "4")
    assert rc == 0, e
    assert "calibration's own leave-one-run-out error" in " ".join(o.split())
    for argv in (["compare", "--systems", "gpu", "--contexts", "1K", "--concurrency", "4", "--output", "128"],
                 ["plan", "--system", "gpu", "--context", "1K", "--output", "128", "--slo", "tbt_mean_ms=30",
                  "--vary", "concurrency"],
                 ["pareto", "--system", "gpu", "--context", "1K", "--output", "128", "--concurrency", "4,16"],
                 ["predict", "--gpu", "b200", "--system", "gpu", "--context", "1K", "--output", "128"]):
        rc, o, e = run(capsys, argv[0], "--scenario", str(out), *argv[1:])
        assert rc == 0, (argv, e)


@pytest.mark.parametrize("text, msg", [
    ('{"completed": 3, "output_throughput": 9', "not valid JSON"),
    (json.dumps({**RUN, "completed": 3, "output_throughput": 9.0, "mean_ttft_ms": 1.0}), "mean_tpot_ms"),
    (json.dumps({**RUN, "completed": 3, "output_throughput": 9.0, "mean_ttft_ms": -1.0, "mean_tpot_ms": 2.0}),
     "mean_ttft_ms"),
    (json.dumps({**RUN, "completed": 3, "output_throughput": 9.0, "mean_ttft_ms": 1.0, "mean_tpot_ms": 2.0,
                 "model_id": "meta-llama/Llama-3.1-8B-Instruct"}), "a run of meta-llama/Llama-3.1-8B-Instruct"),
])
def test_hostile_files_exit_2_with_one_line_and_overwrite_nothing(capsys, tmp_path, text, msg):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text)
    out = tmp_path / "mine.yaml"
    out.write_text("# the user's own scenario\n")
    rc, o, e = run(capsys, "calibrate", str(bad), *MACHINE, "--out", str(out), "--force")
    assert rc == 2 and msg in e and len(e.strip().splitlines()) == 1, e
    assert out.read_text() == "# the user's own scenario\n"


def test_an_existing_out_file_is_refused_without_force(capsys, tmp_path, results):
    out = tmp_path / "mine.yaml"
    out.write_text("keep me\n")
    rc, o, e = run(capsys, "calibrate", str(results), *MACHINE, "--out", str(out))
    assert rc == 2 and "exists; pass --force" in e and out.read_text() == "keep me\n"
    rc, o, e = run(capsys, "calibrate", str(results), "--out", str(tmp_path / "x.yaml"))
    assert rc == 2 and "give the machine they ran on: --gpu" in e


def test_launch_arguments_from_a_server_log(capsys, tmp_path, results):
    log = tmp_path / "server.log"
    log.write_text("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', tp_size=8, "
                   "dp_size=1, ep_size=1, mem_fraction_static=0.82, chunked_prefill_size=32768, "
                   "enable_dp_attention=False)\n")
    out = tmp_path / "log.yaml"
    rc, o, e = run(capsys, "calibrate", str(results), "--server-log", str(log), "--gpu", "h200",
                   "--params", "t_request", "--out", str(out), "--json")
    assert rc == 0, e
    topo = load_topology(out)
    assert topo.model_name == "deepseek-r1" and len(topo.gpus) == 8
    assert topo.serving["mem_fraction"].value == 0.82 and topo.serving["prefill_chunk"].value == 32768


@pytest.mark.parametrize("args, named", [("mem_fraction_static=1.5", "server_args mem_fraction_static=1.5: "),
                                         ("tp_size=3", "server_args tp_size=3: ")])
def test_a_server_log_setting_the_machine_refuses_is_named_with_its_log(capsys, tmp_path, results, args, named):
    """A launch argument from --server-log that the machine refuses said 'scenario: mem_fraction must be in
    (0, 1)': a name the log does not use, and not the log."""
    log = tmp_path / "server.log"
    log.write_text(f"server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', tp_size=8, {args})\n"
                   .replace("tp_size=8, tp_size=3", "tp_size=3"))
    rc, o, e = run(capsys, "calibrate", str(results), "--server-log", str(log), "--gpu", "h200", "--dry-run")
    assert rc == 2 and e.startswith(f"sacmodel: error: {log}: {named}") and len(e.strip().splitlines()) == 1, e
