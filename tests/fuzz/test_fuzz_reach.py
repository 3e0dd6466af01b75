"""Fuzzing what the first generators did not reach: cluster files (schema version 2), Hugging Face config.json,
run JSON through replay, server logs (plain and gzip), special paths as inputs and outputs, and the Python
API with wrong types and extreme values. Each case runs in the sandbox (tests/fuzz/sandbox.py) against the
contract (tests/fuzz/contract.py). CI runs a bounded number of examples per target (half of
SACMODEL_FUZZ_EXAMPLES, at least 10: about a minute for the whole suite); ``pytest --fuzz-long`` runs
SACMODEL_FUZZ_LONG_EXAMPLES (2,000) per target."""
import copy
import gzip
import itertools
import json
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sacmodel.data.runs import shared_data_dir
from sacmodel.hardware.models import CATALOG_CONFIGS
from sacmodel.hardware.scenarios import TOPOLOGY_DIR

from .contract import check, check_quantities, file_kind
from .strategies import corrupted_text, mutated

EXAMPLES = int(os.environ.get("SACMODEL_FUZZ_EXAMPLES", "20"))
LONG = EXAMPLES > 100
FUZZ = settings(max_examples=EXAMPLES if LONG else max(10, EXAMPLES // 2), deadline=None, database=None,
                derandomize=not LONG, print_blob=True, suppress_health_check=list(HealthCheck))

TESTBED = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
SMALL_TRACE = (b'{"timestamp": 0, "input_length": 3000, "output_length": 8, "hash_ids": [1, 2, 3, 4, 5, 6]}\n'
               b'{"timestamp": 50, "input_length": 5000, "output_length": 12, "hash_ids": [1, 2, 3, 7, 8, 9, 10, 11, 12, 13]}\n'
               b'{"timestamp": 90, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]}\n')
PREDICT = ["--context", "8K", "--concurrency", "2", "--requests", "4", "--output", "16", "--json"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("reach")
    (d / "small.jsonl").write_bytes(SMALL_TRACE)
    return d


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


# ---- cluster files (schema version 2) ------------------------------------------------------------------
CLUSTER_4X = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
CLUSTER_INLINE = {**copy.deepcopy(TESTBED), "schema_version": 2, "name": "inline-2x", "cluster": {
    "hosts": [{"id": "h", "count": 2}],
    "instances": [{"id": "i", "count": 2, "host": "h", "role": "both", "tiers": ["hbm", "pool"]}],
    "tiers": {"hbm": {"kind": "hbm", "capacity": {"value": "200000 token", "source": "fuzz"}},
              "pool": {"kind": "cxl", "attached": ["h"], "capacity": {"value": "1 TB", "source": "fuzz"}}}}}
# an instance over two hosts (the span fields: hosts, tp, dp, ep, the DeepEP and engine settings)
CLUSTER_SPAN = {"schema_version": 2, "name": "span-2x", "model": "deepseek-v3.2", "cluster": {
    "host": "sac-testbed", "hosts": [{"id": "h", "count": 4}],
    "instances": [{"id": "i", "host": "h", "hosts": 2, "count": 2, "tp": 16, "dp": 16, "tiers": ["hbm"]}],
    "tiers": {"hbm": {"kind": "hbm", "capacity": {"value": "3200000 token", "source": "fuzz"}}},
    "network": {"rdma": {"nics": {"value": 2, "source": "fuzz"}, "nic_rate": {"value": "100 Gbit/s", "source": "fuzz"},
                         "op_cost": {"value": "0.239 us", "source": "fuzz"}}}}}
SPAN_FIELDS = st.sampled_from(["hosts", "tp", "dp", "ep", "moe_a2a", "deepep_mode", "two_batch_overlap",
                               "ep_redundant", "cuda_graph_max_bs", "engine"])
SPAN_VALUES = st.sampled_from([0, -1, 1, 2, 3, 8, 16, 32, 10**9, 2.5, "16", True, None, [], {}, ["h0"],
                               ["h0", "h0"], ["h0", "h9"], "deepep", "normal", "low_latency", "vllm", "x" * 300])
COUNTS = st.sampled_from([0, -1, 1, 2, 4096, 4097, 10**8, 10**9, 10**30, 2.5, "4", True, None, [], {}])


@st.composite
def cluster_doc(draw):
    doc = copy.deepcopy(draw(mutated(draw(st.sampled_from([CLUSTER_4X, CLUSTER_INLINE, CLUSTER_SPAN])))))
    c = doc.get("cluster") if isinstance(doc, dict) else None
    if isinstance(c, dict) and draw(st.booleans()):        # the counts and shapes the schema must bound
        where = draw(st.sampled_from(["hosts", "instances", "attached", "host", "section", "span"]))
        v = draw(COUNTS)
        if where in ("hosts", "instances") and isinstance(c.get(where), list) and c[where] and \
                isinstance(c[where][0], dict):
            c[where][0]["count"] = v
        elif where == "attached" and isinstance(c.get("tiers"), dict):
            for t in c["tiers"].values():
                if isinstance(t, dict) and t.get("kind") in ("cxl", "rdma"):
                    t["attached"] = draw(st.sampled_from([5, "h", [], [[1]], ["nobody"], None]))
        elif where == "span" and isinstance(c.get("instances"), list) and c["instances"] and \
                isinstance(c["instances"][0], dict):
            c["instances"][0][draw(SPAN_FIELDS)] = draw(SPAN_VALUES)
        elif where == "host":
            c["host"] = draw(st.sampled_from(["/dev/zero", "/dev/null", 5, [], "no-such", "sac-cluster-4x",
                                              "x" * 300 + ".yaml"]))
        else:
            doc[draw(st.sampled_from(["serving", "calibration"]))] = {"t_kernel": {"value": "1 us", "source": "x"}}
    return doc


@FUZZ
@given(doc=cluster_doc(), data=st.data(), how=st.sampled_from(["predict", "predict", "replay", "load"]))
def test_fuzz_cluster_yaml(sandbox, workdir, doc, data, how):
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    p = _write(workdir / "fuzzed_cluster.yaml", data.draw(corrupted_text(text)))
    names = ("fuzzed_cluster.yaml", "sac-testbed", "sac-cluster-4x", "/dev/", "no-such", "xxxx")
    if how == "load":
        r = sandbox.call("tests.fuzz.api_targets:cluster_file", str(p))
        if check(r, names=names, json_out=False) == "ok":
            check_quantities(json.loads(r.out))
        return
    if how == "predict":
        argv = ["predict", "--scenario", str(p), "--system", data.draw(st.sampled_from(["dram", "cxl"])), *PREDICT]
    else:
        argv = ["replay", str(workdir / "small.jsonl"), "--scenario", str(p), "--systems",
                data.draw(st.sampled_from(["dram", "cxl", "rdma"])), "--json"]
    name = str(doc.get("name", "")) if isinstance(doc, dict) else ""
    check(sandbox.run(argv), names=names + ((name,) if name else ()))


# ---- Hugging Face config.json ---------------------------------------------------------------------------
CONFIGS = [{k: v for k, v in CATALOG_CONFIGS[m].items() if not k.startswith("_")}
           for m in ("deepseek-v3.2", "llama-3.1-70b")]
DIMS = st.one_of(st.integers(-3, 3), st.sampled_from([16, 64, 256, 2048, 1 << 24, (1 << 24) + 1, 10**9, 10**30]),
                 st.floats(), st.sampled_from(["7168", "nan", None, True, [], {}]))


@st.composite
def config_doc(draw):
    doc = copy.deepcopy(draw(mutated(draw(st.sampled_from(CONFIGS)))))
    if isinstance(doc, dict):
        for _ in range(draw(st.integers(0, 2))):
            doc[draw(st.sampled_from(sorted(CONFIGS[0])))] = draw(DIMS)
    return doc


@FUZZ
@given(doc=config_doc(), data=st.data(), system=st.sampled_from(["gpu", "dram", "cxl"]))
def test_fuzz_model_config(sandbox, workdir, doc, data, system):
    if data.draw(st.booleans()):                  # the file, through the CLI
        text = json.dumps(doc, allow_nan=True, default=str)
        p = _write(workdir / "fuzz_config.json", data.draw(corrupted_text(text)))
        check(sandbox.run(["predict", "--model", str(p), "--system", system, *PREDICT]),
              names=("fuzz_config.json", "maximum position", "access model", "top-k", "config"))
    else:                                         # the mapping, through the Python API
        r = sandbox.call("tests.fuzz.api_targets:model_config", doc)
        names = ("config",) + ((" ".join(doc.split())[:40],) if isinstance(doc, str) and doc.strip() else ())
        if check(r, names=names, json_out=False) == "ok":
            check_quantities(json.loads(r.out))


# ---- run JSON through replay and validate ---------------------------------------------------------------
PER_REQUEST = {"success": True, "prompt_len": 8192, "output_len": 32, "ttft_ms": 500.0, "latency_ms": 1700.0}
BASE_RUN = {
    "config": {"target_input_tokens": 8192, "max_concurrency": 4, "output_tokens": 32, "round2_output_min": 32,
               "round2_output_max": 32, "round2_num_requests": 6, "round1_max_concurrency": 4},
    "round1": {"metrics": {"num_requests": 4, "num_success": 4, "ttft_mean_ms": 3000.0, "tbt_mean_ms": 40.0,
                           "output_throughput_tok_s": 90.0, "total_output_tokens": 128}},
    "round2": {"metrics": {"num_requests": 6, "num_success": 6, "ttft_mean_ms": 500.0, "tbt_mean_ms": 40.0,
                           "output_throughput_tok_s": 90.0, "e2e_mean_ms": 1800.0},
               "per_request": [dict(PER_REQUEST) for _ in range(6)]}}
RUN_VALUES = st.sampled_from([-5, 0, 1, 10**9, 1e300, math.inf, -math.inf, math.nan, "8192", None, True, [], 2.5])


@st.composite
def run_doc(draw):
    doc = copy.deepcopy(draw(mutated(BASE_RUN)))
    if isinstance(doc, dict) and draw(st.booleans()):
        target = draw(st.sampled_from(["prompt_len", "output_len", "success", "max_concurrency",
                                       "target_input_tokens"]))
        v = draw(RUN_VALUES)
        try:
            if target in ("max_concurrency", "target_input_tokens"):
                doc["config"][target] = v
            else:
                doc["round2"]["per_request"][draw(st.integers(0, 5))][target] = v
        except (KeyError, IndexError, TypeError):
            pass
    return doc


@FUZZ
@given(doc=run_doc(), data=st.data(), command=st.sampled_from(["replay", "replay", "validate"]))
def test_fuzz_run_json_replay(sandbox, workdir, doc, data, command):
    text = json.dumps(doc, allow_nan=True, default=str)
    p = _write(workdir / "fuzzed_dram_ctx8k.json", data.draw(corrupted_text(text)))
    if command == "replay":
        argv = ["replay", str(p), "--systems", data.draw(st.sampled_from(["dram", "cxl", "rdma"])), "--json"]
    else:
        argv = ["validate", str(p), "--json"]
    check(sandbox.run(argv), names=("fuzzed_dram_ctx8k.json",))


# ---- server logs ------------------------------------------------------------------------------------------
def _log_lines(draw) -> list[str]:
    ts = lambda s: f"2026-04-21 19:{s // 60 % 60:02d}:{s % 60:02d}"  # noqa: E731
    lines = ["[2026-04-21 19:00:00] server_args=ServerArgs(model_path='x', dp_size=2, max_total_tokens=200000, "
             "hisparse_config='{\"device_buffer_size\": 4096}')",
             f"[{ts(1)}] WARNING server_args.py:123: chunked_prefill_size is changed to 1024"]
    for i in range(draw(st.integers(1, 12))):
        t = ts(2 + i)
        lines.append(f"[{t}] INFO:     127.0.0.1:5000 - \"POST /v1/completions HTTP/1.1\" 200 OK")
        lines.append(f"[{t} DP{i % 2} TP{i % 2}] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, "
                     f"token usage: 0.05, #running-req: {i}, #queue-req: 0")
        lines.append(f"[{t} DP{i % 2} TP{i % 2}] Decode batch, #running-req: {1 + i // 2}, #token: {4096 + 64 * i}, "
                     f"token usage: 0.1, gen throughput (token/s): {20 + i}.5, #queue-req: 0")
    if draw(st.booleans()):
        lines += [f"[{ts(30)} DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):",
                  "RuntimeError: alloc_size=6208 failed"]
    return lines


FIELD_VALUES = st.sampled_from(["nan", "inf", "-inf", "-1", "1e400", "x", "", "9" * 400, "0x10", "1_0"])


@st.composite
def server_log_bytes(draw) -> tuple[bytes, bool]:
    lines = _log_lines(draw)
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["field", "rank", "stamp", "huge", "args", "drop"]))
        if kind == "field" and ": " in lines[i]:
            head, _, _ = lines[i].rpartition(": ")
            lines[i] = f"{head}: {draw(FIELD_VALUES)}"
        elif kind == "rank":
            lines[i] = lines[i].replace("DP1", draw(st.sampled_from(["DP99999999999999999999999", "DP-1", "DP"])))
        elif kind == "stamp":
            lines[i] = lines[i].replace("2026-04-21 19", draw(st.sampled_from(["2026-13-45 99", "0000-00-00 00"])))
        elif kind == "huge":
            lines[i] = lines[i] + "x" * draw(st.sampled_from([1000, (1 << 20) + 10]))
        elif kind == "args":
            lines[0] = "[2026-04-21 19:00:00] server_args=ServerArgs(" + draw(st.sampled_from(
                ["a='" + "[" * 5000 + "'", "b=(((", "c='{\"x\": NaN}'", "=", "d=1e999"])) + ")"
        else:
            del lines[i]
    text = ("\n".join(lines) + "\n").encode()
    gz = draw(st.booleans())
    if gz:
        text = gzip.compress(text)
    kind = draw(st.sampled_from(["same", "same", "truncate", "flip", "garbage"]))
    if kind == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif kind == "flip" and text:
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + bytes([text[i] ^ 0xFF]) + text[i + 1:]
    elif kind == "garbage":
        text = text + draw(st.binary(min_size=1, max_size=16))
    return text, gz


