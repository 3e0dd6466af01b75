import json
import math
from dataclasses import replace

import numpy as np
import pytest
import yaml
from measured_data import SHARED, needs_shared

from sacmodel import replay
from sacmodel.cli import main
from sacmodel.data.traces import load_trace
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
from sacmodel.serving.predict import ConfigError
from sacmodel.serving.config import resolve
from sacmodel.serving.engine.stepmodel import TRACE_CONTEXT_GRID, Model
from sacmodel.serving.engine.workload import Requests
from sacmodel.serving.predict import simulate

# KV bytes per token of DeepSeek-V3.2 as the testbed runs it: 61 layers x (BF16 latent + rope 1152 B + indexer
# key 132 B); checked against the model catalog in test_cluster_schema
BPT = 61 * (576 * 2 + 132)


def trace(tmp_path, rows, name="t.jsonl"):
    """rows: (arrival s, input tokens, output tokens, hash_ids)."""
    p = tmp_path / name
    p.write_text("".join(json.dumps({"timestamp": int(t * 1000), "input_length": n, "output_length": o,
                                     "hash_ids": h}) + "\n" for t, n, o, h in rows))
    return p


def cluster(tmp_path, mutate=lambda c: None):
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    mutate(data["cluster"])
    p = tmp_path / "cluster.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_one_instance_replays_as_the_single_instance_engine(tmp_path):
    # requests far apart: nobody waits, so TTFT from arrival = the engine's TTFT. The testbed runs DP attention:
    # each of its 8 ranks keeps its own radix cache and takes requests in turn, so of nine requests sharing a
    # 4-block prefix only the ninth (back on rank 0) finds it
    rows = [(60.0 * i, 3000 + 700 * i, 20 + i, [0, 1, 2, 3, 100 + i, 200 + i]) for i in range(9)]
    p = trace(tmp_path, rows)
    new = replay("sac-testbed", "cxl", p)
    pr = new.per_request
    assert list(pr["cached_tokens"]) == [0] * 8 + [2048]
    tr = load_trace(p)
    cfg = resolve(load_topology("sac-testbed"), "cxl")
    old = simulate(cfg, Requests(tr.arrival, tr.input_len, tr.output_len, pr["cached_tokens"]), 1 << 30,
                   model=Model(cfg, context_grid=TRACE_CONTEXT_GRID))
    assert new.ttft_mean_ms == pytest.approx(old.ttft_mean_ms, rel=1e-9)
    assert new.tbt_mean_ms == pytest.approx(old.tbt_mean_ms, rel=1e-9)
    for k in ("arrival", "instance", "ttft_ms", "tbt_ms", "e2e_ms", "cached_cxl", "queue_s"):
        assert len(pr[k]) == 9
    for k in ("ttft_p50_ms", "ttft_p99_ms", "tbt_p50_ms", "tbt_p99_ms", "goodput_req_s", "hit_rate", "bytes_by_link"):
        assert k in new.summary
    assert new.to_dict()["summary"]["requests"] == 9


def test_demotion_and_promotion_in_a_replay_hand_computed(tmp_path):
    # one GPU instance (8 ranks, taken in turn): per rank an HBM tier of 2 blocks, then host DRAM of 2 blocks;
    # requests 100 s apart. Rank 0 serves requests 0, 8 and 16: [1, 2], then [5, 6] (demoting [1, 2] to host
    # DRAM), then [1, 2] again, found in host DRAM; the other requests are fillers on the other ranks
    def small(c):
        c["hosts"] = [{"id": "h"}]
        c["instances"] = [{"id": "n", "host": "h", "tiers": ["hbm", "host"]}]
        c["tiers"]["hbm"]["capacity"]["value"] = "8192 token"
        c["tiers"]["host"]["capacity"]["value"] = "8192 token"
        c["tiers"]["host"]["inclusive"] = False          # write-back: the host tier holds what HBM evicted
        c["tiers"]["cxl"]["attached"] = ["h"]
    fill = lambda i: (100.0 * i, 600, 2, [1000 + i])  # noqa: E731
    rows = [(0, 1024, 2, [1, 2])] + [fill(i) for i in range(1, 8)] + [(800, 1024, 2, [5, 6])] + \
        [fill(i) for i in range(9, 16)] + [(1600, 1024, 2, [1, 2])]
    p = replay(cluster(tmp_path, small), "gpu", trace(tmp_path, rows))
    pr = p.per_request
    assert list(pr["cached_hbm"]) == [0] * 17
    assert list(pr["cached_host"]) == [0] * 16 + [1023]      # demoted by request 8, found in host DRAM
    # the host hit is copied to HBM first: its two blocks of KV over the host's 8 PCIe 5.0 links (55 GB/s each)
    assert pr["load_s"][16] == pytest.approx(1024 * BPT / (8 * 55e9))


