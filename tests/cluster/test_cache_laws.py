"""Prefix caches and the hit-rate fast path against hand-worked cases and their argument limits (campaign 2 of
issue 23: each test kills mutants or planted bugs the earlier cluster tests let through)."""
import json

import pytest

from sacmodel.cluster.hitrate import hit_rates, prefix_hit_rate
from sacmodel.cluster.prefix_cache import RadixCache


def write(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": n, "output_length": 5, "hash_ids": h}) + "\n"
                         for i, (n, h) in enumerate(rows)))
    return p


@pytest.mark.parametrize("kw", [{"instances": True}, {"instances": 0}, {"ranks": 65}, {"ranks": True},
                                {"ranks": 0}])
def test_hit_rates_refuse_bool_counts_and_more_than_64_ranks(tmp_path, kw):
    p = write(tmp_path, [(1024, [1, 2])])
    with pytest.raises(ValueError, match="instances|ranks"):
        hit_rates(p, ["inf"], **kw)


def test_hit_rates_accept_the_largest_rank_count(tmp_path):
    # 64 ranks taken in turn: the second request lands on rank 1 and misses, the 65th is back on rank 0
    p = write(tmp_path, [(1024, [1, 2])] * 65)
    assert prefix_hit_rate(p, capacity_tokens="inf", ranks=64) == pytest.approx(1023 / (65 * 1024))


def test_a_capacity_of_one_block_or_less_keeps_one_block(tmp_path):
    # 512-token blocks: a cache of 512 tokens (or of 100: rounded down, but never below one block) keeps the
    # first block of [1, 2, 3, 4]; the repeat finds 512 of its 2048 tokens
    p = write(tmp_path, [(2048, [1, 2, 3, 4])] * 2)
    assert prefix_hit_rate(p, capacity_tokens=512) == pytest.approx(512 / 4096)
    assert prefix_hit_rate(p, capacity_tokens=100) == pytest.approx(512 / 4096)
    assert prefix_hit_rate(p, capacity_tokens=1024) == pytest.approx(1024 / 4096)


def test_a_block_two_running_requests_pin_stays_until_both_release():
    c = RadixCache([2])
    a = c.admit([1, 2])
    b = c.admit([1, 2])                     # a second request on the same prompt
    c.release(a)
    assert c.admit([3, 4]) == [] and c.evicted == [0]      # full, and every block still pinned by b
    c.check()
    c.release(b)
    assert len(c.admit([3, 4])) == 2 and c.evicted == [2] and c.match_len([1, 2]) == 0
    c.check()


def test_evictions_are_counted_one_per_block():
    c = RadixCache([3])
    c.release(c.admit([1, 2, 3]))
    c.release(c.admit([7]))                  # one block out (the leaf 3)
    assert c.evicted == [1] and c.match_len([1, 2, 3]) == 2
    assert c.touch([8, 9]) == 0 and c.evicted == [3]        # the fast path counts the same way


def test_one_tier_evicts_the_least_recently_released_leaf():
    c = RadixCache([2])
    c.release(c.admit([1]))
    c.release(c.admit([2]))
    c.release(c.admit([1]))                 # 1 is used again: 2 is now the least recently used
    c.release(c.admit([3]))
    assert c.match_len([1]) == 1 and c.match_len([2]) == 0 and c.match_len([3]) == 1
    c.check()


def test_a_shrunk_tier_evicts_down_to_its_capacity_on_the_next_admission():
    # (the one-tier path evicted one block per inserted block, so a tier whose capacity shrank while requests ran
    # stayed above it)
    c = RadixCache([4])
    for b in (1, 2, 3):
        c.release(c.admit([b]))
    c.cap[0] = 1.0
    path = c.admit([9])
    assert len(path) == 1 and c.used == [1] and c.evicted == [3] and c.match_len([1]) == 0
    c.check()
    c.cap[0] = 0.5                                           # nothing evictable: the insertion stops
    assert c.admit([10]) == [] and c.used == [1]


def test_a_router_that_is_not_a_name_is_refused_by_the_hit_rate_path(tmp_path):
    # (found by the long fuzz run: prefix_hit_rate(..., router=[]) raised TypeError, not a ValueError)
    p = write(tmp_path, [(1024, [1, 2])])
    for bad in ([], {}, 3):
        with pytest.raises(ValueError, match="unknown router"):
            prefix_hit_rate(p, capacity_tokens="3M", router=bad)
