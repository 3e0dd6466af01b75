"""The co-simulation's bookkeeping, each against a hand-worked case or an exact law (campaign 2 of issue 23:
each test kills mutants or planted bugs the earlier cluster tests let through): llm-d's scorers by hand and in
a replay, the router queue serialising requests, a failed instance named, the decode instance waiting for the
CXL write to land, generated tokens taking room in the cache, a whole-prompt hit priced as the engine prices it.
"""
import numpy as np
import pytest
import yaml
from test_cosim_mechanisms import BPT, trace

from sacmodel import replay
from sacmodel.cluster.routers import LlmD, RouterState
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
from sacmodel.serving.config import resolve
from sacmodel.serving.engine.stepmodel import TRACE_CONTEXT_GRID, Model
from sacmodel.serving.engine.workload import Requests
from sacmodel.serving.predict import simulate


def cluster(tmp_path, mutate, name="cluster.yaml"):
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    mutate(data["cluster"])
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


# ---- llm-d's endpoint picker ---------------------------------------------------------------------------------
def test_llm_d_scores_prefix_kv_use_and_queue_by_hand():
    # three pods; a 4-block prompt. Pod 0 holds all 4 blocks, 4 waiting, KV half used; pod 1 nothing, 0 waiting,
    # 90% used; pod 2 one block, 2 waiting, 10% used. Queue score (4 - q) / (4 - 0).
    metrics = {0: (4, 0.5), 1: (0, 0.9), 2: (2, 0.1)}
    overlap = {0: (4, 0, 0, 0), 1: (0, 0, 0, 0), 2: (1, 0, 0, 0)}.__getitem__
    s = RouterState(3)
    # weights 3, 2, 2; prefix min-max normalised over pods 0 and 2 (4 and 1 blocks: 1 and 0): pod 0 = 3 x 1 + 2 x 0.5
    # + 2 x 0 = 4.0; pod 1 = 0 + 0.2 + 2 = 2.2; pod 2 = 0 + 1.8 + 1 = 2.8
    r = LlmD()
    r.metrics = metrics.__getitem__
    assert r.choose(s, overlap, 2048, [1, 2, 3, 4]) == 0
    # without the prefix scorer pod 2 wins (1.0, 2.2, 2.8); with the prefix alone pod 0
    r = LlmD(prefix_weight=0.0)
    r.metrics = metrics.__getitem__
    assert r.choose(s, overlap, 2048, [1, 2, 3, 4]) == 2
    r = LlmD(prefix="none")
    r.metrics = metrics.__getitem__
    assert r.choose(s, overlap, 2048, [1, 2, 3, 4]) == 2
    r = LlmD(kv_weight=0.0, queue_weight=0.0)
    r.metrics = metrics.__getitem__
    assert r.choose(s, overlap, 2048, [1, 2, 3, 4]) == 0
    # without metrics the queue is the router's own in-flight count: pod 1 has none in flight
    r = LlmD(prefix="none")
    s.in_flight[:] = [3, 0, 1]
    assert r.choose(s, overlap, 2048, [1, 2, 3, 4]) == 1


def test_llm_d_breaks_ties_at_random_and_its_estimated_prefix_is_an_lru_of_what_it_routed():
    flat = {0: (0, 0.0), 1: (0, 0.0), 2: (0, 0.0)}.__getitem__
    none = lambda c: (0, 0, 0, 0)  # noqa: E731
    r = LlmD(prefix="none", seed=4)
    r.metrics = flat
    picks = [r.choose(RouterState(3), none, 512, [1]) for _ in range(300)]
    assert set(picks) == {0, 1, 2} and np.allclose(np.bincount(picks) / 300, 1 / 3, atol=0.08)
    # estimated prefix: an LRU of at most 3 blocks per pod, looking at the first 2 blocks of a prompt
    r = LlmD(prefix="estimated", prefix_weight=1.0, kv_weight=1.0, queue_weight=1.0, lru_tokens=3 * 512,
             match_tokens=2 * 512, seed=0)
    r.metrics = flat
    s = RouterState(3)
    c = r.choose(s, none, 1536, [1, 2, 9])            # all tied: a seeded random pod learns blocks 1, 2
    assert list(r.trees[c]) == [1, 2] and all(not t for i, t in enumerate(r.trees) if i != c)
    # 2 of the 2 blocks looked at (score 3 against 2), then 1 of 2 (2.5 against 2): the same pod
    assert r.choose(s, none, 1536, [1, 2, 5]) == c
    assert r.choose(s, none, 1024, [1, 3]) == c
    assert r.choose(s, none, 1024, [1, 4]) == c
    # the LRU: 2, 1, 3 then 1 moves last and 4 comes in; 2 (least recent) leaves: 3, 1, 4
    assert list(r.trees[c]) == [3, 1, 4]