@FUZZ
@given(blob=server_log_bytes())
def test_fuzz_server_logs(sandbox, workdir, blob):
    text, gz = blob
    p = _write(workdir / ("fuzzed_server.log.gz" if gz else "fuzzed_server.log"), text)
    r = sandbox.call("tests.fuzz.api_targets:server_log", str(p))
    if check(r, names=("fuzzed_server.log",), json_out=False) == "ok":
        check_quantities(json.loads(r.out))


# ---- special paths as inputs and outputs ----------------------------------------------------------------------
GOOD_MODEL = json.dumps(CONFIGS[0]).encode()
INPUTS = {   # command -> (good file content, suffix, argv with {} for the path)
    "predict --scenario": (yaml.safe_dump(TESTBED).encode(), ".yaml",
                           ["predict", "--scenario", "{}", "--system", "cxl", *PREDICT]),
    "predict --model": (GOOD_MODEL, ".json", ["predict", "--model", "{}", "--system", "dram", *PREDICT]),
    "trace-stats": (SMALL_TRACE, ".jsonl", ["trace-stats", "{}", "--json"]),
    "replay": (SMALL_TRACE, ".jsonl", ["replay", "{}", "--systems", "dram", "--json"]),
    "hitrate": (SMALL_TRACE, ".jsonl", ["hitrate", "{}", "--capacity", "1M", "--json"]),
    "validate": (json.dumps(BASE_RUN).encode(), ".json", ["validate", "{}", "--json"]),
}
IN_KINDS = ["fifo", "link", "dangling", "dir", "long", "dev_zero", "dev_null", "link_dev_zero", "missing", "file"]
OUT_KINDS = ["file", "link", "dangling", "dangling_missing_folder", "dir", "long", "missing_folder"]


