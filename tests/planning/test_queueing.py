"""Issue 32, item 1: independent users by default on a built machine, and configurations that queue are not
answers (plan) nor on the frontier (pareto) unless the SLO bounds the latency their wait is part of."""
from types import SimpleNamespace

import pytest

import sacmodel
from sacmodel.planning.common import latency_slo, queues
from sacmodel.planning.pareto import pareto
from sacmodel.planning.plan import _meets


def pred(peak, concurrency=64, requests=512, dp=8, rate=None, feasible=True):
    return SimpleNamespace(feasible=feasible, success_fraction=1.0, concurrency=concurrency, requests=requests,
                           config={"dp": dp, "rate": rate}, breakdown={"peak_requests_per_rank": peak},
                           capacity={}, tbt_mean_ms=20.0, ttft_mean_ms=40000.0)


def test_a_rank_that_held_fewer_than_its_share_of_the_users_queues():
    # 64 users over 8 ranks, round-robin: 8 a rank. Holding 8 is serving them; 7 is a queue
    assert not queues(pred(8)) and queues(pred(7))
    assert queues(pred(1, concurrency=9)) and not queues(pred(2, concurrency=9))   # 9 over 8 ranks: 2 on one
    assert not queues(pred(1, concurrency=64, requests=8))      # 8 requests in all: one a rank is all of them
    assert not queues(pred(3, rate=2.0))               # open loop: the rate's overload is judged elsewhere
    assert not queues(pred(0, feasible=False))


def test_queueing_misses_an_slo_that_does_not_bound_its_wait():
    assert not _meets(pred(3), {"tbt_mean_ms": 80})
    assert _meets(pred(8), {"tbt_mean_ms": 80})
    assert latency_slo({"ttft_mean_ms": 50000}) and not latency_slo({"output_throughput_tok_s": 1})
    assert _meets(pred(3), {"tbt_mean_ms": 80, "ttft_mean_ms": 50000})      # the wait is within the TTFT bound
    assert not _meets(pred(3), {"tbt_mean_ms": 80, "ttft_mean_ms": 5000})


@pytest.fixture(scope="module")
def h200():
    return sacmodel.scenario("h200", gpus=8, weights="fp8", dp=8)


def test_hbm_that_queues_independent_users_is_off_the_frontier(h200):
    # 64 independent users at 64K: HBM holds 3 of the 8 requests a rank (the rest wait tens of seconds)
    res = pareto(h200, ["gpu"], context=65536, output=1024, concurrencies=[64], dp=[8])
    (p,) = res.points
    assert p.feasible and p.queued and not p.on_frontier and not p.on_system_frontier
    assert p.workload.get("prompts") is None         # the built machine's default: independent users


def test_a_built_machine_serves_independent_users_and_the_testbed_its_benchmark(h200):
    kw = dict(context=1024, output=8, concurrency=8, requests=8, draws=1)
    assert sacmodel.predict(h200, "gpu", **kw).config["prompts"] == "distinct"
    assert sacmodel.predict(h200, "gpu", prompts="shared", **kw).config["prompts"] == "shared"
    assert sacmodel.predict("sac-testbed", "gpu", **kw).config["prompts"] == "shared"
    assert sacmodel.predict("sac-testbed", "gpu", prompts="distinct", **kw).config["prompts"] == "distinct"
