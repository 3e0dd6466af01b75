import pytest

from sacmodel.measured import shared_data_dir

SHARED = shared_data_dir()
needs_shared = pytest.mark.skipif(not (SHARED / "sac-testbed").is_dir(),
                                  reason=f"measured data not found at {SHARED} (../shared is absent)")
