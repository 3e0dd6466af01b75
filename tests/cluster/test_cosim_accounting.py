"""Cluster co-simulation laws (issue 36, item 6): every request of a replay accounted for, a disaggregated run hands each request's KV to a decode instance (and the
hand-off takes time over the network, none when co-located), per-request times ordered."""
import numpy as np
import pytest
from measured_data import SHARED, needs_shared

import sacmodel

TRACE = str(SHARED / "traces" / "mooncake_synthetic_trace.jsonl")


def _replay(system="gpu", **kw):
    return sacmodel.replay("sac-cluster-4x", system, TRACE, limit=kw.pop("limit", 40), **kw)


@needs_shared
@pytest.mark.parametrize("pd", [None, "2:2"])
def test_every_request_is_accounted_for(pd):
    p = _replay(pd=pd)
    s, r = p.summary, p.per_request
    n = 40
    assert s["requests"] == n == len(r["arrival"]) == sum(s["requests_by_instance"].values())
    done = int(np.sum(r["completed"]))
    assert done + s["rejected_requests"] + s["unfinished_requests"] == n
    assert np.all(np.asarray(r["e2e_ms"])[np.asarray(r["completed"], bool)] >=
                  np.asarray(r["ttft_ms"])[np.asarray(r["completed"], bool)])


@needs_shared
def test_disaggregated_requests_hand_their_kv_to_a_decode_instance():
    p = _replay(pd="2:2")
    r = p.per_request
    pre, dec = np.asarray(r["instance"]), np.asarray(r["decode_instance"])
    out = np.asarray(r["output_tokens"])
    multi = out > 1
    assert set(pre[multi]).isdisjoint(set(dec[multi]))            # prefill and decode on different instances
    assert np.all(np.asarray(r["handoff_s"], float)[multi] > 0)  # the KV crosses the network: it takes time
    colo = _replay(pd=None).per_request
    assert np.all(np.nan_to_num(np.asarray(colo["handoff_s"], float)) == 0)


@needs_shared
def test_the_kv_hand_off_grows_with_the_prompt_it_moves():
    from sacmodel.hardware.cluster import kv_bytes_per_token
    from sacmodel.hardware.scenarios import cluster_of
    p = _replay(pd="2:2")
    r = p.per_request
    n_in = np.asarray(r["input_tokens"])
    multi = np.asarray(r["output_tokens"]) > 1
    h = np.asarray(r["handoff_s"], float)[multi]
    order = np.argsort(n_in[multi])
    long, short = order[-1], order[0]
    assert h[long] > h[short]
    # no faster than the hosts' NICs (2 x 100 Gb/s in sac-cluster-4x) can move the longest prompt's KV
    bpt = kv_bytes_per_token(cluster_of("sac-cluster-4x").host)
    assert h[long] >= n_in[multi][long] * bpt / (2 * 12.5e9)


def test_a_closed_loop_run_never_holds_more_than_its_concurrency(tmp_path):
    """A measured run replayed: its client keeps ``max_concurrency`` requests in flight, and sends the next
    when one ends; every request is sent and completes."""
    import json
    n = 12
    one = {"success": True, "prompt_len": 8192, "output_len": 32, "ttft_ms": 500.0, "latency_ms": 1700.0}
    d = {"config": {"target_input_tokens": 8192, "max_concurrency": 4, "output_tokens": 32, "round2_output_min": 32,
                    "round2_output_max": 32, "round2_num_requests": n, "round1_max_concurrency": 4},
         "round1": {"metrics": {"num_requests": 4, "num_success": 4, "ttft_mean_ms": 3000.0, "tbt_mean_ms": 40.0,
                                "output_throughput_tok_s": 90.0, "total_output_tokens": 128}},
         "round2": {"metrics": {"num_requests": n, "num_success": n, "ttft_mean_ms": 500.0, "tbt_mean_ms": 40.0,
                                "output_throughput_tok_s": 90.0, "e2e_mean_ms": 1800.0},
                    "per_request": [dict(one) for _ in range(n)]}}
    f = tmp_path / "small_dram_ctx8k.json"
    f.write_text(json.dumps(d))
    p = sacmodel.replay("sac-testbed", "dram", str(f))
    r = p.per_request
    assert p.summary["closed_loop"] == 4 and int(np.sum(r["completed"])) == n
    start = np.asarray(r["arrival"], float)
    end = start + np.asarray(r["e2e_ms"], float) / 1e3
    most = max(int(np.sum((start <= t) & (t < end))) for t in start)
    assert most == 4                     # the client fills its 4 slots and never more


@needs_shared
@pytest.mark.parametrize("pd", [None, "2:2"])
def test_the_routers_bookkeeping_is_empty_once_every_request_ended(pd):
    """Every request the router counted in flight, prefilling or holding blocks is released by its end (the
    prefill side at its first token in a disaggregated run, the decode side at its last)."""
    from sacmodel.cluster.cosim import CoSim
    from sacmodel.cluster.replay import Setup
    setup = Setup("sac-cluster-4x", "gpu", TRACE, router="kv", instances=None, pd=pd, time_scale=1.0,
                  concurrency=None, cache="trace", slo=None, router_params=None, limit=30, resources={})
    setup.build(None, None, None)
    sim = CoSim(setup)
    sim.run()
    states = [sim.state_pre] + ([sim.state_dec] if pd else [])
    for s in states:
        assert all(x == 0 for x in s.in_flight) and all(abs(x) < 1e-9 for x in s.prefill_tokens)
        assert all(not a for a in s.active) and sum(s.assigned) > 0


def test_a_request_admitted_again_after_preemption_leaves_nothing_pinned_or_held(tmp_path):
    """A vLLM pod of 4,096 KV slots serving twelve 600-token prompts that share a first block and generate 400
    tokens each: its scheduler preempts, and a preempted request is admitted again later (its cached prefix
    looked up and pinned once more). When every request has ended, no block of the pod's cache is pinned and
    no room is held outside it: the first admission's pins and room went when the request was admitted again
    (else the cache's room shrinks for good with every preemption), and its hits by tier are its last admission's.
    """
    import json

    from sacmodel.cluster.cosim import CoSim
    from sacmodel.cluster.replay import Setup
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": 10 * i, "input_length": 600, "output_length": 400,
                                     "hash_ids": [7, 100 + i]}) + "\n" for i in range(12)))
    pod = sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", engine="vllm", max_total_tokens=4096)
    s = Setup(pod, "gpu", p, router="round_robin", instances=1, pd=None, time_scale=1.0, concurrency=None,
              cache="trace", slo=None, router_params=None, limit=None, resources={})
    s.build(None, None, None)
    sim = CoSim(s)
    eng, preempted = sim.servers[0].engine, []
    inner = eng.ranks._retract

    def retract(r):
        before = len(eng.ranks.waiting[r])
        inner(r)
        preempted.append(len(eng.ranks.waiting[r]) - before)
    eng.ranks._retract = retract
    sim.run()
    assert sum(preempted) > 0 and all(x == x for x in sim.done)
    by_tier = sum(np.asarray(v) for v in sim.by_tier.values())       # each request's hits counted once
    assert by_tier.tolist() == pytest.approx(sim.cached)
    assert all(abs(v) < 1e-9 for v in s.caches.outside.values())
    (c, _), = s.caches.private.values()
    assert not any(v > 0 for v in (c.ref.values() if isinstance(c.ref, dict) else c.ref))
