import json
import subprocess
import sys

import pytest

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


def test_infeasible_prediction_names_limit(capsys):
    rc, out, _ = run(capsys, "predict", "--system", "gpu", "--context", "128K", "--concurrency", "192",
                     "--output", "8K")
    assert rc == 0 and "infeasible" in out and "max_total_tokens" in out


@pytest.mark.parametrize("args,msg", [
    (["predict", "--system", "cxl", "--context", "32K", "--scenario", "nope"], "unknown scenario"),
    (["predict", "--system", "cxl", "--context", "32K", "--cxl-devices", "5"], "cxl_devices=5"),
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
