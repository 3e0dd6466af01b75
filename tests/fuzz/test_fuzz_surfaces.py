"""Fuzzing the surfaces of issue 36 (machines built from flags, launch commands, price tables, hostile traces,
shared_prefix, sensitivity's API): every case gives a right answer or one clear ValueError, in the sandbox
(tests/fuzz/sandbox.py) against the contract (tests/fuzz/contract.py)."""
import itertools
import json
import math
import os
import stat

import yaml
from hypothesis import given
from hypothesis import strategies as st

from .contract import check, check_quantities, file_kind
from .strategies import (
    bench_file_text,
    cluster_price_table,
    emit_settings,
    hostile_trace,
    machine_argv,
    machine_kwargs,
    multihost_kwargs,
    price_table_text,
    shared_prefix_args,
)
from .test_fuzz_reach import FUZZ, workdir  # noqa: F401  (the module's fixture)


@FUZZ
@given(case=machine_kwargs())
def test_fuzz_machine(sandbox, case):
    gpu, kw = case
    r = sandbox.call("tests.fuzz.api_targets:machine", gpu, **kw)
    if check(r, json_out=False) == "ok":
        out = json.loads(r.out)
        check_quantities(out)
        assert out["gpus"] >= 1 and out["max_total_tokens"] >= 0


@FUZZ
@given(settings=emit_settings(), system=st.sampled_from(["gpu", "dram", "cxl", "rdma", "cxl-prefetch"]))
def test_fuzz_launch_command(sandbox, settings, system):
    r = sandbox.call("tests.fuzz.api_targets:launch_command", system, **settings)
    if check(r, json_out=False) == "ok":
        out = json.loads(r.out)
        assert out["continued"], f"a line of the command is neither a comment nor continued\n{r.describe()}"
        path = str(settings.get("model_path", ""))
        assert not any(ord(c) < 32 for c in path), f"a control character was let through\n{r.describe()}"


@FUZZ
@given(text=price_table_text(), system=st.sampled_from(["gpu", "dram", "cxl", "rdma"]))
def test_fuzz_price_table(sandbox, workdir, text, system):  # noqa: F811
    p = workdir / "fuzzed_prices.yaml"
    p.write_bytes(text)
    r = sandbox.call("tests.fuzz.api_targets:price_plan", str(p), system)
    if check(r, names=("fuzzed_prices.yaml",), json_out=False) == "ok":
        cost = json.loads(r.out)
        check_quantities(cost)
        assert 0 < cost["total"] < 1e9 and math.isclose(cost["total"], sum(v for k, v in cost.items()
                                                                           if k != "total"), rel_tol=1e-9)


@FUZZ
@given(lines=hostile_trace())
def test_fuzz_hostile_trace(sandbox, workdir, lines):  # noqa: F811
    p = workdir / "fuzzed_trace.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = sandbox.call("tests.fuzz.api_targets:trace_hits", str(p))
    if check(r, names=("fuzzed_trace.jsonl",), json_out=False) == "ok":
        out = json.loads(r.out)
        for rec in lines:                          # an answer means every line met the physics of a trace
            ids = rec.get("hash_ids", [])
            assert len(ids) <= -(-rec["input_length"] // 512) and all(i >= 0 for i in ids), r.describe()
        assert all(0 <= h <= 1 for h in out.get("hits", []))


@FUZZ
@given(case=shared_prefix_args())
def test_fuzz_shared_prefix(sandbox, case):
    args, kw = case
    r = sandbox.call("tests.fuzz.api_targets:shared_prefix_trace", *args, **kw)
    if check(r, json_out=False) == "ok":
        check_quantities(json.loads(r.out))


@FUZZ
@given(system=st.sampled_from(["gpu", "dram", "cxl", "rdma", "nope", 5]),
       metric=st.sampled_from(["ttft", "tbt", "e2e", "bytes_per_step", "nope", None]),
       kw=st.dictionaries(st.sampled_from(["context", "output", "draws", "concurrency", "cxl_devices",
                                           "device_buffer"]),
                          st.sampled_from([8192, 1, 0, -1, 2.5, "8K", None, 10**9, True]), max_size=3))
def test_fuzz_sensitivity_api(sandbox, system, metric, kw):
    kw.setdefault("context", 8192)
    r = sandbox.call("tests.fuzz.api_targets:unloaded_sensitivity", system, metric, **kw)
    if check(r, json_out=False) == "ok":
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in json.loads(r.out).values())


# ---- the surfaces added since: bench files, multi-host machines, writers, cluster plans with prices -----------
BENCH_MACHINE = ["--gpu", "h200", "--gpus", "8", "--tp", "8", "--model", "deepseek-v3.2"]
CASE = itertools.count()


