import pytest

from sacmodel.measured import shared_data_dir

SHARED = shared_data_dir()
needs_shared = pytest.mark.skipif(not (SHARED / "sac-testbed").is_dir(),
                                  reason=f"measured data not found at {SHARED} (../shared is absent)")


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true",
                     help="run the fuzz suite (tests/fuzz) with many more examples (SACMODEL_FUZZ_LONG_EXAMPLES)")


def pytest_configure(config):
    import os
    config.addinivalue_line("markers", "fuzz: hostile-input fuzzing in a sandbox (tests/fuzz)")
    if config.getoption("--fuzz-long"):
        os.environ["SACMODEL_FUZZ_EXAMPLES"] = os.environ.get("SACMODEL_FUZZ_LONG_EXAMPLES", "2000")
