"""Issue 22: plans a user can check, the workload flags of every command, and tables without 1e+06."""
import json
import shlex

import pytest

from sacmodel.cli import main
from sacmodel.cli.common import plain


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _check_line(out: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("check it: "))
    words = shlex.split(line[len("check it: "):])
    assert words[:2] == ["sacmodel", "predict"]
    return words[2:]


@pytest.mark.parametrize("vary, extra", [("cxl_devices", []), ("dp", ["--min", "2", "--max", "8"])])
def test_the_printed_predict_command_reproduces_the_plan(capsys, vary, extra):
    """plan prints the predict command of its answer; run, it gives the plan's own prediction."""
    base = ["plan", "--system", "cxl", "--context", "32K", "--concurrency", "8", "--requests", "16",
            "--output", "64", "--vary", vary, *extra]
    d = _json(capsys, [*base, "--slo", "tbt_mean_ms=1e6", "--json"])
    assert d["found"]
    assert main([*base, "--slo", "tbt_mean_ms=1e6"]) == 0
    argv = _check_line(capsys.readouterr().out)
    p = _json(capsys, ["predict", *argv, "--json"])
    assert p["tbt_mean_ms"] == pytest.approx(d["prediction"]["tbt_mean_ms"], rel=1e-12)
    assert p["ttft_mean_ms"] == pytest.approx(d["prediction"]["ttft_mean_ms"], rel=1e-12)


def test_predict_accepts_more_cxl_devices_than_the_file_lists(capsys):
    """The pool grows by copies of its first device, as plan grows it: 4 devices are faster than 2."""
    two = _json(capsys, ["predict", "--system", "cxl", "--context", "128K", "--concurrency", "16", "--requests", "32",
                         "--output", "64", "--json"])
    four = _json(capsys, ["predict", "--system", "cxl", "--context", "128K", "--concurrency", "16", "--requests",
                          "32", "--output", "64", "--cxl-devices", "4", "--json"])
    assert four["config"]["cxl_devices"] == 4 and four["tbt_mean_ms"] < two["tbt_mean_ms"]


