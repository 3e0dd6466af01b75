"""The fast start-up path: generated step code, the scenario cache, the lazily built graph, and the scipy-free
numerics of the access model. Each must give the same numbers as the slow path it replaces."""
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
from sacmodel.serving import access, step
from sacmodel.util import cache

HEAVY = ("sympy", "pint", "scipy", "networkx", "pydantic", "yaml")


def test_generated_step_code_is_current():
    assert step._generated() is not None, (
        "sacmodel/serving/step_generated.py was made from other expressions than sacmodel/serving/step.py and costs.py now "
        "build: run `python -m sacmodel.serving.step`")


@pytest.mark.parametrize("group", list(step.BUILDERS))
def test_generated_step_code_equals_the_lambdified_expressions(group):
    from sacmodel.serving.config import resolve, static_values
    gen, ref = step.compiled(group), step.Compiled.lambdified(group)
    assert gen.names == ref.names and set(gen.funcs) == set(ref.funcs)
    rng = np.random.default_rng(7)
    fixed = static_values(resolve("sac-testbed", "cxl"))
    for _ in range(50):       # the configuration's constants, the step's variables drawn over their range
        args = [fixed[n] if n in fixed else float(rng.uniform(1.0, 140_000.0)) for n in gen.names]
        for term in gen.funcs:
            assert gen.funcs[term](*args) == pytest.approx(ref.funcs[term](*args), rel=1e-12)
        assert gen.total(*args) == pytest.approx(ref.total(*args), rel=1e-12)


def test_stale_generated_code_is_ignored(monkeypatch):
    monkeypatch.setattr(step, "source_hash", lambda: "not the hash of these sources")
    step._generated.cache_clear()
    try:
        assert step._generated() is None
    finally:
        monkeypatch.undo()
        step._generated.cache_clear()


def test_normal_cdf_and_inverse_match_scipy():
    special = pytest.importorskip("scipy.special")
    x = np.linspace(-12.0, 12.0, 2001)
    assert np.allclose(access.ndtr(x), special.ndtr(x), rtol=1e-13, atol=0)
    assert access.ndtr(0.3) == pytest.approx(float(special.ndtr(0.3)), rel=1e-14)
    p = np.concatenate([np.logspace(-14, -1, 60), 1 - np.logspace(-12, -1, 60)])
    assert np.allclose([access.ndtri(q) for q in p], special.ndtri(p), rtol=1e-12, atol=1e-12)


def test_grid_interpolator_matches_scipy_including_nan_cells_and_nodes():
    interpolate = pytest.importorskip("scipy.interpolate")
    rng = np.random.default_rng(3)
    axes = tuple(np.sort(rng.random(n)) for n in (6, 5, 4))
    values = rng.random((6, 5, 4))
    values[2, 3, 1] = values[5, 4, 3] = np.nan
    pts = np.stack([rng.uniform(a[0], a[-1], 4000) for a in axes], axis=-1)
    for d, a in enumerate(axes):                # points exactly on grid nodes, edges included
        pts[d * 100:(d + 1) * 100, d] = rng.choice(a, 100)
    ours = access.GridInterpolator(axes, values)(pts)
    ref = interpolate.RegularGridInterpolator(axes, values, bounds_error=False, fill_value=None)(pts)
    assert np.array_equal(np.isnan(ours), np.isnan(ref))
    assert np.allclose(ours[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-14, atol=1e-15)


# ---- the scenario cache --------------------------------------------------------------------------------
def _scenario_copy(tmp_path: Path) -> Path:
    p = tmp_path / "mine.yaml"
    p.write_text((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
    return p


def _same(a, b):
    assert a.name == b.name and a.gpus == b.gpus and a.pools == b.pools and a.path == b.path
    for table in ("serving", "calibration"):     # text settings have a NaN value and their text in ``raw``
        ta, tb = getattr(a, table), getattr(b, table)
        assert {k: (v.raw, v.source) for k, v in ta.items()} == {k: (v.raw, v.source) for k, v in tb.items()}
        assert all(v.value == tb[k].value or (math.isnan(v.value) and math.isnan(tb[k].value)) for k, v in ta.items())
    assert dict(a.graph.nodes(data=True)) == dict(b.graph.nodes(data=True))
    assert sorted(a.graph.edges(data=True)) == sorted(b.graph.edges(data=True))


def test_a_cached_scenario_equals_a_validated_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(tmp_path / "cache"))
    p = _scenario_copy(tmp_path)
    first = load_topology(p)
    entries = list((tmp_path / "cache" / "scenario").glob("*.pickle"))
    assert len(entries) == 1
    second = load_topology(p)
    assert "graph" not in second.__dict__             # not built: the cached copy answers lookups without it
    gpu = second.gpus[3]
    for pool in ("cxl", "dram"):
        src = second.pool_for(3, pool)
        assert second.route(src, gpu) == first.route(src, gpu)
        assert second.round_trip_latency(second.route(src, gpu)) == first.round_trip_latency(first.route(src, gpu))
    assert "graph" not in second.__dict__
    _same(first, second)                               # builds the graph: same nodes and links


def test_an_edited_scenario_is_validated_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(tmp_path / "cache"))
    p = _scenario_copy(tmp_path)
    load_topology(p)
    text = p.read_text()
    assert "cacheline:" in text
    p.write_text(text.replace("name: sac-testbed", "name: sac-testbed-edited", 1))
    assert load_topology(p).name == "sac-testbed-edited"
    p.write_text(text.replace("name: sac-testbed", "name: [not, a, name]", 1))
    with pytest.raises(Exception, match="name"):
        load_topology(p)


def test_a_corrupt_or_unwritable_cache_never_breaks_loading(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(d))
    p = _scenario_copy(tmp_path)
    ref = load_topology(p)
    for f in (d / "scenario").glob("*.pickle"):
        f.write_bytes(b"not a pickle")
    _same(load_topology(p), ref)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(blocker / "below-a-file"))
    _same(load_topology(p), ref)
    monkeypatch.setenv("SACMODEL_CACHE_DIR", "off")
    assert cache.folder() is None
    _same(load_topology(p), ref)


