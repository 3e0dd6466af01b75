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
