"""The serving model: fields, closed-form limit, mechanisms as properties, capacity, bad input."""
import math

import numpy as np
import pytest

from sacmodel.hardware.params import with_params
from sacmodel.planning.closed_forms import symbolic
from sacmodel.serving.config import resolve, static_values
from sacmodel.serving.engine.stepmodel import Model
from sacmodel.serving.engine.workload import Requests
from sacmodel.serving.engine.misses import cumulative_misses
from sacmodel.serving.engine.loop import run_engine
from sacmodel.serving.predict import ConfigError, compare, predict, workload


def test_prediction_fields_and_breakdown():
    p = predict("sac-testbed", "cxl", context=32768, output=1024, concurrency=64)
    assert p.feasible and p.limit is None and p.requests == 512 and p.success_fraction == 1.0
    for k in ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s", "e2e_mean_ms"):
        assert math.isfinite(getattr(p, k)) and getattr(p, k) > 0
    # E2E = TTFT + (O - 1) TBT holds per request; the pooled means satisfy it exactly for equal outputs
    assert p.e2e_mean_ms == pytest.approx(p.ttft_mean_ms + 1023 * p.tbt_mean_ms, rel=1e-9)
    assert p.breakdown["step_swap_ms"] > 0 and p.to_dict()["system"] == "cxl"
    assert len(p.per_request["ttft_ms"]) == 512 and p.per_request["completed"].all()


@pytest.mark.parametrize("system", ["gpu", "dram", "cxl", "rdma", "cxl-prefetch", "rdma-topk"])
@pytest.mark.parametrize("L,O", [(65536, 200), (20000, 40)])
def test_single_request_equals_closed_form(system, L, O):
    """One request alone (its prompt's host-pool entry present): the engine reduces to the unloaded closed
    forms built from the same expressions."""
    p = predict("sac-testbed", system, context=L, output=O, concurrency=1, requests=1, cold_staging=False,
                exact_prompt=True)
    for metric, field in (("ttft", "ttft_mean_ms"), ("tbt", "tbt_mean_ms"), ("e2e", "e2e_mean_ms")):
        assert getattr(p, field) == pytest.approx(1e3 * float(symbolic(system, metric, "sac-testbed", context=L,
                                                                          output=O)), rel=1e-9)


@pytest.mark.parametrize("system,pool", [("dram", "dram"), ("cxl", "cxl"), ("rdma", "dram"), ("gpu", None)])
def test_cold_staging_of_one_request_by_hand(system, pool):
    """A rank's first hit backs its whole prompt up to the host pool before the request decodes: one request
    alone finishes later by exactly prompt bytes / the GPU-to-pool bandwidth, its first token unchanged; GPU-only
    has no host pool and nothing to back up."""
    from sacmodel.serving.config import backup_bandwidth
    L = 32768
    warm = predict("sac-testbed", system, context=L, output=40, concurrency=1, requests=1, cold_staging=False)
    cold = predict("sac-testbed", system, context=L, output=40, concurrency=1, requests=1)
    assert cold.ttft_mean_ms == pytest.approx(warm.ttft_mean_ms, rel=1e-12)
    cfg = resolve("sac-testbed", system)
    if pool is None:
        assert cold.e2e_mean_ms == pytest.approx(warm.e2e_mean_ms, rel=1e-12)
        return
    bw = backup_bandwidth(cfg, (1,))[1]           # round 2 starts on rank 1 (the first round went round-robin)
    assert bw == pytest.approx(55e9 if pool == "dram" else 22.5e9)        # the scenario's PCIe / CXL device
    assert cold.e2e_mean_ms - warm.e2e_mean_ms == pytest.approx(1e3 * L * cfg.token_bytes / bw, rel=1e-9)


