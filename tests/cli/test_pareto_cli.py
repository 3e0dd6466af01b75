"""Issue 22, item 6, command-line side: `sacmodel pareto` (table, --csv, --json, --plot, --emit sglang) and the
examples of its --help."""
import csv
import io
import json
import shlex

import pytest

from sacmodel.cli import app as cli
from sacmodel.cli import main


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _examples(name):
    p = cli.build_parser()._subparsers._group_actions[0].choices[name]
    return [ln.strip() for ln in p.epilog.splitlines()[1:] if ln.strip().startswith("sacmodel")]


@pytest.mark.parametrize("example", _examples("pareto") + [e for e in _examples("plan") if "--emit" in e])
def test_every_help_example_runs(example, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, *shlex.split(example)[1:])
    assert rc == 0, err
    assert out.strip()
    if "--plot" in example:
        assert (tmp_path / "pareto.png").stat().st_size > 10_000


def test_the_issues_command_gives_the_frontier_as_csv(capsys):
    """(Its speed, under 30 s by the issue, is measured by benchmarks/timings.py, not asserted here.)"""
    rc, out, err = run(capsys, "pareto", "--system", "cxl,dram,rdma", "--context", "64K", "--csv", "-")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["system"] for r in rows} == {"cxl", "dram", "rdma"}
    assert all(r["on_system_frontier"] == "True" and r["feasible"] == "True" for r in rows)
    across = [r for r in rows if r["on_frontier"] == "True"]
    assert across
    for r in rows:       # tokens/s per user = 1000 / TBT; per GPU = the server's throughput / its 8 GPUs
        assert float(r["tok_s_per_user"]) == pytest.approx(1000 / float(r["tbt_mean_ms"]), rel=1e-3)
        assert float(r["tok_s_per_gpu"]) == pytest.approx(float(r["output_throughput_tok_s"]) / 8, rel=1e-3)


def test_table_all_json_and_both_spellings_of_system(capsys):
    common = ["--context", "32K", "--concurrency", "8,64", "--dp", "8", "--cxl-devices", "2", "--draws", "1"]
    rc, out, _ = run(capsys, "pareto", "--systems", "cxl,dram", *common)
    assert rc == 0 and "tok/s/user" in out and "tok/s/GPU" in out and "across" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    rc, out_all, _ = run(capsys, "pareto", "--system", "cxl,dram", *common, "--all")
    assert rc == 0 and out_all.count("\n cxl") == 2 and "rows: every configuration" in out_all
    rc, out, _ = run(capsys, "pareto", "--system", "cxl,dram", *common, "--json", "--emit", "sglang")
    d = json.loads(out)
    assert rc == 0 and len(d["points"]) == 4 and d["frontier"]
    assert [s["point"] for s in d["sglang"]] == d["frontier"]
    assert all("python3 -m sglang.launch_server" in s["command"] for s in d["sglang"])


def test_emit_on_pareto_prints_one_command_per_frontier_point(capsys):
    rc, out, _ = run(capsys, "pareto", "--system", "cxl,cxl-prefetch", "--context", "32K", "--concurrency", "8",
                     "--dp", "8", "--cxl-devices", "2", "--draws", "1", "--emit", "sglang")
    assert rc == 0
    heads = [ln for ln in out.splitlines() if ln.startswith("# cxl")]
    n = int(out.split("across systems (")[1].split(" ")[0])
    assert len(heads) == n
    if any(ln.startswith("# cxl-prefetch") for ln in heads):
        assert "# no launch command: cxl-prefetch is a what-if" in out


@pytest.mark.parametrize("args,word", [
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "8,x"], "--concurrency"),
    (["--dp", "3"], "divide tp=8"),
    (["--system", "cxl,foo"], "unknown system"),
    (["--emit", "sglang", "--csv", "-"], "--emit with --csv -"),
    (["--emit", "vllm"], "--emit"),
])
def test_bad_input_is_one_line_and_status_2(args, word, capsys):
    rc, out, err = run(capsys, "pareto", "--context", "32K", "--system", "cxl", *args) if "--system" not in args \
        else run(capsys, "pareto", "--context", "32K", *args)
    assert rc == 2 and err.count("\n") == 1 and word in err, err


def test_plan_emit_is_refused_for_cluster_plans(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 3000, "output_length": 8, "hash_ids": [1, 2, 3]}\n')
    rc, out, err = run(capsys, "plan", "--system", "cxl", "--scenario", "sac-cluster-4x", "--trace", str(trace),
                       "--slo", "ttft_p99_ms=7000", "--emit", "sglang")
    assert rc == 2 and err.count("\n") == 1 and "--emit sglang" in err and "--trace" in err
