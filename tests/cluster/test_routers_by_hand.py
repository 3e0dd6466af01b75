"""Routers by hand (issue 36, item 6): the router's own bookkeeping, the SGLang gateway's balance test, llm-d's
queue and KV scorers, prefix affinity, least load's tie order."""
import pytest

from sacmodel.cluster.routers import CacheAware, LlmD, RouterState, make_router

NONE = lambda c: (0, 0, 0, 0)  # noqa: E731


def test_bookkeeping_of_a_request_from_routing_to_its_end():
    s = RouterState(2)
    s.add(1, [10, 11], 1024)
    s.add(1, [10, 12], 1024)
    assert s.in_flight == [0, 2] and s.assigned == [0, 2] and s.prefill_tokens == [0.0, 2048.0]
    assert s.active[1] == {10: 2, 11: 1, 12: 1}
    s.first_token(1, 1024)
    assert s.prefill_tokens == [0.0, 1024.0] and s.in_flight == [0, 2]     # still decoding
    s.finish(1, [10, 11])
    assert s.in_flight == [0, 1] and s.assigned == [0, 2] and s.active[1] == {10: 1, 12: 1}
    assert s.new_blocks(1, [10, 12, 13]) == 1 and s.new_blocks(0, [10, 12, 13]) == 3


def test_least_load_orders_in_flight_then_active_blocks_then_assigned_then_index():
    s = RouterState(3)
    s.in_flight = [1, 1, 1]
    s.active = [{1: 1}, {1: 1}, {1: 1, 2: 1}]
    s.assigned = [5, 3, 0]
    assert make_router("least_load").choose(s, NONE, 10, []) == 1         # fewer assigned breaks the tie
    s.assigned = [3, 3, 0]
    assert make_router("least_load").choose(s, NONE, 10, []) == 0         # then the lower index
    s.in_flight = [2, 1, 0]
    assert make_router("least_load").choose(s, NONE, 10, []) == 2


def _gateway(load, trees):
    r = CacheAware(cache_threshold=0.3, balance_abs=64, balance_rel=1.5)
    s = RouterState(len(load))
    s.in_flight = list(load)
    from collections import OrderedDict
    r.trees = [OrderedDict((k, None) for k in t) for t in trees]
    return r, s


def test_gateway_balances_only_when_both_absolute_and_relative_gaps_are_exceeded():
    keys = [1, 2, 3, 4]
    # instance 0 holds the whole prompt; it is busier by 65 (> 64) and 65 > 1.5 x 0: balance wins
    r, s = _gateway([65, 0], [[1, 2, 3, 4], []])
    assert r.choose(s, NONE, 2048, keys) == 1
    # by 64 only (not > 64): the cache wins
    r, s = _gateway([64, 0], [[1, 2, 3, 4], []])
    assert r.choose(s, NONE, 2048, keys) == 0
    # a gap of 100 but 200 < 1.5 x 150: still the cache
    r, s = _gateway([200, 150], [[1, 2, 3, 4], []])
    assert r.choose(s, NONE, 2048, keys) == 0


def test_gateway_match_threshold_and_smallest_tree():
    keys = [1, 2, 3, 4]
    # a match of 1 block of 4 (25% <= 30%): the smallest tree instead
    r, s = _gateway([0, 0, 0], [[1, 9, 9], [7, 8], [5]])
    assert r.choose(s, NONE, 2048, keys) == 2
    # 2 of 4 (50% > 30%): the best match
    r, s = _gateway([0, 0, 0], [[1, 2, 9], [7, 8], [5]])
    assert r.choose(s, NONE, 2048, keys) == 0
    assert list(r.trees[0])[-4:] == keys                # the decision feeds its own tree


def test_llm_d_queue_scorer_prefers_the_shortest_queue():
    r = LlmD(prefix="none", prefix_weight=0.0, kv_weight=0.0, queue_weight=1.0)
    r.metrics = {0: (4, 0.0), 1: (0, 0.0), 2: (2, 0.0)}.__getitem__
    s = RouterState(3)
    assert r.choose(s, NONE, 512, [1]) == 1
    # the KV scorer: 1 - use; with queues equal (queue score 1 everywhere) the emptiest cache wins
    r = LlmD(prefix="none", prefix_weight=0.0, kv_weight=1.0, queue_weight=1.0)
    r.metrics = {0: (3, 0.9), 1: (3, 0.2), 2: (3, 0.5)}.__getitem__
    assert r.choose(s, NONE, 512, [1]) == 1
    # weighted sum: queue (weight 2) 0 -> 1 beats kv (weight 1) 0.1 -> 0.9
    r = LlmD(prefix="none", prefix_weight=0.0, kv_weight=1.0, queue_weight=2.0)
    r.metrics = {0: (0, 0.9), 1: (5, 0.1)}.__getitem__
    assert r.choose(RouterState(2), NONE, 512, [1]) == 0


def test_llm_d_precise_prefix_scorer_reads_device_blocks():
    r = LlmD(prefix="precise", prefix_weight=3.0, kv_weight=0.0, queue_weight=0.0)
    r.metrics = {0: (0, 0.0), 1: (0, 0.0)}.__getitem__
    ov = {0: (1, 0, 0, 0), 1: (3, 4, 0, 0)}.__getitem__
    assert r.choose(RouterState(2), ov, 2048, [1, 2, 3, 4]) == 1


def test_prefix_affinity_is_consistent_and_by_the_first_blocks():
    r = make_router("prefix_affinity", affinity_blocks=2)
    s = RouterState(8)
    a = r.choose(s, NONE, 2048, [1, 2, 3, 4])
    assert r.choose(s, NONE, 2048, [1, 2, 9, 9]) == a           # same first two blocks
    picks = {r.choose(s, NONE, 2048, [k, k + 1]) for k in range(0, 200, 2)}
    assert len(picks) >= 6                                      # different prefixes spread
    assert r.choose(RouterState(3), NONE, 10, []) == 0          # no blocks: least loaded


@pytest.mark.parametrize("n", [1, 3])
def test_round_robin_cycles(n):
    r = make_router("round_robin")
    assert [r.choose(RouterState(n), NONE, 1, []) for _ in range(2 * n)] == list(range(n)) * 2