def test_cold_staging_backups_share_the_pool_route():
    """Eight ranks backing up at once share the CXL devices: one device takes twice as long as two, and the
    first wave's later first tokens wait for it (DRAM, over each GPU's own PCIe link, barely)."""
    from sacmodel.serving.config import backup_bandwidth
    two, one = resolve("sac-testbed", "cxl", cxl_devices=2), resolve("sac-testbed", "cxl", cxl_devices=1)
    ranks = tuple(range(8))
    assert list(backup_bandwidth(two, ranks).values()) == pytest.approx([2 * 22.5e9 / 8] * 8)
    assert list(backup_bandwidth(one, ranks).values()) == pytest.approx([22.5e9 / 8] * 8)
    kw = dict(context=32768, output=64, concurrency=64, requests=64, record=True)
    first = {}
    for name, extra in (("dram", {}), ("cxl2", {"cxl_devices": 2}), ("cxl1", {"cxl_devices": 1})):
        p = predict("sac-testbed", "dram" if name == "dram" else "cxl", **kw, **extra)
        events = [e for e in p.breakdown["timeline"] if e[2] == "backup"]
        assert sum(e[4] for e in events) == 8               # one cold backup per rank, none after
        assert p.breakdown["cold_backup_s"] == pytest.approx(sum(e[3] for e in events))
        first[name] = p.ttft_mean_ms
    assert first["dram"] < first["cxl2"] < first["cxl1"]
    steady = predict("sac-testbed", "cxl", **kw, cxl_devices=1, cold_staging=False)
    assert steady.ttft_mean_ms < first["cxl1"] and steady.breakdown["cold_backup_s"] == 0.0


def test_one_request_by_hand_on_the_gpu():
    """GPU-only, one request: TTFT = client + request latency + one eager extend iteration (its 64-token tail over
    one sequence, plus the kernels' launch time beyond their in-graph floor), computed by hand."""
    cfg = resolve("sac-testbed", "gpu")
    v = static_values(cfg)
    L = 32768
    p = predict("sac-testbed", "gpu", context=L, output=2, concurrency=1, requests=1, exact_prompt=True)
    mdl = Model(cfg)
    eager = v["layers"] * v["n_kernels"] * (v["t_launch"] - v["t_graph_kernel"])
    extend = mdl.shared(64, True, 64, 1) + mdl.prefill(64, L - 64, True) + eager
    assert p.ttft_mean_ms == pytest.approx(1e3 * (v["t_token"] * L + v["t_request"] + extend), rel=1e-12)


def test_empty_buffer_at_admission_loads_the_whole_top_k_first():
    cfg = resolve("sac-testbed", "cxl")
    c = cumulative_misses(cfg, 32768, 100)
    per = np.diff(c)
    assert per[0] == 2048                           # every selected entry misses at the first step
    assert per[1] < per[0] / 4 and np.all(per >= 0)
    assert c[-1] > 4096                             # the fill alone loads the whole buffer


def test_context_that_fits_the_buffer_skips_swap_in():
    p = predict("sac-testbed", "cxl", context=3000, output=64, concurrency=8)
    assert p.breakdown["step_swap_ms"] == 0.0


@pytest.mark.parametrize("system", ["dram", "cxl", "rdma"])
def test_tbt_falls_as_output_grows(system):
    """Per-request costs (admission, buffer fill, the RDMA copy, the query settling) amortise over the output."""
    tbt = [predict("sac-testbed", system, context=32768, output=o, concurrency=64, requests=128).tbt_mean_ms
           for o in (512, 1024, 2048, 4096)]
    assert all(b <= a * 1.0001 for a, b in zip(tbt, tbt[1:])), tbt


def test_rdma_tends_to_dram_as_output_grows():
    gap = []
    for o in (512, 2048, 8192):
        r = predict("sac-testbed", "rdma", context=32768, output=o, concurrency=64, requests=64)
        d = predict("sac-testbed", "dram", context=32768, output=o, concurrency=64, requests=64)
        gap.append(r.tbt_mean_ms / d.tbt_mean_ms - 1)
    assert gap[0] > gap[1] > gap[2] > 0 and gap[2] < 0.25 * gap[0]


