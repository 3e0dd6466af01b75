"""The fitted constants of the testbed scenario are physically plausible, and the a-priori values the
cross-validation folds start from come from the plausible ranges alone."""
import math

import pytest

from sacmodel.fit.calibrate import (
    MEASURED_PARAMS,
    MICROBENCH_PARAMS,
    PARAM_UNITS,
    PLAUSIBLE,
    PLAUSIBLE_RANGE,
    PREFILL_PARAMS,
    SERVING_PARAMS,
    STEP_PARAMS,
    prior,
)
from sacmodel.hardware.params import get_param
from sacmodel.hardware.scenarios import load_topology
from sacmodel.hardware.template import TEMPLATE

FITTED = (*STEP_PARAMS, *SERVING_PARAMS, *PREFILL_PARAMS)
RANGED = (*FITTED, *MEASURED_PARAMS)          # a constant measured in the logs is held to its range as well


def test_every_fitted_constant_has_a_plausible_range_that_its_text_states():
    assert set(PLAUSIBLE_RANGE) == set(RANGED) == set(PLAUSIBLE) and not set(FITTED) & set(MEASURED_PARAMS)
    for name, (lo, hi) in PLAUSIBLE_RANGE.items():
        assert lo < hi
        text = PLAUSIBLE[name].split(":")[0].replace(" ms", "").replace(" us", "").replace(" GB/s", "")
        text = text.replace(" steps", "").replace(" of peak FLOP/s in large prefill chunks", "")
        assert text.split("-")[0].strip() == f"{lo:g}" and text.split("-")[1].split()[0] == f"{hi:g}", name


@pytest.mark.parametrize("name", FITTED)
def test_prior_lies_in_the_plausible_range_and_the_fit_bounds(name):
    lo, hi = PLAUSIBLE_RANGE[name]
    scale, blo, bhi = PARAM_UNITS[name][1:]
    v = prior(name) / scale
    assert lo <= v <= hi and blo <= v <= bhi
    if name == "score_correlation":     # the middle of the decorrelation 1 - phi on a log scale
        assert math.log(1 - v) == pytest.approx((math.log(1 - lo) + math.log(1 - hi)) / 2)


@pytest.mark.parametrize("name", RANGED)
def test_testbed_fit_is_physically_plausible(name):
    lo, hi = PLAUSIBLE_RANGE[name]
    v = get_param(load_topology("sac-testbed"), name) / PARAM_UNITS[name][1]
    assert lo <= v <= hi, f"{name} = {v:g} outside its plausible range {lo:g}..{hi:g}"


def test_carried_over_constants_match_the_testbed_fit(tmp_path):
    """The scenario template copies the testbed's fitted constants, and the H200 what-if carries them over by
    their transfer rules (it has no runs of its own): a refit of the testbed must reach every copy."""
    from sacmodel.hardware.gpus import get_gpu
    from sacmodel.hardware.transfer import transferred
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE)
    base = load_topology("sac-testbed")
    for name in (*MICROBENCH_PARAMS, *RANGED):
        assert get_param(load_topology(path), name) == pytest.approx(get_param(base, name), rel=1e-9), name
    carried = transferred(get_gpu("h200"), "fp8")
    what_if = load_topology("h200-cxl-large")
    for name in RANGED:
        assert get_param(what_if, name) == pytest.approx(carried[name][0], rel=1e-5), name
