"""Issue 35's fidelity fixes, each against a hand-worked case: store hits served in a chain without a home
tier, Dynamo's prefill load, llm-d's normalised prefix score, outputs cached for the next turn, the decode
instance chosen at arrival, failed instances out of routing; overload always reported (client caps, slow growth,
short traces, crashes and their cap); plans that skip what a replay rules out."""
import math

import pytest

from test_cosim_mechanisms import trace       # rows: (arrival s, input tokens, output tokens, hash_ids)

from sacmodel import replay


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


def test_dynamo_counts_a_requests_uncached_tokens_as_prefill_load_and_decays_the_oldest():
    from sacmodel.cluster.routers import KvRouter, RouterState
    # two ranks; A (4096 tokens, 8 blocks) finds 7 of its blocks on rank 0's device: the router books only its
    # 4096 - 7 x 512 = 512 uncached tokens there (Dynamo's effective prefill tokens), not the whole prompt
    r, s = KvRouter(block_tokens=512), RouterState(2)
    a = list(range(8))
    ov = {0: (7, 0, 0, 0), 1: (0, 0, 0, 0)}.__getitem__
    assert r.choose(s, ov, 4096, a) == 0
    r.admit(s, 0, a, 4096, rid="A")
    assert s.prefill_at(0) == 512
    # a new 1024-token prompt (2 blocks, cached nowhere): rank 0 costs (512 + 1024) / 512 + 8 active + 2 new
    # = 13 blocks (the whole prompt booked: (4096 + 1024) / 512 + 10 = 20); rank 1 costs 2 + 0 + 2 = 4
    none = lambda c: (0, 0, 0, 0)  # noqa: E731
    assert r.costs(s, none, 1024, [100, 101]) == [13.0, 4.0]
    # with a linear prefill model (1000 tokens/s) the oldest prefill decays over its expected 0.512 s
    r, s = KvRouter(block_tokens=512, prefill_tokens_per_s=1000.0), RouterState(1)
    s.now = 0.0
    r.choose(s, lambda c: (7, 0, 0, 0), 4096, a)
    r.admit(s, 0, a, 4096, rid="A")                       # 512 uncached tokens, anchored at 0
    s.now = 0.1
    r.choose(s, none, 1024, [100, 101])
    r.admit(s, 0, [100, 101], 1024, rid="B")              # 1024 more, not decaying yet
    s.now = 0.256
    assert s.prefill_at(0) == pytest.approx(512 + 1024 - 512 * 0.256 / 0.512)
    s.now = 0.3
    s.first_token(0, 4096, rid="A")                       # B becomes the anchor at 0.3, expected 1.024 s
    s.now = 0.8
    assert s.prefill_at(0) == pytest.approx(1024 - 1024 * 0.5 / 1.024)


def test_llm_d_precise_prefix_scores_are_min_max_normalised_across_pods():
    from sacmodel.cluster.routers import LlmD, RouterState
    # pods holding 6, 3 and 0 blocks of an 8-block prompt, and one holding 3: (m - 3) / (6 - 3) over the pods
    # holding any, 0 for the one holding none; equal holders all score 1
    ov = {0: (6, 0, 0, 0), 1: (3, 0, 0, 0), 2: (0, 0, 0, 0), 3: (3, 0, 0, 0)}.__getitem__
    assert LlmD._precise(ov, list(range(8)), 4) == [1.0, 0.0, 0.0, 0.0]
    assert LlmD._precise({0: (2, 0, 0, 0), 1: (0, 0, 0, 0)}.__getitem__, list(range(8)), 2) == [1.0, 0.0]
    # the choice it changes: pod 0 holds 2 of 8 blocks, KV 40% used, 2 waiting; pod 1 nothing, idle. As a share of
    # the prompt pod 0 scores 3 x 0.25 + 2 x 0.6 + 0 = 1.95 < pod 1's 0 + 2 + 2 = 4; normalised, 3 + 1.2 = 4.2 > 4
    r = LlmD()
    r.metrics = {0: (2, 0.4), 1: (0, 0.0)}.__getitem__
    assert r.choose(RouterState(2), {0: (2, 0, 0, 0), 1: (0, 0, 0, 0)}.__getitem__, 4096, list(range(8))) == 0


def test_a_finished_turns_output_serves_the_next_turn(tmp_path):
    # one testbed host, Dynamo's router keeping a conversation on its rank. Turn 1: 1024 prompt tokens (blocks
    # 1, 2), 1100 output tokens; turn 2 five minutes later repeats them and adds 400: 2524 tokens (blocks 1-5).
    # SGLang caches turn 1's prompt and output: (1024 + 1100) // 512 = 4 whole blocks, 2048 tokens, are a hit
    # (only the 2 prompt blocks, 1024 tokens, when the output is not cached)
    rows = [(0, 1024, 1100, [1, 2]), (300, 2524, 4, [1, 2, 3, 4, 5])]
    p = replay("sac-testbed", "gpu", trace(tmp_path, rows), router="kv")
    assert p.per_request["e2e_ms"][0] < 300e3
    assert list(p.per_request["cached_tokens"]) == [0, 2048]


