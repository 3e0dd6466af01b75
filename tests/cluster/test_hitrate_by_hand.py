"""The hit-rate fast path by hand (issue 36, item 6): the last prompt token is always computed, capacity is
in blocks, each rank holds its share, ranks are taken in turn inside their own instance, bytes convert through
the model's bytes per token, and every prompt token is accounted for."""
import numpy as np
import pytest

from sacmodel.cluster.hitrate import hit_rates, prefix_hit_rate
from sacmodel.data.traces import Trace


def trace(rows, lengths=None, bt=512):
    lengths = lengths or [len(r) * bt for r in rows]
    blocks = np.array([b for r in rows for b in r], np.int64)
    offsets = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    n = len(rows)
    return Trace("hand", np.arange(n, dtype=float), np.array(lengths, np.int64), np.full(n, 8, np.int64),
                 np.zeros(n), True, blocks, offsets, bt)


def test_the_last_prompt_token_is_always_computed():
    tr = trace([[0, 1], [0, 1, 2], [0, 1]])
    r = hit_rates(tr, ["inf"])[0]
    # r1 finds 2 blocks (1,024 tokens of 1,536); r2 finds its whole prompt but computes its last token: 1,023
    assert r["cached_tokens"] == 1024 + 1023 and r["prompt_tokens"] == 1024 + 1536 + 1024
    assert r["hit_rate"] == pytest.approx(2047 / 3584)


def test_capacity_in_tokens_holds_that_many_blocks_with_lru():
    tr = trace([[0, 1], [2, 3], [0, 1]])
    small = hit_rates(tr, [1024])[0]                 # 2 blocks: the second prompt evicts the first
    assert small["cached_tokens"] == 0 and small["evicted_blocks"] == 4
    big = hit_rates(tr, [2048])[0]                   # 4 blocks: all stay
    assert big["cached_tokens"] == 1023 and big["evicted_blocks"] == 0


def test_each_rank_holds_its_share_and_ranks_are_taken_in_turn():
    tr = trace([[0, 1], [5, 6], [2, 3], [5, 6], [0, 1]])
    # 2,048 tokens over 2 ranks = 2 blocks each; r0, r2, r4 on rank 0 (r2 evicts r0's blocks), r1, r3 on rank 1
    r = hit_rates(tr, [2048], ranks=2)[0]
    assert r["cached_tokens"] == 1023 and r["ranks"] == 2
    # with each rank holding all 2,048 tokens, rank 0 would keep r0's blocks and r4 would hit too
    one = hit_rates(tr, [2048], ranks=1)[0]          # one cache of 4 blocks: r2 evicts r0's; r3 hits, r4 misses
    assert one["cached_tokens"] == 1023


def test_instances_keep_their_own_ranks():
    # 2 instances x 2 ranks, unbounded: round robin over instances, each instance its ranks in turn; four
    # requests of the same one-block prompt land on four different rank caches: no hit at all
    tr = trace([[0], [0], [0], [0], [0]])
    r = hit_rates(tr, ["inf"], instances=2, ranks=2)[0]
    assert r["cached_tokens"] == 511                 # only the fifth (instance 0, rank 0 again) hits


def test_round_robin_spreads_a_repeated_prompt_over_instances():
    tr = trace([[7, 8]] * 6)
    # 3 instances: the first visit to each misses, the second hits (1,023 tokens each)
    assert hit_rates(tr, ["inf"], instances=3)[0]["cached_tokens"] == 3 * 1023
    assert hit_rates(tr, ["inf"], instances=1)[0]["cached_tokens"] == 5 * 1023


def test_bytes_convert_through_bytes_per_token():
    tr = trace([[0, 1], [2, 3], [0, 1]])
    # 1,152 B per token: 1,179,648 B = 1,024 tokens = 2 blocks (evicts); twice that holds all
    assert hit_rates(tr, ["1179648 B"], bytes_per_token=1152)[0]["capacity_tokens"] == pytest.approx(1024)
    assert prefix_hit_rate(tr, capacity_tokens="2359296 B", bytes_per_token=1152) == pytest.approx(1023 / 3072)
    with pytest.raises(ValueError):
        hit_rates(tr, ["1 GB"])                       # bytes without bytes_per_token


def test_finer_pages_split_blocks():
    # 256-token pages: a 512-token block is two pages; a 768-token prompt of 2 blocks has 3 pages
    tr = trace([[0, 1], [0, 1]], lengths=[768, 768])
    r = hit_rates(tr, ["inf"], block_tokens=256)[0]
    assert r["block_tokens"] == 256 and r["cached_tokens"] == 767


def test_every_prompt_token_is_accounted_for():
    rng = np.random.default_rng(1)
    rows = [list(rng.integers(0, 6, rng.integers(1, 5))) for _ in range(40)]
    rows = [[int(x) for x in r] for r in rows]
    tr = trace(rows)
    for cap in ("inf", 2048, 512):
        r = hit_rates(tr, [cap], instances=2)[0]
        assert r["prompt_tokens"] == sum(len(x) * 512 for x in rows)
        assert 0 <= r["cached_tokens"] <= r["prompt_tokens"] - len(rows)      # each request computes one token


def test_evictions_are_counted_over_every_instances_cache():
    # four prompts of 2 distinct blocks, two instances of 2 blocks each taken in turn: the third and fourth
    # prompts each evict the 2 blocks of the prompt before them on their instance: 4 evictions, 2 in each cache
    # (one instance holding it all evicts at the second, third and fourth prompts: 6)
    tr = trace([[10 * i, 10 * i + 1] for i in range(4)])
    assert hit_rates(tr, [1024], instances=2)[0]["evicted_blocks"] == 4
    assert hit_rates(tr, [1024], instances=1)[0]["evicted_blocks"] == 6
