"""The cluster replay phase by phase (sacmodel.cluster.replay._Replay), each against a hand-worked case."""
import json
import math

import numpy as np
import pytest

from sacmodel.cluster.replay import _percentiles, _pooled_tbt, _Replay, _split

BPT = 61 * (576 * 2 + 132)          # KV bytes per token of DeepSeek-V3.2 as the testbed runs it


def trace(tmp_path, rows):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": int(t * 1000), "input_length": n, "output_length": o,
                                     "hash_ids": h}) + "\n" for t, n, o, h in rows))
    return p


def replay_obj(tmp_path, rows, scenario="sac-testbed", system="cxl", instances=2, pd=None, router="round_robin"):
    r = _Replay(scenario, system, trace(tmp_path, rows), router=router, instances=instances, pd=pd, time_scale=1.0,
                concurrency=None, cache="trace", slo=None, router_params=None, limit=None, resources={})
    r.build_caches(None, None, None)
    return r


def test_split_of_cached_tokens_over_tiers_by_hand():
    """Private path blocks by their tier, then shared tiers beyond them, the last token always computed."""
    # 2 private blocks in tier 0, a shared tier 1 matching 3 blocks: 1024 + 512 tokens; prompt 1600
    assert _split([0, 0], [(1, 3)], 1600, 512, 2) == [1024.0, 512.0]
    # a prompt of exactly the matched 3 blocks: the last token comes off the deepest tier served
    assert _split([0, 0], [(1, 3)], 1536, 512, 2) == [1024.0, 511.0]


def test_route_round_robin_and_prefix_hits_in_private_caches(tmp_path):
    rows = [(0, 1024, 4, [1, 2]), (10, 1024, 4, [1, 2]), (20, 1024, 4, [1, 2])]
    r = replay_obj(tmp_path, rows)
    r.route()
    assert list(r.inst_of) == [0, 1, 0]            # round robin
    # version-1 scenario: one private unbounded cache per instance; the third request finds the first's blocks
    assert r.by_tier.sum(axis=0).tolist() == [0.0, 0.0, 1023.0]


def test_load_transfers_are_zero_when_hits_are_read_in_place(tmp_path):
    rows = [(0, 1024, 4, [1, 2]), (10, 1024, 4, [1, 2])]
    r = replay_obj(tmp_path, rows, instances=1)
    r.route()
    r.load_transfers()
    assert r.load_bytes == [] and list(r.load_s) == [0.0, 0.0]
    assert list(r.cached_total) == [0.0, 1023.0]


def test_prefill_runs_then_rdma_handoff_then_decode(tmp_path):
    """P:D 1:1 on RDMA: the decode instance starts after the handoff of the whole prompt over the Transfer
    Engine (the testbed's two 100 Gb/s NICs when the scenario has no network section)."""
    rows = [(0, 2048, 8, [1, 2, 3, 4])]
    r = replay_obj(tmp_path, rows, system="dram", pd="1:1")
    r.route()
    r.load_transfers()
    r.run_prefill()
    assert math.isfinite(r.first_s[0]) and r.dec_of[0] == 1
    r.handoffs()
    te = r.net.te
    assert r.handoff_s[0] == pytest.approx(te.setup + 2048 * BPT / te.rate, rel=1e-6)
    r.run_decode()
    assert r.done_s[0] > r.first_s[0] + r.handoff_s[0]
    pred = r.prediction()
    assert pred.summary["pd"] == "1:1" and pred.summary["handoff"] == "rdma" and pred.success_fraction == 1.0


def test_summary_helpers_by_hand():
    x = np.array([1.0, 2.0, 3.0, np.nan])
    p = _percentiles(x)
    assert p["mean"] == 2.0 and p["p50"] == 2.0
    first, done = np.array([0.0, 1.0]), np.array([1.0, 3.0])
    # gaps of 1 s over 2 tokens (1 gap) and 2 s over 3 tokens (2 gaps): 3 s / 3 gaps = 1000 ms
    assert _pooled_tbt(first, done, np.array([2, 3]), np.array([True, True])) == pytest.approx(1000.0)