@FUZZ
@given(case=bench_file_text(), write=st.booleans())
def test_fuzz_bench_files(sandbox, workdir, case, write):  # noqa: F811
    """`calibrate FILE --gpu ... --out ...` on SGLang bench_serving JSONL (with and without per-request arrays)
    and vLLM --save-result JSON: fields, types and sizes mutated, arrays cut or grown, lines twice, truncated."""
    kind, text = case
    n = next(CASE)
    p = workdir / f"fuzzed_bench_{n}.{'json' if kind.startswith('vllm') else 'jsonl'}"
    p.write_bytes(text)
    out = workdir / f"calibrated_{n}.yaml"
    r = sandbox.run(["calibrate", str(p), *BENCH_MACHINE, *(["--out", str(out)] if write else ["--dry-run"]),
                     "--json"])
    if check(r, names=(p.name,), json_out=True) == "ok":
        res = json.loads(r.out)
        assert res["constants"] and all(math.isfinite(c["value"]) and c["value"] > 0 for c in res["constants"])
        if write:
            assert res["written_to"] and yaml.safe_load(out.read_text())["name"], r.describe()
    else:
        assert not out.exists(), f"refused but wrote {out}\n{r.describe()}"
    assert p.read_bytes() == text, "the input file changed"


@FUZZ
@given(case=multihost_kwargs(), how=st.sampled_from(["api", "cli"]),
       system=st.sampled_from(["gpu", "dram", "cxl", "rdma"]))
def test_fuzz_multihost(sandbox, case, how, system):
    """Machines beyond one host: `sacmodel.scenario(gpu, gpus=16..4096, tp=, dp=, ep=, pool=, cxl_devices=,
    rdma_nics=)` and the same as `predict` machine flags."""
    gpu, kw = case
    if how == "api":
        r = sandbox.call("tests.fuzz.api_targets:machine", gpu, **kw)
        if check(r, json_out=False) == "ok":
            out = json.loads(r.out)
            check_quantities(out)
            assert out["gpus"] == kw["gpus"], f"asked for {kw['gpus']} GPUs, built {out['gpus']}\n{r.describe()}"
            assert out["tp"] * out["dp"] >= 1 and out["max_total_tokens"] >= 0
        return
    r = sandbox.run(["predict", "--system", system, *machine_argv(gpu, kw), "--context", "8K", "--concurrency", "2",
                     "--requests", "4", "--output", "16", "--json"])
    check(r)


OUTPUT_KINDS = ["read_only", "link_to_read_only", "loop", "self_loop", "dangling", "dangling_missing_folder",
                "folder", "link_to_folder", "file", "missing", "dev_null"]
SMALL = (b'{"timestamp": 0, "input_length": 3000, "output_length": 8, "hash_ids": [1, 2, 3, 4, 5, 6]}\n'
         b'{"timestamp": 50, "input_length": 5000, "output_length": 12, "hash_ids": [1, 2, 3, 7, 8, 9, 10]}\n')
BENCH_LINE = json.dumps({"dataset_name": "random", "max_concurrency": 2, "random_input_len": 512,
                         "random_output_len": 16, "completed": 4, "duration": 1.0, "mean_ttft_ms": 100.0,
                         "mean_tpot_ms": 10.0, "output_throughput": 64.0}).encode() + b"\n"
WRITERS = {  # name -> (suffix, argv with {} for the output path, {trace} and {bench} for inputs)
    "replay --csv": (".csv", ["replay", "{trace}", "--systems", "dram", "--csv", "{}", "--json"]),
    "replay --plot": (".png", ["replay", "{trace}", "--systems", "dram", "--plot", "{}", "--json"]),
    "hitrate --plot": (".png", ["hitrate", "{trace}", "--capacity", "1M", "--plot", "{}", "--json"]),
    "scenarios --csv": (".csv", ["scenarios", "--csv", "{}"]),
    "plan --csv": (".csv", ["plan", "--system", "cxl", "--context", "8K", "--concurrency", "2", "--requests", "4",
                            "--output", "16", "--slo", "tbt_mean_ms=80", "--max", "2", "--csv", "{}"]),
    "sensitivity --csv": (".csv", ["sensitivity", "--system", "dram", "--unloaded", "--context", "8K", "--csv",
                                   "{}"]),
    "calibrate --out": (".yaml", ["calibrate", "{bench}", *BENCH_MACHINE, "--out", "{}", "--json"]),
    "calibrate --out --force": (".yaml", ["calibrate", "{bench}", *BENCH_MACHINE, "--out", "{}", "--force",
                                          "--json"]),
}


