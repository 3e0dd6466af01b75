"""The co-simulation's mechanisms, each against a hand-worked case: blocks usable only once computed, the
handoff before the decode instance's first token, per-rank caches under round-robin, a KV router that
addresses ranks, and Mooncake Store's eviction at its watermark."""
import json
from dataclasses import replace

import pytest

from sacmodel import replay
from sacmodel.cluster.hitrate import prefix_hit_rate
from sacmodel.cluster.store import MooncakeStore
from sacmodel.hardware.scenarios import load_topology

BPT = 61 * (576 * 2 + 132)          # testbed KV bytes per token (see test_cluster_replay)


def trace(tmp_path, rows, name="t.jsonl"):
    """rows: (arrival s, input tokens, output tokens, hash_ids)."""
    p = tmp_path / name
    p.write_text("".join(json.dumps({"timestamp": int(t * 1000), "input_length": n, "output_length": o,
                                     "hash_ids": h}) + "\n" for t, n, o, h in rows))
    return p


def test_a_block_is_not_a_hit_before_its_prefill_has_computed_it(tmp_path):
    # two hosts on one CXL pool (round-robin: A on host 0, B on host 1), B sharing A's 8-block prompt. B arriving
    # 0.1 s after A finds nothing (A's prefill of 4096 tokens takes longer, and its write to the pool lands after
    # it); B arriving a minute later finds all of A's blocks but its last token's
    soon = replay("sac-cluster-4x", "cxl", trace(tmp_path, [(0, 4096, 4, list(range(8))), (0.1, 4096, 4, list(range(8)))]),
                  router="round_robin")
    late = replay("sac-cluster-4x", "cxl", trace(tmp_path, [(0, 4096, 4, list(range(8))), (60, 4096, 4, list(range(8)))],
                                                 "late.jsonl"), router="round_robin")
    assert list(soon.per_request["instance"]) == [0, 1]
    assert list(soon.per_request["cached_tokens"]) == [0, 0]
    assert list(late.per_request["cached_tokens"]) == [0, 4095]
    assert soon.per_request["ttft_ms"][1] > late.per_request["ttft_ms"][1]       # B prefills it all again


def test_the_first_token_of_a_disaggregated_request_comes_after_its_handoff(tmp_path):
    # one prefill and one decode instance (RDMA handoff): the client's first token is the decode instance's,
    # after the prefill's response, the pull of the prompt's KV (setup + bytes at one NIC's rate) and a decode
    # step; with one output token the request ends at the prefill instance
    rows = [(0, 8192, 32, [])]
    pd = replay("sac-cluster-4x", "dram", trace(tmp_path, rows), instances=2, pd="1:1", cache="none")
    alone = replay("sac-cluster-4x", "dram", trace(tmp_path, [(0, 8192, 1, [])], "one.jsonl"), instances=2,
                   pd="1:1", cache="none")
    te = load_topology("sac-cluster-4x").cluster.rdma
    pull = te.setup + 8192 * BPT / replace(te, nics=1).rate
    assert pd.per_request["handoff_s"][0] == pytest.approx(pull)
    assert pd.per_request["ttft_ms"][0] > alone.per_request["ttft_ms"][0] + 1e3 * pull
    assert alone.per_request["decode_instance"][0] == -1 and pd.per_request["decode_instance"][0] == 1


def test_per_rank_caches_under_round_robin_by_hand(tmp_path):
    # one instance of two data-parallel ranks taken in turn: four requests of one 4-block prompt land on ranks
    # 0, 1, 0, 1, so the first two miss and the last two find 2047 of their 2048 tokens
    p = trace(tmp_path, [(i, 2048, 1, [1, 2, 3, 4]) for i in range(4)])
    one = prefix_hit_rate(p, capacity_tokens="inf", ranks=1)
    two = prefix_hit_rate(p, capacity_tokens="inf", ranks=2)
    assert one == pytest.approx(3 * 2047 / (4 * 2048))
    assert two == pytest.approx(2 * 2047 / (4 * 2048))
    # a router that addresses ranks (Dynamo's kv over (worker, rank)) keeps them together
    assert prefix_hit_rate(p, capacity_tokens="inf", ranks=2, router="kv") == pytest.approx(one)


