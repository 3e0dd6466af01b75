"""Measured runs of other machines: reading them, predicting them on their own machine and client, and the
kernel-efficiency fit (the only constants fitted off the testbed)."""
import math
from pathlib import Path

import numpy as np
import pytest

from sacmodel.data.external import INFERENCEX_CLIENT, load_external_runs
from sacmodel.data.records import DataError
from sacmodel.fit.transfer import (EFFICIENCY_BOUNDS, errors, external_requests, fit_kernel_efficiency,
                                   predict_external)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "external" / "h200-deepseek-r1-sglang-tp8.csv"
CHECKS = Path(__file__).resolve().parents[2] / "validation" / "data" / "external_checks.csv"
needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/external is absent")


def test_checks_file_reads_with_a_source_for_every_run():
    runs = load_external_runs(CHECKS)
    assert len(runs) >= 15 and all(r.source and "/" in r.source for r in runs)
    assert {r.gpu for r in runs} >= {"h200", "b200"} and any(r.model == "deepseek-v3.2" for r in runs)


@needs_shared
def test_the_shared_file_takes_the_inferencex_client():
    runs = load_external_runs(SHARED)
    assert len(runs) == 15
    r = runs[0]
    assert (r.range_ratio, r.requests, r.mem_fraction, r.chunked_prefill) == (
        INFERENCEX_CLIENT["range_ratio"], 10 * r.concurrency, 0.82, 32768)


def test_a_bad_row_names_its_file_and_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text(CHECKS.read_text().splitlines()[0] + "\n" +
                 CHECKS.read_text().splitlines()[1].replace(",1024,", ",lots,", 1) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: column '(isl|osl)' is not a number"):
        load_external_runs(p)


def test_the_client_draws_lengths_in_its_range():
    r = load_external_runs(CHECKS)[0]
    reqs = external_requests(r)
    assert len(reqs) == r.requests
    assert reqs.context.min() >= int(r.isl * r.range_ratio) and reqs.context.max() <= r.isl
    assert (reqs.cached == 0).all() and (reqs.arrival == 0).all()


def test_a_check_is_predicted_served_and_compared():
    r = next(x for x in load_external_runs(CHECKS) if x.gpu == "h200" and x.model == "deepseek-r1")
    p = predict_external(r)
    assert p["feasible"] and math.isfinite(p["ttft_mean_ms"]) and 0 < p["tpot_mean_ms"] < p["ttft_mean_ms"]
    e = errors(r, p)
    assert e["tpot"] == pytest.approx(p["tpot_mean_ms"] / r.tpot_mean_ms - 1)
    assert abs(e["tpot"]) < 0.3                       # the check this file exists for: near, not far


def test_the_saturation_runs_are_served_not_infeasible():
    """500 x 4K/200 and 100 x 32K/100 on 8 x H200 with DP attention: the server queued and served them all."""
    for r in load_external_runs(CHECKS):
        if r.model == "deepseek-v3.2":
            assert predict_external(r)["feasible"], r.id


@needs_shared
def test_the_kernel_efficiency_fit_stays_in_its_bounds_and_improves_the_fit():
    runs = load_external_runs(SHARED)[::5]                   # three runs: quick
    vals = fit_kernel_efficiency(runs)
    for k, v in vals.items():
        lo, hi = EFFICIENCY_BOUNDS[k]
        assert lo <= v <= hi
    before = [errors(r, predict_external(r, transfer="rules")) for r in runs]
    after = [errors(r, predict_external(r, transfer="rules", values=vals)) for r in runs]
    cost = lambda es: float(np.sum([math.log(1 + e["tpot"]) ** 2 + math.log(1 + e["ttft"]) ** 2 for e in es]))  # noqa
    assert cost(after) <= cost(before) + 1e-9