def test_rdma_copy_stalls_every_rank():
    """The copy runs on the scheduler thread: the run's stall time is the copies of whole waves."""
    p = predict("sac-testbed", "rdma", context=32768, output=256, concurrency=64, requests=64)
    q = predict("sac-testbed", "dram", context=32768, output=256, concurrency=64, requests=64)
    assert p.breakdown["share_time_prefix_fetch"] > 0.3 and q.breakdown["share_time_prefix_fetch"] == 0
    assert p.duration_s > q.duration_s


@pytest.mark.parametrize("kw", [dict(context=32768, concurrency=8), dict(context=65536, concurrency=32),
                                dict(context=131072, concurrency=64)])
def test_gpu_only_step_never_slower_than_dram(kw):
    g = predict("sac-testbed", "gpu", output=512, requests=kw["concurrency"], **kw)
    d = predict("sac-testbed", "dram", output=512, requests=kw["concurrency"], **kw)
    assert g.breakdown["mean_step_ms"] <= d.breakdown["mean_step_ms"]


def test_device_pool_overflow_ends_the_run():
    """64K, 192 in flight, 6144-slot buffers in a 250,000-slot pool: a rank reaches its 30th buffer and the
    server stops (as measured: 139 of 384 completed)."""
    p = predict("sac-testbed", "dram", context=65536, output=(0, 1024), concurrency=192, requests=384,
                device_buffer=6144, max_total_tokens=250000)
    assert not p.feasible and p.limit.startswith("max_total_tokens") and 0 < p.success_fraction < 0.6
    ok = predict("sac-testbed", "dram", context=32768, output=(0, 1024), concurrency=192, requests=384,
                 device_buffer=6144, max_total_tokens=250000)
    assert ok.feasible and ok.success_fraction == 1.0


def test_success_fraction_monotone_in_concurrency_and_context():
    kw = dict(output=(0, 1024), device_buffer=6144, max_total_tokens=250000, seed=3)
    by_c = [predict("sac-testbed", "cxl", context=65536, concurrency=c, requests=2 * c, **kw).success_fraction
            for c in (128, 160, 192, 256)]
    assert all(b <= a for a, b in zip(by_c, by_c[1:])) and by_c[-1] < 1
    by_l = [predict("sac-testbed", "dram", context=L, concurrency=160, requests=320, **kw).success_fraction
            for L in (32768, 65536, 98304, 131072)]
    assert all(b <= a for a, b in zip(by_l, by_l[1:])) and by_l[-1] < 1


def test_round_robin_dispatch_in_arrival_order():
    cfg = resolve("sac-testbed", "dram")
    reqs = workload(cfg, context=32768, output=16, requests=16)
    res = run_engine(cfg, reqs, 16, record=True, first_round=3)
    firsts = [x for x in res.timeline if x[2] == "prefill"]
    assert firsts[0][1] == 3                        # the counter continues where earlier requests left it


def test_variable_outputs_are_drawn_and_exact_ones_used():
    a = predict("sac-testbed", "dram", context=16384, output=(0, 64), concurrency=8, requests=16, seed=2)
    assert a.output == (0, 64) and a.per_request["output"].min() >= 1 and a.per_request["output"].max() <= 64
    outs = list(range(1, 17))
    b = predict("sac-testbed", "dram", context=16384, output=(0, 64), concurrency=8, requests=16, outputs=outs)
    assert b.per_request["output"].tolist() == outs


def test_capacity_limit_is_named_and_nothing_invented():
    small = with_params("sac-testbed", {"mem_fraction": 0.3})
    q = predict(small, "dram", context=32768, output=1024, concurrency=64)
    assert not q.feasible and q.limit.startswith("hbm") and math.isnan(q.ttft_mean_ms)
    # one request alone larger than the pool: no queueing serves it
    g = predict("sac-testbed", "gpu", context=131072, output=1024, concurrency=8, prompts="distinct",
                max_total_tokens=100000)
    assert not g.feasible and g.limit.startswith("max_total_tokens (one request alone needs")
    assert g.to_dict()["tbt_mean_ms"] is None


