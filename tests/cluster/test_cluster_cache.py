import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sacmodel.cluster.prefix_cache import RadixCache


def keys(c: RadixCache):
    """Cached prefixes as block tuples, with their tier names."""
    out = {}
    for (parent, b), n in c.trie.items():
        path = [b]
        while parent:
            path.append(c.key[parent][1])
            parent = c.parent[parent]
        out[tuple(reversed(path))] = c.names[c.tier[n]]
    return out


def test_lru_evicts_the_least_recently_used_leaf_never_its_parent():
    c = RadixCache([3])
    assert c.touch([1, 2]) == 0            # nodes 1, 1-2
    assert c.touch([1, 3]) == 1            # hits block 1; adds 1-3 (3 blocks: full)
    assert c.touch([4]) == 0               # evicts 1-2, the least recently used leaf (1 was used later)
    assert set(keys(c)) == {(1,), (1, 3), (4,)}
    assert c.touch([1, 2]) == 1            # 1-2 is gone; re-adding it evicts 1-3, not 1 (a parent)
    assert set(keys(c)) == {(1,), (4,), (1, 2)} and c.evicted == [2]
    c.check()


def test_pinned_paths_are_never_evicted_and_a_full_cache_truncates_insertion():
    c = RadixCache([2])
    path = c.admit([1, 2, 3])              # only two blocks fit, both pinned by the request in flight
    assert len(path) == 2 and len(c) == 2
    assert c.admit([9]) == []              # nothing evictable: the other request caches nothing
    c.release(path)
    assert c.touch([1, 2, 3]) == 2
    c.check()


def test_demotion_to_host_and_promotion_on_hit():
    c = RadixCache([2, 2], ["hbm", "host"])
    c.touch([1, 2])
    c.touch([5, 6])                        # 1-2 then 1 demoted to host (leaf first)
    assert keys(c) == {(1,): "host", (1, 2): "host", (5,): "hbm", (5, 6): "hbm"}
    path = c.match([1, 2])
    assert c.tier_counts(path) == [0, 2]   # both blocks served from host DRAM
    c.release(c.admit([1, 2], path))
    # promotion swaps: 1 leaves host, so 5-6 (the LRU leaf of HBM) is demoted into its place; then 1-2
    # leaves host and 5 (now a leaf) takes its place. Nothing is lost: four blocks, four slots
    assert keys(c) == {(1,): "hbm", (1, 2): "hbm", (5,): "host", (5, 6): "host"}
    assert c.promoted == 2
    c.check()


def test_batch_eviction_above_the_high_watermark():
    c = RadixCache([100], watermark=0.95, evict_ratio=0.05)
    for b in range(95):
        c.touch([b])
    assert len(c) == 95
    c.touch([1000])                        # 96 > 95: evict ceil(5% of 95) = 5 oldest objects first
    assert len(c) == 91 and c.evicted == [5]
    assert c.match_len([4]) == 0 and c.match_len([5]) == 1
    c.check()


def lead_hits(reqs):
    """Brute force with an unbounded cache: blocks of the leading run of prefixes seen before."""
    seen, hits = set(), []
    for r in reqs:
        k = 0
        while k < len(r) and tuple(r[:k + 1]) in seen:
            k += 1
        hits.append(k)
        seen.update(tuple(r[:j + 1]) for j in range(len(r)))
    return hits


requests = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(requests)
def test_unbounded_cache_hits_every_previously_seen_prefix(reqs):
    c = RadixCache([math.inf])
    assert [c.touch(r) for r in reqs] == lead_hits(reqs)


@settings(max_examples=60, deadline=None)
@given(requests, st.integers(6, 20), st.integers(1, 10))
def test_lru_hits_grow_with_capacity_and_invariants_hold(reqs, cap, extra):
    small, big = RadixCache([cap]), RadixCache([cap + extra])
    hs = [small.touch(r) for r in reqs]
    hb = [big.touch(r) for r in reqs]
    assert sum(hs) <= sum(hb)
    small.check()
    big.check()
    assert len(small) <= cap


@settings(max_examples=150, deadline=None)
@given(requests, st.integers(1, 6), st.integers(1, 6))
def test_two_tiers_hold_as_much_as_one_of_their_total_size(reqs, c0, c1):
    # demotion keeps every block a single tier of c0 + c1 would keep (LRU order is the same)
    tiered, flat = RadixCache([c0, c1]), RadixCache([c0 + c1])
    for r in reqs:
        if len(r) > c0:                    # a request longer than tier 0 cannot be admitted whole
            continue
        assert tiered.touch(r) == flat.touch(r)
        tiered.check()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 4), min_size=1, max_size=5), st.integers(0, 9)),
                max_size=40), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4))
def test_requests_in_flight_keep_their_blocks_whatever_the_tiers_do(ops, c0, c1, c2):
    c = RadixCache([c0, c1, c2], watermark=None)
    held = []
    for admit, blocks, k in ops:
        if admit or not held:
            path = c.admit(blocks)
            assert len(path) <= len(blocks)
            held.append(path)
        else:
            c.release(held.pop(k % len(held)))
        c.check()
        for path in held:                 # a pinned block is never evicted, and its prefix neither
            assert all(c.key[n] is not None and c.ref[n] > 0 for n in path)
    for path in held:
        c.release(path)
    c.check()
    assert not any(c.ref[n] for n in range(1, len(c.ref)) if c.key[n] is not None)
