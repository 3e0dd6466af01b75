"""Paths on the command line: a dangling symbolic link is named as one, as input and as output (before: 'the
folder '.' does not exist'), and a name longer than the file system allows is a one-line error (before: an
OSError traceback from argparse's type check)."""
from sacmodel.cli import main


def test_dangling_links_are_named(tmp_path, capsys):
    out = tmp_path / "out.csv"
    out.symlink_to(tmp_path / "gone" / "x.csv")
    assert main(["compare", "--contexts", "8K", "--csv", str(out)]) == 2
    err = capsys.readouterr().err
    assert "out.csv' is a symbolic link to" in err and "gone" in err and "does not exist" in err
    trace = tmp_path / "t.jsonl"
    trace.symlink_to(tmp_path / "moved.jsonl")
    assert main(["trace-stats", str(trace)]) == 2
    assert "t.jsonl' is a dangling symbolic link (to" in capsys.readouterr().err


def test_names_too_long_for_the_file_system(tmp_path, capsys):
    long = str(tmp_path / ("a" * 300))
    for argv in (["trace-stats", long + ".jsonl"], ["compare", "--contexts", "8K", "--csv", long + ".csv"],
                 ["validate", long + ".json"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "File name too long" in err[0], err


def test_an_output_never_replaces_a_file_the_command_reads(tmp_path, capsys):
    """--csv on the trace being replayed, --csv on the --scenario (also through a symbolic link) and calibrate's
    --out --force on its own benchmark file used to replace the user's input with the output."""
    import json
    import math
    import shutil
    from pathlib import Path
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}) + "\n")
    scen = tmp_path / "mine.yaml"
    shutil.copy(Path(__file__).parents[2] / "topologies" / "sac-testbed.yaml", scen)
    (tmp_path / "link.csv").symlink_to(scen)
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"dataset_name": "random", "request_rate": math.inf, "random_input_len": 1024,
                                 "random_output_len": 128, "max_concurrency": 1, "completed": 3, "duration": 9.0,
                                 "output_throughput": 95.0, "mean_ttft_ms": 240.0, "mean_tpot_ms": 9.9}) + "\n")
    before = {p: p.read_bytes() for p in (trace, scen, bench)}
    for argv, named in (
            (["replay", str(trace), "--csv", str(trace)], "TRACE"),
            (["compare", "--scenario", str(scen), "--contexts", "8K", "--csv", str(scen)], "--scenario"),
            (["compare", "--scenario", str(scen), "--contexts", "8K", "--csv", str(tmp_path / "link.csv")],
             "--scenario"),
            (["calibrate", str(bench), "--gpu", "h200", "--model", "deepseek-r1", "--out", str(bench), "--force"],
             "PATH")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"is the file {named} reads" in err and len(err.strip().splitlines()) == 1, err
    assert {p: p.read_bytes() for p in before} == before
