"""Issue 10, command-line side: fast start, help, tables at 80 columns, units, honest defaults and labels,
files only where asked, --json/--csv, plots with quantities and units, bring-your-own model and hardware."""
import csv
import io
import json
import re
import subprocess
import sys

import pytest

from sacmodel.cli import app as cli
from sacmodel.cli import serving as cli_serving
from sacmodel.cli import main
from sacmodel.plots import serving as plots
from sacmodel.util import progress


def run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


# ---- start-up -----------------------------------------------------------------------------------------
def test_help_and_predict_parsing_import_no_heavy_library():
    code = ("import sys; from sacmodel.cli.app import build_parser; "
            "build_parser().parse_args(['predict', '--system', 'cxl', '--context', '32K']); "
            "print(sorted(m for m in ('sympy', 'pint', 'scipy', 'numpy', 'matplotlib', 'networkx', 'pydantic') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_version_and_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "sacmodel", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and re.fullmatch(r"sacmodel \d+\.\d+\.\d+\n", r.stdout)


# ---- help ---------------------------------------------------------------------------------------------
def _subparsers():
    ap = cli.build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


def test_every_option_of_every_command_has_help_and_every_command_examples():
    for name, p in _subparsers().items():
        assert p.epilog and "examples:" in p.epilog and f"sacmodel {name}" in p.epilog, name
        for act in p._actions:
            if act.dest != "help":
                assert act.help and len(act.help) > 10, f"{name} {act.option_strings or act.dest}: no help"


def test_time_scale_help_says_one_thing():
    h = _subparsers()["replay"].format_help()
    assert "divided by X: 2 = requests arrive twice as fast" in " ".join(h.split())


def test_bad_option_is_one_line_with_a_pointer_to_help(capsys):
    rc, _, err = run(capsys, "predict", "--system", "cxl")
    assert rc == 2 and err.count("\n") == 1 and "--context" in err and "sacmodel predict --help" in err


# ---- tables and units ---------------------------------------------------------------------------------
def _fits(text):
    lines = text.splitlines()
    assert "…" not in text and max(len(x) for x in lines) <= 80, text


def test_tables_fit_80_columns_without_truncation(capsys):
    for args in (["models"], ["compare", "--contexts", "16K,128K", "--concurrency", "8", "--cold"],
                 ["predict", "--system", "rdma", "--context", "128K", "--concurrency", "8"],
                 ["sensitivity", "--system", "cxl", "--context", "32K", "--unloaded", "--top", "5"]):
        rc, out, _ = run(capsys, *args)
        assert rc == 0
        _fits(out)


def test_predict_shows_memory_use_and_units_per_row(capsys):
    rc, out, _ = run(capsys, "predict", "--system", "cxl", "--context", "32K", "--concurrency", "16")
    assert rc == 0 and "memory use vs capacity" in out and "CXL pool" in out
    rows = {ln.split()[0]: ln.split()[-1] for ln in out.splitlines() if ln.strip() and len(ln.split()) >= 3}
    assert rows["swap_bandwidth_share"] == "GB/s" and rows["share_time_prefill"] == "%" and rows["step_swap"] == "ms"
    metrics = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.strip().startswith(("TTFT", "output"))}
    assert "ms" in metrics["TTFT"] and "tok/s" in metrics["output"]         # a unit; an exact prompt: one run
    assert metrics["TTFT"][-1] == "ms" and "range" not in out
    rc, out, _ = run(capsys, "predict", "--system", "cxl", "--context", "32K", "--concurrency", "16", "--drawn-tail")
    ttft = next(ln.split() for ln in out.splitlines() if ln.strip().startswith("TTFT mean"))
    assert "-" in ttft[-1] and "range" in out                                # drawn tails: the draws' range


