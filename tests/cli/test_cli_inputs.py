"""Issue 9, command-line and Python-API cases: each bad input ends as a one-line exit-2 message (or a right
answer), never a traceback, never a run without bound. One named test per reported case."""
import json

import numpy as np
import pytest

import sacmodel
from sacmodel.cli import main
from sacmodel.cli.types import Bad, count, grid_axis, tokens, value_of
from sacmodel.planning.common import SolverError
from sacmodel.planning.sweep import winner_map
from sacmodel.util.names import LIMITS


def refused(capsys, *args, msg):
    """Run the CLI in-process; it must exit 2 with exactly one stderr line containing ``msg``."""
    rc = main(list(args))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert msg in err and "Traceback" not in err
    assert err.count("\n") == 1, err
    return err


BE = ["breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt"]


@pytest.mark.parametrize("text", ["2**10", "9**9**9 B", "2*512 B", "1e3+24 B", "(1024) B", "sqrt(4) KiB"])
def test_entry_bytes_arithmetic_is_refused_not_evaluated(capsys, text):
    refused(capsys, "microbench", "--backend", "cxl", "--topk", "2048", "--entry-bytes", text,
            msg="arithmetic is not evaluated")


def test_entry_bytes_number_with_unit_is_read(capsys):
    assert main(["microbench", "--backend", "cxl", "--topk", "64", "--entry-bytes", "1.125 KiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entry_bytes"] == 1152.0


def test_breakeven_points_beyond_limit(capsys):
    refused(capsys, *BE, "--vary", "context", "--lo", "8K", "--hi", "128K", "--points", "1e8",
            msg=f"at most {LIMITS['points']:,}")


def test_predict_requests_beyond_limit(capsys):
    refused(capsys, "predict", "--system", "cxl", "--context", "32K", "--requests", "10000000",
            msg=f"at most {LIMITS['requests']:,}")


def test_sweep_grid_beyond_point_limit(capsys):
    refused(capsys, "sweep", "--system", "cxl", "--grid", "context=8K:64K:5000", "--grid",
            "sw_bw=1GB/s:10GB/s:5000", msg="at most 5,000,000")


def test_winner_map_3000_by_3000_refused(capsys):
    refused(capsys, "winner-map", "--unloaded", "--x", "context=8K:8M:3000", "--y", "t_graph_kernel=0.1ms:1ms:3000",
            msg="cells")


def test_winner_map_unknown_system(capsys):
    refused(capsys, "winner-map", "--systems", "foo", "--x", "context=8K:64K:3", "--y", "output=64:1K:3",
            msg="unknown system 'foo'")


def test_sweep_csv_to_a_folder(capsys):
    refused(capsys, "sweep", "--system", "cxl", "--grid", "context=8K:64K:3", "--csv", "/", msg="is a folder")


def test_sweep_full_over_a_hardware_number(capsys):
    refused(capsys, "sweep", "--full", "--system", "cxl", "--context", "32K", "--grid",
            "node:gpu.hbm_bandwidth=1TB/s:2TB/s:2", msg="vary hardware numbers with the vectorised sweep")


def test_plan_prices_as_a_list(capsys, tmp_path):
    p = tmp_path / "prices.yaml"
    p.write_text("- gpu\n- 2.0\n")
    refused(capsys, "plan", "--system", "cxl", "--context", "32K", "--slo", "tbt_mean_ms=500", "--max", "2",
            "--prices", str(p), msg="prices.yaml: a price table maps 'parts:'")


def test_scenario_of_5000_characters(capsys):
    refused(capsys, "predict", "--system", "cxl", "--context", "32K", "--scenario", "x" * 5000,
            msg="5,000 characters")


@pytest.mark.parametrize("lo", ["0", "0 GB/s", "-5 GB/s"])
def test_breakeven_bandwidth_from_zero(capsys, lo):
    refused(capsys, *BE, "--vary", "node:cxl_device.bandwidth", "--lo", lo, "--hi", "100 GB/s", "--context",
            "32K", msg="node:cxl_device.bandwidth")


@pytest.mark.parametrize("opt,value,msg", [("--ratio", "nan", "not a number"), ("--ratio", "inf", "not a"),
                                           ("--ratio", "0", "must be > 0"), ("--points", "0", "must be >= 2"),
                                           ("--points", "1", "must be >= 2")])
def test_breakeven_ratio_nan_and_points_zero(capsys, opt, value, msg):
    refused(capsys, *BE, "--vary", "context", "--lo", "8K", "--hi", "128K", opt, value, msg=msg)


def test_vary_unknown_hardware_field(capsys):
    err = refused(capsys, *BE, "--unloaded", "--vary", "node:gpu.foo", "--lo", "1", "--hi", "2",
                  "--context", "32K", msg="node:gpu.foo: no such hardware number")
    assert "node:gpu.hbm_bandwidth" in err           # the message lists what exists


def test_compare_empty_contexts(capsys):
    refused(capsys, "compare", "--contexts", "", msg="give at least one token count")


def test_sensitivity_concurrency_zero(capsys):
    refused(capsys, "sensitivity", "--system", "cxl", "--context", "32K", "--concurrency", "0", msg="must be >= 1")


def test_predict_rate_1e_300_refused(capsys):
    refused(capsys, "predict", "--system", "cxl", "--context", "32K", "--rate", "1e-300", msg="must be >= 0.0001")


@pytest.mark.parametrize("args,msg", [
    (["predict", "--system", "cxl", "--context", "-5"], "not a token count"),
    (["predict", "--system", "cxl", "--context", "99999999999"], "at most 16,777,216 tokens"),
    (["predict", "--system", "cxl", "--context", "32K", "--cxl-devices", "2.5"], "not a whole number"),
    (["predict", "--system", "cxl", "--context", "32K", "--model", "no-such-model"], "unknown model"),
    (["replay", "/"], "is a folder"),
    (["compare", "--plot", "curves.txt", "--contexts", "32K"], "give a file name ending in one of"),
    (["sweep", "--system", "cxl", "--grid", "context=64K:8K:3"], "above the high end"),
    (["plan", "--system", "cxl", "--context", "32K", "--slo", "tbt_mean_ms=-3"], "must be > 0"),
    (["breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--vary", "pf_dma_bw", "--lo", "1 GB/s",
      "--hi", "2 GB/s", "--context", "32K"], "symbol of the unloaded closed form"),
    (["breakeven", "--a", "cxl", "--b", "dram", "--metric", "bytes_per_step", "--vary", "context", "--lo", "8K",
      "--hi", "16K"], "add --unloaded"),
])
def test_more_values_refused_at_the_edge(capsys, args, msg):
    refused(capsys, *args, msg=msg)


# ---- the typed parsers themselves --------------------------------------------------------------------
def test_value_parsers_read_units_and_refuse_expressions():
    assert value_of("26 GB/s", "sw_bw") == 26e9
    assert value_of("750 ns", "link:gpu.latency") == pytest.approx(750e-9)
    assert value_of("1.125 KiB", "entry_bytes") == 1152.0 and value_of("656", "entry_bytes") == 656.0
    assert value_of("32K", "context") == 32768 and value_of("2", "cxl_devices") == 2
    assert count("1e3") == 1000 and tokens("1M") == 2 ** 20
    for bad, name in (("26", "sw_bw"), ("26 GB", "sw_bw"), ("2**10", "entry_bytes"), ("1e999 B", "entry_bytes"),
                      ("3 GB/s", "compute_eff"), ("0x10", "context")):
        with pytest.raises(Bad):
            value_of(bad, name)


def test_grid_axis_gives_whole_tokens():
    name, vals = grid_axis("output=64:32K:7")
    assert name == "output" and vals.dtype.kind == "i" and vals[0] == 64 and vals[-1] == 32768
    assert list(grid_axis("context=8K,16K,8K")[1]) == [8192, 16384]      # duplicates dropped


# ---- Python API ----------------------------------------------------------------------------------------
def test_api_sweep_with_a_list_as_context():
    with pytest.raises(SolverError, match="context must be a positive number of tokens"):
        sacmodel.sweep("sac-testbed", "cxl", {"sw_bw": [1e9, 2e9]}, "tbt", context=[-5, 0])


def test_api_sweep_negative_grid_values():
    with pytest.raises(SolverError, match="grid context: values must be positive"):
        sacmodel.sweep("sac-testbed", "cxl", {"context": [-5, 0]}, "tbt")


@pytest.mark.parametrize("call", [
    lambda: sacmodel.sweep(None, "cxl", {"context": [8192]}, "tbt"),
    lambda: sacmodel.breakeven(None, "cxl", "dram", metric="tbt", vary="context", lo=8192, hi=16384, output=64),
    lambda: sacmodel.plan(None, "cxl", workload={"context": 8192, "output": 64, "concurrency": 1},
                          slo={"tbt_mean_ms": 100}),
    lambda: sacmodel.max_load(None, "cxl", workload={"context": 8192, "output": 64}, slo={"tbt_mean_ms": 100}),
    lambda: sacmodel.sensitivity(None, "cxl", context=8192),
    lambda: winner_map(None, ["cxl"], "tbt", ("context", [8192]), ("output", [64])),
], ids=["sweep", "breakeven", "plan", "max_load", "sensitivity", "winner_map"])
def test_api_scenario_none(call):
    with pytest.raises(SolverError, match="scenario must be a built-in name, a YAML path or a Topology, got None"):
        call()


def test_api_breakeven_checks_points_ratio_and_range():
    kw = dict(metric="tbt", vary="context", lo=8192, hi=16384, output=64)
    for bad in (dict(points=0), dict(points=True), dict(ratio=float("nan")), dict(lo=16384, hi=8192)):
        with pytest.raises(SolverError):
            sacmodel.breakeven("sac-testbed", "cxl", "dram", **{**kw, **bad})


def test_api_winner_map_marks_cells_where_nothing_is_feasible():
    # the gpu system alone cannot hold 1M-token contexts at concurrency 64: no winner there, not a wrong one
    wm = winner_map("sac-testbed", ["gpu"], "tbt_mean_ms", ("context", np.array([16384, 2 ** 20])),
                    ("output", np.array([64])), concurrency=64)
    assert wm["winner"].tolist() == [[0], [-1]] and np.isnan(wm["values"][0, 1, 0])



def test_an_error_naming_input_with_line_breaks_stays_on_one_line(capsys, tmp_path):
    # (found by the long fuzz run: a scenario whose link named a node '\r' gave an error split over two lines)
    import yaml
    from sacmodel.hardware.scenarios import TOPOLOGY_DIR
    doc = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
    doc["links"][0]["from"] = "\r"
    (tmp_path / "cr.yaml").write_text(yaml.safe_dump(doc))
    cases = ((str(tmp_path / "cr.yaml"), "link \\r -> "), ("no\rsuch\nfile.yaml", "no\\rsuch\\nfile.yaml"))
    for scenario, shown in cases:
        assert main(["predict", "--system", "cxl", "--context", "8K", "--scenario", scenario]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("sacmodel: error:") and shown in err, err


def test_a_cluster_plans_costs_print_to_the_cent():
    # (a newcomer's find: 'plan --trace' printed 54 in the USD/h column next to 10.80 in its price line)
    from sacmodel.cli.cluster import _cell
    assert _cell("cost_usd_per_hour", 54.0) == "54.00"
    assert _cell("cost_usd_per_million_tokens", 1234.5) == "1,234.50"
    assert _cell("cost_usd_per_hour", float("inf")) == "unfin."
    assert _cell("hit_rate_total", 0.5) == "50.0"
