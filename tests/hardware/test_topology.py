import math

import pytest
import yaml

from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
from sacmodel.hardware.topology import TopologyError, max_min_share

BASE = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())


def write(tmp_path, data, name="s.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return p


def test_testbed_graph_and_routes():
    t = load_topology("sac-testbed")
    assert len(t.gpus) == 8 and len(t.nodes_of("cxl_device")) == 2 and len(t.nodes_of("rdma_nic")) == 2
    r = t.route("cxl_dev[0]", "gpu_s0[0]")
    assert r == ["cxl_dev[0]", "cxl_switch", "cxl_adapter0", "rc0", "gpu_s0[0]"]
    assert t.bottleneck(r) == pytest.approx(22.5e9)           # the device
    lat = sum(t.graph.edges[u, v]["latency"] for u, v in zip(r, r[1:])) + sum(
        t.graph.nodes[n].get("latency", 0) for n in r[1:])
    assert t.route_latency(r) == pytest.approx(lat)
    # the CXL switch never carries host-to-host traffic: socket 1 DRAM reaches socket 0 over UPI
    assert "cxl_switch" not in t.route("dram1", "gpu_s0[0]")
    assert t.pool_for(5, "dram") == "dram1" and t.pool_for(5, "cxl") == "cxl_dev[1]"
    assert t.pool_for(5, "cxl", n_devices=1) == "cxl_dev[0]"


def test_max_min_share_cxl_devices():
    t = load_topology("sac-testbed")
    two = max_min_share(t, [(t.pool_for(r, "cxl"), g) for r, g in enumerate(t.gpus)])
    one = max_min_share(t, [(t.pool_for(r, "cxl", 1), g) for r, g in enumerate(t.gpus)])
    assert two == pytest.approx([22.5e9 / 4] * 8) and one == pytest.approx([22.5e9 / 8] * 8)
    solo = max_min_share(t, [("cxl_dev[0]", "gpu_s0[0]")])
    assert solo == pytest.approx([22.5e9])
    capped = max_min_share(t, [("cxl_dev[0]", "gpu_s0[0]", 1e9), ("cxl_dev[0]", "gpu_s0[1]")])
    assert capped == pytest.approx([1e9, 21.5e9])


def mutate(fn):
    d = yaml.safe_load(yaml.safe_dump(BASE))
    fn(d)
    return d


@pytest.mark.parametrize("change,msg", [
    (lambda d: d["nodes"][0].update(kind="tpu"), "unknown kind 'tpu'"),
    (lambda d: d["nodes"][0].pop("hbm_bandwidth"), "missing field 'hbm_bandwidth'"),
    (lambda d: d["links"][0]["bandwidth"].update(value="-5 GB/s"), "bandwidth: must be positive"),
    (lambda d: d["links"][0]["bandwidth"].update(value="0 GB/s"), "must be positive"),
    (lambda d: d["nodes"][0]["hbm_capacity"].update(value="96 GB/s"), "not a bytes"),
    (lambda d: d["nodes"][0]["hbm_capacity"].pop("source"), "source"),
    (lambda d: d.update(schema_version=99), "schema_version 99"),
    (lambda d: d["links"].append({"from": "gpu_s0", "to": "nowhere", "protocol": "pcie5",
                                  "bandwidth": {"value": "1 GB/s", "source": "x"}}), "unknown node 'nowhere'"),
])
def test_schema_errors(tmp_path, change, msg):
    p = write(tmp_path, mutate(change))
    with pytest.raises(TopologyError, match=msg) as ei:
        load_topology(p)
    assert str(p) in str(ei.value)


def test_gpu_without_route_to_pool(tmp_path):
    def cut(d):  # socket 1 loses its CXL adapter link: its GPUs cannot reach the CXL pool
        d["links"] = [lk for lk in d["links"] if not (lk["from"] == "rc1" and lk["to"] == "cxl_adapter1")]
        d["links"] = [lk for lk in d["links"] if lk.get("protocol") != "upi"]
    with pytest.raises(TopologyError, match="no route to cxl pool"):
        load_topology(write(tmp_path, mutate(cut)))


def test_malformed_yaml_names_line(tmp_path):
    p = write(tmp_path, "schema_version: 1\nname: x\nnodes: [\n  - {id: a\n")
    with pytest.raises(TopologyError, match=r"line \d+"):
        load_topology(p)


def test_key_given_twice_is_refused_with_both_lines(tmp_path):
    """A second `serving:` block (or a second `tp:`) added by hand used to replace the first silently: the
    scenario lost every serving setting and the error blamed a missing 'dp'. A merge key may still be
    overridden."""
    text = (TOPOLOGY_DIR / "sac-testbed.yaml").read_text()
    p = write(tmp_path, text + "serving: {}\n")
    last = text.count("\n") + 1
    first = text.splitlines().index("serving:") + 1
    with pytest.raises(TopologyError, match=rf"line {last}, column 1: .*'serving' given twice, first on line "
                                            rf"{first}"):
        load_topology(p)
    from sacmodel.hardware.schema import read_yaml
    assert read_yaml(write(tmp_path, "b: &b {x: 1}\nc:\n  <<: *b\n  x: 2\n", "m.yaml"))["c"] == {"x": 2}
    with pytest.raises(TopologyError, match="'x' given twice"):
        read_yaml(write(tmp_path, "a: {x: 1, x: 2}\n", "f.yaml"))


def test_yaml_is_safe_loaded(tmp_path):
    p = write(tmp_path, "schema_version: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(TopologyError, match="malformed YAML"):
        load_topology(p)


def test_unknown_scenario():
    with pytest.raises(TopologyError, match="unknown scenario"):
        load_topology("no-such-scenario")


def test_what_if_scenario_loads():
    t = load_topology("h200-cxl-large")
    assert len(t.pools["cxl"]) == 4 and t.node(t.gpus[0])["hbm_capacity"] == 141e9
    assert t.node("nic[0]")["rate"] == pytest.approx(50e9) and math.isfinite(t.param("t_graph_kernel"))
    assert t.param("weight_bytes_per_param") < 1.01 and t.serving["weights"].raw == "fp8"     # no longer AWQ