def test_llm_d_in_a_replay_reads_the_engines_and_keeps_a_prefix_on_its_pod(tmp_path):
    # requests a minute apart sharing 4 blocks: every pod idle, so the precise prefix score (the blocks in the
    # pod's device cache, from its KV events) decides and every later request joins the first one's pod
    rows = [(60.0 * i, 3000, 4, [0, 1, 2, 3, 100 + i]) for i in range(6)]
    p = replay("sac-cluster-4x", "gpu", trace(tmp_path, rows), router="llm_d")
    assert len(set(p.per_request["instance"].tolist())) == 1
    assert list(p.per_request["cached_tokens"]) == [0] + [2048] * 5
    blind = replay("sac-cluster-4x", "gpu", trace(tmp_path, rows), router="llm_d",
                   router_params={"prefix": "none"})
    assert len(set(blind.per_request["instance"].tolist())) > 1       # seeded random ties spread them


# ---- the router's queue --------------------------------------------------------------------------------------
def test_a_kv_router_queue_below_one_prompt_serves_identical_requests_one_after_another(tmp_path):
    # one candidate (a TP-2 pod without DP attention), four identical requests at t = 0, no shared blocks. With
    # a queue threshold below one prompt every request waits in the router until the previous one's first token
    # is seen, then takes as long as the first plus the same wait w for the scheduler's loop (it comes while the
    # previous one decodes: the loop takes it in as it launches the next iteration, admits it in the one after):
    # TTFT_k = TTFT_0 + k (TTFT_0 + w), w the difference of their queue times
    from sacmodel import scenario
    pod = scenario("h100", gpus=2, model="qwen3-32b", weights="bf16")
    rows = [(0, 4096, 4, [10 * i + j for j in range(8)]) for i in range(4)]
    q = replay(pod, "gpu", trace(tmp_path, rows), router="kv", router_params={"queue_threshold": 0.01})
    ttft, queue = q.per_request["ttft_ms"], q.per_request["queue_s"]
    w = (queue[1] - queue[0]) * 1e3
    assert ttft == pytest.approx([ttft[0] + k * (ttft[0] + w) for k in range(4)], rel=1e-9)
    assert queue[1:] == pytest.approx([queue[1]] * 3, rel=1e-9)
    # at most three decode steps: the request may reach the engine a step after the first token was seen (the
    # engine's clock runs to its iteration's end), then the loop takes it in one or two steps later
    assert 0 < w <= 3 * q.per_request["tbt_ms"][0]
    free = replay(pod, "gpu", trace(tmp_path, rows), router="kv")
    # without the queue the other three prefill in the iteration after the first one's: it runs without a CUDA
    # graph, and the first token leaves once the CPU has launched all its kernels. A built machine overlaps the
    # launches with the GPU's work (launch_overlap 1), so that is n t_launch (Model.launch_cpu), not the excess
    # over the in-graph floor (t_eager) a fork that serialises them adds: 45.2 against 42.3 ms here
    from sacmodel.serving.config import resolve
    from sacmodel.serving.engine import Model
    model = Model(resolve(pod, "gpu"))
    launched_ms = model.launch_cpu(model.t_eager) * 1e3
    assert launched_ms > model.t_eager * 1e3
    assert free.per_request["ttft_ms"][0] == pytest.approx(ttft[0] + launched_ms, rel=1e-12)
    assert free.per_request["ttft_ms"][3] < ttft[3]              # without it they prefill together


