"""The machine fit's prior (issue 33, two runs): a constant's transferred value is a prior whose width is its
physical range; it moves only as far as the runs outweigh that prior, and not at all when the runs cannot tell
it from its transferred value at their repeatability. Runs here are made by hand: each predicts its TPOT as a
known log-linear function of one constant, so the fit's answer is computed on paper."""
import math

import pytest

from sacmodel.fit.machine import (MOVED_SD, NOISE, PRIOR_SPAN, fit_machine, prior_width)
from sacmodel.hardware.build import scenario

SLOPE = 0.008           # d log TPOT per unit of t_request (10 ms): a TPOT row's sd of t_request is 2.5 units


@pytest.fixture(scope="module")
def base():
    return scenario("h200", gpus=8, tp=8, model="deepseek-r1")


class LogLinearRun:
    """A run whose predicted TPOT is 10 ms x exp(SLOPE x t_request / 10 ms) and whose measured TPOT is what
    ``units`` more of t_request (10 ms each) than ``t0`` predicts; TTFT and throughput not measured."""

    def __init__(self, name, t0, units):
        self.source, self.requests = name, 1
        self.ttft_mean_ms, self.output_tok_s = math.nan, math.nan
        self.tpot_mean_ms = self._tpot(t0 + 0.01 * units)

    @staticmethod
    def _tpot(t_request):
        return 10.0 * math.exp(SLOPE * t_request / 0.01)

    def predict(self, topo):
        return {"feasible": True, "limit": None, "ttft": 100.0, "tpot": self._tpot(topo.param("t_request")),
                "throughput": 1.0}


def test_the_prior_width_is_the_range_over_the_span_in_the_fitted_coordinate(base):
    moe, req = prior_width(base, ["moe_eff", "t_request"])
    assert moe == pytest.approx(math.log(0.95 / 0.3) / PRIOR_SPAN)          # a rate: log of its range
    assert req == pytest.approx((0.3 - 1e-4) / 0.01 / PRIOR_SPAN)          # a time: its range in 10 ms units


def test_a_constant_moves_as_far_as_the_runs_outweigh_its_prior(base):
    t0 = base.param("t_request")
    f = fit_machine(base, [LogLinearRun("r", t0, 10.0)], ["t_request"])
    assert f.fitted == ["t_request"]
    # one row of sd NOISE / SLOPE = 2.5 units against a prior of 29.99 / 4 units: the Gaussian posterior's mean
    # moves the data's 10 units by prior^2 / (prior^2 + data^2)
    data, prior = NOISE / SLOPE, (0.3 - 1e-4) / 0.01 / PRIOR_SPAN
    k = prior ** 2 / (prior ** 2 + data ** 2)
    assert (f.values["t_request"] - t0) / 0.01 == pytest.approx(10.0 * k, rel=0.03)
    assert k < 0.95             # the prior's pull is visible at this width
    # the prior's row is not one of the runs': the bootstrap and the folds resample the runs' rows alone
    assert f.jac.shape == (1, 1) and f.resid.shape == (1,)


def test_runs_that_agree_with_the_transferred_value_leave_it_there_and_say_so(base):
    t0 = base.param("t_request")
    # 4 units asked: 1.6 sd of a 2.5-unit row, under MOVED_SD (2)
    assert MOVED_SD == pytest.approx(2.0)
    f = fit_machine(base, [LogLinearRun("r", t0, 4.0)], ["t_request"])
    assert f.fitted == [] and f.values["t_request"] == t0
    assert f.unidentified["t_request"].endswith("sd of their repeatability from the transferred value (under 2), "
                                                "so it is kept there")
    assert "a move of only 1.6 sd" in f.unidentified["t_request"]
    # two runs asking 5 units each: rows of 2.5 / sqrt 2 = 1.8 units together, 2.8 sd
    g = fit_machine(base, [LogLinearRun("a", t0, 5.0), LogLinearRun("b", t0, 5.0)], ["t_request"])
    assert g.fitted == ["t_request"]