def test_set_applies_what_plan_varies(capsys):
    fast = _json(capsys, ["predict", "--system", "cxl", "--context", "128K", "--concurrency", "16", "--requests", "32",
                          "--output", "64", "--set", "node:cxl_device.bandwidth=1 TB/s", "--json"])
    slow = _json(capsys, ["predict", "--system", "cxl", "--context", "128K", "--concurrency", "16", "--requests", "32",
                          "--output", "64", "--set", "node:cxl_device.bandwidth=5 GB/s", "--json"])
    assert slow["tbt_mean_ms"] > fast["tbt_mean_ms"]
    assert main(["predict", "--system", "cxl", "--context", "8K", "--set", "nonsense=3"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_plan_reports_cost_per_million_tokens_and_price_sources(capsys):
    d = _json(capsys, ["plan", "--system", "cxl", "--context", "32K", "--concurrency", "8", "--requests", "16",
                       "--output", "64", "--slo", "tbt_mean_ms=1e6", "--json"])
    tok_s = d["prediction"]["output_throughput_tok_s"]
    assert d["cost_usd_per_million_tokens"] == pytest.approx(d["cost_usd_per_hour"]["total"] / (tok_s * 3600) * 1e6)
    assert set(d["prices"]) == set(d["cost_usd_per_hour"]) - {"total"}
    assert all(v.get("source") for v in d["prices"].values())


def test_plan_explains_a_target_one_request_alone_misses(capsys):
    d = _json(capsys, ["plan", "--system", "cxl", "--context", "64K", "--cold", "--concurrency", "4", "--requests",
                       "8", "--output", "16", "--max", "2", "--slo", "ttft_mean_ms=10", "--json"])
    assert not d["found"] and "One request alone already takes TTFT" in d["message"]


@pytest.mark.parametrize("cmd", [
    ["predict", "--system", "cxl", "--context", "8K"],
    ["compare", "--contexts", "8K", "--systems", "cxl"],
    ["breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--vary", "context", "--lo", "8K", "--hi", "16K",
     "--points", "2"],
    ["winner-map", "--x", "context=8K,16K", "--y", "concurrency=4,8", "--systems", "cxl,dram"],
    ["plan", "--system", "cxl", "--context", "8K", "--slo", "tbt_mean_ms=1e6", "--max", "1"],
    ["sensitivity", "--system", "cxl", "--context", "8K", "--top", "2"],
    ["sweep", "--system", "cxl", "--full", "--grid", "context=8K", "--workers", "1"],
    ["pareto", "--system", "cxl", "--context", "8K", "--dp", "8", "--cxl-devices", "2"],
])
def test_every_workload_command_takes_output_ranges_and_server_caps(capsys, cmd):
    """--output MIN:MAX, --max-total-tokens and --max-running-requests on every command that takes a workload."""
    flags = ["--output", "0:64", "--max-total-tokens", "100K", "--max-running-requests", "4", "--requests", "8"]
    if cmd[0] not in ("winner-map", "pareto"):
        flags += ["--concurrency", "4"]
    assert main([*cmd, *flags]) == 0, capsys.readouterr().err


def test_server_caps_reach_the_engine(capsys):
    d = _json(capsys, ["predict", "--system", "cxl", "--context", "8K", "--concurrency", "8", "--requests", "8",
                       "--output", "0:64", "--max-total-tokens", "100K", "--max-running-requests", "4", "--json"])
    assert d["capacity"]["usage"]["max_total_tokens"]["capacity"] == 102400
    assert d["config"]["max_running_requests"] == 4


def test_winner_map_over_concurrency_runs(tmp_path, capsys):
    """The --help example that stopped on 'error: concurrency'."""
    out = tmp_path / "map.csv"
    assert main(["winner-map", "--x", "context=16K,32K", "--y", "concurrency=8,16", "--systems", "cxl,dram",
                 "--requests", "16", "--output", "32", "--csv", str(out)]) == 0
    assert "concurrency varied" in capsys.readouterr().out
    assert out.read_text().splitlines()[1].startswith("16384,8,")


def test_plain_numbers_never_scientific():
    assert plain(7000000.0) == "7,000,000" and plain(1234.5) == "1,234" and plain(0.0123) == "0.012"
    assert plain(82.125) == "82.12" and plain(3) == "3" and plain(float("nan")) == "-" and plain(True) == "True"


def test_compare_names_the_setting_that_fixes_an_infeasible_system():
    import io

    from rich.console import Console

    from sacmodel.cli.serving import _explain_limits

    class P:
        feasible, limit = False, "host_pool"
        capacity = {"usage": {"host_pool": {"used": 264.0, "capacity": 100.0}}}

    class Q:
        feasible, limit, capacity = True, None, {}
    con = Console(file=io.StringIO(), width=200)
    _explain_limits(con, [(131072, {"dram": P(), "gpu": Q()}), (262144, {"dram": P(), "gpu": Q()})])
    out = con.file.getvalue()
    assert out.count("(host_pool)") == 1 and "dram first at 131,072 tokens (264% of capacity)" in out
    assert "--concurrency" in out


def test_predict_reports_overload_before_the_tables(capsys):
    assert main(["predict", "--system", "cxl", "--context", "32K", "--rate", "50", "--requests", "64",
                 "--output", "64"]) == 0
    out = capsys.readouterr().out
    assert "overloaded" in out and out.index("overloaded") < out.index("predicted metrics")


def test_plan_never_answers_with_an_overloaded_configuration(capsys):
    """Poisson arrivals above what any size serves: no answer, each try marked overloaded, and the reason."""
    d = _json(capsys, ["plan", "--system", "cxl", "--context", "32K", "--concurrency", "8", "--requests", "32",
                       "--output", "64", "--rate", "50", "--max", "2", "--slo", "tbt_mean_ms=1e6", "--json"])
    assert not d["found"] and all(r["overloaded"] and r["success_fraction"] == 1.0 for r in d["tried"])
    assert "outpace" in d["message"]


def test_compare_header_and_breakeven_range_say_what_was_computed(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")   # the header on one line whatever terminal the worker process inherits
    assert main(["compare", "--contexts", "8K", "--systems", "cxl", "--concurrency", "4", "--output", "16"]) == 0
    assert "32 requests, one shared cached prompt" in " ".join(capsys.readouterr().out.split())
    assert main(["breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--vary", "context", "--lo", "64K",
                 "--hi", "256K", "--points", "3", "--concurrency", "4", "--requests", "4", "--output", "16"]) == 0
    out = capsys.readouterr().out
    assert "of the asked [65,536 tokens, 262,144 tokens]" in out and "163,840 positions" in out


def test_max_load_prints_a_checkable_predict_command_too(capsys):
    base = ["plan", "--system", "cxl", "--context", "32K", "--requests", "64", "--output", "64",
            "--slo", "tbt_mean_ms=60", "--max-load", "concurrency", "--max", "64"]
    d = _json(capsys, [*base, "--json"])
    assert main(base) == 0
    argv = _check_line(capsys.readouterr().out)
    assert argv[argv.index("--concurrency") + 1] == str(d["value"])
    p = _json(capsys, ["predict", *argv, "--json"])
    assert p["tbt_mean_ms"] == pytest.approx(d["prediction"]["tbt_mean_ms"], rel=1e-12) and p["tbt_mean_ms"] <= 60
