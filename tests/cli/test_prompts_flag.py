"""Issue 32, item 1: --prompts on every planning command, and every header names the workload."""
import pytest

from sacmodel.cli import main

COMMANDS = ("predict", "compare", "plan", "pareto", "breakeven", "winner-map", "sweep", "sensitivity")


def run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def header(capsys, *flags, requests="2"):
    """(exit status, output with whitespace folded) of a small gpu prediction with ``flags``."""
    rc, out, _ = run(capsys, "predict", "--system", "gpu", *flags, "--context", "1K", "--output", "4",
                     "--concurrency", "2", "--requests", requests, "--draws", "1")
    return rc, " ".join(out.split())


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
    rc, text = header(capsys)
    assert rc == 0 and "one shared cached prompt and identical outputs: the testbed benchmark" in text
    rc, text = header(capsys, "--prompts", "distinct")
    assert rc == 0 and "independent users: distinct prompts (each prefilled) and outputs" in text
    rc, text = header(capsys, "--prompts", "distinct", "--cached")
    assert rc == 0 and "independent users: distinct prompts (each cached) and outputs" in text
    rc, _, err = run(capsys, "predict", "--system", "gpu", "--cold", "--cached", "--context", "1K")
    assert rc == 2 and "--cached" in err


def test_independent_users_prompts_are_prefilled_by_default():
    """Distinct prompts were never sent before (bench_serving's random dataset: no prefix hits), so a
    prediction that names no cache state prefills each one: its TTFT is the --cold one, above the cached one."""
    from sacmodel import scenario
    from sacmodel.serving.predict import predict
    topo = scenario("h200", gpus=8, tp=8, model="deepseek-r1")
    kw = dict(context=4096, output=8, concurrency=4, requests=8)
    base, cold, warm = (predict(topo, "gpu", **kw, **x) for x in ({}, {"prefix_cached": False},
                                                                    {"prefix_cached": True}))
    assert base.config["prompts"] == "distinct" and base.config["prefix_cached"] is False
    assert base.ttft_mean_ms == cold.ttft_mean_ms > 1.5 * warm.ttft_mean_ms


@pytest.mark.parametrize("command", COMMANDS)
def test_every_planning_command_takes_start_next_to_prompts(command, capsys):
    rc, out, _ = run(capsys, command, "--help")
    assert rc == 0 and "--start {together,staggered}" in out
    assert out.index("--start {together,staggered}") > out.index("--prompts {shared,distinct}")


def test_headers_say_how_the_users_start(capsys):
    rc, text = header(capsys, requests="4")
    assert rc == 0 and "the testbed benchmark; users start together" in text
    rc, text = header(capsys, "--prompts", "distinct", requests="4")
    assert rc == 0 and "and outputs; users staggered, steady state" in text
    rc, text = header(capsys, "--prompts", "distinct", "--start", "together", requests="4")
    assert rc == 0 and "users start together; fixed outputs: each wave" in text
    rc, text = header(capsys, "--prompts", "distinct", "--rate", "2", requests="4")
    head = text.split("predicted metrics")[0]
    assert rc == 0 and "Poisson" in head and "users start" not in head and "users staggered" not in head
    rc, _, err = run(capsys, "sensitivity", "--system", "cxl", "--context", "8K", "--unloaded", "--start", "together")
    assert rc == 2 and "--start" in err