# ---- failures ------------------------------------------------------------------------------------------------
def test_an_instance_whose_engine_fails_is_named_and_its_requests_are_unfinished(tmp_path):
    # HiSparse: each request takes a device buffer of 6144 + one 64-token page = 6208 slots per rank; 20,000
    # slots hold 3 (18,624). 32 requests at t = 0 over 8 ranks in turn: rank 0's fourth allocation fails (8K
    # prompts: the host pool, twice the device pool, holds four of 8,254 tokens, so the device buffer binds first)
    rows = [(0, 8192, 64, [1000 * i + j for j in range(16)]) for i in range(32)]
    p = replay("sac-testbed", "dram", trace(tmp_path, rows), device_buffer=6144, max_total_tokens=20000)
    why = "i0: device-buffer allocation of 6208 slots failed on rank 0 (18624 of 20000 slots in use)"
    assert p.summary["failed_instances"] == [why]
    assert not p.feasible and p.limit.startswith(why + "; ") and p.limit.endswith(p.summary["crash_advice"])
    assert p.success_fraction == 0.0 and p.summary["unfinished_requests"] == 32


# ---- disaggregation over the CXL pool ------------------------------------------------------------------------
def test_the_decode_instance_waits_for_the_prefills_write_to_land_in_the_pool(tmp_path):
    # one prefill and one decode instance on the CXL pool; the prompt's 8 blocks (4096 tokens) are written through
    # the prefill host's adapters from the end of the prefill, and the prefill's response comes g later: the decode
    # instance waits max(0, write time - g), so from 1 to 0.5 GB/s the wait grows by exactly the extra write time,
    # and at 66 GB/s, where the two devices' 2 x 22.5 GB/s bind, it is what is left of a write that short
    rows = [(0, 4096, 8, list(range(8)))]
    out = {}
    for w in ("66 GB/s", "1 GB/s", "0.5 GB/s"):
        c = cluster(tmp_path, lambda c, w=w: c["tiers"]["cxl"]["host_write_bandwidth"].update(value=w),
                    f"c{w.split()[0]}.yaml")
        out[w] = replay(c, "cxl", trace(tmp_path, rows), instances=2, pd="1:1")
    nbytes = 4096 * BPT
    assert out["66 GB/s"].summary["bytes_by_link"]["h0.cxl_write"] == pytest.approx(nbytes)
    slow, slower = out["1 GB/s"].per_request, out["0.5 GB/s"].per_request
    assert slow["handoff_s"][0] > 0
    g = nbytes / 1e9 - slow["handoff_s"][0]
    assert g > 0 and out["66 GB/s"].per_request["handoff_s"][0] == pytest.approx(max(0.0, nbytes / 45e9 - g),
                                                                                 rel=1e-9)
    assert slower["handoff_s"][0] - slow["handoff_s"][0] == pytest.approx(nbytes / 0.5e9 - nbytes / 1e9, rel=1e-9)
    assert slower["ttft_ms"][0] - slow["ttft_ms"][0] == pytest.approx(1e3 * (nbytes / 0.5e9 - nbytes / 1e9), rel=1e-9)


# ---- the cache: generated tokens, whole-prompt hits ----------------------------------------------------------
def test_generated_tokens_join_the_cache_at_the_end_and_take_room(tmp_path):
    # one GPU instance, 8 ranks in turn, an HBM tier of 16384 tokens: 4 blocks per rank. Rank 0 serves requests
    # 0, 8, 16, 24 (the others are fillers on the other ranks), 100 s apart:
    #   0: Y = [8] (1 block);  8: A = [1] with 1024 output tokens: at its end its prompt and its 2 generated
    #   blocks join the cache (4 blocks used: Y, A, and A's two);  16: B = [5] needs one more: Y, the least
    #   recently used leaf, leaves;  24: Y again finds nothing. (Without the generated blocks Y would stay.)
    def small(c):
        c["hosts"] = [{"id": "h"}]
        c["instances"] = [{"id": "n", "host": "h", "tiers": ["hbm"]}]
        c["tiers"]["hbm"]["capacity"]["value"] = "16384 token"
        c["tiers"]["cxl"]["attached"] = ["h"]
    fill = lambda i: (100.0 * i, 600, 2, [1000 + i])  # noqa: E731
    rows = [(0, 512, 2, [8])] + [fill(i) for i in range(1, 8)] + [(800, 512, 1024, [1])] + \
        [fill(i) for i in range(9, 16)] + [(1600, 512, 2, [5])] + [fill(i) for i in range(17, 24)] + \
        [(2400, 512, 2, [8])]
    p = replay(cluster(tmp_path, small), "gpu", trace(tmp_path, rows))
    assert list(p.per_request["cached_tokens"]) == [0] * 25
    # Y by B, then one of A's generated blocks (a leaf, least recently used) when Y comes back
    assert p.summary["evicted_blocks"] == {"hbm": 2}


