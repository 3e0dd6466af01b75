"""Issue 36: the argument contract of the surfaces added since the last round. Each case is one the issue
reproduces (or one of its kind): the API raises ValueError naming the argument, the value and the rule, the
CLI prints one line and exits 2."""
import pytest
from measured_data import SHARED, needs_shared

import sacmodel
from sacmodel.cli import main

MOONCAKE = str(SHARED / "traces" / "mooncake_synthetic_trace.jsonl")


def one_line_error(capsys, *argv, names=()):
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for n in names:
        assert n in err, err
    return err


# ---- Impossible data fitted or replayed ---------------------------------------------------------------------
@needs_shared
@pytest.mark.parametrize("kw,names", [(dict(block_tokens=0), ("block_tokens", "got 0")),
                                      (dict(time_scale=1e-300), ("time_scale", "1e-300", "from 1e-06"))])
def test_replay_refuses_block_tokens_zero_and_a_vanishing_time_scale(kw, names):
    with pytest.raises(ValueError) as e:
        sacmodel.replay("sac-testbed", "dram", MOONCAKE, limit=4, **kw)
    assert all(n in str(e.value) for n in names)


@pytest.mark.parametrize("rate", [1e-300, 1e300, 0.0])
def test_predict_refuses_a_rate_no_run_can_hold(rate):
    with pytest.raises(ValueError, match=r"rate must be a number of requests/s from 0\.0001 to 1e\+06, got"):
        sacmodel.predict("sac-testbed", "gpu", context=8192, output=16, concurrency=4, requests=4, rate=rate)