def test_the_kv_router_sends_a_prefix_back_to_the_rank_that_holds_it(tmp_path):
    # the testbed's 8 ranks: round-robin spreads nine requests of one prefix over all ranks (only the ninth hits);
    # Dynamo's router sees the rank's KV events and keeps every later one on the first request's rank
    rows = [(60.0 * i, 3000, 4, [0, 1, 2, 3, 100 + i]) for i in range(9)]
    p = trace(tmp_path, rows)
    rr = replay("sac-testbed", "gpu", p, router="round_robin")
    kv = replay("sac-testbed", "gpu", p, router="kv")
    assert list(rr.per_request["cached_tokens"]) == [0] * 8 + [2048]
    assert list(kv.per_request["cached_tokens"]) == [0] + [2048] * 8


def test_mooncake_store_evicts_at_its_watermark_oldest_lease_first():
    st = MooncakeStore(100, watermark=0.9, evict_ratio=0.05, lease=10.0, tick=0.01)
    keys = list(range(91))
    st.put_end(st.put_start(keys, 0.0), 0.0)
    assert st.used == 91 and st.evicted == 0
    assert st.match_len(list(range(10)), 0.005) == 10       # objects 0-9 read before the first tick: leased
    # the next pass (any operation past the 10 ms tick): 91 > 90 = watermark x capacity, so it frees
    # max(0.05, 0.91 - 0.90 + 0.05) = 6% of the capacity: 6 objects, the oldest leases that have expired (10-15)
    st.match_len([], 0.05)
    assert st.evicted == 6 and st.used == 85
    assert all(k in st.lease_until for k in range(10)) and not any(k in st.lease_until for k in range(10, 16))
    assert st.match_len(list(range(20)), 0.06) == 10        # a prefix is read up to its first missing object


def test_a_full_mooncake_store_drops_writes_and_asks_for_eviction():
    st = MooncakeStore(10, watermark=0.9, evict_ratio=0.05, lease=10.0, tick=0.01)
    got = st.put_start(list(range(12)), 0.0)
    assert got == list(range(10)) and st.dropped == 2 and st.need_eviction
    assert st.match_len([0], 0.0) == 0                       # allocated, not readable before PutEnd
    st.put_end(got, 0.001)
    assert st.match_len(list(range(12)), 0.001) == 10
    # the next pass frees max(0.05, 1.0 - 0.9 + 0.05) = 15% of 10: 2 objects; all leased now, so none
    st.match_len([], 0.02)
    assert st.evicted == 0
    st.match_len([], 10.05)                                  # leases over: the next pass frees 2
    assert st.evicted == 2 and st.used == 8


def test_a_store_on_the_hosts_reads_a_local_replica_locally():
    from sacmodel.cluster.network import Network
    from sacmodel.hardware.scenarios import load_cluster
    st = MooncakeStore(100, segments=["h0", "h1", "h2", "h3"], replicas=2, seed=5)
    st.put_end(st.put_start([1, 2, 3, 4], 0.0, "h0"), 0.0)
    held = st.holders([1, 2, 3, 4])
    assert sum(held.values()) == 8 and set(held) <= {"h0", "h1", "h2", "h3"}      # two replicas each
    cl = load_cluster("sac-cluster-4x")
    net = Network(cl, cl.hosts, cl.host)
    flows = net.load("h1", 0, cl.tiers["store"], 8e9, held)
    assert len(flows) == len(held)
    for (src, n), (nbytes, lat, res) in zip(sorted(held.items()), flows):
        assert nbytes == pytest.approx(8e9 * n / 8)
        if src == "h1":                     # its own replica: host memory, no NIC, no setup
            assert res == ("h1.pcie",) and lat == 0
        else:
            assert res == (f"{src}.nic0.out", "h1.nic0.in") and lat == cl.rdma.setup


def test_a_replay_takes_a_built_scenario_and_a_generated_workload():
    from sacmodel import scenario
    from sacmodel.workloads import shared_prefix
    pod = scenario("h100", gpus=2, model="qwen3-32b", weights="bf16")
    tr = shared_prefix(4, 2, 2048, 256, 16, rate=2.0, requests=16, seed=0)
    p = replay(pod, "gpu", tr, instances=2, router="kv")
    assert p.feasible and p.success_fraction == 1.0 and p.summary["instances"] == 2
    # every prompt repeats once (8 prompts, 16 requests): at least the repeats find their prompt cached
    assert p.summary["hit_rate_total"] >= 0.4
