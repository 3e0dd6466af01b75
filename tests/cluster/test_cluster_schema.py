import math

import pytest
import yaml

import sacmodel
from sacmodel.hardware.cluster import kv_bytes_per_token, parse_capacity
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
from sacmodel.hardware.topology import TopologyError
from sacmodel.hardware.units import UnitError


def test_builtin_cluster_and_version_1_files_load():
    c = sacmodel.load_cluster("sac-cluster-4x")
    assert c.hosts == ["h0", "h1", "h2", "h3"] and [i.host for i in c.instances] == c.hosts
    assert c.tiers["cxl"].shared and c.tiers["cxl"].attached == tuple(c.hosts) and not c.tiers["hbm"].shared
    # 2 TB of KV at 61 x (1152 + 132) B per token: the testbed's BF16 KV entries (server logs) + indexer keys
    assert kv_bytes_per_token(c.host) == 61 * (1152 + 132)
    assert c.tiers["cxl"].capacity_tokens == pytest.approx(2e12 / (61 * 1284))
    assert c.tiers["hbm"].capacity_tokens == 8 * 200000          # --max-total-tokens per rank, 8 ranks
    assert c.tiers["store"].watermark == 0.90 and c.rdma.nics == 2
    assert c.tiers["store"].params["lease"] == 10.0 and c.tiers["host"].params["inclusive"] is True
    v1 = load_topology("sac-testbed")
    assert v1.cluster is None and sacmodel.load_cluster("sac-testbed").implicit


def cluster_yaml(tmp_path, mutate):
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    mutate(data["cluster"])
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize("mutate,msg", [
    (lambda c: c["instances"][0].update(tiers=["cxl"]) or c["tiers"]["cxl"].update(attached=[]),
     "instance 'node0' on host 'h0' reaches no KV tier"),
    (lambda c: c["instances"][0].update(tiers=["nvme"]), "unknown tier 'nvme'"),
    (lambda c: c["tiers"]["host"]["capacity"].update(value="3 GB/s"), "cluster.tiers.host.capacity: '3 GB/s'"),
    (lambda c: c["tiers"]["host"]["capacity"].pop("source"), "cluster.tiers.host.capacity"),
    (lambda c: c["tiers"]["cxl"].update(kind="optane"), "unknown tier kind 'optane'"),
    (lambda c: c["instances"][0].update(role="both-ish"), "unknown role"),
    (lambda c: c["network"].pop("rdma"), "network.rdma"),
    (lambda c: c["tiers"]["store"]["watermark"].update(value=1.5), "watermark: must be in"),
    (lambda c: c["tiers"]["cxl"].update(inclusive=True), "cxl.inclusive: true or false, for a host tier"),
    (lambda c: c["tiers"]["store"].update(segments="nvme"), "store.segments: 'hosts' or 'dedicated'"),
    (lambda c: c["tiers"]["store"].update(lease={"value": "3 GB", "source": "x"}), "store.lease"),
])
def test_bad_cluster_files_name_the_field(tmp_path, mutate, msg):
    with pytest.raises(TopologyError, match=msg.replace("(", r"\(").replace(".", r"\.")):
        load_topology(cluster_yaml(tmp_path, mutate))


def test_capacity_units():
    assert parse_capacity("3M", "f", 1.0) == 3 * 1024 ** 2
    assert parse_capacity("inf", "f", 1.0) == math.inf
    assert parse_capacity("1 GB", "f", 1000.0) == pytest.approx(1e6)
    assert parse_capacity("200000 token", "f", 1.0) == 200000
    with pytest.raises(UnitError, match="cache: '10 ms' is not a capacity"):
        parse_capacity("10 ms", "cache", 1.0)


def test_an_inclusive_host_tier_adds_only_its_surplus():
    from sacmodel.cluster.caches import _inclusive
    assert _inclusive([4.0, 10.0], [True, True]) == [4.0, 6.0]       # 10 blocks of host DRAM mirror the 4 of HBM
    assert _inclusive([4.0, 10.0], [True, False]) == [4.0, 10.0]     # write-back: what HBM evicted
    assert _inclusive([4.0, 3.0], [True, True]) == [4.0, 1.0]
