"""Cluster-file instances that span hosts (issue 35 item 1): one SGLang server over several hosts of the host
scenario, its collectives and DeepEP's all-to-all over the cluster's network, refused where SGLang refuses."""
import pytest
import yaml

import sacmodel
from sacmodel.cli import main
from sacmodel.hardware.cluster import instance_topology
from sacmodel.hardware.scenarios import load_topology
from sacmodel.hardware.topology import TopologyError
from sacmodel.serving.config import resolve, static_values

NET = {"rdma": {"nics": {"value": 2, "source": "sac-system.md: 2 x ConnectX-7 per host"},
                "nic_rate": {"value": "100 Gbit/s", "source": "sac-system.md"},
                "op_cost": {"value": "0.239 us", "source": "fitted"}}}


def span_file(tmp_path, instances, hosts=4):
    data = {"schema_version": 2, "name": "span", "model": "deepseek-v3.2",
            "cluster": {"host": "sac-testbed", "hosts": [{"id": "h", "count": hosts}], "instances": instances,
                        "tiers": {"hbm": {"kind": "hbm", "capacity": {"value": "3200000 token", "source": "test"}}},
                        "network": NET}}
    p = tmp_path / "span.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_an_instance_over_two_hosts_runs_its_collectives_at_the_hosts_nics_hand_computed(tmp_path):
    p = span_file(tmp_path, [{"id": "i", "host": "h", "hosts": 2, "count": 2, "tp": 16, "dp": 16,
                              "tiers": ["hbm"]}])
    cl = sacmodel.load_cluster(p)
    assert [i.hosts for i in cl.instances] == [("h0", "h1"), ("h2", "h3")]
    t = instance_topology(cl, cl.instances[0])
    assert len(t.gpus) == 16 and len(t.pools["dram"]) == 4          # each host keeps its own DRAM
    cfg = resolve(t, "gpu")
    assert (cfg.tp, cfg.dp, cfg.ep, cfg.attn_tp) == (16, 16, 1, 1)
    assert cfg.prefill_chunk == 1024 * 8 // 16        # the testbed's chunked_prefill_size 8192 over dp 16
    v = static_values(cfg)
    # DP attention over 16 GPUs: an all-gather and a reduce-scatter per layer, crossing the two hosts: a host
    # sends at its 2 x 100 Gb/s = 25 GB/s (far below NVLink's 450 GB/s); NCCL's ring LL over 16 ranks on 2 nodes:
    # 6.6 us base + 14 NVLink steps at the 1.0 us network overhead + 1 network step of 2.7 us = 23.3 us
    assert v["link_bw"] == pytest.approx(25e9)
    assert v["t_collective"] == pytest.approx(23.3e-6)
    assert v["coll_bytes"] == pytest.approx(2 * 15 / 16 * 2 * 7168)
    one = static_values(resolve(load_topology("sac-testbed"), "gpu"))
    assert one["link_bw"] == 450e9                     # on one host: NVLink


def test_deepep_across_hosts_prices_the_all_to_all_over_the_network(tmp_path):
    ep = {"tp": 16, "dp": 16, "ep": 16, "moe_a2a": "deepep"}
    p = span_file(tmp_path, [{"id": "p", "hosts": ["h0", "h1"], "role": "prefill", "tiers": ["hbm"], **ep},
                             {"id": "d", "hosts": ["h2", "h3"], "role": "decode", "tiers": ["hbm"], **ep}])
    cl = sacmodel.load_cluster(p)
    v = static_values(resolve(instance_topology(cl, cl.instances[0]), "gpu"))
    assert 0.9 < v["a2a_share"] < 1          # the MoE layers' dispatch and combine; the 3 dense layers gather
    r = sacmodel.replay(p, "gpu", _trace(tmp_path))
    assert r.summary["pd"] == "1:1" and r.success_fraction == 1


def _trace(tmp_path):
    import json
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 8, "hash_ids": h}) + "\n"
                         for t, n, h in ((0, 3000, [1, 2, 3]), (400, 2000, [4, 5]))))
    return p