def test_a_whole_prompt_hit_is_priced_as_the_engine_prices_a_cached_prompt(tmp_path):
    # one instance, requests a minute apart; request 8 repeats request 0's 5-block prompt of 2049 tokens on rank
    # 0: it finds 2048 tokens (the last one is always computed, and 2048 is a whole number of 64-token pages, so
    # one token is prefilled, not a page and one) and its times are the single-instance engine's
    rows = [(60.0 * i, 2049 if i % 8 == 0 else 3000 + 700 * i, 20 + i,
             [0, 1, 2, 3, 4] if i % 8 == 0 else [50 + i, 60 + i]) for i in range(9)]
    p = trace(tmp_path, rows)
    new = replay("sac-testbed", "cxl", p)
    cached = new.per_request["cached_tokens"]
    assert list(cached) == [0] * 8 + [2048]
    from sacmodel.data.traces import load_trace
    tr = load_trace(p)
    cfg = resolve(load_topology("sac-testbed"), "cxl")
    old = simulate(cfg, Requests(tr.arrival, tr.input_len, tr.output_len, cached), 1 << 30,
                   model=Model(cfg, context_grid=TRACE_CONTEXT_GRID))
    assert new.ttft_mean_ms == pytest.approx(old.ttft_mean_ms, rel=1e-12)
    assert new.tbt_mean_ms == pytest.approx(old.tbt_mean_ms, rel=1e-12)


def _one_host(tiers):
    def mutate(c):
        c["hosts"] = [{"id": "h"}]
        c["instances"] = [{"id": "n", "host": "h", "tiers": tiers}]
        c["tiers"]["cxl"]["attached"] = ["h"]
    return mutate


def test_a_far_hit_beyond_a_near_one_loads_only_the_blocks_the_rank_lacks(tmp_path):
    # one GPU instance (8 ranks in turn) caching in HBM and writing through to the RDMA store. Request 0 (rank 0)
    # computes [1, 2]; request 1 (rank 1) finds [1, 2] in the store only and loads them; request 8 (rank 0 again)
    # holds [1, 2] in HBM and finds [1, 2, 3, 4] in the store: it loads the 2 blocks it lacks, 1024 tokens over one
    # NIC of its host after the Transfer Engine's setup, and of its 2047 cached tokens 1024 came from the store
    fill = lambda i: (100.0 * i, 600, 2, [1000 + i])  # noqa: E731
    rows = [(0, 1024, 2, [1, 2]), (100, 2048, 2, [1, 2, 3, 4])] + [fill(i) for i in range(2, 8)] + \
        [(800, 2048, 2, [1, 2, 3, 4])]
    p = replay(cluster(tmp_path, _one_host(["hbm", "store"])), "gpu", trace(tmp_path, rows))
    pr = p.per_request
    assert list(pr["cached_store"]) == [0, 1024] + [0] * 6 + [1024]
    assert list(pr["cached_hbm"]) == [0] * 8 + [1023]
    te = load_topology("sac-cluster-4x").cluster.rdma
    from dataclasses import replace
    load = te.setup + 1024 * BPT / replace(te, nics=1).rate
    assert pr["load_s"][1] == pytest.approx(load, rel=1e-9) and pr["load_s"][8] == pytest.approx(load, rel=1e-9)
    assert p.summary["bytes_by_link"]["store.rdma_out"] == pytest.approx(2 * 1024 * BPT)


