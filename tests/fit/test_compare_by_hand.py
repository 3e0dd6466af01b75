"""fit/compare.py by hand (issue 36, item 6): the relative error is over the measurement, MAPE averages absolute
errors per system, feasibility is scored against the run's success, and a run's configuration maps onto
predict's arguments field by field."""
import numpy as np
import pytest

from sacmodel.data.runs import Run
from sacmodel.fit.compare import Comparison, mape_table, run_kwargs


def run(system="cxl", **kw):
    base = dict(file="r.json", system=system, context=32768, output=1024, concurrency=64, requests=256)
    return Run(**{**base, **kw})


def test_relative_error_is_over_the_measurement():
    c = Comparison(run(metrics={"ttft_mean_ms": 200.0}), {"ttft_mean_ms": 300.0}, True, None)
    assert c.error("ttft_mean_ms") == pytest.approx(0.5)          # (300 - 200) / 200, not / 300
    c = Comparison(run(metrics={"ttft_mean_ms": 300.0}), {"ttft_mean_ms": 200.0}, True, None)
    assert c.error("ttft_mean_ms") == pytest.approx(-1 / 3)       # signed: under-prediction is negative


def test_no_error_where_nothing_can_be_compared():
    assert Comparison(run(metrics={"a": 0.0}), {"a": 1.0}, True, None).error("a") is None         # measured 0
    assert Comparison(run(metrics={}), {"a": 1.0}, True, None).error("a") is None                 # not measured
    assert Comparison(run(metrics={"a": 1.0}), {"a": None}, True, None).error("a") is None        # no prediction
    assert Comparison(run(metrics={"a": 1.0}), {"a": float("inf")}, True, None).error("a") is None
    failed = run(metrics={"a": 1.0}, num_success=10)                                             # 10 of 256
    assert Comparison(failed, {"a": 2.0}, True, None).error("a") is None


def test_mape_table_by_hand():
    comps = [Comparison(run("cxl", metrics={"tbt_mean_ms": 100.0}), {"tbt_mean_ms": 110.0}, True, None),
             Comparison(run("cxl", metrics={"tbt_mean_ms": 100.0}), {"tbt_mean_ms": 70.0}, True, None),
             Comparison(run("rdma", metrics={"tbt_mean_ms": 50.0}), {"tbt_mean_ms": 55.0}, False, "x"),
             Comparison(run("rdma", metrics={"tbt_mean_ms": 50.0}, num_success=3), {"tbt_mean_ms": 1.0}, False,
                        "x")]
    t = mape_table(comps, metrics=("tbt_mean_ms",))
    assert t["cxl"]["tbt_mean_ms"] == pytest.approx(20.0)        # mean of |+10%| and |-30%|
    assert t["rdma"]["tbt_mean_ms"] == pytest.approx(10.0)       # the failed run has no error
    assert t["cxl"]["feasibility_right"] == 100.0 and t["cxl"]["runs"] == 2
    # rdma: the first was predicted infeasible but ran (wrong), the second failed and was predicted so (right)
    assert t["rdma"]["feasibility_right"] == pytest.approx(50.0)


def test_run_kwargs_field_by_field():
    kw = run_kwargs(run("cxl", cxl_devices=3, rdma_nics=4, device_buffer=2048, max_total_tokens=150000,
                        max_running_requests=32))
    assert kw == dict(context=32768, output=1024, concurrency=64, requests=256, exact_prompt=True, cxl_devices=3,
                      device_buffer=2048, max_total_tokens=150000, max_running_requests=32,
                      start="together")        # the testbed's client sent every request at once
    kw = run_kwargs(run("rdma", cxl_devices=3, rdma_nics=4, device_buffer=2048))
    assert kw["rdma_nics"] == 4 and "cxl_devices" not in kw
    kw = run_kwargs(run("gpu", device_buffer=2048, prefix_cached=False))
    assert "device_buffer" not in kw and kw["prefix_cached"] is False            # no device buffer on gpu
    var = run_kwargs(run("cxl", output=500, output_min=100, output_max=900, outputs=np.array([100, 0, 900]),
                         requests=3))
    assert var["output"] == (100, 900) and var["outputs"] == [100, 1, 900]       # at least one token each
    fixed = run_kwargs(run("cxl", output=500, output_min=500, output_max=500))
    assert fixed["output"] == 500 and "outputs" not in fixed
