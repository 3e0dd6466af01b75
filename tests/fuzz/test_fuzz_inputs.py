"""Fuzzing the edge: scenario YAML, traces, run and micro-benchmark JSON and CLI values, each case run in a
sandbox (tests/fuzz/sandbox.py) against the contract (tests/fuzz/contract.py). CI runs a bounded number of
examples per target (SACMODEL_FUZZ_EXAMPLES, default 20); ``pytest --fuzz-long`` runs 2,000 per target."""
import json
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sacmodel.hardware.scenarios import TOPOLOGY_DIR
from sacmodel.serving.systems import SYSTEMS

from .contract import check
from .strategies import corrupted_text, mutated, nasty

EXAMPLES = int(os.environ.get("SACMODEL_FUZZ_EXAMPLES", "20"))
LONG = EXAMPLES > 100
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not LONG, print_blob=True,
                suppress_health_check=list(HealthCheck))

BASE_SCENARIO = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
CONTEXTS = ["1K", "8K", "32K", "128K"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


# ---- scenario YAML ----------------------------------------------------------------------------------------
@FUZZ
@given(doc=mutated(BASE_SCENARIO), data=st.data(), system=st.sampled_from(SYSTEMS),
       context=st.sampled_from(CONTEXTS), concurrency=st.integers(1, 16))
def test_fuzz_scenario_yaml(sandbox, workdir, doc, data, system, context, concurrency):
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    p = _write(workdir / "fuzzed.yaml", data.draw(corrupted_text(text)))
    r = sandbox.run(["predict", "--scenario", str(p), "--system", system, "--context", context,
                     "--concurrency", str(concurrency), "--requests", str(2 * concurrency), "--output", "64",
                     "--json"])
    check(r, names=("fuzzed.yaml", str(doc.get("name", "")) if isinstance(doc, dict) else "fuzzed.yaml"))


# ---- traces -----------------------------------------------------------------------------------------------
good_record = st.fixed_dictionaries({"timestamp": st.integers(0, 10**6), "input_length": st.integers(1, 70000),
                                     "output_length": st.integers(1, 300),
                                     "hash_ids": st.lists(st.integers(0, 50), max_size=8)})
record = st.one_of(good_record, good_record.flatmap(
    lambda r: st.tuples(st.sampled_from(sorted(r)), nasty).map(lambda kv: {**r, kv[0]: kv[1]})))


@st.composite
def mooncake_text(draw):
    recs = draw(st.lists(record, min_size=1, max_size=12))
    if draw(st.booleans()):   # mostly in time order
        recs.sort(key=lambda r: r["timestamp"] if isinstance(r.get("timestamp"), (int, float))
                  and not isinstance(r.get("timestamp"), bool) and r["timestamp"] == r["timestamp"] else 0)
    lines = [json.dumps(r, allow_nan=True, default=str) for r in recs]
    if draw(st.integers(0, 4)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(
            ["", "{", "[]", "null", "1", '"x"', '{"timestamp": 1}', "[" * 5000, '{"a": 1' + "0" * 5000 + "}"])))
    return "\n".join(lines) + "\n"


