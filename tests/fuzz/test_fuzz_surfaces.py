"""Fuzzing the surfaces of issue 36 (machines built from flags, launch commands, price tables, hostile traces,
shared_prefix, sensitivity's API): every case gives a right answer or one clear ValueError, in the sandbox
(tests/fuzz/sandbox.py) against the contract (tests/fuzz/contract.py)."""
import json
import math

from hypothesis import given
from hypothesis import strategies as st

from .contract import check, check_quantities
from .strategies import emit_settings, hostile_trace, machine_kwargs, price_table_text, shared_prefix_args
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