def test_oversubscribed_gpu_only_is_served_by_queueing_not_refused():
    """64 distinct 128K prompts hold 8 x the pool of a rank: SGLang admits what fits and the rest wait, so the
    run is served, and later than with a pool that holds them all."""
    kw = dict(context=131072, output=256, concurrency=64, requests=64, prompts="distinct")
    tight = predict("sac-testbed", "gpu", **kw)
    assert tight.feasible and tight.success_fraction == 1.0 and not tight.capacity["fits_at_once"]
    roomy = predict(with_params("sac-testbed", {"mem_fraction": 0.95}), "gpu", max_total_tokens=1_200_000, **kw)
    assert roomy.ttft_mean_ms < tight.ttft_mean_ms


def test_open_loop_is_seeded_and_lighter_load_is_faster():
    a = predict("sac-testbed", "dram", context=32768, output=256, concurrency=64, requests=64, rate=0.5, seed=1)
    b = predict("sac-testbed", "dram", context=32768, output=256, concurrency=64, requests=64, rate=0.5, seed=1)
    assert a.to_dict() == b.to_dict()
    heavy = predict("sac-testbed", "dram", context=32768, output=256, concurrency=64, requests=64, rate=50.0)
    assert heavy.tbt_mean_ms >= a.tbt_mean_ms


@pytest.mark.parametrize("kw,msg", [(dict(context=0), "context"), (dict(concurrency=-1), "concurrency"),
                                    (dict(rate=-2.0), "rate"), (dict(cxl_devices=0), "cxl_devices"),
                                    (dict(device_buffer=1024), "smaller than the top-k"),
                                    (dict(context=200000), "maximum position"), (dict(rate=True), "rate"),
                                    (dict(device_buffer=True), "device_buffer"), (dict(output=(5, 1)), "min <= max"),
                                    (dict(prompts="some"), "prompts")])
def test_bad_workload_is_a_clear_error(kw, msg):
    """(More CXL devices than the scenario lists are planned additions, not an error: tests/cli/test_plan_trust.)"""
    args = {**dict(context=32768, output=128, concurrency=4), **kw}
    with pytest.raises(ConfigError, match=msg):
        predict("sac-testbed", "cxl", **args)


@pytest.mark.parametrize("cluster", [False, True])
def test_a_scenario_device_buffer_below_the_top_k_names_the_file_and_field(tmp_path, cluster):
    # (found by the long fuzz run: "device_buffer=1 is smaller than the top-k (2048)" named neither the scenario
    # file, nor a cluster file, nor that the value is its serving.device_buffer)
    import yaml

    from sacmodel.hardware.scenarios import TOPOLOGY_DIR
    doc = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
    doc["serving"]["device_buffer"]["value"] = 2047
    if cluster:
        doc.update(schema_version=2, name="inline-2x", cluster={
            "hosts": [{"id": "h", "count": 2}],
            "instances": [{"id": "i", "count": 2, "host": "h", "role": "both", "tiers": ["hbm"]}],
            "tiers": {"hbm": {"kind": "hbm", "capacity": {"value": "200000 token", "source": "test"}}}})
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(doc))
    for system in ("dram", "cxl"):
        with pytest.raises(ConfigError, match=r"mine\.yaml: serving\.device_buffer=2047 is smaller than the top-k"):
            predict(str(tmp_path / "mine.yaml"), system, context=8192, output=16, concurrency=2, requests=4)
    with pytest.raises(ConfigError, match=r"^device_buffer=2047 is smaller"):     # the argument: named as such
        predict("sac-testbed", "cxl", context=8192, output=16, concurrency=2, device_buffer=2047)


def test_dense_model_in_a_pool_system_is_refused():
    t = with_params("sac-testbed", {})
    t.model_name = "deepseek-v3"
    with pytest.raises(ConfigError, match="sparse-attention model"):
        predict(t, "cxl", context=32768, output=128, concurrency=4)
    g = predict(t, "gpu", context=8192, output=64, concurrency=4)       # dense attention in HBM: fine
    assert g.feasible and g.tbt_mean_ms > 0