def test_a_shared_cxl_pool_serves_every_instance_private_pools_do_not(tmp_path):
    rows = [(0, 2048, 2, [1, 2, 3, 4]), (500, 2048, 2, [1, 2, 3, 4])]
    p = trace(tmp_path, rows)
    shared = replay("sac-cluster-4x", "cxl", p, router="round_robin")
    private = replay("sac-testbed", "cxl", p, router="round_robin", instances=2)
    assert list(shared.per_request["instance"][:2]) == [0, 1]
    assert shared.per_request["cached_cxl"][1] == 2047 and private.per_request["cached_cxl"][1] == 0
    # every new token's KV is written once to the pool through its host's adapters
    b = shared.summary["bytes_by_link"]
    assert b["h0.cxl_write"] == pytest.approx(2048 * BPT) and "h1.cxl_write" not in b
    assert b["cxl.devices"] == pytest.approx(b["h0.cxl_write"])


def test_disaggregation_over_rdma_and_over_the_cxl_pool(tmp_path):
    rows = [(10.0 * i, 4096, 40, [1000 * i + j for j in range(8)]) for i in range(4)]
    p = trace(tmp_path, rows)
    rd = replay("sac-cluster-4x", "dram", p, pd="1:3", router="round_robin")
    assert rd.summary["handoff"] == "rdma" and set(rd.per_request["instance"]) == {0}
    assert set(rd.per_request["decode_instance"]) <= {1, 2, 3}
    te = load_topology("sac-cluster-4x").cluster.rdma
    # the whole prompt's KV in one Transfer Engine operation on the NIC nearest the GPU, which also carries the
    # write-through of the prompt's blocks to the RDMA store, begun at the end of the prefill a moment before the
    # response: the handoff takes more than setup + size / one NIC, at most setup + both sizes / one NIC
    one_nic = replace(te, nics=1).rate
    h = rd.per_request["handoff_s"]
    assert np.allclose(h, h[0]) and te.setup + 4096 * BPT / one_nic < h[0] <= te.setup + 2 * 4096 * BPT / one_nic
    out = {k: v for k, v in rd.summary["bytes_by_link"].items() if k.startswith("h0.nic")}
    # (the NICs also carry the write-through of every new block to the RDMA store)
    assert sum(v for k, v in out.items() if k.endswith(".out")) >= 4 * 4096 * BPT
    cx = replay("sac-cluster-4x", "cxl", p, pd="1:3", router="round_robin")
    assert cx.summary["handoff"] == "cxl"
    # written once to the pool through the prefill host's adapters (the decode instance waits at most for that
    # write, begun at the end of the prefill), read in place: no RDMA bytes at all
    assert cx.summary["bytes_by_link"]["h0.cxl_write"] == pytest.approx(4 * 4096 * BPT)
    write = 4096 * BPT / 45e9                     # the two devices' 2 x 22.5 GB/s bind (the adapters: 66 GB/s)
    assert np.all((0 <= cx.per_request["handoff_s"]) & (cx.per_request["handoff_s"] < write))
    assert not any(".nic" in k or "rdma" in k for k in cx.summary["bytes_by_link"])
    tbt = cx.per_request["tbt_ms"]
    assert np.all(np.isfinite(tbt)) and np.all(cx.per_request["e2e_ms"] > cx.per_request["ttft_ms"])


def test_time_scale_slo_and_goodput(tmp_path):
    rows = [(2.0 * i, 1500, 8, [i]) for i in range(8)]
    p = trace(tmp_path, rows)
    r = replay("sac-testbed", "cxl", p, time_scale=2.0, slo="ttft=1h,tbt=1h")
    assert list(r.per_request["arrival"]) == [float(i) for i in range(8)]
    assert r.summary["slo_attainment"] == 1.0
    assert r.summary["goodput_req_s"] == pytest.approx(8 / r.summary["duration_s"])
    strict = replay("sac-testbed", "cxl", p, time_scale=2.0, slo={"ttft": 1e-3})
    assert strict.summary["goodput_req_s"] == 0.0


