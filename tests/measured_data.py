"""Where the measured data lives, and the marker of tests that need it (skipped when ../shared is absent).

A module of its own, not conftest.py: tests/fuzz has a conftest too, and ``from measured_data import`` would pick
whichever was imported first."""
import pytest

from sacmodel.data.runs import shared_data_dir

SHARED = shared_data_dir()
needs_shared = pytest.mark.skipif(not (SHARED / "sac-testbed").is_dir(),
                                  reason=f"measured data not found at {SHARED} (../shared is absent)")
