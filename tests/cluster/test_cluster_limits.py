"""The cluster layer's limits and edge checks, from a file as from the Python API: host, instance and tier counts
bounded (before: 10^9 hosts were built one by one), a malformed ``attached`` or an ignored ``calibration:``
refused, ``replay``/``prefix_hit_rate``/plans bounded in instances, bytes never counted as tokens, a run JSON
replayed through the run schema, and an empty router list refused."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

import sacmodel
from sacmodel.cli import main
from sacmodel.cluster.hitrate import hit_rates
from sacmodel.cluster.plan import cluster_sweep, cost_per_hour
from sacmodel.data.records import DataError
from sacmodel.hardware.cluster import kv_bytes_per_token
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_cluster, load_topology
from sacmodel.hardware.topology import TopologyError
from sacmodel.hardware.units import UnitError

ROWS = [(0, 3000, 4, [1, 2, 3, 4, 5, 6]), (0.05, 5000, 6, [1, 2, 3, 7, 8, 9, 10, 11, 12, 13]),
        (0.09, 1000, 2, [1, 2])]


def trace(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": int(t * 1000), "input_length": n, "output_length": o,
                                     "hash_ids": h}) + "\n" for t, n, o, h in ROWS))
    return p


def cluster_file(tmp_path, mutate, name="c.yaml"):
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    mutate(data)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def bounded(code: str, seconds: float = 120, memory: int = 2 << 30) -> subprocess.CompletedProcess:
    """``code`` in a child Python with an address-space limit and a timeout: before the limits, these cases
    built 10^9 hosts, caches or instance counts and would take the machine with them."""
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=seconds, preexec_fn=limit, env=env)


def test_huge_counts_are_refused_at_once(tmp_path):
    hosts = cluster_file(tmp_path, lambda d: d["cluster"]["hosts"][0].update(count=10**9), "hosts.yaml")
    insts = cluster_file(tmp_path, lambda d: d["cluster"]["instances"][0].update(count=10**8), "insts.yaml")
    r = bounded(f"""
        import sacmodel
        from sacmodel.cluster.plan import parse_axis
        t = {str(trace(tmp_path))!r}
        for f in (lambda: sacmodel.load_cluster({str(hosts)!r}), lambda: sacmodel.load_cluster({str(insts)!r}),
                  lambda: sacmodel.replay("sac-testbed", "dram", t, instances=10**9),
                  lambda: sacmodel.prefix_hit_rate(t, capacity_tokens="1M", instances=10**9),
                  lambda: parse_axis("instances", "1:1000000000")):
            try:
                f()
                print("RAN")
            except ValueError as exc:
                print(exc)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 5, lines
    assert "hosts.yaml: cluster.hosts[0].count: 1,000,000,000 is above the limit of 4,096 hosts" in lines[0]
    assert "insts.yaml: cluster.instances[0].count: 100,000,000 is above the limit of 4,096 instances" in lines[1]
    assert "instances must be a whole number in 1..4,096" in lines[2] and "1000000000" in lines[2]
    assert "instances must be a whole number in 1..4,096" in lines[3]
    assert "instances 1:1000000000: need 1 <= LO <= HI <= 4,096" in lines[4]


def test_total_instances_and_tiers_are_bounded(tmp_path):
    def many(d):      # 2 x 3000 instances, each group within the per-entry limit
        c = d["cluster"]
        c["hosts"] = [{"id": "h", "count": 3000}]
        c["instances"] = [{"id": "a", "count": 3000, "host": "h", "tiers": ["hbm"]},
                          {"id": "b", "count": 3000, "host": "h", "tiers": ["hbm"]}]
    with pytest.raises(TopologyError, match=r"instances\[1\]: more than 4,096 instances in the cluster"):
        load_topology(cluster_file(tmp_path, many))
    tiers = lambda d: d["cluster"]["tiers"].update(  # noqa: E731
        {f"t{i}": {"kind": "host", "capacity": {"value": "1M", "source": "x"}} for i in range(70)})
    with pytest.raises(TopologyError, match="cluster.tiers: more than 64 tiers"):
        load_topology(cluster_file(tmp_path, tiers))


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d["cluster"]["tiers"]["cxl"].update(attached=5), r"cluster.tiers.cxl.attached: expected a list"),
    (lambda d: d.update(calibration={"t_kernel": {"value": "1 us", "source": "x"}}), r"c.yaml: calibration: a "
     r"cluster file that names its host scenario \(cluster.host\) takes them from there"),
    (lambda d: d.update(serving={"dp": {"value": 4, "source": "x"}}), r"c.yaml: serving: a cluster file"),
    (lambda d: d["cluster"].update(instances=5), r"cluster.instances: expected a list"),
    (lambda d: d["cluster"].update(hosts={"h": 1}), r"cluster.hosts: expected a list"),
    (lambda d: d["cluster"]["instances"][0].update(tiers=[["hbm"]]), r"unknown tier \['hbm'\]"),
    (lambda d: d["cluster"].update(host=5), r"cluster.host: expected a scenario name or path"),
], ids=["attached", "calibration", "serving", "instances", "hosts", "tier-list", "host"])
def test_malformed_or_ignored_sections_are_refused(tmp_path, mutate, msg):
    with pytest.raises(TopologyError, match=msg):
        load_topology(cluster_file(tmp_path, mutate))