def test_bad_input(tmp_path):
    p = trace(tmp_path, [(0, 1000, 2, [1, 2]), (1, 200000, 2, [3])])
    r = replay("sac-cluster-4x", "cxl", p)          # the server refuses the long one; it serves the other
    assert r.success_fraction == 0.5 and not r.feasible
    assert "1 request(s) refused: input_length 200000 exceeds the model's maximum context 163840" in r.limit
    ok = trace(tmp_path, [(0, 1000, 2, [1, 2])], "ok.jsonl")
    with pytest.raises(ConfigError, match="pd 2:6 does not match the 4 instances"):
        replay("sac-cluster-4x", "cxl", ok, pd="2:6")
    with pytest.raises(ConfigError, match="unknown router 'nearest'"):
        replay("sac-cluster-4x", "cxl", ok, router="nearest")
    with pytest.raises(ConfigError, match="reaches no KV tier that system 'cxl' can use"):
        replay(cluster(tmp_path, lambda c: c["instances"][0].update(tiers=["hbm", "host"])), "cxl", ok)


@pytest.mark.parametrize("args,msg", [
    (["--router", "nearest"], "unknown router 'nearest'"),
    (["--pd", "3:3"], "pd 3:3 does not match the 4 instances"),
    (["--cache-capacity", "3 GB/s"], "cache_capacity: '3 GB/s' is not a capacity"),
])
def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, args, msg):
    ok = trace(tmp_path, [(0, 1000, 2, [1, 2])])
    out = tmp_path / "out.csv"
    assert main(["replay", str(ok), "--scenario", "sac-cluster-4x", "--system", "cxl", "--csv", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1 and not out.exists()


def test_cli_replay_csv_json_and_plot(tmp_path, capsys):
    p = trace(tmp_path, [(1.0 * i, 2000 + 100 * i, 5, [7, 8, 9 + i]) for i in range(6)])
    out, png = tmp_path / "r.csv", tmp_path / "cdf.png"
    assert main(["replay", str(p), "--scenario", "sac-cluster-4x", "--systems", "cxl,rdma", "--router", "kv",
                 "--csv", str(out), "--plot", str(png), "--quiet"]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 12 and lines[0].startswith("configuration,arrival,instance")
    assert png.stat().st_size > 10000
    capsys.readouterr()
    assert main(["replay", str(p), "--scenario", "sac-cluster-4x", "--system", "cxl", "--json", "--quiet"]) == 0
    d = json.loads(capsys.readouterr().out)["cxl"]
    assert d["summary"]["requests"] == 6 and d["summary"]["instances"] == 4 and "ttft_ms" in d["per_request_fields"]


@needs_shared
def test_replay_of_a_testbed_run_keeps_the_prompt_cached():
    run = next((SHARED / "sac-testbed" / "runs").glob("dc_0417-p3_04_cxl2_ctx32k_conc64_r2fix2k_n256.json"))
    r = replay("sac-testbed", "cxl", run, limit=64)
    assert r.summary["hit_rate_total"] == pytest.approx(1.0, abs=1e-4)
    assert r.summary["closed_loop"] == 64
    assert math.isfinite(r.summary["tbt_p50_ms"]) and r.summary["tbt_p50_ms"] > 30


def test_the_issue_command_line_and_a_request_too_big_for_hbm(tmp_path, capsys):
    p = trace(tmp_path, [(0.5 * i, 3000 + 50 * i, 6, [1, 2, 3, 10 + i]) for i in range(16)])
    assert main(["replay", str(p), "--scenario", "sac-cluster-4x", "--system", "cxl", "--router", "kv",
                 "--instances", "8", "--pd", "2:6", "--cache-capacity", "3M", "--time-scale", "1.0", "--json",
                 "--quiet"]) == 0
    s = json.loads(capsys.readouterr().out)["cxl"]["summary"]
    assert s["instances"] == 8 and s["pd"] == "2:6" and s["cache_capacity_tokens"]["cxl"] == 3 * 2 ** 20
    big = trace(tmp_path, [(0, 160000, 50000, [1]), (1, 1000, 5, [2])], "big.jsonl")   # 210K > the pool
    r = replay("sac-testbed", "gpu", big)
    assert not r.feasible and "larger than one instance can hold" in r.limit and r.success_fraction == 0.5


def test_roles_in_the_cluster_file_disaggregate_without_pd(tmp_path):
    def roles(c):
        c["hosts"] = [{"id": "hp"}, {"id": "hd", "count": 3}]
        c["tiers"]["cxl"]["attached"] = ["hp", "hd"]
        c["instances"] = [{"id": "p", "host": "hp", "role": "prefill", "tiers": ["cxl"]},
                          {"id": "d", "count": 3, "host": "hd", "role": "decode", "tiers": ["cxl"]}]
    p = trace(tmp_path, [(0, 3000, 8, [1, 2, 3, 4, 5, 6])])
    r = replay(cluster(tmp_path, roles), "cxl", p)
    assert r.summary["pd"] == "1:3" and r.summary["requests_by_instance"] == {"p": 1}
    assert r.per_request["decode_instance"][0] in (1, 2, 3)
