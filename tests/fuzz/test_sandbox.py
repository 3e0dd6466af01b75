"""The sandbox enforces its budgets: a case past the wall-clock or memory budget is stopped and reported."""
from .sandbox import Sandbox


def test_wall_clock_and_memory_budgets_are_enforced():
    sb = Sandbox(budget={"wall_s": 0.001})
    try:
        assert sb.run(["scenarios"]).status == "timeout"
    finally:
        sb.close()
    sb = Sandbox(budget={"memory_bytes": 1 << 20})
    try:
        r = sb.run(["predict", "--system", "cxl", "--context", "8K", "--concurrency", "8", "--requests", "64",
                    "--json"])
        assert r.status == "memory" and r.rc is None, r.describe()
    finally:
        sb.close()


def test_a_normal_case_runs_within_budget(sandbox):
    r = sandbox.run(["predict", "--system", "dram", "--context", "8K", "--concurrency", "4", "--requests", "8",
                     "--json"])
    assert r.status == "exited" and r.rc == 0 and '"feasible": true' in r.out