def test_breakeven_ratio_wording_and_units(capsys):
    # unloaded, cxl's TBT stays within 1.5x dram's over 8K-16K: say so, do not say it "wins"
    rc, out, _ = run(capsys, "breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--ratio", "1.5",
                     "--vary", "context", "--lo", "8K", "--hi", "16K", "--unloaded", "--points", "4")
    assert rc == 0 and "stays within 1.5x" in out and "wins" not in out and "unloaded" in out
    rc, out, _ = run(capsys, "breakeven", "--a", "cxl", "--b", "cxl-prefetch", "--metric", "e2e", "--vary",
                     "pf_dma_bw", "--lo", "1 GB/s", "--hi", "1 TB/s", "--context", "128K", "--output", "16K",
                     "--unloaded")
    assert rc == 0 and re.search(r"pf_dma_bw = \d+\.\d+ GB/s", out), out


def test_sweep_over_output_gives_whole_tokens(capsys):
    rc, out, _ = run(capsys, "sweep", "--system", "cxl", "--grid", "output=64:32K:9", "--context", "32K")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and rows and all(re.fullmatch(r"\d+", r["output"]) for r in rows)
    assert "tbt_unloaded_s" in rows[0]                   # the column says what it is and its unit


# ---- honest defaults ----------------------------------------------------------------------------------
def test_breakeven_is_loaded_by_default_and_labels_the_closed_form(capsys):
    args = ["breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--vary", "context", "--lo", "16K",
            "--hi", "64K", "--points", "3", "--concurrency", "8", "--json"]
    rc, out, _ = run(capsys, *args)
    d = json.loads(out)
    assert rc == 0 and d["model"] == "loaded" and d["metric"] == "tbt_mean_ms" and d["workload"]["concurrency"] == 8
    rc, out, _ = run(capsys, *args[:-3], "--unloaded", "--json")
    d = json.loads(out)
    assert rc == 0 and d["model"] == "unloaded" and d["metric"] == "tbt"
    rc, out, _ = run(capsys, *args[:-3], "--unloaded")
    assert "unloaded closed form: one request alone" in out


def test_loaded_and_unloaded_sensitivity_differ_and_say_which(capsys):
    # a short workload (the labels and the parameters asked are what is checked, not the elasticities' size)
    rc, out, _ = run(capsys, "sensitivity", "--system", "cxl", "--context", "64K", "--concurrency", "32",
                     "--requests", "64", "--output", "128", "--hardware", "--json")
    loaded = json.loads(out)
    assert rc == 0 and loaded["model"] == "loaded" and loaded["workload"]["concurrency"] == 32
    assert all(r["parameter"].startswith(("node:", "link:", "node@", "link@")) for r in loaded["rows"])
    rc, out, _ = run(capsys, "sensitivity", "--system", "cxl", "--context", "64K", "--unloaded", "--json")
    assert rc == 0 and json.loads(out)["model"] == "unloaded"


def test_unloaded_flags_refuse_loaded_options(capsys):
    rc, _, err = run(capsys, "winner-map", "--unloaded", "--concurrency", "8", "--x", "context=8K:64K:3", "--y",
                     "output=64:1K:3")
    assert rc == 2 and "no effect with --unloaded" in err


def test_expr_labels_unloaded_and_shows_the_loaded_value(capsys):
    rc, out, _ = run(capsys, "expr", "--system", "cxl", "--metric", "tbt", "--bind", "--context", "32K",
                     "--concurrency", "16")
    assert rc == 0 and "unloaded (one request alone" in out and "loaded at concurrency 16" in out
    assert re.search(r"tbt = \d+\.\d+ ms", out)


def test_open_loop_overload_is_reported(capsys):
    rc, out, _ = run(capsys, "predict", "--system", "cxl", "--context", "32K", "--rate", "50", "--requests", "100",
                     "--json")
    d = json.loads(out)["load"]
    assert rc == 0 and d["overloaded"] and d["offered_req_s"] == 50 and d["served_req_s"] < 5
    rc, out, _ = run(capsys, "predict", "--system", "cxl", "--context", "32K", "--rate", "50", "--requests", "100")
    assert "overloaded" in out and "offered 50 req/s" in out
    rc, out, _ = run(capsys, "predict", "--system", "cxl", "--context", "32K", "--rate", "0.05", "--requests", "20",
                     "--json")
    d = json.loads(out)["load"]
    assert not d["overloaded"] and d["served_req_s"] == pytest.approx(0.05)


