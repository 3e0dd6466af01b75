"""What a fit reuses between its points (calibrate's serving stage) gives what a fresh computation gives.

A fitted constant set in place keeps the scenario's route cache; the step model's parts are shared between
configurations whose static values differ only in constants no part reads; a run whose static values did not
move is not simulated again. Each test fails if the reuse hands back a stale number.
"""
import copy

import numpy as np
import pytest

from sacmodel.fit.calibrate import STATIC_ONLY, _run_prediction
from sacmodel.hardware.params import set_param
from sacmodel.hardware.scenarios import as_topology, load_topology
from sacmodel.serving.config import resolve, static_values
from sacmodel.serving.engine.stepmodel import PARTS_FREE, Model
from sacmodel.serving.predict import predict
from sacmodel.serving.step_generated import GROUPS

WORK = dict(context=8192, output=64, concurrency=8, requests=16, exact_prompt=True, start="together")


def _fresh(**values):
    """The testbed scenario loaded anew (nothing cached) with ``values`` in its calibration table."""
    t = copy.deepcopy(load_topology("sac-testbed"))
    t._routes.clear()
    for k, v in values.items():
        t.calibration[k].value = v
    return t


@pytest.mark.parametrize("name,factor", [("score_correlation", 0.9990 / 0.9995), ("t_hs", 1.5),
                                         ("stage_copy_bw", 0.5)])
def test_a_constant_set_in_place_after_a_prediction_predicts_as_a_fresh_scenario(name, factor):
    """set_param of a fitted constant leaves the route cache (routes read only nodes and links): the miss curves
    kept there are keyed on the score process's constants, so a changed correlation is not served a stale curve
    (the TBT of a CXL run moves with it)."""
    system = "rdma" if name == "stage_copy_bw" else "cxl"
    t = copy.deepcopy(as_topology("sac-testbed"))
    before = predict(t, system, **WORK)
    v = t.param(name) * factor
    set_param(t, name, v)
    after = predict(t, system, **WORK)
    ref = predict(_fresh(**{name: v}), system, **WORK)
    for m in ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s"):
        assert getattr(after, m) == getattr(ref, m), m
    assert (after.tbt_mean_ms, after.ttft_mean_ms) != (before.tbt_mean_ms, before.ttft_mean_ms)


def test_the_parts_signature_leaves_out_only_constants_no_part_reads():
    """The rank and shared parts read none of PARTS_FREE; the prefill part reads HiSparse's admission, which
    its key carries (by hand: one admitting chunk costs t_hs_admit more, a later chunk nothing)."""
    reads = set(GROUPS["rank"][0]) | set(GROUPS["shared"][0])
    assert not reads & set(PARTS_FREE)
    assert set(GROUPS["prefill"][0]) & set(PARTS_FREE) == {"t_hs_admit"}
    a = Model(resolve(_fresh(t_hs_admit=0.004), "cxl"))
    b = Model(resolve(_fresh(t_hs_admit=0.010), "cxl"))
    assert a._id == b._id                        # the shared and rank parts are shared
    assert b.prefill(64.0, 32704.0, True) - a.prefill(64.0, 32704.0, True) == pytest.approx(0.006, rel=1e-9)
    assert b.prefill(64.0, 32704.0, False) == a.prefill(64.0, 32704.0, False)


def test_a_run_whose_static_values_did_not_move_is_not_simulated_again():
    """The memo of the serving fit: the RDMA copy bandwidth moves an RDMA run's static values (simulated again,
    a new prediction) and leaves a CXL run's (the same prediction object); either equals a fresh prediction."""
    from sacmodel.data.runs import Run
    assert STATIC_ONLY == {"t_request", "t_hs_admit", "stage_copy_bw", "prefill_eff"}
    runs = [Run(file="x_cxl", system="cxl", context=8192, output=64, concurrency=8, requests=16, metrics={}),
            Run(file="x_rdma", system="rdma", context=8192, output=64, concurrency=8, requests=16, metrics={})]
    t = copy.deepcopy(as_topology("sac-testbed"))
    memo: dict = {}
    p0 = [_run_prediction(t, r, i, memo) for i, r in enumerate(runs)]
    bw = t.param("stage_copy_bw") * 0.5
    set_param(t, "stage_copy_bw", bw)
    p1 = [_run_prediction(t, r, i, memo) for i, r in enumerate(runs)]
    assert p1[0] is p0[0] and p1[1] is not p0[1] and len(memo) == 3
    ref = predict(_fresh(stage_copy_bw=bw), "rdma", **WORK, explain=False)
    assert p1[1].ttft_mean_ms == ref.ttft_mean_ms and p1[1].ttft_mean_ms > p0[1].ttft_mean_ms
    cxl = static_values(resolve(t, "cxl"))
    assert cxl["stage_copy_bw"] == 1.0 and np.isfinite(p1[0].tbt_mean_ms)


def test_two_runs_of_one_configuration_share_one_prediction_and_others_do_not():
    """The memo is keyed on a run's configuration, not on its place in the list: the testbed's two splits repeat
    configurations, simulated once per point; a run that differs in any setting is simulated on its own."""
    from sacmodel.data.runs import Run
    kw = dict(system="cxl", context=8192, output=64, concurrency=8, requests=16, metrics={})
    runs = [Run(file="a", **kw), Run(file="b", **kw), Run(file="c", **{**kw, "concurrency": 4})]
    t = copy.deepcopy(as_topology("sac-testbed"))
    memo: dict = {}
    p = [_run_prediction(t, r, i, memo) for i, r in enumerate(runs)]
    assert p[0] is p[1] and p[2] is not p[0] and len(memo) == 2
    assert p[2].tbt_mean_ms != p[0].tbt_mean_ms


def test_explain_false_leaves_the_metrics_and_only_drops_the_binding():
    a = predict("sac-testbed", "cxl", **WORK)
    b = predict("sac-testbed", "cxl", **WORK, explain=False)
    assert a.binding and not b.binding
    for m in ("ttft_mean_ms", "tbt_mean_ms", "e2e_mean_ms", "output_throughput_tok_s"):
        assert getattr(a, m) == getattr(b, m)
