"""A loaded winner map or evaluation without a context names what is missing (before: ``winner-map`` without
``--context`` ended in a TypeError traceback from predict)."""
import numpy as np
import pytest

from sacmodel.cli import main
from sacmodel.planning.common import SolverError
from sacmodel.planning.sweep import winner_map


def test_a_loaded_map_without_context_is_refused(capsys):
    with pytest.raises(SolverError, match="loaded metrics need context"):
        winner_map("sac-testbed", ["cxl"], "tbt_mean_ms", ("output", np.array([256.0])),
                   ("concurrency", np.array([1.0])))
    assert main(["winner-map", "--x", "output=256,512", "--y", "concurrency=1,2"]) == 2
    assert "give --context or vary context on --x/--y" in capsys.readouterr().err
