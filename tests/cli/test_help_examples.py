"""Every example that a `--help` prints runs as written from the project root, on shipped data (issues 22 and
36): the test runs each in a folder holding only what the project root holds for reading (``examples/``,
``topologies/``) and ``../shared`` (the shared data), so an example naming a file that does not exist fails."""
import shlex

import pytest
from measured_data import SHARED, needs_shared

from sacmodel.cli import app as cli
from sacmodel.cli import main
from sacmodel.data.runs import REPO


def _examples():
    ap = cli.build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    return [line.strip() for p in sub.choices.values() for line in (p.epilog or "").splitlines()[1:]
            if line.strip().startswith("sacmodel")]


def _folder(tmp_path):
    """A stand-in for the project root: its shipped folders linked, ../shared beside it, outputs kept here."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "shared").symlink_to(SHARED.parent)
    for name in ("examples", "topologies"):
        (work / name).symlink_to(REPO / name)
    return work


EXAMPLES = _examples()


@needs_shared
@pytest.mark.parametrize("line", EXAMPLES, ids=[f"{i:02d}-{ln.split()[1]}" for i, ln in enumerate(EXAMPLES)])
def test_every_help_example_runs_as_written(line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(_folder(tmp_path))
    cmd, _, redirect = line.split("#")[0].partition(" > ")
    rc = main(shlex.split(cmd)[1:])
    out, err = capsys.readouterr()
    assert rc == 0, f"{line}\n{err}"
    assert out.strip() or redirect or "--csv" in cmd or "--plot" in cmd, line