def test_load_report_prefers_the_engines_figures():
    class P:
        breakdown = {"offered_req_s": 4.0, "served_req_s": 1.0}

    class A:
        rate, system = 4.0, "cxl"
    assert cli_serving._load_report("sac-testbed", A, P, {}) == {"offered_req_s": 4.0, "served_req_s": 1.0,
                                                                 "overloaded": True}


# ---- files only where asked; --json and --csv ----------------------------------------------------------
def test_winner_map_writes_nothing_without_plot(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(capsys, "winner-map", "--unloaded", "--x", "context=8K:64K:3", "--y", "output=64:1K:3")
    assert rc == 0 and "best system" in out and list(tmp_path.iterdir()) == []


def test_json_and_csv_on_table_commands(capsys, tmp_path):
    for args in (["models"], ["scenarios"], ["compare", "--contexts", "32K", "--concurrency", "8"],
                 ["winner-map", "--unloaded", "--x", "context=8K:64K:3", "--y", "output=64:1K:2"],
                 ["sensitivity", "--system", "dram", "--context", "32K", "--unloaded", "--top", "3"],
                 ["plan", "--system", "cxl", "--context", "32K", "--concurrency", "8", "--slo",
                  "tbt_mean_ms=500", "--max", "2"]):
        rc, out, _ = run(capsys, *args, "--json")
        assert rc == 0 and json.loads(out), args
        f = tmp_path / f"{args[0]}.csv"
        rc, _, err = run(capsys, *args, "--csv", str(f))
        rows = list(csv.reader(f.open()))
        assert rc == 0 and len(rows) >= 2 and f"wrote {f}" in err, args
    rc, out, _ = run(capsys, "models", "--csv", "-")
    assert out.startswith("name,attention,layers") and "deepseek-v3.2" in out


# ---- bring your own model and hardware -----------------------------------------------------------------
def test_model_option_takes_a_catalog_name_or_a_config(capsys, tmp_path):
    from dataclasses import replace

    from sacmodel.hardware.models import CATALOG_CONFIGS
    from sacmodel.hardware.scenarios import as_topology
    from sacmodel.serving.predict import predict
    args = ["predict", "--system", "gpu", "--context", "16K", "--concurrency", "4", "--json"]
    base = json.loads(run(capsys, *args)[1])
    rc, out, _ = run(capsys, *args, "--model", "deepseek-v3")
    dense = json.loads(out)
    # --model is the scenario with that model in place of its own (and SGLang's page size for its attention: 1
    # for a model without DSA, issue 36): the same numbers as doing so by hand
    import copy
    t = copy.deepcopy(as_topology("sac-testbed"))
    t.serving["page_tokens"].value = 1
    by_hand = predict(replace(t, model_name="deepseek-v3", model_overrides={}, _routes={}), "gpu", context=16384,
                      output=1024, concurrency=4)
    assert rc == 0 and dense["tbt_mean_ms"] == by_hand.tbt_mean_ms != base["tbt_mean_ms"]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CATALOG_CONFIGS["deepseek-v3"]))
    rc, out, _ = run(capsys, *args, "--model", str(cfg))
    assert rc == 0 and json.loads(out)["tbt_mean_ms"] == pytest.approx(dense["tbt_mean_ms"])


def test_prompts_flag_reaches_predict_only_when_given(capsys, monkeypatch):
    import sacmodel.serving.predict as serving
    seen, real = [], serving.predict

    def spy(*a, **kw):
        seen.append(kw.pop("prompts", None))
        return real(*a, **kw)
    monkeypatch.setattr(serving, "predict", spy)
    base = ["predict", "--system", "cxl", "--context", "8K", "--concurrency", "2", "--json"]
    assert run(capsys, *base)[0] == 0 and run(capsys, *base, "--prompts", "distinct")[0] == 0
    assert seen == [None, "distinct"]


def test_scenario_template_is_documented_and_loads(capsys, tmp_path):
    rc, out, _ = run(capsys, "scenarios", "--template")
    path = tmp_path / "mine.yaml"
    path.write_text(out)
    assert rc == 0 and out.count("#") > 20 and "source:" in out
    from sacmodel.hardware.scenarios import load_topology
    from sacmodel.serving.predict import predict
    t = load_topology(path)
    assert t.name == "my-cluster" and len(t.gpus) == 8
    for s in ("gpu", "dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk"):
        assert predict(path, s, context=16384, output=64, concurrency=8).feasible, s