def test_compare_runs_every_system():
    out = compare("sac-testbed", ("gpu", "dram", "cxl", "rdma"), context=16384, output=128, concurrency=16)
    assert set(out) == {"gpu", "dram", "cxl", "rdma"}
    assert out["rdma"].ttft_mean_ms > out["cxl"].ttft_mean_ms


def test_requests_array_validation():
    r = Requests([0.0, 1.0], [100, 200], [5, 6], [0, 0])
    assert len(r) == 2 and r.context.dtype == np.int64


def test_fetches_of_one_rank_add_up():
    """Requests staged together on one rank are fetched one after another on its scheduler thread: a wave of
    two per rank stalls twice as long as a wave of one per rank (seven ranks fetching in both, so each sees
    the same NIC share; rank 0's first request is admitted alone before the others arrive)."""
    topo = with_params("sac-testbed", {"t_token": 1e-12})        # every request reaches its rank at once
    cfg = resolve(topo, "rdma")

    def longest_fetch(n):
        z = np.zeros(n)
        res = run_engine(cfg, Requests(z, np.full(n, 32768), np.full(n, 8), np.full(n, 32767.0)), n, record=True)
        return max(e[3] for e in res.timeline if e[2] == "fetch")
    one, two = longest_fetch(cfg.dp), longest_fetch(2 * cfg.dp)
    assert one > 1.0                                               # seconds: a 32K prompt's copy
    assert two == pytest.approx(2 * one, rel=1e-9)


def test_first_tokens_wait_for_the_next_batchs_prefix_copies():
    """SGLang's overlap scheduler sends a batch's results after scheduling the next batch, and on the RDMA pool
    that scheduling runs the prefix copies of requests staged earlier: a request prefilled in the iteration
    before a copy sees its first token only after the copy (the testbed's per-request TTFTs at concurrency 8:
    0.2 s for the first request of a wave, 4.2 s for the two prefilled just after it, 8.4 s for the rest)."""
    topo = with_params("sac-testbed", {"t_token": 1e-12, "t_request": 0.0})
    res = {}
    for system in ("rdma", "dram"):
        cfg = resolve(topo, system)
        z = np.zeros(2 * cfg.dp)
        res[system] = run_engine(cfg, Requests(z, np.full(2 * cfg.dp, 32768), np.full(2 * cfg.dp, 8),
                                                np.full(2 * cfg.dp, 32767.0)), 2 * cfg.dp, record=True)
    rd = res["rdma"]
    stall = [e[3] for e in rd.timeline if e[2] == "fetch"][0]       # rank 0's first request, copied alone
    assert stall > 1.0
    # only that request's first token goes out before the copy; the others, prefilled in the iteration
    # before it, wait for it whole
    first = np.sort(rd.first)
    assert first[0] < 0.5 and first[1:].min() > stall
    # dram runs no copy: its first tokens all go out within the prefill iterations
    assert res["dram"].first.max() < 0.5 * stall


@pytest.mark.parametrize("system", ["gpu", "dram", "cxl", "rdma"])
def test_no_request_ends_before_its_first_token_is_seen(system):
    """Outputs of 1 token (drawn 0..64, 0 counting as 1) end with their first token: its copy wait (rdma) and
    the front end's queue delay their end as much as their first token."""
    p = predict("sac-testbed", system, context=32768, output=(0, 64), concurrency=32, requests=128)
    pr = p.per_request
    ok = pr["completed"]
    assert (pr["output"][ok] == 1).any()
    assert np.all(pr["e2e_ms"][ok] >= pr["ttft_ms"][ok])


def test_breakdown_reports_the_first_tokens_wait_for_copies():
    rd = predict("sac-testbed", "rdma", context=32768, output=256, concurrency=16, requests=32)
    dr = predict("sac-testbed", "dram", context=32768, output=256, concurrency=16, requests=32)
    assert 0 < rd.breakdown["ttft_copy_wait_ms"] < rd.ttft_mean_ms
    assert "ttft_copy_wait_ms" not in dr.breakdown


