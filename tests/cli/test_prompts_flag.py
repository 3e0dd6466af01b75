"""Issue 32, item 1: --prompts on every planning command, and every header names the workload."""
import pytest

from sacmodel.cli import main

COMMANDS = ("predict", "compare", "plan", "pareto", "breakeven", "winner-map", "sweep", "sensitivity")


def run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("command", COMMANDS)
def test_every_planning_command_takes_prompts(command, capsys):
    rc, out, _ = run(capsys, command, "--help")
    assert rc == 0 and "--prompts {shared,distinct}" in out


@pytest.mark.parametrize("args", [
    ("breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--vary", "context", "--lo", "8K", "--hi", "16K",
     "--unloaded", "--prompts", "shared"),
    ("sensitivity", "--system", "cxl", "--context", "8K", "--unloaded", "--prompts", "distinct"),
    ("sweep", "--system", "cxl", "--grid", "context=8K,16K", "--prompts", "distinct")])
def test_prompts_has_no_effect_on_the_closed_form_and_says_so(args, capsys):
    rc, _, err = run(capsys, *args)
    assert rc == 2 and "--prompts" in err


def test_headers_name_the_workload(capsys):
    kw = ("--context", "1K", "--output", "4", "--concurrency", "2", "--requests", "2", "--draws", "1")
    rc, out, _ = run(capsys, "predict", "--system", "gpu", *kw)
    assert rc == 0 and "one shared cached prompt and identical outputs: the testbed benchmark" in " ".join(out.split())
    rc, out, _ = run(capsys, "predict", "--system", "gpu", "--prompts", "distinct", *kw)
    assert rc == 0 and "independent users: distinct prompts (each cached) and outputs" in " ".join(out.split())
