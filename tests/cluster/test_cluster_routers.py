import numpy as np
import pytest

from sacmodel.cluster.load import InstanceLoad
from sacmodel.cluster.routers import KvRouter, RouterError, make_router


def loads(active_blocks, pending, in_flight=None):
    out = []
    for j, (a, p) in enumerate(zip(active_blocks, pending)):
        ld = InstanceLoad(None, 512)
        ld.active_blocks, ld.pending_tokens = a, p
        ld.active = [(0, 0, 0)] * (in_flight[j] if in_flight else 0)
        out.append(ld)
    return out


def test_round_robin_and_least_load():
    rr = make_router("round_robin")
    L = loads([0, 0, 0], [0, 0, 0])
    assert [rr.choose([0, 1, 2], L, None, 10, []) for _ in range(5)] == [0, 1, 2, 0, 1]
    ll = make_router("least_load")
    assert ll.choose([0, 1, 2], loads([5, 1, 9], [0, 0, 0], [2, 1, 1]), None, 10, []) == 1


def test_kv_router_cost_is_weighted_prefill_plus_decode_blocks():
    # 4-block prompt; instance 0 caches 3 blocks but holds 10 blocks in flight; instance 1 caches nothing, holds 2
    L = loads([10, 2], [0, 0])
    ov = {0: 3, 1: 0}.__getitem__
    r = KvRouter(weight=1.0)
    # costs: 0 -> 1 x (4 - 3) + (10 + 4) = 15; 1 -> 1 x 4 + (2 + 4) = 10
    assert r.costs([0, 1], L, ov, 4 * 512) == [15.0, 10.0]
    assert r.choose([0, 1], L, ov, 4 * 512, []) == 1
    # weighting the prefill blocks 5x makes the cached prefix win: 0 -> 5 + 14 = 19, 1 -> 20 + 6 = 26
    assert KvRouter(weight=5.0).choose([0, 1], L, ov, 4 * 512, []) == 0
    # blocks it is already prefilling count as prefill work
    assert KvRouter(weight=1.0).costs([0, 1], loads([10, 2], [0, 8 * 512]), ov, 4 * 512) == [15.0, 18.0]


def test_kv_router_temperature_samples_the_normalised_softmax():
    L = loads([0, 0, 0], [0, 0, 0])
    ov = {0: 0, 1: 2, 2: 4}.__getitem__          # costs 4 + 4, 2 + 4, 0 + 4 -> normalised 1, 0.5, 0
    r = KvRouter(weight=1.0, temperature=0.5, seed=1)
    picks = np.array([r.choose([0, 1, 2], L, ov, 4 * 512, []) for _ in range(4000)])
    p = np.exp(-np.array([1.0, 0.5, 0.0]) / 0.5)
    p /= p.sum()
    assert np.allclose(np.bincount(picks, minlength=3) / len(picks), p, atol=0.03)
    again = KvRouter(weight=1.0, temperature=0.5, seed=1)
    assert [again.choose([0, 1, 2], L, ov, 2048, []) for _ in range(50)] == list(picks[:50])


def test_prefix_affinity_keeps_a_conversation_on_one_instance():
    r = make_router("prefix_affinity", affinity_blocks=2)
    L = loads([0] * 4, [0] * 4)
    first = r.choose([0, 1, 2, 3], L, None, 1000, [7, 8, 9])
    assert all(r.choose([0, 1, 2, 3], L, None, 1000, [7, 8] + list(range(50, 50 + k))) == first for k in range(5))
    spread = {r.choose([0, 1, 2, 3], L, None, 1000, [k, k + 1]) for k in range(0, 400, 2)}
    assert spread == {0, 1, 2, 3}


def test_bad_router_names_and_parameters():
    with pytest.raises(RouterError, match="unknown router 'fastest'"):
        make_router("fastest")
    with pytest.raises(RouterError, match="temperature"):
        make_router("kv", temperature=-1)
    with pytest.raises(RouterError, match="takes no parameter"):
        make_router("round_robin", weight=2)