def test_a_store_on_the_hosts_serves_far_hits_from_the_hosts_holding_replicas(tmp_path):
    # Mooncake Store with its segments on the four hosts: request 1 (instance 1) loads request 0's 4 blocks from the
    # hosts the store placed them on, over their NICs into h1's, never from a dedicated store server
    def seg(c):
        c["instances"] = [{"id": "n", "count": 4, "host": "h", "tiers": ["hbm", "store"]}]
        c["tiers"]["store"]["segments"] = "hosts"
    rows = [(0, 2048, 2, [1, 2, 3, 4]), (60, 2048, 2, [1, 2, 3, 4])]
    p = replay(cluster(tmp_path, seg), "gpu", trace(tmp_path, rows))
    assert list(p.per_request["instance"]) == [0, 1] and list(p.per_request["cached_store"]) == [0, 2047]
    b = p.summary["bytes_by_link"]
    assert "store.rdma_out" not in b
    assert b["h1.nic0.in"] + b.get("h1.pcie", 0.0) == pytest.approx(2048 * BPT)   # all four blocks, from replicas


def test_blocks_that_running_requests_pin_in_a_ranks_home_cache_are_counted_once(tmp_path):
    from sacmodel.cluster.replay import Setup
    s = Setup("sac-testbed", "gpu", trace(tmp_path, [(0, 1000, 2, [1, 2])]), router="round_robin", instances=None,
              pd=None, time_scale=1.0, concurrency=None, cache="trace", slo=None, router_params=None, limit=None,
              resources={})
    s.build(None, None, None)
    c = s.caches
    home = c.home(0, 0)
    keys = [11, 12, 13, 14]
    assert c.shared_in_use(0, 0, keys, 4) == 0
    path = c.pin(home, keys, 3)                       # a running request pins the first 3 blocks
    assert c.shared_in_use(0, 0, keys, 4) == 3 and c.shared_in_use(0, 0, keys, 2) == 2
    assert c.shared_in_use(0, 1, keys, 4) == 0        # another rank has its own cache
    home.release(path)
    assert c.shared_in_use(0, 0, keys, 4) == 0        # still cached, no longer in use



# ---- routers: names and the gateway's tree bound -----------------------------------------------------------
def test_every_router_is_named_as_it_is_asked_for():
    from sacmodel.cluster.routers import make_router
    from sacmodel.util.names import ROUTERS
    assert [make_router(n).name for n in ROUTERS] == list(ROUTERS)


def test_the_cache_aware_tree_holds_its_default_2_to_the_24_tokens_in_512_token_blocks():
    from sacmodel.cluster.routers import CacheAware
    r = CacheAware(cache_threshold=0.0)
    s = RouterState(2)
    n = 2 ** 24 // 512                                   # 32,768 blocks
    r.choose(s, lambda c: (0, 0, 0, 0), 512 * n, list(range(n)))
    c = next(i for i, t in enumerate(r.trees) if t)
    assert len(r.trees[c]) == n and 0 in r.trees[c]
    r._insert(r.trees[c], [n])                           # one more: the least recently sent block leaves
    assert len(r.trees[c]) == n and 0 not in r.trees[c] and n in r.trees[c]


@pytest.mark.parametrize("bad", [{"kv_weight": -1.0}, {"queue_weight": float("inf")}, {"prefix_weight": True},
                                 {"prefix": "exact"}])
def test_llm_d_refuses_negative_infinite_or_boolean_weights_and_unknown_prefix_modes(bad):
    from sacmodel.cluster.routers import RouterError, make_router
    with pytest.raises(RouterError, match="llm_d router"):
        make_router("llm_d", **bad)
    assert make_router("llm_d", kv_weight=0.0, queue_weight=0).w == (3.0, 0.0, 0.0)    # zero is a weight


