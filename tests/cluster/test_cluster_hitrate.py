import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from measured_data import SHARED

from sacmodel.cluster.hitrate import hit_rates, prefix_hit_rate
from sacmodel.data.records import DataError
from sacmodel.data.traces import load_trace

TRACES = SHARED / "traces"


def write(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": n, "output_length": 5, "hash_ids": h}) + "\n"
                         for i, (n, h) in enumerate(rows)))
    return p


def test_hand_computed_hits_with_lru_eviction(tmp_path):
    # blocks of 512 tokens; a cache of 3 blocks
    p = write(tmp_path, [(1024, [1, 2]), (1500, [1, 2, 3]), (600, [9, 10]), (1024, [1, 2])])
    # r2 hits 1-2 (1024 tokens); r3 fills the cache: the LRU leaves 1-2-3 then 1-2 go, r4 hits block 1 only
    # r4 asked 1024 tokens: at most 1023 are cached, the last token is computed
    total = 1024 + 1500 + 600 + 1024
    assert prefix_hit_rate(p, capacity_tokens=3 * 512) == pytest.approx((1024 + 512) / total)
    assert prefix_hit_rate(p, capacity_tokens="inf") == pytest.approx((1024 + 1023) / total)


def test_pages_split_blocks(tmp_path):
    # 64-token pages: a 600-token prompt is 10 pages; its 512-token first block is 8 of them
    p = write(tmp_path, [(600, [1, 2]), (600, [1, 5])])
    assert prefix_hit_rate(p, capacity_tokens="inf", block_tokens=64) == pytest.approx(512 / 1200)
    # a cache smaller than a prompt keeps the prompt's leading pages
    assert prefix_hit_rate(p, capacity_tokens=4 * 64, block_tokens=64) == pytest.approx(256 / 1200)
    with pytest.raises(ValueError, match="block_tokens"):
        prefix_hit_rate(p, capacity_tokens="inf", block_tokens=100)


def test_no_prefix_information_is_an_error(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    with pytest.raises(DataError, match="no prefix information"):
        prefix_hit_rate(p, capacity_tokens="1M")


def chained(digits):
    """Mooncake-like ids: the id of position j names the whole prefix (branch digits d1..dj)."""
    ids, v = [], 1
    for d in digits:
        v = v * 4 + d
        ids.append(v)
    return ids


traces = st.lists(st.tuples(st.integers(1, 3000), st.lists(st.integers(0, 2), min_size=1, max_size=6).map(chained)),
                  min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(traces, st.sampled_from([512, 256, 64]))
def test_hit_rate_grows_with_capacity_and_unbounded_matches_the_trace(tmp_path_factory, rows, bt):
    rows = [(max(n, 512 * (len(h) - 1) + 1), h) for n, h in rows]
    p = write(tmp_path_factory.mktemp("h"), rows)
    tr = load_trace(p)
    caps = [bt * 12, bt * 24, bt * 48, "inf"]
    rates = [r["hit_rate"] for r in hit_rates(tr, caps, block_tokens=bt)]
    assert rates == sorted(rates)
    if bt == 512:   # the trace's own unbounded-cache prefix hits (leading blocks seen before)
        assert rates[-1] == pytest.approx(tr.cached.sum() / tr.input_len.sum())


@pytest.mark.skipif(not TRACES.is_dir(), reason="needs ../shared/data/traces")
@pytest.mark.parametrize("name,ratio", [("mooncake_conversation_trace", 0.374), ("mooncake_synthetic_trace", 0.651)])
def test_unbounded_cache_gives_the_documented_prefix_ratio(name, ratio):
    tr = load_trace(TRACES / f"{name}.jsonl")
    r = hit_rates(tr, ["10M", "inf"])
    assert r[1]["hit_rate"] == pytest.approx(ratio, abs=0.0005)       # constants.md §6
    assert r[0]["hit_rate"] < r[1]["hit_rate"]
    # one shared cache of 4x the size serves at least what 4 round-robin caches do
    four = hit_rates(tr, ["10M"], instances=4)[0]["hit_rate"]
    assert four < hit_rates(tr, ["40M"])[0]["hit_rate"]
    # routing by prefix recovers most of a single cache's hits
    assert hit_rates(tr, ["10M"], instances=4, router="prefix_affinity")[0]["hit_rate"] > four
