"""The suite's two commands (README, "Tests"):

    python3 -m pytest              the checks: in parallel (pytest-xdist, ``-n auto``), hypothesis's "checks"
                                   profile, the fuzz suite at SACMODEL_FUZZ_EXAMPLES (20) per target
    python3 -m pytest -m long      the campaigns: tests marked ``long``, the fuzz suite at 2,000 examples per
                                   target (SACMODEL_FUZZ_LONG_EXAMPLES) and every hypothesis test under the
                                   "long" profile (ten times the default run's examples)

``-m "not long"`` is in addopts (pyproject.toml); a later ``-m`` on the command line replaces it.
"""
import os

# One BLAS thread per process, set before numpy loads: the suite already runs a process per core (-n auto), and
# OpenBLAS's extra threads spin-wait for work on the shared cores (the access reference's matrix-vector products
# took 6x the CPU seconds with them). Inherited by the xdist workers and the CLI subprocesses.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from measured_data import SHARED, needs_shared  # noqa: F401, E402  (tests import them from measured_data)

# Hypothesis tests that give their own ``max_examples`` keep it in the default run and get LONG_FACTOR times it
# under the "long" profile; the others take the profile's number.
LONG_FACTOR = 10
settings.register_profile("checks", max_examples=50, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=50 * LONG_FACTOR, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("checks")


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true",
                     help="run the fuzz suite (tests/fuzz) with many more examples (SACMODEL_FUZZ_LONG_EXAMPLES); "
                          "-m long implies it")


def _campaign(config) -> bool:
    """``-m long``: the campaigns' command."""
    return config.getoption("markexpr", "").strip() == "long"


def pytest_configure(config):
    import tempfile
    # the scenario cache of this run (inherited by the CLI subprocesses and by xdist's workers), not ~/.cache
    os.environ.setdefault("SACMODEL_CACHE_DIR", tempfile.mkdtemp(prefix="sacmodel-test-cache-"))
    os.environ.setdefault("SACMODEL_PROGRESS", "0")      # no progress lines in the tests' captured output
    config.addinivalue_line("markers", "fuzz: hostile-input fuzzing in a sandbox (tests/fuzz)")
    config.addinivalue_line("markers", "long: a campaign rather than a check: run by `pytest -m long`, "
                                       "deselected by default (addopts)")
    if _campaign(config) or config.getoption("--fuzz-long"):
        os.environ["SACMODEL_FUZZ_EXAMPLES"] = os.environ.get("SACMODEL_FUZZ_LONG_EXAMPLES", "2000")
    if _campaign(config):
        settings.load_profile("long")
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_WorkerResults(), "sacmodel-worker-results")


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (addopts): one worker per core for the suite or a folder; none (this process) when the
    command names only test files or tests (``pytest tests/x/test_y.py``: two workers would import and collect
    everything twice for a few seconds of tests)."""
    args = [a for a in config.args if not a.startswith("-")]
    if args and all(a.split("::")[0].endswith(".py") for a in args):
        return 0
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _hypothesis_settings(item):
    return getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None)


def pytest_collection_modifyitems(config, items):
    """Under ``-m long``, every hypothesis test is part of the campaign: marked ``long`` and, where it fixes its
    own number of examples, run with LONG_FACTOR times as many (the fuzz suite's sizes come from
    SACMODEL_FUZZ_EXAMPLES instead)."""
    if not _campaign(config):
        return
    for item in items:
        s = _hypothesis_settings(item)
        if s is None:
            continue
        item.add_marker(pytest.mark.long)
        fuzz = item.nodeid.startswith("tests/fuzz/") or item.get_closest_marker("fuzz") is not None
        if not fuzz and s.max_examples != settings.default.max_examples:
            item.obj._hypothesis_internal_use_settings = settings(s, max_examples=s.max_examples * LONG_FACTOR)


class _WorkerResults:
    """Under xdist the fuzz sandboxes live in the workers: collect their cases for the summary below."""

    def __init__(self):
        self.fuzz: list = []

    def pytest_testnodedown(self, node, error):
        self.fuzz += getattr(node, "workeroutput", {}).get("sacmodel_fuzz", [])


def pytest_terminal_summary(terminalreporter, config):
    """The fuzz suite's cases: how many each target ran, answered (0), refused (2) or other."""
    plugin = config.pluginmanager.get_plugin("sacmodel-worker-results")
    results = list(getattr(config, "sacmodel_fuzz", [])) + (plugin.fuzz if plugin else [])
    if not results:
        return
    rc0 = sum(rc == 0 for _, rc, _ in results)
    rc2 = sum(rc == 2 for _, rc, _ in results)
    slow = max(s for _, _, s in results)
    terminalreporter.write_line(f"fuzz: {len(results)} cases ({os.environ.get('SACMODEL_FUZZ_EXAMPLES', 'default')} "
                                f"examples per target): {rc0} answered, {rc2} refused, "
                                f"{len(results) - rc0 - rc2} other; slowest {slow:.1f} s")
    per: dict[str, list[int]] = {}
    for target, rc, _ in results:
        c = per.setdefault(target or "other", [0, 0, 0])
        c[0 if rc == 0 else 1 if rc == 2 else 2] += 1
    for target, (a, b, c) in sorted(per.items()):
        terminalreporter.write_line(f"  {target}: {a + b + c} cases ({a} answered, {b} refused, {c} other)")
