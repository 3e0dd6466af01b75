"""The sandbox enforces its budgets: a case past the wall-clock or memory budget is stopped and reported."""
from .sandbox import Sandbox


def test_wall_clock_and_memory_budgets_are_enforced(tmp_path):
    sb = Sandbox(budget={"wall_s": 0.001})
    try:
        assert sb.run(["scenarios"]).status == "timeout"
    finally:
        sb.close()
    trace = tmp_path / "big.jsonl"        # 200,000 requests: tens of MB of Python objects while reading
    trace.write_text("".join(f'{{"timestamp": {i}, "input_length": 100, "output_length": 5, "hash_ids": [{i}]}}\n'
                             for i in range(200_000)))
    sb = Sandbox(budget={"memory_bytes": 4 << 20})
    try:
        r = sb.run(["trace-stats", str(trace), "--json"])
        assert r.status == "memory" and r.rc is None, r.describe()
    finally:
        sb.close()


def test_a_normal_case_runs_within_budget(sandbox):
    r = sandbox.run(["predict", "--system", "dram", "--context", "8K", "--concurrency", "4", "--requests", "8",
                     "--json"])
    assert r.status == "exited" and r.rc == 0 and '"feasible": true' in r.out
