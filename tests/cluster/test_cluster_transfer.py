import math

import numpy as np
import pytest

from sacmodel.cluster.transfer import TABLES, Flow, fit_table, link_bytes, share_links, table_error
from sacmodel.hardware.cluster import TransferEngine


def test_transfer_engine_time_is_setup_plus_size_over_sliced_rate():
    te = TransferEngine(nics=2, nic_rate=10e9, op_cost=1e-6, setup=1e-3, slice_bytes=10e3)
    # a 10 kB slice takes 1 us on the wire plus 1 us of per-op cost: half the line rate per NIC
    assert te.rate == pytest.approx(2 * 10e3 / 2e-6)
    assert te.time(1e9) == pytest.approx(1e-3 + 1e9 / 1e10)
    # bigger slices amortise the per-op cost: the bandwidth grows towards the line rate
    assert te.time(1e9, slice_bytes=1e6) < te.time(1e9) and 1e9 / (te.time(1e9, slice_bytes=1e9) - 1e-3) < 2e10


@pytest.mark.parametrize("name", list(TABLES))
def test_fit_reproduces_each_measured_transfer_table(name):
    te, e = fit_table(name)
    assert e["mape_pct"] < 5 and e["max_err_pct"] < 10          # constants.md §3 tables, in sample
    tab = TABLES[name]
    line = tab["nics"] * tab["nic_rate"]
    assert 0.5 * line < te.rate < line                             # 71% and 82% of line rate are quoted


def test_block_size_table_and_cross_table_errors_are_reported():
    te, e = fit_table("efa-blocks", free=("op_cost",))
    assert 1e-6 < te.op_cost < 2e-5 and e["mape_pct"] < 20         # one per-op cost explains 64 KB..2 MB
    fitted, _ = fit_table("sglang-h20")
    other = table_error("vllm-h800", fitted)
    assert other["mape_pct"] > 5    # fixed costs differ between the two deployments: the fit does not transfer


def test_one_flow_alone_runs_at_its_bottleneck_and_pays_its_latency():
    cap = {"a": 10.0, "b": 5.0}
    done = share_links([Flow(1.0, 50.0, 0.5, ("a", "b"))], cap)
    assert done[0] == pytest.approx(1.0 + 0.5 + 50.0 / 5.0)


def test_flows_share_a_link_max_min_and_the_survivor_speeds_up():
    cap = {"nic": 10.0}
    # two flows of 10 and 30 bytes from t=0: both at 5 B/s until the first ends at t=2, then 10 B/s
    done = share_links([Flow(0.0, 10.0, 0.0, ("nic",)), Flow(0.0, 30.0, 0.0, ("nic",))], cap)
    assert done[0] == pytest.approx(2.0) and done[1] == pytest.approx(2.0 + 20.0 / 10.0)
    # a third flow on another link does not slow them
    done3 = share_links([Flow(0.0, 10.0, 0.0, ("nic",)), Flow(0.0, 30.0, 0.0, ("nic",)),
                         Flow(0.0, 10.0, 0.0, ("other",))], {"nic": 10.0, "other": 1.0})
    assert np.allclose(done3[:2], done)


def test_bytes_per_link_are_conserved():
    flows = [Flow(0.0, 7.0, 0.0, ("x", "y")), Flow(0.5, 3.0, 0.0, ("y",))]
    assert link_bytes(flows) == {"x": 7.0, "y": 10.0}
    done = share_links(flows, {"x": 1.0, "y": 1.0})
    assert all(math.isfinite(d) for d in done)
    # all bytes through y at <= 1 B/s: the last flow cannot end before 10 s
    assert max(done) >= 10.0 - 1e-9
