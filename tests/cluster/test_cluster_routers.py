"""Routers against hand-worked cases: what each decides from its own bookkeeping and the caches it sees."""
import numpy as np
import pytest

from sacmodel.cluster.routers import CacheAware, KvRouter, RouterError, RouterState, make_router

NONE = lambda c: (0, 0, 0, 0)  # noqa: E731


def state(active_keys, prefill=None, in_flight=None):
    s = RouterState(len(active_keys))
    for c, keys in enumerate(active_keys):
        for k in keys:
            s.active[c][k] = s.active[c].get(k, 0) + 1
        s.prefill_tokens[c] = (prefill or [0] * len(active_keys))[c]
        s.in_flight[c] = (in_flight or [0] * len(active_keys))[c]
    return s


def test_round_robin_and_least_load():
    rr = make_router("round_robin")
    s = state([[], [], []])
    assert [rr.choose(s, NONE, 10, []) for _ in range(5)] == [0, 1, 2, 0, 1]
    ll = make_router("least_load")
    # fewest in flight wins; tie on in-flight broken by fewer active blocks
    assert ll.choose(state([[1, 2], [1], [1, 2, 3]], in_flight=[2, 1, 1]), NONE, 10, []) == 1
    assert ll.choose(state([[1, 2], [1, 2, 3], [9]], in_flight=[1, 1, 1]), NONE, 10, []) == 2


def test_unique_active_blocks_count_a_shared_prefix_once():
    s = RouterState(1)
    s.add(0, [1, 2, 3], 1536)
    s.add(0, [1, 2, 4], 1536)              # shares blocks 1, 2 with the first
    assert len(s.active[0]) == 4
    assert s.new_blocks(0, [1, 2, 3, 5]) == 1
    s.finish(0, [1, 2, 3])
    assert sorted(s.active[0]) == [1, 2, 4]
    assert s.in_flight == [1] and s.assigned == [2]


def test_kv_router_cost_is_dynamos():
    # 4-block prompt (2048 tokens, 512-token blocks). Candidate 0: 3 device blocks cached, 10 unique active
    # blocks; candidate 1: nothing cached, 2 active blocks, and 4096 prompt tokens still before their first token
    s = state([list(range(100, 110)), [200, 201]], prefill=[0, 4096])
    ov = {0: (3, 0, 0, 0), 1: (0, 0, 0, 0)}.__getitem__
    r = KvRouter(weight=1.0)
    keys = [1, 2, 3, 4]
    # 0: max(0, 2048/512 - 3) + 10 + 4 = 15;  1: (4096 + 2048)/512 + 2 + 4 = 18
    assert r.costs(s, ov, 2048, keys) == [15.0, 18.0]
    assert r.choose(s, ov, 2048, keys) == 0
    # host-tier blocks earn 0.75 each, disk 0.25, a shared tier nothing (Dynamo's defaults)
    ov2 = {0: (0, 4, 0, 0), 1: (0, 0, 4, 4)}.__getitem__
    assert r.costs(state([[], []]), ov2, 2048, keys) == [1.0 + 4, 3.0 + 4]
    # blocks already active on a candidate are not new there
    assert r.costs(state([[1, 2], []]), NONE, 2048, keys) == [4 + 2 + 2, 4 + 0 + 4]


def test_kv_router_breaks_ties_at_random_seeded():
    s = state([[], [], []])
    picks = [KvRouter(seed=3).choose(s, NONE, 512, [1]) for _ in range(1)]
    r = KvRouter(seed=3)
    seq = [r.choose(s, NONE, 512, [1]) for _ in range(300)]
    assert set(seq) == {0, 1, 2}                           # every tied candidate gets picked
    assert np.allclose(np.bincount(seq) / 300, 1 / 3, atol=0.08)
    assert KvRouter(seed=3).choose(s, NONE, 512, [1]) == picks[0]     # same seed, same choice


def test_kv_router_temperature_samples_the_normalised_softmax():
    s = state([[], [], []])
    ov = {0: (0, 0, 0, 0), 1: (2, 0, 0, 0), 2: (4, 0, 0, 0)}.__getitem__   # costs 8, 6, 4 -> 1, 0.5, 0
    r = KvRouter(weight=1.0, temperature=0.5, seed=1)
    picks = np.array([r.choose(s, ov, 4 * 512, [1, 2, 3, 4]) for _ in range(4000)])
    p = np.exp(-np.array([1.0, 0.5, 0.0]) / 0.5)
    p /= p.sum()
    assert np.allclose(np.bincount(picks, minlength=3) / len(picks), p, atol=0.03)


def test_kv_router_queue_holds_requests_while_every_rank_is_busy_prefilling():
    r = KvRouter(queue_threshold=1.0, batched_tokens=1000)
    assert r.waits(state([[], []], prefill=[1500, 1200]))
    assert not r.waits(state([[], []], prefill=[1500, 900]))
    assert not KvRouter().waits(state([[], []], prefill=[1e9, 1e9]))      # off by default, as in Dynamo


def test_cache_aware_router_follows_the_sglang_gateway():
    r = CacheAware(cache_threshold=0.3, balance_abs=2, balance_rel=1.5)
    s = state([[], [], []])
    # empty trees: the smallest tree (lowest index on a tie) takes it, and the tree learns the prompt
    assert r.choose(s, NONE, 2048, [1, 2, 3, 4]) == 0
    assert r.choose(s, NONE, 2048, [7, 8]) == 1
    # 2 of 4 blocks (50% > 30%) match instance 0's tree: it wins though its tree is the largest
    assert r.choose(s, NONE, 2048, [1, 2, 9, 10]) == 0
    # 1 of 4 (25%) is below the threshold: the smallest tree (instance 2) takes it
    assert r.choose(s, NONE, 2048, [1, 11, 12, 13]) == 2
    # imbalance (max - min in flight > 2 and max > 1.5 min): the least loaded, whatever the trees say
    busy = state([[], [], []], in_flight=[9, 0, 5])
    r.trees = r.trees
    assert r.choose(busy, NONE, 2048, [1, 2, 3, 4]) == 1


def test_prefix_affinity_keeps_a_conversation_on_one_instance():
    r = make_router("prefix_affinity", affinity_blocks=2)
    s = state([[]] * 4)
    first = r.choose(s, NONE, 1000, [7, 8, 9])
    assert all(r.choose(s, NONE, 1000, [7, 8] + list(range(50, 50 + k))) == first for k in range(5))
    spread = {r.choose(s, NONE, 1000, [k, k + 1]) for k in range(0, 400, 2)}
    assert spread == {0, 1, 2, 3}


def test_bad_router_names_and_parameters():
    with pytest.raises(RouterError, match="unknown router 'fastest'"):
        make_router("fastest")
    for name in ([], None, 5):                 # (found by the long fuzz run: a list raised TypeError)
        with pytest.raises(RouterError, match="unknown router"):
            make_router(name)
    with pytest.raises(RouterError, match="temperature"):
        make_router("kv", temperature=-1)
    with pytest.raises(RouterError, match="takes no parameter"):
        make_router("round_robin", weight=2)
    with pytest.raises(RouterError, match="queue_threshold"):
        make_router("kv", queue_threshold=0)