def _front_end_log(events, until=math.inf):
    """Run a FrontEnd over (time, 'in'|'msg', ...) events; return its dispatches and deliveries."""
    from sacmodel.serving.engine.frontend import FrontEnd
    fe, got = FrontEnd(), []
    for ev in events:
        if ev[1] == "in":
            fe.arrive(ev[0], ev[2], ev[3])
        else:
            fe.produce(ev[0], ev[2], ev[3])
    fe.run(until, lambda i, t: got.append(("dispatch", i, round(t, 9))),
           lambda p, t: got.append(("deliver", tuple(p), round(t, 9))))
    return got, fe


def test_front_end_hands_on_one_message_per_intake_turn():
    """Hand-worked: three requests arrive together (1 s of work each) while two single messages wait; the turn
    takes all three in, then hands on one message; the second goes out in the next turn (nothing to take in)."""
    got, fe = _front_end_log([(0.0, "in", 0, 1.0), (0.0, "in", 1, 1.0), (0.0, "in", 2, 1.0),
                              (0.0, "msg", 1, [("a", False)]), (0.5, "msg", 1, [("b", False)])])
    assert got == [("dispatch", 0, 1.0), ("dispatch", 1, 2.0), ("dispatch", 2, 3.0),
                   ("deliver", (("a", False),), 3.0), ("deliver", (("b", False),), 3.0)]
    assert not fe.busy()


def test_front_end_holds_messages_behind_the_queue_while_it_takes_requests_in():
    """A payload behind four payload-less messages waits four intake turns when requests keep arriving one per
    turn; with nothing to take in, the whole queue goes out at once."""
    ev = [(0.0, "msg", 4, None), (0.0, "msg", 1, [("x", True)])] + [(float(k), "in", k, 1.0) for k in range(6)]
    got, _ = _front_end_log(ev)
    assert ("deliver", (("x", True),), 5.0) in got                 # turns end at 1, 2, 3, 4 (4 messages), then 5
    got, _ = _front_end_log([(0.0, "msg", 4, None), (0.0, "msg", 1, [("x", True)])])
    assert got == [("deliver", (("x", True),), 0.0)]


def test_front_end_runs_only_turns_that_start_by_until():
    got, fe = _front_end_log([(0.0, "in", 0, 2.0), (1.0, "in", 1, 1.0)], until=1.5)
    assert got == [("dispatch", 0, 2.0)]                            # the second turn starts at 2.0 > 1.5
    assert fe.busy() and fe.next_turn() == 2.0


def test_closed_loop_sends_follow_the_front_end_pace():
    """At 64K tokens a prompt takes tens of ms to take in; a later wave is then sent over about one intake per
    request (measured 2.3 s for 64 requests at 0.55 us per token), not all at once."""
    from sacmodel.hardware.params import with_params
    from sacmodel.hardware.scenarios import as_topology
    t = with_params(as_topology("sac-testbed"), {"t_token": 0.55e-6})
    p = predict(t, "dram", context=65536, output=256, concurrency=64, requests=192, record=True)
    rel = np.sort(p.per_request["release_s"])
    later = rel[64:128] - rel[64]
    assert 0.5 * 64 * 0.55e-6 * 65536 < later.max() < 2.0 * 64 * 0.55e-6 * 65536

def test_a_scenario_without_the_pool_its_system_reads_names_the_file(tmp_path):
    # (found by the long fuzz run of stop 38: a scenario file whose cxl pool was deleted, predicted with system
    # cxl, said "cxl_devices=2 but the scenario has no cxl pool", naming neither the file nor the system)
    import yaml

    from sacmodel.hardware.scenarios import TOPOLOGY_DIR
    doc = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
    del doc["pools"]["cxl"]
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"mine\.yaml: system 'cxl' reads a cxl pool, which the scenario does not"):
        predict(str(tmp_path / "mine.yaml"), "cxl", context=8192, output=16, concurrency=2, requests=4)
    assert predict(str(tmp_path / "mine.yaml"), "dram", context=8192, output=16, concurrency=2, requests=4).feasible
