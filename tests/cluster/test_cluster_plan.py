import csv
import json

import pytest

from sacmodel.cli import main
from sacmodel.cluster.plan import cluster_plan, cluster_sweep, cost_per_hour
from sacmodel.cluster.replay import replay


def burst(tmp_path, n=24, gap_ms=200):
    """n prompts of 6K-9K tokens ``gap_ms`` apart (a few seconds in all by default), sharing a system prompt: one
    host queues them."""
    p = tmp_path / "burst.jsonl"
    p.write_text("".join(json.dumps({"timestamp": gap_ms * i, "input_length": 6000 + 130 * i, "output_length": 16,
                                     "hash_ids": [1, 2] + [100 * i + j for j in range(3, 13 + i // 8)]}) + "\n"
                         for i in range(n)))
    return p


def test_cost_per_hour_by_hand():
    c = cost_per_hour("sac-cluster-4x", "cxl", 4, None)
    # 4 hosts x 8 H20s x $1.35; a 2 TB pool is two 1 TB devices = 2,000 GB x $0.000228; two CXL adapters per
    # host; one switch
    assert c["gpu_h20"] == pytest.approx(32 * 1.35) and c["cxl_gb"] == pytest.approx(2000 * 0.000228)
    assert c["cxl_adapter"] == pytest.approx(8 * 0.04) and c["cxl_switch"] == pytest.approx(0.38)
    assert c["total"] == pytest.approx(43.2 + 0.456 + 0.32 + 0.38)
    assert cost_per_hour("sac-cluster-4x", "rdma", 2, None)["rdma_nic"] == pytest.approx((4 + 4) * 0.06)


def test_sweep_serial_and_on_dask_agree(tmp_path):
    tr = burst(tmp_path, 12)
    grid = {"instances": [1, 2], "router": ["round_robin", "kv"]}
    serial = cluster_sweep("sac-cluster-4x", "cxl", tr, grid, workers=1)
    assert [(r["instances"], r["router"]) for r in serial] == [(1, "round_robin"), (1, "kv"), (2, "round_robin"),
                                                              (2, "kv")]
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cl:
        dask = cluster_sweep("sac-cluster-4x", "cxl", tr, grid, scheduler=cl.scheduler_address)
    assert [r["ttft_p99_ms"] for r in dask] == [r["ttft_p99_ms"] for r in serial]
    bad = cluster_sweep("sac-cluster-4x", "cxl", tr, {"instances": [3], "pd": ["1:1"]}, workers=1)
    assert bad[0]["feasible"] is False and "does not match the 3 instances" in bad[0]["limit"]


def test_plan_finds_the_smallest_instance_count_that_meets_the_slo(tmp_path):
    tr = burst(tmp_path)
    p1 = replay("sac-cluster-4x", "cxl", tr, instances=1).summary["ttft_p99_ms"]
    p4 = replay("sac-cluster-4x", "cxl", tr, instances=4).summary["ttft_p99_ms"]
    assert p4 < p1
    bound = (p1 + p4) / 2
    plan = cluster_plan("sac-cluster-4x", "cxl", tr, {"ttft_p99_ms": bound}, vary="instances", values="1:4",
                        workers=1)
    n = plan.best
    assert 1 < n <= 4
    # checked independently: the chosen count meets the bound, the one below does not
    assert replay("sac-cluster-4x", "cxl", tr, instances=n).summary["ttft_p99_ms"] <= bound
    below = replay("sac-cluster-4x", "cxl", tr, instances=n - 1).summary
    assert below["ttft_p99_ms"] > bound or below["load"]["overloaded"]     # a queue that grows is no answer
    assert [r["overloaded"] for r in plan.tried[:n]] == [
        replay("sac-cluster-4x", "cxl", tr, instances=k).summary["load"]["overloaded"] for k in range(1, n + 1)]
    assert all(r["skipped"] for r in plan.tried[n:])          # larger counts cost more: not replayed
    none = cluster_plan("sac-cluster-4x", "cxl", tr, {"ttft_p99_ms": 1.0}, vary="instances", values="1:2", workers=1)
    assert none.best is None and "no instances" in none.message
    over = cluster_plan("sac-cluster-4x", "cxl", burst(tmp_path, 24, gap_ms=50), {"ttft_p99_ms": 1e9},
                        vary="instances", values="1", workers=1)
    assert over.best is None and over.tried[0]["overloaded"] and "overloaded" in over.tried[0]["limit"]


def test_cluster_plan_and_sweep_cli(tmp_path, capsys):
    tr = burst(tmp_path, 10, gap_ms=10_000)             # spread out: one host keeps up
    out = tmp_path / "sweep.csv"
    assert main(["sweep", "--scenario", "sac-cluster-4x", "--system", "cxl", "--trace", str(tr),
                 "--grid", "instances=1,2", "--grid", "pool=1M,inf", "--workers", "1", "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and {r["pool"] for r in rows} == {"1M", "inf"} and float(rows[0]["cost_usd_per_hour"]) > 0
    capsys.readouterr()
    assert main(["plan", "--scenario", "sac-cluster-4x", "--system", "cxl", "--trace", str(tr), "--vary", "instances",
                 "--values", "1,2", "--slo", "ttft_p99_ms=1e9", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["best"] == 1 and len(d["tried"]) == 2
    assert d["tried"][0]["success_fraction"] == 1.0 and d["tried"][0]["overloaded"] is False
    assert d["tried"][1]["skipped"] and "1 instances meet the SLO at a lower cost" in d["tried"][1]["limit"]
    assert d["replays"] == 1                    # the count above the answer was not replayed
    assert main(["plan", "--scenario", "sac-cluster-4x", "--system", "cxl", "--trace", str(tr), "--vary", "instances",
                 "--values", "1,2", "--slo", "ttft_p99_ms=1e9"]) == 0
    out = capsys.readouterr().out
    assert "1 cluster replay(s) for 2 instances value(s)" in out
    line = next(x for x in out.splitlines() if x.startswith("check it: "))
    import shlex
    argv = shlex.split(line[len("check it: "):])[1:]
    assert argv[:2] == ["replay", str(tr)] and argv[argv.index("--instances") + 1] == "1"
    assert main([*argv, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["cxl"]["summary"]
    assert again["ttft_p99_ms"] == pytest.approx(d["tried"][0]["ttft_p99_ms"], rel=1e-12)
    assert main(["plan", "--scenario", "sac-cluster-4x", "--system", "cxl", "--trace", str(tr), "--values", "1",
                 "--slo", "latency=3"]) == 2
    assert "unknown SLO metric 'latency'" in capsys.readouterr().err


def test_cluster_plan_prices_from_the_given_table(tmp_path, capsys):
    """Issue 36: a cluster plan over a trace used the built-in table whatever --prices said."""
    from measured_data import SHARED

    from sacmodel.cli import main
    p = tmp_path / "mine.yaml"
    p.write_text("parts:\n  gpu: {usd_per_hour: 100.0}\n  cxl_gb: {usd_per_hour: 0.001}\n"
                 "  cxl_adapter: {usd_per_hour: 1.0}\n  cxl_switch: {usd_per_hour: 10.0}\n")
    # one host: 8 GPUs x 100 + a 2 TB pool (two 1 TB devices, 2,000 GB x 0.001) + 2 adapters + 1 switch
    assert cost_per_hour("sac-cluster-4x", "cxl", 1, None, p)["total"] == pytest.approx(800 + 2 + 2 + 10)
    trace = str(SHARED / "traces" / "mooncake_synthetic_trace.jsonl")
    assert main(["plan", "--trace", trace, "--scenario", "sac-cluster-4x", "--system", "cxl", "--values", "1",
                 "--limit", "20", "--slo", "ttft_p99_ms=1000000", "--prices", str(p), "--json"]) == 0
    import json
    rows = json.loads(capsys.readouterr().out)["tried"]
    assert rows[0]["cost_usd_per_hour"] == pytest.approx(814.0)
    no_cxl = tmp_path / "gpu.yaml"
    no_cxl.write_text("parts:\n  gpu: {usd_per_hour: 1.0}\n")
    with pytest.raises(ValueError, match="the table has no cxl_gb, cxl_adapter, cxl_switch"):
        cluster_sweep("sac-cluster-4x", "cxl", trace, {"instances": [1]}, fixed={"limit": 5}, price_table=no_cxl)


def test_the_instance_search_two_replays_at_a_time_lists_the_same_rows(tmp_path):
    """Issue 35 item 6: once a replay keeps up the search replays the next counts at once; what a count before
    them settles (the answer, a bound) still rules them out, so the rows are those of one count at a time."""
    tr = burst(tmp_path)
    p3, p4 = (replay("sac-cluster-4x", "cxl", tr, instances=n).summary for n in (3, 4))
    assert not p3["load"]["overloaded"] and p4["ttft_p99_ms"] < p3["ttft_p99_ms"]
    slo = {"ttft_p99_ms": (p3["ttft_p99_ms"] + p4["ttft_p99_ms"]) / 2}     # 3 keeps up but misses it, 4 meets it
    one = cluster_plan("sac-cluster-4x", "cxl", tr, slo, vary="instances", values="1:5", workers=1)
    two = cluster_plan("sac-cluster-4x", "cxl", tr, slo, vary="instances", values="1:5", workers=2)
    assert one.best == two.best == 4
    assert json.dumps(two.tried, default=str) == json.dumps(one.tried, default=str)
    assert two.replays == one.replays == 4 and one.unused == 0
    assert two.unused == 1 and two.tried[4]["skipped"]    # 5 was replayed with 4, then not needed


def test_a_replay_run_alongside_the_answer_is_listed_as_not_replayed_and_counted():
    from sacmodel.cluster.plan import _Search
    ok = {"feasible": True, "ttft_p99_ms": 1.0, "overloaded": False}
    late = {"feasible": True, "ttft_p99_ms": 0.5, "overloaded": False}
    st = _Search()
    st.settle(3, ok, {"ttft_p99_ms": 2.0})
    st.settle(4, late, {"ttft_p99_ms": 2.0})              # replayed at once with 3: not needed
    assert st.best == 3 and st.rows[3] is ok and st.unused == 1
    assert st.rows[4]["skipped"] and "3 instances meet the SLO at a lower cost" in st.rows[4]["limit"]
    st = _Search()                                        # an overloaded replay's bound rules out what ran with it
    st.settle(1, {"feasible": False, "overloaded": True, "offered_req_s": 10.0, "served_req_s": 1.0,
                  "success_fraction": 1.0, "too_short": False}, {"ttft_p99_ms": 2.0})
    st.settle(2, late, {"ttft_p99_ms": 2.0})
    assert st.floor == 10 and st.rows[2]["skipped"] and "overloaded by the bound" in st.rows[2]["limit"]
    assert st.unused == 1 and st.best is None