# ---- Mooncake Store ------------------------------------------------------------------------------------------
def test_mooncake_store_defaults_are_the_masters_lease_10_s_watermark_90_percent_and_5_percent_passes():
    from sacmodel.cluster.store import MooncakeStore
    st = MooncakeStore(10)
    st.put_end(st.put_start(list(range(10)), 0.0), 0.0)
    assert st.match_len(list(range(10)), 0.0) == 10          # read at t = 0: leased until 10 s
    st.match_len([], 9.99)                                   # 10 objects > 90% of 10, but all leased
    assert st.evicted == 0 and st.passes == 1
    st.match_len([], 9.995)                                  # within the 10 ms tick: no pass
    assert st.passes == 1
    st.match_len([], 10.0)                                   # leases over: max(5%, 100% - 90% + 5%) of 10 = 2
    assert st.evicted == 2 and st.used == 8 and st.passes == 2
    assert sorted(st.lease_until) == list(range(2, 10))      # the oldest leases first (ties: oldest object)


# ---- the fluid network -------------------------------------------------------------------------------------
def test_a_stream_that_stops_gives_its_share_to_a_running_transfer_at_once():
    # 30 B/s devices: a 20 B/s stream and a 30-byte transfer share them 15/15 from t = 0; at t = 1 the stream
    # stops with 15 bytes of the transfer left, which then move at 30 B/s: done at 1.5 s
    from sacmodel.cluster.fabric import Fabric
    f = Fabric({"dev": 30.0})
    assert f.stream("h", 0.0, 20.0, ("dev",)) == 20.0
    done = {}
    f.transfer(0.0, 30.0, 0.0, ("dev",), lambda t: done.setdefault("x", t))
    f.advance(0.0)
    assert f.next_time() == pytest.approx(2.0)               # 15 B/s each
    f.advance(1.0)
    f.stream("h", 1.0, 0.0, ("dev",))
    assert f.next_time() == pytest.approx(1.5)
    f.advance(10.0)
    assert done == {"x": pytest.approx(1.5)}


def test_a_stream_keeps_its_share_for_demand_changes_within_2_percent():
    from sacmodel.cluster.fabric import Fabric
    f = Fabric({"dev": 45.0})
    assert f.stream("h", 0.0, 20.0, ("dev",)) == 20.0
    assert f.stream("h", 0.1, 20.2, ("dev",)) == 20.0         # +1%: the last share, not a new solve
    assert f.stream("h", 0.2, 21.0, ("dev",)) == 21.0         # +5%: solved again, all of it fits
    assert f.stream("h", 0.3, 50.0, ("dev",)) == 45.0         # more than the devices: their capacity


# ---- planted bugs the earlier tests let through ---------------------------------------------------------------
def test_output_throughput_counts_only_the_requests_that_completed(tmp_path):
    # the server refuses the 200K-token prompt (beyond the model's positions): only the other's 2 tokens count
    p = replay("sac-cluster-4x", "cxl", trace(tmp_path, [(0, 1000, 2, [1, 2]), (1, 200000, 5, [3])]))
    assert list(p.per_request["completed"]) == [True, False]
    assert p.output_throughput_tok_s == pytest.approx(2 / p.duration_s, rel=1e-12)
    assert p.summary["output_throughput_tok_s"] == p.output_throughput_tok_s
    assert p.summary["throughput_req_s"] == pytest.approx(1 / p.duration_s, rel=1e-12)


def test_a_prefill_rank_keeps_a_prompts_kv_until_the_decode_instance_has_pulled_it(tmp_path):
    # one prefill and one decode GPU instance; nine 8192-token prompts at t = 0, so the prefill instance's rank 0
    # serves requests 0 and 8. With 12,000 slots per rank it holds one prompt: request 8 is admitted only after
    # request 0's KV has left over RDMA, later than with the default pool by at least that pull; the other
    # ranks' requests are untouched
    rows = [(0, 8192, 32, [100 * i + j for j in range(16)]) for i in range(9)]
    t = trace(tmp_path, rows)
    free = replay("sac-cluster-4x", "gpu", t, instances=2, pd="1:1", cache="none").per_request
    tight = replay("sac-cluster-4x", "gpu", t, instances=2, pd="1:1", cache="none", max_total_tokens=12000).per_request
    assert tight["queue_s"][8] >= free["queue_s"][8] + free["handoff_s"][0]
    assert tight["queue_s"][:8] == pytest.approx(free["queue_s"][:8], rel=1e-12)
    assert tight["handoff_s"] == pytest.approx(free["handoff_s"], rel=1e-12)


