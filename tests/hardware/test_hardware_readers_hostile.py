"""Scenario files, cluster host references and Hugging Face config.json through the reading layer and their
range checks: a FIFO or /dev/zero is refused by name (before: blocked or read until memory ran out), a
config.json with an infinite layer count, a negative indexer dimension or more dense layers than layers is a
one-line error, and one with a tiny top-k predicts quickly (before: a traceback, a negative step time,
negative weights per GPU, or a prediction that never finished)."""
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from sacmodel.hardware.models import CATALOG_CONFIGS, ModelError, from_hf_config, get_model
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
from sacmodel.hardware.topology import TopologyError

V32 = {k: v for k, v in CATALOG_CONFIGS["deepseek-v3.2"].items() if not k.startswith("_")}


def bounded(code: str, seconds: float = 90, memory: int = 2 << 30) -> subprocess.CompletedProcess:
    """Run ``code`` in a child Python with an address-space limit and a timeout (a regression that blocks or
    reads for ever fails the test instead of taking the machine)."""
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=seconds, preexec_fn=limit, env=env)


def test_special_scenario_files_and_cluster_hosts_are_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    cluster = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    for name, host in (("c_fifo.yaml", str(tmp_path / "fifo.yaml")), ("c_zero.yaml", "/dev/zero")):
        cluster["cluster"]["host"] = host
        (tmp_path / name).write_text(yaml.safe_dump(cluster))
    (tmp_path / "config.json").symlink_to("/dev/zero")
    r = bounded(f"""
        from pathlib import Path
        from sacmodel.hardware.scenarios import load_topology
        from sacmodel.hardware.models import get_model
        d = Path({str(tmp_path)!r})
        for fn, name in ((load_topology, "fifo.yaml"), (load_topology, "zero.yaml"), (load_topology, "c_fifo.yaml"),
                         (load_topology, "c_zero.yaml"), (get_model, "config.json")):
            try:
                fn(d / name)
                print("READ", name)
            except ValueError as exc:
                print(exc)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 5, lines
    assert "fifo.yaml: is a FIFO (named pipe), not a scenario file" in lines[0]
    assert "zero.yaml: is a character device, not a scenario file" in lines[1]
    assert "fifo.yaml: is a FIFO" in lines[2] and "/dev/zero: is a character device" in lines[3]
    assert "config.json: is a character device, not a model config" in lines[4]


def test_dangling_scenario_link_is_named(tmp_path):
    link = tmp_path / "mine.yaml"
    link.symlink_to(tmp_path / "moved.yaml")
    with pytest.raises(TopologyError, match=r"mine.yaml: a dangling symbolic link \(to .*moved.yaml"):
        load_topology(link)


@pytest.mark.parametrize("field,value,msg", [
    ("num_hidden_layers", math.inf, "'num_hidden_layers' must be a whole number"),      # was OverflowError
    ("num_hidden_layers", 10**400, "'num_hidden_layers' must be a whole number"),
    ("index_head_dim", -5, "'index_head_dim' must be a whole number in"),              # was a negative step
    ("first_k_dense_replace", 1000, "first_k_dense_replace 1000 is above num_hidden_layers 61"),
    ("hidden_size", "7168", "'hidden_size' must be a whole number"),
    ("index_topk", "nan", "'index_topk' must be a whole number"),                      # was int('nan')
    ("num_experts_per_tok", 300, "num_experts_per_tok 300 is above the 256 routed experts"),
    ("index_head_dim", 0, "needs a positive 'index_head_dim'"),
    ("v_head_dim", 0, "an MLA config"),
    ("num_hidden_layers", 61.5, "'num_hidden_layers' must be a whole number"),          # was truncated to 61
], ids=lambda x: str(x)[:20])
def test_config_fields_are_range_checked(field, value, msg):
    with pytest.raises(ModelError, match=msg):
        from_hf_config({**V32, field: value})


def test_config_json_file_errors_name_the_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(V32).replace('"num_hidden_layers": 61', '"num_hidden_layers": Infinity'))
    with pytest.raises(ModelError, match="config.json: not valid JSON .Infinity"):
        get_model(p)
    p.write_text(json.dumps({**V32, "first_k_dense_replace": 1000}))
    with pytest.raises(ModelError, match="config.json: first_k_dense_replace 1000"):
        get_model(str(p))
    assert from_hf_config({**V32, "kv_lora_rank": None}).kind == "mha"        # null is absent, as in HF files
    assert get_model("deepseek-v3.2").layers == 61


def test_a_tiny_index_topk_predicts_quickly(tmp_path):
    """index_topk 16 with the testbed's 4096-slot buffer (256 x the top-k) ran the exact access process at every
    decode age for minutes, then was refused; the access table now covers every buffer / top-k ratio, so it
    predicts in well under a minute, with a finite positive TBT, as do a short prompt and a tiny buffer."""
    (tmp_path / "config.json").write_text(json.dumps({**V32, "index_topk": 16}))
    scen = yaml.safe_load((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
    scen["model"] = str(tmp_path / "config.json")
    (tmp_path / "k16.yaml").write_text(yaml.safe_dump(scen))
    r = bounded(f"""
        import math, time
        from sacmodel import predict
        scen = {str(tmp_path / "k16.yaml")!r}
        t = time.perf_counter()
        for kw in (dict(context=8192, output=1024, concurrency=8, requests=8),
                   dict(context=300, output=4000, concurrency=1, requests=1),
                   dict(context=8192, output=64, concurrency=4, requests=4, device_buffer=128)):
            p = predict(scen, "cxl", **kw)
            print(p.feasible, math.isfinite(p.tbt_mean_ms) and p.tbt_mean_ms > 0)
        print(time.perf_counter() - t < 20)
    """, seconds=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["True True"] * 3 + ["True"], r.stdout


def test_a_cluster_host_named_longer_than_the_file_system_allows_is_a_clear_error(tmp_path):
    # (found by the long fuzz run: Path.exists raised ENAMETOOLONG out of the cluster loader)
    from sacmodel.hardware.scenarios import load_cluster
    cluster = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    cluster["cluster"]["host"] = "x" * 300 + ".yaml"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    with pytest.raises(TopologyError, match="cannot use as a scenario path"):
        load_cluster(tmp_path / "c.yaml")


@pytest.mark.parametrize("host", ["", "   ", "no-such-scenario"])
def test_a_bad_cluster_host_reference_names_the_cluster_file_and_field(tmp_path, host):
    # (found by the long fuzz run: host '' gave "not a scenario name or path: ''", naming neither)
    from sacmodel.hardware.scenarios import load_cluster
    cluster = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    cluster["cluster"]["host"] = host
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(cluster))
    with pytest.raises(TopologyError, match=r"mine\.yaml: cluster\.host: "):
        load_cluster(tmp_path / "mine.yaml")