def _output(d, kind: str, suffix: str) -> str:
    """An output path of ``kind`` in the fresh folder ``d`` (its target, if any, holds b'old')."""
    p = d / f"out{suffix}"
    old = d / f"old{suffix}"
    old.write_bytes(b"old")
    if kind in ("read_only", "link_to_read_only"):
        old.chmod(0o444)
        if kind == "read_only":
            return str(old)
        p.symlink_to(old)
    elif kind == "loop":
        p.symlink_to(d / f"other{suffix}")
        (d / f"other{suffix}").symlink_to(p)
    elif kind == "self_loop":
        p.symlink_to(p)
    elif kind == "dangling":
        p.symlink_to(d / f"gone{suffix}")
    elif kind == "dangling_missing_folder":
        p.symlink_to(d / "no_folder" / f"gone{suffix}")
    elif kind in ("folder", "link_to_folder"):
        (d / "folder").mkdir()
        if kind == "folder":
            return str(d / "folder")
        p.symlink_to(d / "folder")
    elif kind == "file":
        return str(old)
    elif kind == "dev_null":
        return "/dev/null"
    return str(p)


@FUZZ
@given(writer=st.sampled_from(sorted(WRITERS)), kind=st.sampled_from(OUTPUT_KINDS))
def test_fuzz_writers(sandbox, workdir, writer, kind):
    """--csv, --plot and --out onto read-only files, links to them, loops of links, dangling links and folders:
    a clear error or the output written, never a user's file replaced against its protection."""
    d = workdir / f"writer{next(CASE)}"
    d.mkdir()
    (d / "trace.jsonl").write_bytes(SMALL)
    (d / "bench.jsonl").write_bytes(BENCH_LINE)
    suffix, argv = WRITERS[writer]
    p = _output(d, kind, suffix)
    before = {x.name: (file_kind(x), x.read_bytes() if file_kind(x) == "file" else None,
                       stat.S_IMODE(os.lstat(x).st_mode)) for x in d.iterdir()}
    r = sandbox.run([a.replace("{trace}", str(d / "trace.jsonl")).replace("{bench}", str(d / "bench.jsonl"))
                     .replace("{}", p) for a in argv])
    check(r, names=(os.path.basename(p)[:80], "folder", "loop", "--out", "--csv", "--plot"), json_out=False)
    for name, (k, data, mode) in before.items():
        x = d / name
        if mode & 0o222 == 0 or name in ("trace.jsonl", "bench.jsonl"):     # protected or an input: untouched
            assert (file_kind(x), x.read_bytes(), stat.S_IMODE(os.lstat(x).st_mode)) == (k, data, mode), \
                f"{name} changed\n{r.describe()}"
        elif not k.startswith("file"):
            assert file_kind(x) == k, f"{name} was {k}, is {file_kind(x)}\n{r.describe()}"
        if kind == "file" and writer.startswith("calibrate --out") and "--force" not in writer and x == d / f"old{suffix}":
            assert x.read_bytes() == b"old", f"an existing --out replaced without --force\n{r.describe()}"
    if r.rc == 0 and kind in ("dangling", "missing", "file"):
        target = os.path.realpath(p)
        assert os.path.getsize(target) > 3, f"answered but {target} holds no output\n{r.describe()}"


@FUZZ
@given(text=cluster_price_table(), system=st.sampled_from(["gpu", "dram", "cxl", "rdma"]),
       scenario=st.sampled_from(["sac-cluster-4x", "gpu"]))
def test_fuzz_cluster_plan_prices(sandbox, workdir, text, system, scenario):  # noqa: F811
    """A cluster plan over a trace with `--prices` tables: parts missing, twice, unknown, hostile prices, broken
    YAML. An answer prices every configuration it tried, finite and positive."""
    d = workdir / f"prices{next(CASE)}"
    d.mkdir()
    (d / "trace.jsonl").write_bytes(SMALL)
    p = d / "fuzzed_prices.yaml"
    p.write_bytes(text)
    machine = ["--scenario", "sac-cluster-4x"] if scenario != "gpu" else ["--gpu", "h100", "--gpus", "8",
                                                                          "--model", "llama-3.1-8b"]
    r = sandbox.run(["plan", "--trace", str(d / "trace.jsonl"), *machine, "--system", system, "--values", "1",
                     "--limit", "2", "--slo", "ttft_p99_ms=1000000", "--prices", str(p), "--json"])
    if check(r, names=("fuzzed_prices.yaml", "--system", "--gpu", "--values", "pool"), json_out=True) == "ok":
        rows = json.loads(r.out)["tried"]
        assert rows and all(0 < row["cost_usd_per_hour"] < 1e9 for row in rows), r.describe()
    assert p.read_bytes() == text
