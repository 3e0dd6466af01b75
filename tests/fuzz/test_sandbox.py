"""The sandbox enforces its budgets: a case past the wall-clock or memory budget is stopped and reported."""
from contextlib import contextmanager


@contextmanager
def _budget(sb, **budget):
    """The session's sandbox with ``budget`` for the cases run inside (the server takes the budget with each
    case, so no second server need start and warm up): its cases are left out of the fuzz summary."""
    old, n = sb.budget, len(sb.results)
    sb.budget = {**old, **budget}
    try:
        yield sb
    finally:
        sb.budget = old
        del sb.results[n:]


def test_wall_clock_and_memory_budgets_are_enforced(sandbox, tmp_path):
    with _budget(sandbox, wall_s=0.001) as sb:
        assert sb.run(["scenarios"]).status == "timeout"
    trace = tmp_path / "big.jsonl"        # 200,000 requests: tens of MB of Python objects while reading
    trace.write_text("".join(f'{{"timestamp": {i}, "input_length": 100, "output_length": 5, "hash_ids": [{i}]}}\n'
                             for i in range(200_000)))
    with _budget(sandbox, memory_bytes=4 << 20) as sb:
        r = sb.run(["trace-stats", str(trace), "--json"])
        assert r.status == "memory" and r.rc is None, r.describe()
    # the server survives both and runs the next case within the default budget
    assert sandbox.run(["scenarios"]).status == "exited"


def test_a_normal_case_runs_within_budget(sandbox):
    r = sandbox.run(["predict", "--system", "dram", "--context", "8K", "--concurrency", "4", "--requests", "8",
                     "--json"])
    assert r.status == "exited" and r.rc == 0 and '"feasible": true' in r.out
