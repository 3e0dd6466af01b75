"""Every example in the README runs as written, and the outputs it shows are the outputs it gives."""
import re
import shlex
from pathlib import Path

import pytest
from measured_data import SHARED

from sacmodel.cli import main

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text() + "\n" + (REPO / "docs" / "tour.md").read_text()   # the tour goes on
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S)
COMMANDS = [(b.split("\n"), i) for i, (lang, b) in enumerate(BLOCKS) if lang == "" and b.startswith("$ sacmodel")]
PYTHON = [b for lang, b in BLOCKS if lang == "python"]
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*\.?\d*(?:x|%)?(?![\w.])")


def examples():
    for lines, _ in COMMANDS:
        cur = None
        for ln in lines:
            if ln.startswith("$ sacmodel"):
                if cur:
                    yield cur
                cur = [ln[2:], []]
            elif cur is not None and ln.strip():
                cur[1].append(ln)
        if cur:
            yield cur


def needs_shared(text: str):
    if "../shared" in text and not SHARED.exists():
        pytest.skip("needs ../shared/data")


@pytest.mark.parametrize("cmd,shown", list(examples()), ids=lambda x: x if isinstance(x, str) else "")
def test_readme_command_gives_the_output_shown(cmd, shown, capsys, monkeypatch):
    needs_shared(cmd)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "140")
    assert main(shlex.split(cmd)[1:]) == 0
    out = capsys.readouterr().out
    got = NUMBER.findall(out)
    for line in shown:
        if line.startswith("("):           # a note of the README's, not output
            continue
        for n in NUMBER.findall(line):
            assert n in got, f"{cmd}: the README shows {n} ({line.strip()[:60]}), the command prints:\n{out}"


@pytest.mark.parametrize("code", PYTHON, ids=[f"python-{i}" for i in range(len(PYTHON))])
def test_readme_python_runs(code, monkeypatch):
    needs_shared(code)
    monkeypatch.chdir(REPO)
    ns: dict = {}
    exec(compile(code, "README", "exec"), ns)
    if 'p = sacmodel.predict("sac-testbed"' in code:       # the results the comments show
        p, q = ns["p"], ns["q"]
        assert (round(p.ttft_mean_ms), round(p.tbt_mean_ms, 1), round(p.output_throughput_tok_s)) == (1505, 83.8, 751)
        assert (q.feasible, round(q.success_fraction, 3)) == (False, 0.268) and "6208 slots" in q.limit
    if "r1 = sacmodel.scenario(" in code:                   # the machines it builds are served
        assert ns["p"].feasible and ns["q"].feasible and ns["q"].tbt_mean_ms > 0
    if "shared_prefix(" in code:                            # llm-d's shape: every request served, prefixes found
        r, hosts = ns["r"], ns["hosts"]
        assert r.success_fraction == 1.0 and r.summary["hit_rate_total"] > 0.5
        assert [row["hosts"] for row in hosts["rows"]] == [1, 4, 8]


def test_the_readme_stays_a_page_for_users():
    """Issue 19: under 260 lines; the longer tour and the model notes live in docs/."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 260
    for section in ("## Set-up", "## Quick tour", "## Concepts", "## Accuracy", "## Commands", "## Limits"):
        assert section in text
