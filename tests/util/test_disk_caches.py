"""What the on-disk cache keeps (issue 34: work that does not change between runs, read back instead of redone)
is what building it gives: the unloaded closed forms, the parsed server logs and their step observations."""
import numpy as np
import sympy as sp
from measured_data import needs_shared

from sacmodel.data import server_logs
from sacmodel.data.runs import load_runs
from sacmodel.fit import calibrate
from sacmodel.planning import closed_forms as cf
from sacmodel.serving.costs import SYMBOLS


def test_a_closed_form_read_back_is_the_one_built_and_registers_its_units(tmp_path, monkeypatch):
    """Every metric of a system (its chunked cold prefill a Sum) reads back node for node as built, although
    the reading skips sympy's evaluation (cf._load_forms); one entry holds the five."""
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(tmp_path))
    cf._cached.cache_clear()
    builds = []
    build_all = cf._build_all
    monkeypatch.setattr(cf, "_build_all", lambda *a: builds.append(build_all(*a)) or builds[-1])
    built = cf.unloaded_expression("rdma-topk", "bytes_per_step")
    assert len(list((tmp_path / "closed-form").glob("*.pickle"))) == 1 and len(builds) == 1
    assert not list((tmp_path / "closed-form").glob("*.lock"))
    cf._cached.cache_clear()
    fresh = builds[0]
    saved = {s.name: SYMBOLS.pop(s.name) for e in fresh.values() for s in e.free_symbols if s.name in SYMBOLS}
    try:
        read = cf.unloaded_expression("rdma-topk", "bytes_per_step", True, "mla")
        assert read == built == fresh["bytes_per_step"]
        for metric, e in fresh.items():
            back = cf.unloaded_expression("rdma-topk", metric)
            assert sp.srepr(back) == sp.srepr(e) and back == e and hash(back) == hash(e), metric
        assert fresh["ttft_cold"].has(sp.Sum) and len(builds) == 1       # every metric read back, none rebuilt
        assert {s.name: SYMBOLS[s.name] for s in read.free_symbols} == \
            {s.name: saved[s.name] for s in read.free_symbols}     # units and meanings back
    finally:
        SYMBOLS.update({k: v for k, v in saved.items() if k not in SYMBOLS})
        cf._cached.cache_clear()


def test_one_cache_entry_whatever_the_spelling_of_the_defaults():
    # the run's own cache folder (tests/conftest.py): the forms are built once per run, whichever test needs them
    cf._cached.cache_clear()
    try:
        a = cf.unloaded_expression("rdma-topk", "bytes_per_step")
        assert cf.unloaded_expression("rdma-topk", "bytes_per_step", True, "mla") is a
        assert cf._cached.cache_info().currsize == 1
    finally:
        cf._cached.cache_clear()


@needs_shared
def test_server_logs_and_step_observations_read_back_equal_the_parsed(tmp_path, monkeypatch):
    runs = [r for r in load_runs() if r.server_log and r.output_min == r.output_max and not r.failed
            and r.prefix_cached][:2]
    assert runs
    monkeypatch.setattr(server_logs, "_LOG_CACHE", {})
    monkeypatch.setenv("SACMODEL_CACHE_DIR", "off")
    fresh = calibrate.step_observations(runs)
    logs = [server_logs.load_server_log(r.server_log) for r in runs]
    monkeypatch.setenv("SACMODEL_CACHE_DIR", str(tmp_path))
    for _ in range(2):          # the first pass stores, the second reads back
        monkeypatch.setattr(server_logs, "_LOG_CACHE", {})
        got = calibrate.step_observations(runs)
        assert [(o.run, o.b, o.age, o.step_s, o.weight, o.distinct) for o in got] == \
            [(o.run, o.b, o.age, o.step_s, o.weight, o.distinct) for o in fresh]
        for r, log in zip(runs, logs):
            back = server_logs.load_server_log(r.server_log)
            assert all(np.array_equal(getattr(back, k), getattr(log, k)) for k in ("prefill", "decode", "arrivals"))
            assert back.settings == log.settings and back.path == log.path
    assert list((tmp_path / "server-log").glob("*.pickle")) and list((tmp_path / "step-observations").glob("*.pickle"))