def test_scenarios_lists_scenarios_only(capsys):
    rc, out, _ = run(capsys, "scenarios", "--json")
    names = [r["name"] for r in json.loads(out)]
    assert rc == 0 and "sac-testbed" in names and "prices" not in names


# ---- plots ----------------------------------------------------------------------------------------------
@pytest.fixture
def figures(monkeypatch):
    """Capture the figures the plot functions save (to inspect their axes) instead of writing files."""
    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or path)
    return figs


def test_axes_name_quantity_and_unit():
    assert plots.quantity_axis("node:cxl_device.bandwidth") == ("node:cxl_device.bandwidth (GB/s)", 1e-9)
    assert plots.quantity_axis("context")[0] == "context (tokens)"
    assert plots.quantity_axis("link:gpu.latency", [1e-7, 2e-6]) == ("link:gpu.latency (us)", 1e6)
    assert plots.metric_axis("tbt") == ("unloaded TBT (ms)", 1e3)
    assert plots.metric_axis("tbt_mean_ms")[0] == "mean TBT (ms)"


def test_breakeven_and_winner_map_plots_have_units(figures, capsys):
    assert main(["breakeven", "--a", "cxl", "--b", "dram", "--metric", "tbt", "--vary", "context", "--lo", "8K",
                 "--hi", "64K", "--unloaded", "--points", "4", "--plot", "be.png"]) == 0
    assert main(["winner-map", "--unloaded", "--x", "context=8K:256K:4", "--y", "output=64:16K:4", "--plot",
                 "m.png"]) == 0
    be, wm = (f.axes[0] for f in figures)
    assert be.get_ylabel() == "unloaded TBT (ms)" and be.get_xlabel() == "context (tokens)" and be.get_title()
    assert wm.get_xlabel() == "context (tokens)" and wm.get_ylabel() == "output (tokens)"
    assert "unloaded" in wm.get_title()


def test_sensitivity_plot_honours_top(figures, capsys):
    assert main(["sensitivity", "--system", "cxl", "--context", "32K", "--unloaded", "--top", "4", "--plot",
                 "t.png"]) == 0
    assert len(figures[0].axes[0].patches) == 4


def test_validation_scatter_shows_every_system(figures):
    from sacmodel.data.runs import Run
    from sacmodel.fit.compare import Comparison
    comps = []
    for i, s in enumerate(("gpu", "dram", "cxl", "rdma")):
        r = Run(f"{s}.json", s, 32768, 1024, 64, 512, metrics={"ttft_mean_ms": 100.0 * (i + 1), "tbt_mean_ms": 50.0,
                                                                 "output_throughput_tok_s": 900.0})
        comps.append(Comparison(r, {"ttft_mean_ms": 110.0 * (i + 1), "tbt_mean_ms": 55.0,
                                    "output_throughput_tok_s": 850.0}, True, None))
    plots.plot_validation(comps, "v.png", title="four runs, one per system")
    ax = figures[0].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:4] == ["gpu (1)", "dram (1)", "cxl (1)", "rdma (1)"]
    assert figures[0]._suptitle.get_text() == "four runs, one per system"


# ---- helpers --------------------------------------------------------------------------------------------
def test_progress_prints_a_line_every_few_seconds_when_not_a_terminal(monkeypatch, capsys):
    """Piped: a long loop reports on standard error (one line per LINE_EVERY_S), a short one prints nothing."""
    import time
    monkeypatch.setenv("SACMODEL_PROGRESS", "1")
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.05)
    for _ in progress.track(range(3), "slow loop"):
        time.sleep(0.12)
    err = capsys.readouterr().err
    assert "slow loop: " in err and "/3" in err
    monkeypatch.setattr(progress, "LINE_EVERY_S", 60.0)
    list(progress.track(range(3), "quick"))
    with progress.status("quick status"):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("SACMODEL_PROGRESS", "0")
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.01)
    for _ in progress.track(range(2), "off"):
        time.sleep(0.03)
    assert capsys.readouterr().err == ""