def test_the_decode_instance_is_chosen_at_arrival_as_the_pd_proxies_do(tmp_path):
    # 2 prefill + 2 decode instances, decode taken in turn. A (16K tokens) arrives first, B (1K) 10 ms later;
    # B's prefill answers long before A's. The proxy picked both decode instances at arrival: A gets the first
    # (instance 2), B the second (3); choosing when the prefill answers gave B the first
    rows = [(0, 16384, 32, []), (0.01, 1024, 32, [])]
    p = replay("sac-cluster-4x", "dram", trace(tmp_path, rows), instances=4, pd="2:2", cache="none")
    assert list(p.per_request["instance"]) == [0, 1]
    assert p.per_request["ttft_ms"][1] < p.per_request["ttft_ms"][0]
    assert list(p.per_request["decode_instance"]) == [2, 3]


def test_a_failed_instance_leaves_routing(tmp_path):
    # two testbed instances whose HiSparse device buffers hold 3 requests per rank (see test_cosim_laws). 32 long
    # requests sharing their first 4 blocks at t = 0: prefix affinity sends all to one instance, whose fourth
    # allocation on a rank fails (at 66 s, after its first three prefills); 4 more of the same prefix at t = 600
    # go to the instance still up and finish
    head = [1, 2, 3, 4]
    rows = [(0, 16384, 64, head + [1000 * i + j for j in range(28)]) for i in range(32)]
    rows += [(600, 16384, 64, head + [90000 + 1000 * i + j for j in range(28)]) for i in range(4)]
    p = replay("sac-testbed", "dram", trace(tmp_path, rows), instances=2, router="prefix_affinity",
               device_buffer=6144, max_total_tokens=20000)
    pr = p.per_request
    dead = int(pr["instance"][0])
    assert len(p.summary["failed_instances"]) == 1 and p.summary["failed_instances"][0].startswith(f"i{dead}:")
    assert set(pr["instance"][:32]) == {dead} and not pr["completed"][:32].any()
    assert set(pr["instance"][32:]) == {1 - dead} and pr["completed"][32:].all()


# ---- overload, always reported (issue 35 item 5) ---------------------------------------------------------------
def test_a_crash_names_the_device_buffer_and_the_concurrency_cap_that_avoids_it(tmp_path):
    # the fork's HiSparse device buffer: 6144 + a 64-token page = 6208 slots per request of 8K tokens; 20,000
    # slots per rank hold 3 of them, so 8 ranks x 3 = 24 requests in flight per instance at most (the host pool,
    # twice the device pool, holds four requests of 8,254 tokens: the device buffer binds first)
    rows = [(0, 8192, 64, [1000 * i + j for j in range(16)]) for i in range(32)]
    p = replay("sac-testbed", "dram", trace(tmp_path, rows), device_buffer=6144, max_total_tokens=20000)
    advice = p.summary["crash_advice"]
    assert "device_buffer 6144" in advice and "6208 slots" in advice and "max_total_tokens 20000" in advice
    assert "at most 3 requests per rank" in advice and "--concurrency 3 " in advice and "up to 24 " in advice
    assert advice in p.limit
    # the caps it names avoid the crash (24: these equal requests spread evenly over the ranks); one more request
    # per rank in flight does not
    for c in (3, 24):
        ok = replay("sac-testbed", "dram", trace(tmp_path, rows), device_buffer=6144, max_total_tokens=20000,
                    concurrency=c)
        assert ok.feasible and ok.success_fraction == 1.0
    assert replay("sac-testbed", "dram", trace(tmp_path, rows), device_buffer=6144, max_total_tokens=20000,
                  concurrency=32).success_fraction == 0.0


