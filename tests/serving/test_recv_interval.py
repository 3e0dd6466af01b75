"""SGLang's ``--scheduler-recv-interval`` N (the recv skipper): the scheduler takes new requests in only after N
decode iterations since its last intake (at once after a prefill, and at once when idle). Laws of the engine
and the analytic form, and the setting's edges."""
import math

import pytest

from sacmodel import predict, scenario
from sacmodel.hardware.topology import TopologyError
from sacmodel.serving.config import ConfigError, resolve

WORK = dict(context=1024, output=(400, 600), prefix_cached=False, prompts="distinct", draws=1)


def _machine(n):
    return scenario("h200", gpus=8, model="deepseek-r1", weights="fp8", scheduler_recv_interval=n)


@pytest.fixture(scope="module")
def by_interval():
    return {n: predict(_machine(n), "gpu", concurrency=16, requests=64, **WORK) for n in (1, 4, 30)}


def test_interval_one_is_sglang_default():
    base = predict(scenario("h200", gpus=8, model="deepseek-r1", weights="fp8"), "gpu", concurrency=16,
                   requests=64, **WORK)
    one = predict(_machine(1), "gpu", concurrency=16, requests=64, **WORK)
    assert one.ttft_mean_ms == base.ttft_mean_ms and one.tbt_mean_ms == base.tbt_mean_ms


def test_ttft_grows_with_the_interval(by_interval):
    t = [by_interval[n].ttft_mean_ms for n in (1, 4, 30)]
    assert t[0] < t[1] < t[2]


def test_wait_is_about_half_an_intake_window(by_interval):
    """A request sent at a random decode iteration waits (N - 1) / 2 of them on average for the intake (less
    where a prefill opened the intake early), so TTFT(30) - TTFT(1) lies between a quarter and one whole of
    29 / 2 decode steps."""
    p1, p30 = by_interval[1], by_interval[30]
    half = 29 / 2 * p30.tbt_mean_ms
    extra = p30.ttft_mean_ms - p1.ttft_mean_ms
    assert 0.25 * half < extra < 1.0 * half, (extra, half)


def test_intake_in_batches_does_not_slow_decode(by_interval):
    """Fewer, larger admissions interrupt decode less: TBT does not grow with N."""
    assert by_interval[30].tbt_mean_ms <= by_interval[1].tbt_mean_ms * 1.001


def test_idle_scheduler_takes_a_lone_request_at_once():
    one, thirty = (predict(_machine(n), "gpu", concurrency=1, requests=3, **WORK) for n in (1, 30))
    assert thirty.ttft_mean_ms == pytest.approx(one.ttft_mean_ms, rel=1e-9)


def test_analytic_form_follows_the_engine():
    eng, ana = (predict(_machine(30), "gpu", concurrency=32, requests=256, method=m, **WORK)
                for m in ("engine", "analytic"))
    assert ana.ttft_mean_ms == pytest.approx(eng.ttft_mean_ms, rel=0.2)
    assert math.isfinite(ana.tbt_mean_ms)


def test_refused_with_dp_attention():
    with pytest.raises(TopologyError, match="scheduler_recv_interval.*dp"):
        scenario("h200", gpus=8, model="deepseek-v3.2", dp=8, scheduler_recv_interval=10)
    with pytest.raises(TopologyError, match="scheduler_recv_interval"):
        scenario("h200", gpus=8, scheduler_recv_interval=0)


def test_a_scenario_file_with_dp_attention_is_refused_too():
    from sacmodel.hardware.build import scenario_dict
    from sacmodel.hardware.scenarios import load_topology
    d = scenario_dict("h200", gpus=8, model="deepseek-v3.2", dp=8)
    d["serving"]["scheduler_recv_interval"] = {"value": 10, "source": "given"}
    with pytest.raises(ConfigError, match="scheduler_recv_interval"):
        resolve(load_topology(d), "gpu")


def test_emitted_launch_command_carries_the_setting():
    from sacmodel.planning.emit import sglang_args
    args, _ = sglang_args(_machine(30), "gpu")
    assert args["--scheduler-recv-interval"] == 30
    assert "--scheduler-recv-interval" not in sglang_args(_machine(1), "gpu")[0]