def test_a_topology_pickles_with_or_without_its_graph(tmp_path):
    t = load_topology("sac-testbed")
    t.precompute_routes()
    u = pickle.loads(pickle.dumps(t))
    assert "graph" not in u.__dict__
    v = pickle.loads(pickle.dumps(u))                 # pickled again before the graph is built
    u.graph.nodes[u.gpus[0]]["hbm_bandwidth"] = 1.0    # built; a change lands in the graph the lookups use
    assert u.node(u.gpus[0])["hbm_bandwidth"] == 1.0
    _same(v, t)


def test_a_warm_prediction_imports_none_of_the_heavy_libraries(tmp_path):
    env = dict(os.environ, SACMODEL_CACHE_DIR=str(tmp_path / "cache"))
    code = ("import sys, sacmodel; r = sacmodel.predict('sac-testbed', '{s}', context=32768, output=64, "
            "concurrency=8, requests=16); assert math.isfinite(r.tbt_mean_ms); "
            f"print(sorted(m for m in {HEAVY!r} if type(sys.modules.get(m)).__name__ == 'module'))")
    for system in ("cxl", "rdma"):
        c = "import math; " + code.replace("{s}", system)
        first = subprocess.run([sys.executable, "-c", c], capture_output=True, text=True, env=env)
        assert first.returncode == 0, first.stderr
        warm = subprocess.run([sys.executable, "-c", c], capture_output=True, text=True, env=env)
        assert warm.returncode == 0 and warm.stdout.strip() == "[]", warm.stdout + warm.stderr


def test_percentile_equals_numpys():
    from sacmodel.serving.predict import percentile
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 7, 64, 511, 512):
        x = rng.lognormal(size=n) * 1000.0
        for q in (0, 1, 10, 50, 90, 99, 99.9, 100):
            assert percentile(x, q) == pytest.approx(float(np.percentile(x, q)), rel=1e-12)


def test_a_cluster_file_is_validated_again_when_its_host_scenario_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(tmp_path / "cache"))
    host = _scenario_copy(tmp_path)
    cluster_text = (TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text()
    import re
    m = re.search(r"^(\s*host:\s*)(\S+)\s*$", cluster_text, re.M)
    assert m, "the built-in cluster names its host scenario"
    clus = tmp_path / "cluster.yaml"
    clus.write_text(cluster_text[:m.start(2)] + host.name + cluster_text[m.end(2):])
    first = load_topology(clus)
    assert first.cluster is not None and first.gpus
    assert load_topology(clus).param("t_hs") == first.param("t_hs")              # from the cache
    text = host.read_text()
    old = re.search(r"t_hs: \{value: ([0-9.]+) ms", text)
    host.write_text(text.replace(old.group(0), "t_hs: {value: 0.5 ms", 1))
    assert load_topology(clus).param("t_hs") == pytest.approx(0.5e-3)             # the host changed


def test_the_cache_stays_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "MAX_ENTRIES", 8)
    for i in range(20):
        cache.store("demo", cache.key(str(i)), i)
        os.utime(cache._file("demo", cache.key(str(i))), (i, i))     # distinct ages, oldest first
    left = [v for v in (cache.load("demo", cache.key(str(i))) for i in range(20)) if v is not None]
    assert 6 <= len(left) <= 8 and left[-1] == 19 and 0 not in left