CASES = itertools.count()


def _make(workdir, kind: str, content: bytes, suffix: str):
    """A path of ``kind`` in a fresh folder (a FIFO, a link to a good file, a dangling link, ...)."""
    d = workdir / f"case{next(CASES)}"
    d.mkdir()
    p = d / f"input{suffix}"
    good = d / f"good{suffix}"
    good.write_bytes(content)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "link":
        p.symlink_to(good)
    elif kind in ("dangling", "dangling_missing_folder"):
        p.symlink_to(d / ("nothere" if kind == "dangling" else "no_folder/x") / f"gone{suffix}")
    elif kind == "dir":
        p.mkdir()
    elif kind == "long":
        p = d / ("x" * 300 + suffix)
    elif kind in ("dev_zero", "dev_null"):
        p = f"/dev/{kind[4:]}"
    elif kind == "link_dev_zero":
        p.symlink_to("/dev/zero")
    elif kind == "missing_folder":
        p = d / "no_folder" / f"out{suffix}"
    elif kind == "file":
        p.write_bytes(content)
    return str(p)


@FUZZ
@given(command=st.sampled_from(sorted(INPUTS)), kind=st.sampled_from(IN_KINDS))
def test_fuzz_input_paths(sandbox, workdir, command, kind):
    content, suffix, argv = INPUTS[command]
    p = _make(workdir, kind, content, suffix)
    before = file_kind(p)
    r = sandbox.run([a.replace("{}", p) for a in argv])
    name = os.path.basename(p)[:80]
    check(r, names=(name, p[:80]), json_out=True, allow_nan=("rate_req_s",))
    assert file_kind(p) == before, f"{p} was {before}, is {file_kind(p)}\n{r.describe()}"