@st.composite
def azure_text(draw):
    rows = draw(st.lists(st.tuples(st.integers(0, 3600 * 24), st.integers(1, 70000), st.integers(0, 300)),
                         min_size=1, max_size=12))
    rows.sort()
    cells = [[f"2023-11-16 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}.1234567", str(i), str(o)]
             for t, i, o in rows]
    for _ in range(draw(st.integers(0, 2))):
        row = draw(st.integers(0, len(cells) - 1))
        cells[row][draw(st.integers(0, 2))] = str(draw(nasty)).replace("\n", " ")[:200]
    header = draw(st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens"] * 4 + ["", "a,b,c"]))
    return header + "\n" + "\n".join(",".join(c) for c in cells) + "\n"


@FUZZ
@given(data=st.data(), fmt=st.sampled_from(["jsonl", "csv"]), command=st.sampled_from(["stats", "stats", "replay"]))
def test_fuzz_traces(sandbox, workdir, data, fmt, command):
    text = data.draw(mooncake_text() if fmt == "jsonl" else azure_text())
    p = _write(workdir / f"fuzzed.{fmt}", data.draw(corrupted_text(text)))
    if command == "stats":
        argv = ["trace-stats", str(p), "--json"]
    else:
        argv = ["replay", str(p), "--systems", data.draw(st.sampled_from(["dram", "cxl", "rdma"])),
                "--limit", "12", "--concurrency", "4", "--json"]
    check(sandbox.run(argv), names=(f"fuzzed.{fmt}",), allow_nan=("rate_req_s",))


# ---- run and micro-benchmark JSON ---------------------------------------------------------------------------
BASE_RUN = {
    "config": {"target_input_tokens": 8192, "max_concurrency": 4, "output_tokens": 32, "round2_output_min": 32,
               "round2_output_max": 32, "round2_num_requests": 8, "round1_max_concurrency": 4},
    "round1": {"metrics": {"num_requests": 4, "num_success": 4, "ttft_mean_ms": 3000.0, "tbt_mean_ms": 40.0,
                           "output_throughput_tok_s": 90.0, "total_output_tokens": 128}},
    "round2": {"metrics": {"num_requests": 8, "num_success": 8, "ttft_mean_ms": 500.0, "tbt_mean_ms": 40.0,
                           "output_throughput_tok_s": 90.0, "e2e_mean_ms": 1800.0},
               "per_request": [{"output_len": 32}] * 8}}
BASE_BENCH = {"completed": 8, "num_prompts": 8, "max_concurrency": 4, "random_input_len": 8192,
              "random_output_len": 32, "mean_ttft_ms": 500.0, "mean_tpot_ms": 40.0, "output_throughput": 90.0,
              "mean_e2e_latency_ms": 1800.0}
BASE_MICRO = {"config": {"item_size": 656}, "results": {"32768": {
    "64": {"dram": {"mean_us": 11.0, "p50_us": 11.0, "p99_us": 14.0},
           "cxl": {"mean_us": 15.0, "p50_us": 15.0, "p99_us": 18.0}},
    "2048": {"dram": {"mean_us": 60.0, "p50_us": 60.0, "p99_us": 70.0},
             "cxl": {"mean_us": 95.0, "p50_us": 95.0, "p99_us": 110.0}}}}}


@FUZZ
@given(data=st.data(), base=st.sampled_from(["testbed", "bench"]), round_=st.sampled_from(["1", "2"]))
def test_fuzz_run_json(sandbox, workdir, data, base, round_):
    doc = data.draw(mutated(BASE_RUN if base == "testbed" else BASE_BENCH))
    text = json.dumps(doc, allow_nan=True, default=str)
    p = _write(workdir / "fuzzed_cxl2_ctx8k.json", data.draw(corrupted_text(text)))
    check(sandbox.run(["validate", str(p), "--round", round_, "--json"]), names=("fuzzed_cxl2_ctx8k.json",))


@FUZZ
@given(data=st.data())
def test_fuzz_microbench_json(sandbox, workdir, data):
    doc = data.draw(mutated(BASE_MICRO))
    p = _write(workdir / "sparse_kv_bench_fuzzed.json",
               data.draw(corrupted_text(json.dumps(doc, allow_nan=True, default=str))))
    check(sandbox.run(["calibrate", "--microbench", str(p), "--params", "t_kernel", "--dry-run", "--json"]),
          names=("sparse_kv_bench_fuzzed.json",))


# ---- CLI values ----------------------------------------------------------------------------------------------
value = st.one_of(nasty.map(lambda v: str(v)[:300]), st.sampled_from(["8K", "32K", "1", "64", "0", "-1"]))
OPTIONS = {
    "predict": ["--context", "--output", "--concurrency", "--requests", "--device-buffer", "--cxl-devices",
                "--rdma-nics", "--rate", "--scenario"],
    "microbench": ["--topk", "--entry-bytes", "--scenario"],
    "trace-stats": ["--limit"],
}
BASE_ARGV = {
    "predict": {"--system": "cxl", "--context": "8K", "--concurrency": "4", "--requests": "8", "--output": "32"},
    "microbench": {"--backend": "cxl", "--topk": "2048"},
    "trace-stats": {},
}


@FUZZ
@given(data=st.data(), command=st.sampled_from(sorted(OPTIONS)))
def test_fuzz_cli_values(sandbox, workdir, data, command):
    args = dict(BASE_ARGV[command])
    for opt in data.draw(st.lists(st.sampled_from(OPTIONS[command]), min_size=1, max_size=3, unique=True)):
        args[opt] = data.draw(value)
    argv = [command] + [x for kv in args.items() for x in kv] + ["--json"]
    if command == "trace-stats":
        trace = _write(workdir / "ok.jsonl", b'{"timestamp": 0, "input_length": 100, "output_length": 5}\n'
                                             b'{"timestamp": 5, "input_length": 300, "output_length": 9}\n')
        argv.insert(1, str(trace))
    check(sandbox.run(argv), allow_nan=("rate_req_s",))