def test_slow_queue_growth_and_a_growing_backlog_are_overload_by_hand():
    import numpy as np
    from sacmodel.cluster.replay import load_report
    t = np.linspace(0.0, 1000.0, 400)
    done = np.ones(400, bool)
    # the rank queue's wait grows 0.02 s per s: below the fast threshold (0.05), but 15 s added over the trace
    slow = load_report(t, 0.02 * t, done, 1100.0, closed_loop=False)
    assert slow["queue_growth_s_per_s"] == pytest.approx(0.02, rel=0.02)
    assert slow["overloaded"] and slow["overload"] == "slow queue"
    # no rank queue and 1 s of service each, but each request ends 10% later than the one before it would (a
    # queue outside the ranks, a client cap): at time T about T - (T - 1) / 1.1 requests are in the system, 10 at
    # T = 100 s, 37 at 399 s: 27 more over 299 arrivals, 9% > 5%
    a = np.arange(400.0)
    rep = load_report(a, np.zeros(400), done, 500.0, closed_loop=False, done_s=1.1 * a + 1.0, life_s=np.ones(400))
    assert rep["overloaded"] and rep["overload"] == "backlog"
    assert rep["backlog_growth"] == pytest.approx(27 / 299, abs=0.01)
    calm = load_report(a, np.zeros(400), done, 402.0, closed_loop=False, done_s=a + 1.0, life_s=np.ones(400))
    assert not calm["overloaded"] and not calm["too_short"]


def test_a_trace_too_short_to_tell_says_so_and_by_how_much():
    import numpy as np
    from sacmodel.cluster.replay import load_report
    # 200 requests over 10 s (20 req/s), each in the system 5 s: at the last arrival 100 (half) are still in
    # it, steady load or queue the trace cannot tell: the served rate could be as low as 20 x (1 - 0.5) = 10 req/s
    a = np.arange(200) * 0.05
    rep = load_report(a, np.zeros(200), np.ones(200, bool), 15.0, closed_loop=False, done_s=a + 5.0,
                      life_s=np.full(200, 5.0))
    assert rep["too_short"] and not rep["overloaded"]
    assert rep["answer_could_change"] == pytest.approx(100 / 200, abs=0.01)
    assert rep["served_floor_req_s"] == pytest.approx(200 / 9.95 * (1 - 100 / 200), rel=0.02)


def test_a_client_capped_replay_whose_backlog_grows_is_overloaded(tmp_path):
    # one testbed instance with at most 8 requests in flight (one per rank), 20 req/s of 2K-token prompts: the
    # ranks never queue (the client holds the rest), yet the requests in the system grow without bound
    rows = [(0.05 * i, 2048, 16, [10_000 * i + j for j in range(4)]) for i in range(400)]
    p = replay("sac-testbed", "gpu", trace(tmp_path, rows), concurrency=8)
    load = p.summary["load"]
    assert load["served_req_s"] < 0.5 * load["offered_req_s"]
    assert load["overloaded"] and load["overload"] == "backlog"


def test_plan_and_replay_say_when_the_trace_is_too_short_to_tell(tmp_path, capsys):
    from sacmodel.cli.app import main
    # 12 prompts of 6K tokens 0.3 s apart: every request is still in the system at the last arrival, so
    # nothing the replay measured tells a steady state from warm-up
    rows = [(0.3 * i, 6000, 16, [100 * i + j for j in range(12)]) for i in range(12)]
    p = trace(tmp_path, rows)
    assert main(["plan", "--scenario", "sac-cluster-4x", "--system", "cxl", "--trace", str(p), "--vary",
                 "instances", "--values", "4", "--slo", "ttft_p99_ms=1e9"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "too short to tell steady state from warm-up" in out and "could change by up to 100%" in out
    assert main(["replay", str(p), "--scenario", "sac-cluster-4x", "--system", "cxl", "--instances", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "trace too short to tell" in out or "overloaded" in out


# ---- speed (issue 35 item 6) ---------------------------------------------------------------------------------
def test_a_plan_skips_the_counts_an_overloaded_replay_rules_out(tmp_path):
    from sacmodel.cluster.plan import cluster_plan
    # 20 req/s of 2K-token prompts, 8 in flight per instance: one instance keeps up with about 2.5 req/s, so
    # fewer than ceil(0.95 x 20 / 2.5) = 8 cannot keep up; 2 and 3 are not replayed, and are indeed overloaded
    rows = [(0.05 * i, 2048, 16, [10_000 * i + j for j in range(4)]) for i in range(400)]
    p = trace(tmp_path, rows)
    plan = cluster_plan("sac-testbed", "gpu", p, {"ttft_p50_ms": 1e9}, vary="instances", values="1:3",
                        fixed={"concurrency": 8})
    one, two, three = plan.tried
    assert plan.best is None and one["overloaded"] and not one.get("skipped")
    per = max(one["served_req_s"], one["served_window_req_s"])
    need = math.ceil(0.95 * one["offered_req_s"] / per)
    assert need > 3 and two["skipped"] and three["skipped"] and f"fewer than {need} serve" in three["limit"]
    check = replay("sac-testbed", "gpu", p, instances=3, concurrency=8).summary["load"]
    assert check["overloaded"] and check["served_req_s"] < 0.95 * check["offered_req_s"]
