"""Issue 35's fidelity fixes, each against a hand-worked case: store hits served in a chain without a home
tier, Dynamo's prefill load, llm-d's normalised prefix score, outputs cached for the next turn, the decode
instance chosen at arrival, failed instances out of routing."""
import json

import pytest

from sacmodel import replay


def trace(tmp_path, rows, name="t.jsonl"):
    """rows: (arrival s, input tokens, output tokens, hash_ids)."""
    p = tmp_path / name
    p.write_text("".join(json.dumps({"timestamp": int(t * 1000), "input_length": n, "output_length": o,
                                     "hash_ids": h}) + "\n" for t, n, o, h in rows))
    return p


def test_store_hits_reach_the_engine_when_the_store_is_the_only_tier(tmp_path):
    # dram with the Mooncake store alone: A (host 0) writes its 8 blocks to the store; B, the same prompt a
    # minute later on host 1, loads them over the network and prefills only its last token's page
    rows = [(0, 4096, 4, list(range(8))), (60, 4096, 4, list(range(8)))]
    p = replay("sac-cluster-4x", "dram", trace(tmp_path, rows), router="round_robin", tiers=["store"])
    pr = p.per_request
    assert list(pr["instance"]) == [0, 1]
    assert list(pr["cached_store"]) == [0, 4095]
    assert list(pr["cached_tokens"]) == [0, 4095]                   # the hits reach the engine
    assert p.summary["hit_rate_total"] == pytest.approx(4095 / 8192)
    assert pr["load_s"][1] > 0
    # B's TTFT: the load plus a one-page prefill, far below A's 4096-token prefill
    assert pr["load_s"][1] * 1e3 < pr["ttft_ms"][1] < 0.2 * pr["ttft_ms"][0]