@pytest.mark.parametrize("inst,msg", [
    ({"hosts": 2, "tp": 12}, "instances[0].tp: tp=12 must equal gpus=16 (2 host(s) x 8 GPUs)"),
    ({"hosts": 2, "tp": 16, "dp": 16, "ep": 8, "moe_a2a": "deepep"},
     "instances[0].moe_a2a: moe_a2a='deepep' with tp=16, dp=16, ep=8: SGLang's DeepEP runs expert parallelism"),
    ({"hosts": 2, "tp": 16, "ep": 3}, "instances[0].ep: ep=3 must divide tp=16"),
    ({"hosts": 2, "two_batch_overlap": True}, "instances[0].two_batch_overlap: two_batch_overlap overlaps DeepEP's "
     "dispatch and combine with computation: SGLang's --enable-two-batch-overlap needs --moe-a2a-backend deepep"),
    ({"hosts": 5}, "instances[0].hosts: 1 instance(s) of 5 hosts each need 5 hosts; the host group has 4"),
    ({"hosts": ["h0", "h9"]}, "instances[0].hosts: unknown host 'h9'"),
    ({"hosts": 2, "tp": "16"}, "instances[0].tp: expected a whole number, got '16'"),
    ({"hosts": 2, "tp": 16, "dp": 16, "ep": 16, "moe_a2a": "nccl"}, "instances[0].moe_a2a: moe_a2a must be one of"),
    ({"hosts": 2, "cuda_graph_max_bs": 100000}, "instances[0].cuda_graph_max_bs: must be a whole number from 1"),
    ({"hosts": 0}, "instances[0].hosts: expected a host count"),
    ({"hosts": 2, "tp": 16, "dp": 8, "moe_dense_tp": 1},
     "instances[0].moe_dense_tp: moe_dense_tp=1 with tp=16, dp=8: the dense layers run data-parallel"),
    ({"hosts": 2, "tp": 16, "dp": 16, "moe_dense_tp": 2},
     "instances[0].moe_dense_tp: moe_dense_tp=2: SGLang's --moe-dense-tp-size takes 1 or None"),
])
def test_refused_instances_name_the_file_the_field_and_sglangs_rule(tmp_path, capsys, inst, msg):
    p = span_file(tmp_path, [{"id": "i", "host": "h", "tiers": ["hbm"], **inst}])
    with pytest.raises(TopologyError) as exc:
        sacmodel.load_cluster(p)
    assert str(p) in str(exc.value) and msg in str(exc.value)
    assert main(["replay", str(_trace(tmp_path)), "--scenario", str(p), "--system", "gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_a_one_host_instance_is_unchanged(tmp_path):
    tr = _trace(tmp_path)
    plain = sacmodel.replay(span_file(tmp_path, [{"id": "i", "host": "h", "count": 2, "tiers": ["hbm"]}], hosts=2), "gpu", tr)
    cl = sacmodel.load_cluster(span_file(tmp_path, [{"id": "i", "host": "h", "count": 2, "hosts": 1,
                                                     "tiers": ["hbm"]}], hosts=2))
    assert cl.instances[0].settings == {} and instance_topology(cl, cl.instances[0]) is cl.host
    again = sacmodel.replay(cl, "gpu", tr)
    # the host's own server written out (tp 8, dp 8 on one host) prices every step as the host scenario does
    same = span_file(tmp_path, [{"id": "i", "host": "h", "count": 2, "hosts": 1, "tp": 8, "dp": 8,
                                 "tiers": ["hbm"]}], hosts=2)
    cl2 = sacmodel.load_cluster(same)
    host = static_values(resolve(cl2.host, "gpu"))
    own = static_values(resolve(instance_topology(cl2, cl2.instances[0]), "gpu"))
    assert own == host
    written = sacmodel.replay(same, "gpu", tr)
    for r in (again, written):
        assert r.ttft_mean_ms == plain.ttft_mean_ms and r.tbt_mean_ms == plain.tbt_mean_ms


def test_an_instance_whose_weights_leave_no_kv_pool_is_refused(tmp_path):
    """DeepSeek-V3 FP8 on 8 x H200 at mem_fraction 0.6: TP8 holds 79.3 GiB of weights per GPU, within 0.6 x (the
    GPU's memory less SGLang's runtime reserve); DP attention over the 8 GPUs replicates the attention and dense
    weights (89.6 GiB per GPU): no KV pool is left, and SGLang stops at start."""
    host = tmp_path / "host.yaml"
    host.write_text(sacmodel.scenario_yaml(gpu="h200", gpus=8, model="deepseek-v3", mem_fraction=0.6))
    data = {"schema_version": 2, "name": "fits", "model": "deepseek-v3",
            "cluster": {"host": str(host), "hosts": [{"id": "h", "count": 2}],
                        "instances": [{"id": "i", "host": "h", "count": 2, "hosts": 1, "tp": 8, "dp": 8,
                                       "tiers": ["hbm"]}],
                        "tiers": {"hbm": {"kind": "hbm", "capacity": {"value": "1000000 token", "source": "t"}}},
                        "network": NET}}
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError, match=r"instances\[0\]\.tp: deepseek-v3 does not fit on tp=8 GPUs"):
        sacmodel.load_cluster(p)
    data["cluster"]["instances"][0]["dp"] = 1           # TP8 as the host runs it fits
    p.write_text(yaml.safe_dump(data))
    assert sacmodel.load_cluster(p).instances[0].settings["dp"] == 1


def test_an_instance_over_two_built_hosts_prices_its_network_as_scenario_does(tmp_path):
    """Two hosts of 8 x H200 (the host scenario sacmodel.scenario builds, with its NICs) joined in one DeepEP
    server of 16 GPUs communicate as scenario("h200", gpus=16, ...) does: the same collective and all-to-all
    rates, latencies and routing skew."""
    host = tmp_path / "host.yaml"
    host.write_text(sacmodel.scenario_yaml(gpu="h200", gpus=8, model="deepseek-v3"))
    ep = {"tp": 16, "dp": 16, "ep": 16, "moe_a2a": "deepep", "two_batch_overlap": True, "moe_dense_tp": 1}
    data = {"schema_version": 2, "name": "two", "model": "deepseek-v3",
            "cluster": {"host": str(host), "hosts": [{"id": "h", "count": 2}],
                        "instances": [{"id": "i", "host": "h", "hosts": 2, "tiers": ["hbm"], **ep}],
                        "tiers": {"hbm": {"kind": "hbm", "capacity": {"value": "1000000 token", "source": "t"}}}}}
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    cl = sacmodel.load_cluster(p)
    mine = static_values(resolve(instance_topology(cl, cl.instances[0]), "gpu"))
    built = static_values(resolve(sacmodel.scenario("h200", gpus=16, model="deepseek-v3", dp=16, ep=16,
                                                    moe_a2a="deepep", two_batch_overlap=True, moe_dense_tp=1), "gpu"))
    assert built["dense_split"] == 1.0
    for k in ("link_bw", "t_collective", "coll_bytes", "a2a_share", "n_coll", "coll_bytes_prefill",
              "t_collective_prefill", "a2a_share_prefill", "tbo", "ep", "tp", "attn_tp", "ep_skew", "ep_skew_prefill",
              "a2a_lat_share", "a2a_lat_share_prefill", "dense_split", "shared_split"):
        assert mine[k] == pytest.approx(built[k], rel=1e-5), k


def test_more_instances_like_the_files_keep_their_hosts_and_settings(tmp_path):
    """replay(instances=3) of a file whose instance spans two hosts: three such servers, each on two hosts of
    its own (hosts added past the file's four), each with the file's settings."""
    from sacmodel.cluster.replay import _instances
    p = span_file(tmp_path, [{"id": "i", "host": "h", "hosts": 2, "count": 2, "tp": 16, "dp": 16, "tiers": ["hbm"]}])
    cl = sacmodel.load_cluster(p)
    more = _instances(cl, 3)
    assert [i.hosts for i in more] == [("h0", "h1"), ("h2", "h3"), ("host4", "host5")]
    assert all(i.settings == cl.instances[0].settings for i in more)
    r = sacmodel.replay(p, "gpu", _trace(tmp_path), instances=3)
    assert r.success_fraction == 1


def test_an_instance_across_hosts_costs_all_their_gpus(tmp_path):
    """Two instances of two testbed hosts each: 4 hosts x 8 H20s x $1.35 per hour, as four one-host instances."""
    from sacmodel.cluster.plan import cost_per_hour
    p = span_file(tmp_path, [{"id": "i", "host": "h", "hosts": 2, "count": 2, "tp": 16, "dp": 16, "tiers": ["hbm"]}])
    assert cost_per_hour(p, "gpu", 2, None)["gpu_h20"] == pytest.approx(32 * 1.35)
    assert cost_per_hour(p, "gpu", 1, None)["gpu_h20"] == pytest.approx(16 * 1.35)


def test_handoffs_leave_and_reach_the_host_of_each_rank(tmp_path):
    """A prefill server over h0-h1 hands each request's KV to a decode server over h2-h3: a DP rank's KV leaves
    from its own host's NIC (ranks 0-7 on h0, 8-15 on h1) and lands on its decode rank's host; every byte
    sent is received."""
    import json
    ep = {"tp": 16, "dp": 16}
    p = span_file(tmp_path, [{"id": "p", "hosts": ["h0", "h1"], "role": "prefill", "tiers": ["hbm"], **ep},
                             {"id": "d", "hosts": ["h2", "h3"], "role": "decode", "tiers": ["hbm"], **ep}])
    tr = tmp_path / "t20.jsonl"
    tr.write_text("".join(json.dumps({"timestamp": 300 * i, "input_length": 2000, "output_length": 4,
                                      "hash_ids": [1000 + i]}) + "\n" for i in range(20)))
    r = sacmodel.replay(p, "gpu", tr)
    links = r.summary["bytes_by_link"]
    assert r.success_fraction == 1
    assert {k.split(".")[0] for k in links if k.endswith(".out")} == {"h0", "h1"}
    assert {k.split(".")[0] for k in links if k.endswith(".in")} == {"h2", "h3"}
    assert sum(v for k, v in links.items() if k.endswith(".out")) == \
        pytest.approx(sum(v for k, v in links.items() if k.endswith(".in")))


def test_each_rank_uses_its_own_hosts_memory_and_the_shared_cxl_pool(tmp_path):
    """sac-cluster-4x with one server over two hosts: a rank on the second host swaps from that host's DRAM and
    posts RDMA on its NICs, while the CXL pool behind the switch is one pool for both hosts: its two devices
    are mapped by 16 ranks instead of 8, so each rank's share of a device is half the one-host share."""
    from sacmodel.hardware.scenarios import TOPOLOGY_DIR
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    data["cluster"]["instances"] = [{"id": "n", "count": 2, "host": "h", "hosts": 2, "tp": 16, "dp": 16,
                                     "tiers": ["hbm", "host", "cxl", "store"]}]
    p = tmp_path / "c4.yaml"
    p.write_text(yaml.safe_dump(data))
    cl = sacmodel.load_cluster(p)
    t = instance_topology(cl, cl.instances[0])
    assert t.pool_for(9, "dram").endswith("@1") and not t.pool_for(1, "dram").endswith("@1")
    assert t.pool_for(9, "rdma", 2) == "nic[1]@1" and t.pool_for(1, "rdma", 2) == "nic[1]"
    assert t.pool_for(9, "cxl", 2) == "cxl_dev[1]" and t.pools["cxl"] == ["cxl_dev[0]", "cxl_dev[1]"]
    one = resolve(load_topology("sac-testbed"), "cxl").limits["cxl_partition"]
    assert resolve(t, "cxl").limits["cxl_partition"] == one // 2
    for system in ("cxl", "rdma", "dram"):
        assert sacmodel.replay(p, system, _trace(tmp_path)).success_fraction == 1


# ---- an instance across hosts reads and writes through every host's links (issue 35, fidelity) -----------------
def _c4(tmp_path, instances, name="c4.yaml", **tier_fields):
    """sac-cluster-4x with the given instances; ``tier_fields``: tier -> fields replaced."""
    from sacmodel.hardware.scenarios import TOPOLOGY_DIR
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    data["cluster"]["instances"] = instances
    for tier, fields in tier_fields.items():
        data["cluster"]["tiers"][tier].update(fields)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def _setup(p, trace, system="cxl", pd=None):
    from sacmodel.cluster.replay import Setup
    s = Setup(p, system, trace, router="round_robin", instances=None, pd=pd, time_scale=1.0, concurrency=None,
              cache="trace", slo=None, router_params=None, limit=None, resources={})
    s.build(None, None, None)
    return s


def _decodes(tmp_path, n, name):
    import json
    p = tmp_path / name
    p.write_text("".join(json.dumps({"timestamp": 0, "input_length": 30000, "output_length": 200,
                                     "hash_ids": [1000 + i]}) + "\n" for i in range(n)))
    return p


def test_a_server_over_two_hosts_loads_the_cxl_pool_through_both_hosts_adapters(tmp_path):
    """The pool's devices are ample and each host's CXL adapters read 2 GB/s: one host decoding 8 long requests
    (one per rank) asks about that much. A server over two hosts decoding 16 (one per rank, eight on each host)
    loads each rank's entries through its own host's adapters: the pool carries more than one host's 2 GB/s,
    and its steps slow down by what one host's do, not twice that (one adapter carrying both hosts' loads)."""
    fields = {"host_read_bandwidth": {"value": "2 GB/s", "source": "test"},
              "device_bandwidth": {"value": "10 TB/s", "source": "test"}}
    one = sacmodel.replay(_c4(tmp_path, [{"id": "a", "host": "h0", "tiers": ["cxl"]}], "one.yaml", cxl=fields),
                          "cxl", _decodes(tmp_path, 8, "t8.jsonl"))
    two = sacmodel.replay(_c4(tmp_path, [{"id": "b", "hosts": ["h0", "h1"], "tp": 16, "dp": 16, "tiers": ["cxl"]}],
                              "two.yaml", cxl=fields), "cxl", _decodes(tmp_path, 16, "t16.jsonl"))
    assert one.success_fraction == two.success_fraction == 1
    p1, p2 = one.summary["pool"], two.summary["pool"]
    assert 1.0 < p1["slowdown"] < 1.2                       # one host: its adapters just bind
    assert p2["traffic_Bps"] > 2e9 * 1.5                    # more than one host's adapters can carry
    assert p2["slowdown"] == pytest.approx(p1["slowdown"], rel=0.05)


def test_a_store_on_the_hosts_has_a_segment_on_every_host_of_a_server(tmp_path):
    """Mooncake Store with its segments on the hosts: every host of every instance mounts one (a server over h0
    and h1 runs a store client on both), so objects are placed on h1 too."""
    p = _c4(tmp_path, [{"id": "b", "hosts": ["h0", "h1"], "tp": 16, "dp": 16, "tiers": ["store"]},
                       {"id": "c", "host": "h2", "tiers": ["store"]}], store={"segments": "hosts"})
    s = _setup(p, _decodes(tmp_path, 2, "t2.jsonl"), system="rdma")
    st = s.caches.shared["store"]
    assert st.segments == ["h0", "h1", "h2"]
    st.put_start(list(range(300)), 0.0, "h0")
    assert {h for hs in st.where.values() for h in hs} == {"h0", "h1", "h2"}


def test_a_rank_over_two_hosts_moves_its_kv_through_both_hosts_nics(tmp_path):
    """A tp=16 rank over h0-h1 (GPUs 0-7 on h0, 8-15 on h1): DeepSeek's latent is whole on every GPU, so a
    prefix read from a shared tier comes into each host whole, a new prefix is written once (SGLang HiCache
    backs an MLA model's KV up from tp rank 0 only), and a handoff to a tp=16 decode rank over h2-h3 goes from
    each prefill GPU's NIC to the NIC of the decode GPU of the same tp rank: eight GPUs h0 -> h2, eight h1 -> h3,
    each with the whole latent."""
    from sacmodel.cluster.network import Network
    p = _c4(tmp_path, [{"id": "p", "hosts": ["h0", "h1"], "tp": 16, "role": "prefill", "tiers": ["store"]},
                       {"id": "d", "hosts": ["h2", "h3"], "tp": 16, "role": "decode", "tiers": ["store"]}])
    s = _setup(p, _decodes(tmp_path, 2, "t2.jsonl"), system="rdma", pd="1:1")
    assert s.gpus_of(0, 0) == [("h0", g) for g in range(8)] + [("h1", g) for g in range(8)]
    assert s.readers(0, 0) == {"h0": (0, 1.0), "h1": (0, 1.0)}
    assert s.writers(0, 0) == {"h0": (0, 1.0)}
    net = Network(s.cl, ["h0", "h1", "h2", "h3"], s.cl.host)
    flows = net.handoff(s.gpus_of(0, 0), s.gpus_of(1, 0), 1e9, s.lanes_split)
    assert len(flows) == 16 and all(nb == 1e9 for nb, _, _ in flows)
    pairs = sorted({(out.split(".")[0], inn.split(".")[0]) for _, _, (out, inn) in flows})
    assert pairs == [("h0", "h2"), ("h1", "h3")]
    # the NIC nearest each GPU: GPUs 0-3 on nic0, 4-7 on nic1 (2 NICs per 8 GPUs), four shares on each
    per_nic = {}
    for _, _, (out, _) in flows:
        per_nic[out] = per_nic.get(out, 0) + 1
    assert per_nic == {f"h{h}.nic{j}.out": 4 for h in (0, 1) for j in (0, 1)}


def test_a_rank_of_several_gpus_hands_off_from_the_nics_nearest_its_own_gpus(tmp_path):
    """dp=2 over one host's 8 GPUs: rank 1 is GPUs 4-7, nearest the host's second NIC; its handoff leaves there
    (not from GPUs 1-4, the rank's index taken for a GPU's)."""
    from sacmodel.cluster.network import Network
    p = _c4(tmp_path, [{"id": "p", "host": "h0", "tp": 8, "dp": 2, "role": "prefill", "tiers": ["store"]},
                       {"id": "d", "host": "h1", "tp": 8, "dp": 2, "role": "decode", "tiers": ["store"]}])
    s = _setup(p, _decodes(tmp_path, 2, "t2.jsonl"), system="rdma", pd="1:1")
    assert s.gpus_of(0, 1) == [("h0", g) for g in range(4, 8)]
    net = Network(s.cl, ["h0", "h1"], s.cl.host)
    flows = net.handoff(s.gpus_of(0, 1), s.gpus_of(1, 1), 4e8, s.lanes_split)
    assert {res for _, _, res in flows} == {("h0.nic1.out", "h1.nic1.in")}
