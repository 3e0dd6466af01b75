from measured_data import SHARED, needs_shared  # noqa: F401  (tests import them from measured_data)


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true",
                     help="run the fuzz suite (tests/fuzz) with many more examples (SACMODEL_FUZZ_LONG_EXAMPLES)")


def pytest_configure(config):
    import os
    import tempfile
    # the scenario cache of this run (inherited by the CLI subprocesses), not the user's ~/.cache
    os.environ.setdefault("SACMODEL_CACHE_DIR", tempfile.mkdtemp(prefix="sacmodel-test-cache-"))
    os.environ.setdefault("SACMODEL_PROGRESS", "0")      # no progress lines in the tests' captured output
    config.addinivalue_line("markers", "fuzz: hostile-input fuzzing in a sandbox (tests/fuzz)")
    if config.getoption("--fuzz-long"):
        os.environ["SACMODEL_FUZZ_EXAMPLES"] = os.environ.get("SACMODEL_FUZZ_LONG_EXAMPLES", "2000")