@FUZZ
@given(kind=st.sampled_from(OUT_KINDS))
def test_fuzz_output_paths(sandbox, workdir, kind):
    """--csv of replay into links, dangling links, folders, too long names; never a device or a FIFO."""
    p = _make(workdir, kind, b"old,content\n", ".csv")
    before = file_kind(p)
    r = sandbox.run(["replay", str(workdir / "small.jsonl"), "--systems", "dram", "--csv", p, "--json"])
    check(r, names=(os.path.basename(p)[:80], "folder"), json_out=False)
    after = file_kind(p)
    if before.startswith("link") or before in ("dir", "missing"):
        assert after == before, f"{p} was {before}, is {after}\n{r.describe()}"
    if r.rc == 0:
        with open(p, "rb") as fh:
            assert fh.read(13) == b"configuration", r.describe()


# ---- the Python API -------------------------------------------------------------------------------------------
WRONG = st.sampled_from([None, 0, -1, 1.5, "8K", "x", True, [], {}, math.nan, math.inf, -math.inf, 10**9, 10**18,
                         10**30, [10**9] * 8])
TRACE = str(shared_data_dir() / "traces" / "mooncake_synthetic_trace.jsonl")


@st.composite
def api_call(draw, workdir):
    target = draw(st.sampled_from(["predict", "predict", "replay", "prefix_hit_rate", "load_trace"]))
    small = str(workdir / "small.jsonl")
    if target == "predict":
        kw = {"context": 8192, "output": 16, "concurrency": 2, "requests": 4}
        for k in draw(st.lists(st.sampled_from(["context", "output", "concurrency", "requests", "outputs", "rate",
                                                "device_buffer", "cxl_devices", "prompts", "method"]),
                               min_size=1, max_size=2, unique=True)):
            kw[k] = draw(st.one_of(WRONG, st.sampled_from([[16] * 4, [0] * 4, [1.5] * 4, [2 ** 40] * 4])))
        return "sacmodel:predict", ["sac-testbed", draw(st.sampled_from(["dram", "cxl", "gpu", 5, "nope"]))], kw
    if target == "replay":
        kw = {}
        for k in draw(st.lists(st.sampled_from(["instances", "router", "limit", "cache_capacity", "time_scale",
                                                "concurrency", "block_tokens", "pd", "tiers"]),
                               min_size=1, max_size=2, unique=True)):
            kw[k] = draw(st.one_of(WRONG, st.sampled_from([",", "kv", "1 GB", "3M", "2:1", 4097])))
        return "sacmodel:replay", [draw(st.sampled_from(["sac-testbed", "sac-cluster-4x"])), "dram", small], kw
    if target == "prefix_hit_rate":
        kw = {"capacity_tokens": draw(st.one_of(WRONG, st.sampled_from(["1 GB", "3M", "inf", "1e3", "-1"])))}
        for k in draw(st.lists(st.sampled_from(["instances", "block_tokens", "router", "bytes_per_token"]),
                               max_size=2, unique=True)):
            kw[k] = draw(st.one_of(WRONG, st.sampled_from([4097, 64, "kv"])))
        return "sacmodel:prefix_hit_rate", [draw(st.sampled_from([small, TRACE, 5, "/dev/zero"]))], kw
    return "sacmodel:load_trace", [draw(st.sampled_from([small, 5, None, "/dev/zero", "/nope.jsonl", "/tmp"]))], \
        {"limit": draw(st.one_of(st.none(), WRONG))}


@FUZZ
@given(data=st.data())
def test_fuzz_python_api(sandbox, workdir, data):
    target, args, kwargs = data.draw(api_call(workdir))
    r = sandbox.call(target, *args, **kwargs)
    if check(r, json_out=False) == "ok" and r.out.strip():
        out = json.loads(r.out)
        if isinstance(out, dict) and out.get("feasible") is False:
            assert out.get("limit"), r.describe()
        elif isinstance(out, dict) and "system" in out:
            for k in ("ttft_mean_ms", "output_throughput_tok_s", "e2e_mean_ms"):
                v = out.get(k)
                assert v is not None and math.isfinite(v) and v > 0, f"{k} = {v}\n{r.describe()}"
        elif isinstance(out, float):
            assert math.isfinite(out) and 0 <= out <= 1, r.describe()

