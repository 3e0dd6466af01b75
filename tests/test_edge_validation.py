"""Named regression tests for issue 9 (scenario, trace and run-JSON side): every bad input ends as a one-line
error naming the file and field or line (exit 2 from the CLI), never a traceback, never a wrong success."""
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from measured_data import SHARED, needs_shared

from sacmodel.cli import main
from sacmodel.data import records as schemas
from sacmodel.data.microbench import load_microbench
from sacmodel.data.records import DataError
from sacmodel.data.runs import load_run
from sacmodel.data.traces import load_trace
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
from sacmodel.hardware.topology import LIMITS, TopologyError
from sacmodel.hardware.units import UnitError, parse_quantity, parse_tokens

REPO = Path(__file__).resolve().parent.parent
BASE = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
PREDICT = ["predict", "--system", "cxl", "--context", "8K", "--concurrency", "8", "--requests", "8", "--json"]


def cli(capsys, *args):
    """(exit status, stdout, stderr) of the CLI run in-process; argparse exits are caught too."""
    try:
        rc = main(list(args))
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def refused(capsys, *args, names=()):
    """The CLI exits 2 with one error line naming every string in ``names``."""
    rc, _, err = cli(capsys, *args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in err, err
    assert lines and "error:" in lines[-1] and all(n in lines[-1] for n in names), err
    return lines[-1]


def scenario(tmp_path, change=None, text=None, name="s.yaml"):
    d = copy.deepcopy(BASE)
    if change:
        change(d)
    p = tmp_path / name
    p.write_text(text if text is not None else yaml.safe_dump(d, sort_keys=False))
    return p


def serving(name, value):
    """Set serving/calibration parameter ``name`` (added under calibration when the scenario lacks it)."""
    def f(d):
        table = "serving" if name in d["serving"] else "calibration"
        d[table].setdefault(name, {"source": "test"})["value"] = value
    return f


# ---- units and ranges -----------------------------------------------------------------------------------
def test_units_hz_is_not_a_bandwidth(capsys, tmp_path):
    with pytest.raises(UnitError, match="not a bandwidth"):
        parse_quantity("22.5 Hz", "bandwidth")
    p = scenario(tmp_path, lambda d: d["nodes"][0]["hbm_bandwidth"].update(value="22.5 Hz"))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("s.yaml", "gpu_s0", "hbm_bandwidth", "not a bandwidth"))


def test_units_bare_96_is_not_a_capacity(capsys, tmp_path):
    p = scenario(tmp_path, lambda d: d["nodes"][0]["hbm_capacity"].update(value="96"))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("hbm_capacity", "no unit"))
    p = scenario(tmp_path, lambda d: d["nodes"][0]["hbm_capacity"].update(value=96))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("hbm_capacity", "no unit"))


def test_units_bytes_are_a_dimension():
    assert parse_quantity("96 GiB", "bytes") == 96 * 2**30 and parse_quantity("100 Gbit/s", "bandwidth") == 12.5e9
    assert parse_quantity("3 Hz", "rate") == 3.0 and parse_quantity("5 us", "time") == 5e-6
    for text, dim in (("96 GB", "time"), ("1 s", "bytes"), ("2 FLOP/s", "bandwidth"), ("1 B/s", "flops")):
        with pytest.raises(UnitError):
            parse_quantity(text, dim)


def test_units_memory_fraction_in_gb_refused(capsys, tmp_path):
    p = scenario(tmp_path, serving("mem_fraction", "0.85 GB"))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("serving.mem_fraction", "plain number"))


@pytest.mark.parametrize("name,value,msg", [
    ("mem_fraction", 1.5, "must be in (0, 1]"), ("mem_fraction", 0, "must be positive"),
    ("hbm_eff", 1.2, "must be in (0, 1]"), ("compute_eff", 0, "must be positive"),
    ("gqa_decode_eff", 1.5, "must be in (0, 1]"), ("gqa_decode_eff", 0, "must be positive"),
    ("prefill_eff", -0.1, "must be positive"), ("score_correlation", 1.01, "must be in [0, 0.999999]"),
    ("tp", 2.5, "whole number"), ("dp", 0, "must be positive"), ("tp", 0, "must be positive"),
    ("max_total_tokens", 0, "must be positive"), ("max_total_tokens", 1000.5, "whole number"),
    ("device_buffer", -4096, "must be positive"), ("t_graph_kernel", "-1 ms", "non-negative"),
    ("stage_copy_bw", "0 GB/s", "must be positive"), ("cacheline", "0.5 B", "must be in [1 B"), ("cacheline", "1.5 B", "whole number"),
    ("kv_dtype", "int3", "must be one of"),
])
def test_ranges_of_parameters(capsys, tmp_path, name, value, msg):
    p = scenario(tmp_path, serving(name, value))
    refused(capsys, *PREDICT, "--scenario", str(p), names=(f".{name}", msg))