def test_an_inline_hosts_errors_name_the_cluster_file(tmp_path):
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
    data.update(schema_version=2, name="", cluster={
        "hosts": [{"id": "h", "count": 2}], "instances": [{"id": "i", "count": 2, "host": "h", "tiers": ["hbm"]}],
        "tiers": {"hbm": {"kind": "hbm", "capacity": {"value": "200000 token", "source": "x"}}}})
    p = tmp_path / "inline.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError, match=r"inline.yaml: name: String should have at least 1 character"):
        load_topology(p)                    # was '<scenario>: name: ...'


def test_bytes_are_not_tokens_without_a_model(tmp_path):
    t = trace(tmp_path)
    with pytest.raises(UnitError, match="'1 GB' is a size in bytes; give tokens"):
        sacmodel.prefix_hit_rate(t, capacity_tokens="1 GB")          # was 10^9 tokens
    bpt = kv_bytes_per_token(load_cluster("sac-cluster-4x").host)
    a = hit_rates(t, ["1 GB"], bytes_per_token=bpt)[0]
    b = hit_rates(t, [1e9 / bpt])[0]
    assert a["capacity_tokens"] == pytest.approx(1e9 / bpt) and a["hit_rate"] == b["hit_rate"]
    assert main(["hitrate", str(t), "--capacity", "1 GB", "--json"]) == 2


def test_a_plans_pool_in_bytes_is_priced_in_tokens(tmp_path):
    row = cluster_sweep("sac-cluster-4x", "cxl", trace(tmp_path), {"pool": ["2 TB"]}, workers=1)[0]
    bpt = kv_bytes_per_token(load_cluster("sac-cluster-4x").host)
    want = cost_per_hour("sac-cluster-4x", "cxl", 4, 2e12 / bpt)["total"]
    assert row["cost_usd_per_hour"] == pytest.approx(want)       # was 2e12 "tokens": 96,000 CXL devices


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d["round2"]["per_request"][0].update(prompt_len=-5), r"round2.per_request\[0\].prompt_len"),
    (lambda d: d["config"].update(max_concurrency=-1), r"config.max_concurrency"),
    (lambda d: d["round2"]["per_request"][1].update(prompt_len=float("inf")), r"not valid JSON .Infinity"),
    (lambda d: d["round2"]["per_request"][0].update(output_len="32"), r"round2.per_request\[0\].output_len"),
    (lambda d: d.pop("round2"), r"not a testbed run file \(no 'round2'\)"),
], ids=["negative-prompt", "negative-concurrency", "infinity", "text", "no-round2"])
def test_a_run_file_is_replayed_through_the_run_schema(tmp_path, capsys, mutate, msg):
    run = {"config": {"target_input_tokens": 8192, "max_concurrency": 2, "output_tokens": 8},
           "round2": {"metrics": {"num_requests": 2, "num_success": 2},
                      "per_request": [{"success": True, "prompt_len": 8192, "output_len": 8}] * 2}}
    run = json.loads(json.dumps(run))
    mutate(run)
    p = tmp_path / "run_dram.json"
    p.write_text(json.dumps(run))
    with pytest.raises(DataError, match=f"run_dram.json: .*{msg}" if "Infinity" not in msg else msg):
        sacmodel.replay("sac-testbed", "dram", p)
    assert main(["replay", str(p), "--systems", "dram"]) == 2
    assert "run_dram.json" in capsys.readouterr().err


def test_an_empty_router_or_system_list_is_refused(tmp_path, capsys):
    t = str(trace(tmp_path))
    assert main(["replay", t, "--router", ",", "--json"]) == 2              # printed {} and exit 0
    assert "--router: give at least one of round_robin" in capsys.readouterr().err
    assert main(["replay", t, "--systems", " , ", "--json"]) == 2
    assert "--systems: give at least one of" in capsys.readouterr().err
    assert main(["hitrate", t, "--router", ",", "--json"]) == 2
    with pytest.raises(ValueError, match="unknown router ','"):
        sacmodel.replay("sac-testbed", "dram", t, router=",")
    with pytest.raises(ValueError, match="tiers must be a tier name or kind"):
        sacmodel.replay("sac-testbed", "dram", t, tiers=0)             # was TypeError
