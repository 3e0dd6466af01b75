"""sensitivity --hardware covers every node and link of the topology (issue 22, item 3)."""
import copy

import pytest

from sacmodel.hardware.params import get_param, link_of, set_param
from sacmodel.hardware.scenarios import as_topology
from sacmodel.hardware.template import TEMPLATE
from sacmodel.hardware.topology import LINK_FIELDS, NODE_FIELDS
from sacmodel.planning.common import hardware_parameters
from sacmodel.planning.sensitivity import links_used, sensitivity_loaded

SPEEDS = ("bandwidth", "time", "flops", "count")     # the dimensions of a rate or a latency


def template(tmp_path, device_bw="22.5 GB/s"):
    p = tmp_path / "template.yaml"
    p.write_text(TEMPLATE.replace("22.5 GB/s", device_bw))
    return as_topology(str(p))


def covered_elements(names):
    """The nodes and directed links the parameter names reach ('gpu' stands for every GPU)."""
    out = set()
    for n in names:
        if n.startswith("node:gpu."):
            out.add("gpu")
        elif n.startswith("node@"):
            out.add(n[5:].rpartition(".")[0])
        elif n.startswith("link@"):
            u, _, v = n[5:].rpartition(".")[0].partition("->")
            out.add((u, v))
    return out


@pytest.mark.parametrize("scenario", ["sac-testbed", "h200-cxl-large", "template"])
def test_every_node_and_link_with_a_rate_or_latency_is_a_parameter(scenario, tmp_path):
    t = template(tmp_path) if scenario == "template" else as_topology(scenario)
    names = hardware_parameters(t)
    want = set()
    for n, d in t.graph.nodes(data=True):
        if any(dim in SPEEDS and d.get(f) for f, (dim, _) in NODE_FIELDS[d["kind"]].items()):
            want.add("gpu" if d["kind"] == "gpu" else n)
    for u, v, d in t.graph.edges(data=True):
        if any(d.get(f) for f in ("bandwidth", "per_flow_bandwidth", "latency")):
            want.add((u, v))
    assert covered_elements(names) == want
    # each element's every nonzero rate and latency field, no other
    for n, d in t.graph.nodes(data=True):
        if d["kind"] != "gpu":
            fields = {f for f, (dim, _) in NODE_FIELDS[d["kind"]].items() if dim in SPEEDS and d.get(f)}
            assert {x.rpartition(".")[2] for x in names if x.startswith(f"node@{n}.")} == fields
    for u, v, d in t.graph.edges(data=True):
        fields = {f for f in ("bandwidth", "per_flow_bandwidth", "latency") if f in LINK_FIELDS and d.get(f)}
        assert {x.rpartition(".")[2] for x in names if x.startswith(f"link@{u}->{v}.")} == fields


def test_one_element_is_read_and_set_alone(tmp_path):
    t = copy.deepcopy(template(tmp_path))
    assert get_param(t, "link@cxl_adapter->rc.bandwidth") == 46e9          # the way back of the rc -> adapter link
    assert get_param(t, "link@rc->cxl_adapter.bandwidth") == 33e9
    set_param(t, "link@cxl_adapter->rc.bandwidth", 50e9)
    assert t.graph.edges["cxl_adapter", "rc"]["bandwidth"] == 50e9 and t.graph.edges["rc", "cxl_adapter"]["bandwidth"] == 33e9
    set_param(t, "node@cxl_dev[1].bandwidth", 30e9)
    assert t.node("cxl_dev[1]")["bandwidth"] == 30e9 and t.node("cxl_dev[0]")["bandwidth"] == 22.5e9
    assert link_of(t, "link@gpu[3]->rc.latency") == ("gpu[3]", "rc")


def test_loaded_sensitivity_names_the_adapter_link(tmp_path):
    """At 36 GB/s per device the template's single adapter link binds the swap-in; the NIC's links are on no
    route of the cxl system, so their elasticity is 0 without a prediction."""
    t = template(tmp_path, "36 GB/s")
    wl = dict(context=131072, output=256, concurrency=64, draws=4, prompts="shared")    # the benchmark
    used = links_used(t, "cxl", wl)
    assert ("cxl_adapter", "rc") in used and ("nic[0]", "remote_pool") not in used
    rows = sensitivity_loaded(t, "cxl", "tbt_mean_ms", rel=0.05, **wl,
                              params=["link@cxl_adapter->rc.bandwidth", "node@cxl_dev[0].bandwidth",
                                      "link@nic[0]->remote_pool.bandwidth"])
    el = {n: (e, m) for n, e, _, m in rows}
    assert el["link@cxl_adapter->rc.bandwidth"][0] < -0.05
    assert abs(el["node@cxl_dev[0].bandwidth"][0]) < 0.01
    assert el["link@nic[0]->remote_pool.bandwidth"] == (0.0, "loaded: on no route the prediction uses")