@pytest.mark.parametrize("count,msg", [(0, "greater than or equal to 1"), (2.5, "valid integer"),
                                       ("4", "valid integer"), (True, "valid integer")])
def test_ranges_node_count_is_a_positive_integer(capsys, tmp_path, count, msg):
    p = scenario(tmp_path, lambda d: d["nodes"][0].update(count=count))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("nodes[0]", "count", msg))


def test_ranges_unknown_parameter_is_named(capsys, tmp_path):
    p = scenario(tmp_path, lambda d: d["calibration"].update(compute_efff={"value": 0.3, "source": "typo"}))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("calibration.compute_efff", "unknown parameter"))
    p = scenario(tmp_path, lambda d: d["nodes"][0].update(hbm_speed={"value": "1 TB/s", "source": "x"}))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("gpu_s0", "unknown field 'hbm_speed'"))


def _quick(args, timeout=60):
    """Run the CLI in a subprocess with a time limit: (exit status, stderr, seconds)."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sacmodel", *args], capture_output=True, text=True, cwd=REPO,
                       timeout=timeout)
    return r.returncode, r.stderr, time.monotonic() - t0


def test_units_no_expression_evaluation(tmp_path):
    """'2**10' and '9**9**9 B' are refused as text, never evaluated (the latter ran past 60 s)."""
    for text in ("2**10", "9**9**9 B", "2*3 B", "(1+1) GB", "1e999999 B"):
        with pytest.raises(UnitError):
            parse_quantity(text, "bytes")
        with pytest.raises(UnitError):
            parse_tokens(text)
    rc, err, _ = _quick(["microbench", "--backend", "cxl", "--topk", "2048", "--entry-bytes", "2**10"])
    assert rc == 2 and "Traceback" not in err
    rc, err, _ = _quick(["microbench", "--backend", "cxl", "--topk", "2048", "--entry-bytes", "9**9**9 B"])
    assert rc == 2 and "Traceback" not in err
    p = scenario(tmp_path, lambda d: d["nodes"][0]["hbm_capacity"].update(value="9**9**9 B"))
    rc, err, _ = _quick([*PREDICT, "--scenario", str(p)])
    assert rc == 2 and "hbm_capacity" in err and "cannot parse" in err


# ---- sizes -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [10000, 9223372036854775808])
def test_sizes_gpu_count_limited(capsys, tmp_path, count):
    p = scenario(tmp_path, lambda d: d["nodes"][0].update(count=count))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("nodes[0]", "count", str(LIMITS["node_count"])))


def test_sizes_total_gpus_and_nodes_limited(capsys, tmp_path):
    def many(d):
        for i in range(2):
            d["nodes"][i]["count"] = 1000
    refused(capsys, *PREDICT, "--scenario", str(scenario(tmp_path, many)), names=("more than", "GPUs"))


def test_sizes_scenario_file_size_limited(capsys, tmp_path):
    text = (TOPOLOGY_DIR / "sac-testbed.yaml").read_text() + "#" * (LIMITS["file_bytes"] + 1) + "\n"
    refused(capsys, *PREDICT, "--scenario", str(scenario(tmp_path, text=text)), names=("s.yaml", "byte limit"))


def test_sizes_trace_request_limit(tmp_path, monkeypatch):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": 100, "output_length": 5}) + "\n"
                         for i in range(10)))
    monkeypatch.setitem(schemas.LIMITS, "trace_requests", 5)
    with pytest.raises(DataError, match=r"t.jsonl:6: more than 5 requests.*limit="):
        load_trace(p)
    assert len(load_trace(p, limit=5)) == 5
    with pytest.raises(DataError, match="over the 5-request limit"):
        load_trace(p, limit=6)


def test_sizes_trace_line_length_limited(capsys, tmp_path):
    p = tmp_path / "long.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "pad": "' + "x" * (2 << 20) + '"}\n')
    refused(capsys, "trace-stats", str(p), names=("long.jsonl:1", "longer than"))


# ---- tracebacks on valid-looking input -----------------------------------------------------------------------
def test_traceback_scenario_without_dram_pool(capsys, tmp_path):
    p = scenario(tmp_path, lambda d: d["pools"].pop("dram"))
    for system in ("dram", "rdma", "cxl-prefetch"):
        refused(capsys, "predict", "--system", system, "--context", "8K", "--scenario", str(p),
                names=("s.yaml", "dram"))


@pytest.mark.parametrize("name", ["compute_eff", "hbm_eff", "tp", "max_total_tokens"])
def test_traceback_zero_parameters(capsys, tmp_path, name):
    p = scenario(tmp_path, serving(name, 0))
    refused(capsys, *PREDICT, "--scenario", str(p), names=("s.yaml", name, "positive"))


@pytest.mark.parametrize("text,msg", [
    ("schema_version: 1\nname: " + "[" * 3000 + "]" * 3000 + "\n", "nested deeper"),
    ("schema_version: 1\n" + "".join("  " * i + f"k{i}:\n" for i in range(200)), "nested deeper"),
    ("schema_version: 1\n1: 2\n", "key 1 is not a string"),
    ("? [a, b]\n: 1\n", "unhashable key"),
    ("? 3\n: 1\n", "key 3 is not a string"),
    ("a: &a [*a]\n", "nested deeper"),
    ("a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
     "f: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n", "values (aliases expanded)"),
    ("schema_version: " + "9" * 5000 + "\n", "malformed YAML"),
    ("schema_version: 1\nname: x\nmodel: y\nnodes: []\nlinks: []\nserving: {dp: {value: 1e999, source: x}}\n",
     "not a finite number"),
], ids=["deep-flow", "deep-block", "int-key", "list-key", "int-key-2", "recursive-alias", "alias-bomb",
        "5000-digit-int", "inf-value"])
def test_traceback_yaml_safety(capsys, tmp_path, text, msg):
    refused(capsys, *PREDICT, "--scenario", str(scenario(tmp_path, text=text)), names=("s.yaml", msg))


def test_traceback_yaml_non_utf8(capsys, tmp_path):
    p = tmp_path / "s.yaml"
    p.write_bytes(b"schema_version: 1\nname: \xff\xfe\n")
    refused(capsys, *PREDICT, "--scenario", str(p), names=("s.yaml", "line 2", "UTF-8"))


def test_traceback_long_scenario_argument(capsys):
    refused(capsys, *PREDICT, "--scenario", "x" * 5000, names=("scenario",))
    with pytest.raises(TopologyError, match="not NoneType"):
        load_topology(None)


def run_file(tmp_path, obj=None, text=None, name="r_cxl2_ctx32k.json"):
    p = tmp_path / name
    p.write_text(text if text is not None else json.dumps(obj))
    return p


GOOD_RUN = {"config": {"target_input_tokens": 32768, "max_concurrency": 8, "output_tokens": 64,
                       "round2_num_requests": 16},
            "round2": {"metrics": {"num_success": 16, "ttft_mean_ms": 900.0, "tbt_mean_ms": 40.0,
                                   "output_throughput_tok_s": 800.0}}}


def bad_run(change):
    d = copy.deepcopy(GOOD_RUN)
    change(d)
    return d


def test_good_run_file_loads(tmp_path):
    r = load_run(run_file(tmp_path, GOOD_RUN))
    assert (r.system, r.cxl_devices, r.context, r.output, r.requests, r.num_success) == ("cxl", 2, 32768, 64, 16, 16)


@pytest.mark.parametrize("obj,text,msg", [
    ([], None, "expected a JSON object"),
    (bad_run(lambda d: d.update(config=[1])), None, "config: expected an object"),
    (bad_run(lambda d: d.update(config="x")), None, "config: expected an object"),
    (None, json.dumps(GOOD_RUN).replace("900.0", "Infinity"), "Infinity"),
    (None, json.dumps(GOOD_RUN).replace("900.0", "NaN"), "NaN"),
    (None, json.dumps(GOOD_RUN).replace("900.0", "1" + "0" * 400), "ttft_mean_ms"),
    (None, json.dumps(GOOD_RUN).replace("32768", "9" * 5000), "4300 digits"),
    (bad_run(lambda d: d["config"].update(target_input_tokens=10**30)), None, "target_input_tokens"),
])
def test_traceback_run_json(capsys, tmp_path, obj, text, msg):
    refused(capsys, "validate", str(run_file(tmp_path, obj, text)), names=("r_cxl2_ctx32k.json", msg))


def microbench(tmp_path, results, name="sparse_kv_bench_x.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"config": {"item_size": 656}, "results": results}))
    return p


@pytest.mark.parametrize("results,msg", [
    ([], "results: expected an object"), ({}, "no results"),
    ({"32768": {"64": {"cxl": {"mean_us": 0, "p50_us": 1, "p99_us": 1}}}}, "mean_us: Input should be greater"),
    ({"32768": {"64": {"cxl": {"mean_us": -3, "p50_us": 1, "p99_us": 1}}}}, "mean_us"),
    ({"32768": {"64": {"cxl": {"mean_us": "fast", "p50_us": 1, "p99_us": 1}}}}, "mean_us"),
    ({"32k": {"64": {"cxl": {"mean_us": 1, "p50_us": 1, "p99_us": 1}}}}, "context '32k'"),
    ({"32768": {"64": {"gpu": {"mean_us": 1, "p50_us": 1, "p99_us": 1}}}}, "no dram, cxl or rdma_total"),
])
def test_traceback_microbench(capsys, tmp_path, results, msg):
    p = microbench(tmp_path, results)
    with pytest.raises(DataError, match=msg.replace("(", r"\(")):
        load_microbench([p])
    refused(capsys, "calibrate", "--microbench", str(p), "--dry-run", names=("sparse_kv_bench_x.json",))


def mooncake(tmp_path, *lines, name="t.jsonl"):
    p = tmp_path / name
    good = '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}'
    p.write_text("\n".join((good, *lines)) + "\n")
    return p


@pytest.mark.parametrize("line,msg", [
    ('{"timestamp": NaN, "input_length": 100, "output_length": 5}', "NaN"),
    ('{"timestamp": Infinity, "input_length": 100, "output_length": 5}', "Infinity"),
    ('{"timestamp": -Infinity, "input_length": 100, "output_length": 5}', "Infinity"),
    ('{"timestamp": 5, "input_length": 100, "output_length": 5, "hash_ids": [[1]]}', "hash_ids[0]"),
    ('{"timestamp": 5, "input_length": 100, "output_length": 5, "hash_ids": 7}', "hash_ids"),
    ('{"timestamp": 5, "input_length": 100.5, "output_length": 5}', "input_length"),
    ('{"timestamp": 5, "input_length": 100, "output_length": true}', "output_length"),
    ('{"timestamp": 5, "input_length": 100000000000, "output_length": 5}', "input_length"),
    ('[' * 50000 + ']' * 50000, "nested too deeply"),
], ids=["nan", "inf", "-inf", "nested-hash-ids", "hash-ids-int", "fractional", "bool", "huge", "deep"])
def test_traceback_trace_records(capsys, tmp_path, line, msg):
    p = mooncake(tmp_path, line)
    refused(capsys, "trace-stats", str(p), names=("t.jsonl:2", msg))


def test_traceback_trace_is_a_directory(capsys, tmp_path):
    d = tmp_path / "trace.jsonl"
    d.mkdir()
    with pytest.raises(DataError, match="trace.jsonl: is a directory"):
        load_trace(d)
    refused(capsys, "trace-stats", str(d), names=("trace.jsonl",))
    refused(capsys, "replay", str(tmp_path), names=(tmp_path.name,))


def test_traceback_csv_field_over_128k(capsys, tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                 '"' + "x" * (200 * 1024) + '",1,1\n')
    refused(capsys, "trace-stats", str(p), names=("a.csv:3", "field larger than field limit"))


def test_traceback_trace_non_utf8(capsys, tmp_path):
    p = tmp_path / "b.csv"
    p.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,37\xff4,44\n")
    refused(capsys, "trace-stats", str(p), names=("b.csv:2", "not UTF-8"))
    p = mooncake(tmp_path, "")
    p.write_bytes(p.read_bytes() + b'{"timestamp": 9, "input_length": 100, "output_length": 5, "x": "\xc3("}\n')
    refused(capsys, "trace-stats", str(p), names=("t.jsonl:3", "not UTF-8"))


# ---- wrong success ------------------------------------------------------------------------------------------
def test_wrong_success_out_of_order_timestamps(capsys, tmp_path):
    p = mooncake(tmp_path, '{"timestamp": 500, "input_length": 100, "output_length": 5, "hash_ids": []}',
                 '{"timestamp": 200, "input_length": 100, "output_length": 5, "hash_ids": []}')
    refused(capsys, "replay", str(p), "--systems", "dram", names=("t.jsonl:3", "time order"))
    c = tmp_path / "a.csv"
    c.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.0,374,44\n"
                 "2023-11-16 18:15:46.0,396,109\n")
    refused(capsys, "trace-stats", str(c), names=("a.csv:3", "time order"))


def test_wrong_success_equal_timestamps_are_in_order(tmp_path):
    p = mooncake(tmp_path, '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": []}')
    assert list(load_trace(p).arrival) == [0.0, 0.0]


@pytest.mark.parametrize("where", ["link", "node", "nic"])
def test_wrong_success_negative_bandwidth(capsys, tmp_path, where):
    change = {"link": lambda d: d["links"][0]["bandwidth"].update(value="-55 GB/s"),
              "node": lambda d: d["nodes"][4]["bandwidth"].update(value="-358 GB/s"),
              "nic": lambda d: d["nodes"][10]["rate"].update(value="-100 Gbit/s")}[where]
    refused(capsys, *PREDICT, "--scenario", str(scenario(tmp_path, change)), names=("must be positive",))


@pytest.mark.parametrize("field,value", [("ttft_mean_ms", -5.0), ("tbt_mean_ms", -0.1),
                                         ("output_throughput_tok_s", -1.0), ("num_success", 3.5),
                                         ("num_success", -1), ("num_success", 17)])
def test_wrong_success_negative_nan_or_fractional_measurements(capsys, tmp_path, field, value):
    p = run_file(tmp_path, bad_run(lambda d: d["round2"]["metrics"].update({field: value})))
    refused(capsys, "validate", str(p), names=("r_cxl2_ctx32k.json", "num_success" if field == "num_success"
                                               else field))


@pytest.mark.parametrize("field,value", [("max_concurrency", 8.5), ("round2_num_requests", 0),
                                         ("target_input_tokens", 0), ("output_tokens", 1.5)])
def test_wrong_success_fractional_or_zero_counts_in_config(capsys, tmp_path, field, value):
    p = run_file(tmp_path, bad_run(lambda d: d["config"].update({field: value})))
    refused(capsys, "validate", str(p), names=("r_cxl2_ctx32k.json", field))


def test_bench_serving_values_validated(capsys, tmp_path):
    d = {"completed": 128, "num_prompts": 128, "max_concurrency": 16, "random_input_len": 32768,
         "random_output_len": 512, "mean_ttft_ms": 500.0, "mean_tpot_ms": 45.0, "output_throughput": 330.0}
    load_run(run_file(tmp_path, d, name="b_cxl2_ctx32k.json"))
    for k, v in (("mean_ttft_ms", -1.0), ("completed", 0), ("output_throughput", "fast"), ("completed", 1.5)):
        p = run_file(tmp_path, {**d, k: v}, name="b_cxl2_ctx32k.json")
        refused(capsys, "validate", str(p), names=("b_cxl2_ctx32k.json", k))


@needs_shared
def test_manifest_errors_name_the_line(tmp_path):
    src = SHARED / "sac-testbed"
    (tmp_path / "runs").mkdir()
    f = "p2_12_cxl2_ctx32k_conc64_r2fix1k_n512.json"
    (tmp_path / "runs" / f).write_bytes((src / "runs" / f).read_bytes())
    rows = (src / "manifest.csv").read_text().splitlines()
    header, row = rows[0], next(r for r in rows if r.startswith(f))
    (tmp_path / "manifest.csv").write_text(header + "\n" + row.replace(",4096,", ",4096.5,") + "\n")
    with pytest.raises(DataError, match=r"manifest.csv:2: device_buffer"):
        load_run(tmp_path / "runs" / f)
    (tmp_path / "manifest.csv").write_text(header + "\n" + row + "\n")
    r = load_run(tmp_path / "runs" / f)
    assert r.split == "calibration-1" and r.server_log == (tmp_path / row.split(",")[-1]).resolve()


def test_closed_loop_send_times_by_hand_and_refused_latencies():
    from sacmodel.data.runs import closed_loop_releases
    # two in flight: requests 0 and 1 leave at once; 2 when 0 completes (1 s), 3 when 2 completes (2 s),
    # since 1 is still running until 3 s
    assert closed_loop_releases([1000, 3000, 1000, 500], 2).tolist() == [0.0, 0.0, 1.0, 2.0]
    assert closed_loop_releases([1000, 3000], 4).tolist() == [0.0, 0.0]
    for bad, c in (([1000, float("nan")], 1), ([1000, -1], 1), ([1000], 0)):
        with pytest.raises(DataError):
            closed_loop_releases(bad, c)