def test_a_block_written_to_the_pool_is_found_only_once_the_write_has_landed(tmp_path):
    # two hosts on the CXL pool, writes at 0.05 GB/s: the prompt's 8 blocks (4096 x BPT bytes, 6.4 s) land long
    # after the prefill; request 1 (on the other host) arriving at 5 s finds nothing, at 60 s all but the last token
    c = cluster(tmp_path, lambda c: c["tiers"]["cxl"]["host_write_bandwidth"].update(value="0.05 GB/s"))
    assert 4096 * BPT / 0.05e9 > 6.4
    early = replay(c, "cxl", trace(tmp_path, [(0, 4096, 4, list(range(8))), (5, 4096, 4, list(range(8)))]))
    late = replay(c, "cxl", trace(tmp_path, [(0, 4096, 4, list(range(8))), (60, 4096, 4, list(range(8)))],
                                  "late.jsonl"))
    assert list(early.per_request["instance"]) == [0, 1] == list(late.per_request["instance"])
    assert list(early.per_request["cached_tokens"]) == [0, 0]
    assert list(late.per_request["cached_tokens"]) == [0, 4095]


def test_a_full_mooncake_store_drops_a_write_even_when_it_could_evict():
    # PutStart on a full store fails the put and asks for an eviction pass; it does not evict in place, even
    # when every object's lease has expired. The next pass (a tick later) frees 15% of 10: 2 objects
    from sacmodel.cluster.store import MooncakeStore
    st = MooncakeStore(10, tick=0.01)
    st.put_end(st.put_start(list(range(10)), 0.0), 0.0)      # landed at t = 0: leases already expired
    assert st.put_start([99], 0.001) == [] and st.dropped == 1 and st.need_eviction and st.evicted == 0
    assert st.put_start([99], 0.02) == [99] and st.evicted == 2 and st.used == 9


# ---- defects the campaign found --------------------------------------------------------------------------------
def test_llm_d_with_an_estimated_prefix_of_weight_0_still_routes_and_learns():
    # (it indexed its per-pod LRUs before making them: IndexError on the first request)
    from sacmodel.cluster.routers import make_router
    r = make_router("llm_d", prefix="estimated", prefix_weight=0, seed=1)
    s = RouterState(2)
    c = r.choose(s, lambda c: (0, 0, 0, 0), 1024, [5, 6])
    assert c in (0, 1) and list(r.trees[c]) == [5, 6] and not r.trees[1 - c]


def test_what_a_running_request_will_write_evicts_cached_blocks_at_once(tmp_path):
    # one GPU instance, 8 ranks in turn, 4 blocks of HBM cache per rank. Rank 0: request 0 caches X = [8, 9];
    # request 8 (one block, 2048 output tokens) runs from t = 100: once its prompt is cached its output still
    # to come holds 2048 tokens = 4 blocks of the pool, so the cache keeps max(1, 4 - 4) = 1 block, its own, and
    # both of X's go; request 16 = X at t = 110, while 8 still decodes, finds nothing
    def small(c):
        c["hosts"] = [{"id": "h"}]
        c["instances"] = [{"id": "n", "host": "h", "tiers": ["hbm"]}]
        c["tiers"]["hbm"]["capacity"]["value"] = "16384 token"
        c["tiers"]["cxl"]["attached"] = ["h"]
    fill = lambda t, i: (t, 600, 2, [1000 + i])  # noqa: E731
    rows = [(0, 1024, 2, [8, 9])] + [fill(i, i) for i in range(1, 8)] + [(100, 512, 2048, [1])] + \
        [fill(100 + i - 8, i) for i in range(9, 16)] + [(110, 1024, 2, [8, 9])]
    p = replay(cluster(tmp_path, small), "gpu", trace(tmp_path, rows))
    assert p.per_request["e2e_ms"][8] > 10e3                 # request 8 still decodes at t = 110
    assert list(p.per_request["cached_tokens"]) == [0] * 17
    assert p.summary["evicted_blocks"] == {"hbm": 2}