def test_progress_passes_every_item_and_nests(monkeypatch):
    assert list(progress.track(range(5), "x")) == [0, 1, 2, 3, 4]         # not a terminal: no display
    monkeypatch.setattr(progress, "enabled", lambda: True)
    out = [(i, list(progress.track("ab", "inner"))) for i in progress.track(range(3), "outer")]
    assert out == [(0, ["a", "b"]), (1, ["a", "b"]), (2, ["a", "b"])]
    with progress.status("spinner"):
        pass
    assert progress._live is None


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    from sacmodel.util.files import atomic_path, write_text
    f = tmp_path / "keep.csv"
    f.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(f) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert f.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["keep.csv"]
    write_text(f, "new")
    assert f.read_text() == "new"


def test_shared_names_match_the_library():
    from sacmodel.planning import common
    from sacmodel.serving import systems
    from sacmodel.util import names
    assert names.SYSTEMS == systems.SYSTEMS and names.MAIN_SYSTEMS == systems.MAIN_SYSTEMS
    assert names.BACKENDS == systems.BACKENDS and common.LOADED == names.LOADED
    assert names.fmt_value(3.456e9, "bandwidth") == "3.456 GB/s" and names.fmt_value(1.858e-6, "time") == "1.858 us"


def test_capacity_rows_get_their_unit():
    assert cli_serving._usage_unit("hbm", {"used": 1.6e10, "capacity": 3.1e10}) == "bytes"
    assert cli_serving._usage_unit("device_pool", {"used": 65088, "capacity": 200000}) == "tokens"
    assert cli_serving._usage_unit("max_total_tokens", {"used": 4e8, "capacity": 5e8}) == "tokens"
    assert cli_serving._usage_unit("pool", {"used": 5, "capacity": 10, "unit": "bytes"}) == "bytes"
    assert cli_serving._unit_of("peak_device_tokens_per_rank") == ("peak_device_tokens_per_rank", "tokens", 1.0)


def test_every_help_example_parses():
    import shlex
    ap = cli.build_parser()
    for name, p in _subparsers().items():
        for line in p.epilog.splitlines()[1:]:
            words = shlex.split(line.split(" > ")[0].split("#")[0])
            if name in ("replay", "trace-stats", "hitrate") or words[:1] != ["sacmodel"]:
                continue                      # (trace files of the examples need not exist here)
            try:
                ap.parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"example does not parse: {line.strip()}")


def test_loaded_breakeven_over_concurrency_runs(capsys):
    """The example in `breakeven --help` that varies the concurrency (the workload line had no concurrency)."""
    rc, out, err = run(capsys, "breakeven", "--a", "cxl", "--b", "rdma", "--metric", "throughput",
                       "--vary", "concurrency", "--lo", "8", "--hi", "64", "--context", "32K", "--points", "4")
    assert rc == 0, err
    assert "over concurrency" in out and "8 x concurrency requests" in out


def test_sensitivity_draws_reach_every_prediction(capsys):
    """--draws N: each loaded prediction averages N draws (the workload says so and the API gives the same
    elasticities); with --unloaded it is refused, the closed form having no randomness."""
    from sacmodel.planning.common import hardware_parameters
    from sacmodel.planning.sensitivity import sensitivity_loaded
    args = ("sensitivity", "--system", "gpu", "--context", "8K", "--concurrency", "4", "--hardware", "--json")
    rc, out, _ = run(capsys, *args, "--draws", "2")
    d = json.loads(out)
    assert rc == 0 and d["workload"]["draws"] == 2
    api = {n: e for n, e, _, _ in sensitivity_loaded("sac-testbed", "gpu", "tbt_mean_ms", context=8192, output=1024,
                                                      concurrency=4, draws=2,
                                                      params=hardware_parameters("sac-testbed"))}
    for r in d["rows"]:
        assert r["elasticity"] == pytest.approx(api[r["parameter"]], abs=1e-12)
    rc, _, err = run(capsys, "sensitivity", "--system", "gpu", "--context", "8K", "--unloaded", "--draws", "4")
    assert rc == 2 and "no effect with --unloaded" in err
