"""Issue 22: replays count every request, report overload, and plans say why nothing fits."""
import math

import numpy as np
import pytest

from sacmodel.cluster.replay import _percentiles, load_report
from sacmodel.cluster.why import new_tokens, why_not
from sacmodel.data.traces import Trace


def test_percentiles_count_unfinished_requests_as_infinite():
    x = np.array([1.0] * 97 + [math.inf] * 3)
    p = _percentiles(x)
    assert p["mean"] == 1.0 and p["p50"] == 1.0 and p["p90"] == 1.0 and p["p99"] == math.inf
    assert _percentiles(np.array([1.0, 2.0, math.nan]))["p50"] == 1.5      # nan: not applicable, left out


def test_load_report_by_hand():
    """Arrivals 1 per s for 100 s; served 1 per 2 s: the wait of arrival t is t (2 - 1) = t."""
    t = np.arange(100.0)
    served = load_report(t, t.copy(), np.ones(100, bool), 200.0, closed_loop=False)
    assert served["offered_req_s"] == pytest.approx(100 / 99) and served["served_req_s"] == pytest.approx(0.5)
    assert served["queue_growth_s_per_s"] == pytest.approx(1.0) and served["overloaded"]
    calm = load_report(t, np.full(100, 0.2), np.ones(100, bool), 101.0, closed_loop=False)
    assert not calm["overloaded"] and calm["queue_growth_s_per_s"] == 0.0
    assert not load_report(t, t.copy(), np.ones(100, bool), 200.0, closed_loop=True)["overloaded"]


def _trace(blocks, lens):
    offs = np.cumsum([0] + [len(b) for b in blocks])
    n = len(lens)
    return Trace("t", np.arange(n, dtype=float), np.array(lens), np.full(n, 8), np.zeros(n, dtype=np.int64), True,
                 np.array([x for b in blocks for x in b]), offs, 512)


def test_new_tokens_are_the_blocks_no_earlier_request_had():
    tr = _trace([[1, 2, 3], [1, 2, 9], [5, 1, 2]], [1500, 1600, 1536])
    # request 1 shares blocks 1-2 (1,024 tokens); request 2 starts with an unseen block: nothing matches
    assert new_tokens(tr).tolist() == [1500, 1600 - 1024, 1536]


def test_why_not_names_the_longest_cold_prompt():
    tr = _trace([[1], [2], [3] + list(range(100, 160))], [400, 500, 31000])
    msg = why_not("sac-testbed", "cxl", tr, {"ttft_p99_ms": 50.0})
    assert msg and "request 2 (31,000 prompt tokens" in msg
    assert why_not("sac-testbed", "cxl", tr, {"ttft_p99_ms": 1e9}) is None


def test_replay_says_overloaded_before_any_table(tmp_path, capsys):
    import json

    from sacmodel.cli import main
    p = tmp_path / "burst.jsonl"
    p.write_text("".join(json.dumps({"timestamp": 50 * i, "input_length": 6000 + 130 * i, "output_length": 16,
                                     "hash_ids": [1, 2] + [100 * i + j for j in range(3, 13)]}) + "\n"
                         for i in range(24)))
    assert main(["replay", str(p), "--scenario", "sac-cluster-4x", "--system", "cxl", "--instances", "1"]) == 0
    out = capsys.readouterr().out
    assert "overloaded" in out and out.index("overloaded") < out.index("replay of burst")
    assert "offered" in out and "served" in out


def test_a_replay_is_the_same_whatever_the_string_hash_seed():
    """Deterministic: two interpreters with different PYTHONHASHSEED print the same replay, key order included
    (the tiers' capacities once came out in set order)."""
    import os
    import subprocess
    import sys
    code = ("import json; from sacmodel import replay; from sacmodel.workloads import shared_prefix; "
            "tr = shared_prefix(4, 2, 2048, 256, 16, rate=4.0, requests=40, seed=1); "
            "p = replay('sac-cluster-4x', 'dram', tr, instances=4, pd='2:2'); "
            "print(json.dumps(p.to_dict(), default=str))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "1", "7")}
    assert len(outs) == 1
