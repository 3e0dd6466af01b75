"""``predict``'s metrics and limits against hand-worked cases (campaign 2 of issue 23, second sample)."""
import pytest

from sacmodel import predict
from sacmodel.serving.predict import ConfigError

DRAM = dict(context=16384, output=64, concurrency=32, requests=32, device_buffer=6144, prompts="distinct")


def test_a_server_that_stops_is_infeasible_as_false_not_as_a_missing_value():
    # HiSparse: 6144 + 64 = 6208 slots per request and rank; 32 requests over 8 ranks is 4 a rank. 20,000 slots
    # hold 3 (18,624): the fourth allocation stops the server before any request completes. The round-robin
    # starts at rank 1 (the warm-up request and the first round went before), so rank 1's fourth request comes
    # first (the 25th) and fails. 30,000 hold all 4
    p = predict("sac-testbed", "dram", max_total_tokens=20000, **DRAM)
    assert p.feasible is False and p.to_dict()["feasible"] is False
    assert p.limit == ("max_total_tokens: device-buffer allocation of 6208 slots failed on rank 1 "
                       "(18624 of 20000 slots in use)")
    assert p.success_fraction == 0.0
    ok = predict("sac-testbed", "dram", max_total_tokens=30000, **DRAM)
    assert ok.feasible is True and ok.limit is None and ok.success_fraction == 1.0


@pytest.mark.parametrize("draws", [0, 65, True, 2.0])
def test_draws_are_a_whole_number_from_1_to_64(draws):
    with pytest.raises(ConfigError, match="draws must be a whole number from 1 to 64"):
        predict("sac-testbed", "gpu", context=1024, output=4, concurrency=1, requests=1, draws=draws)


def test_64_draws_are_allowed_and_each_is_counted():
    many = predict("sac-testbed", "gpu", context=1024, output=4, concurrency=1, requests=1, draws=64,
                   exact_prompt=False)
    assert many.spread["draws"] == 64 and many.feasible
    lo, hi = many.spread["ttft_mean_ms"]
    assert lo <= many.ttft_mean_ms <= hi


def test_an_exact_prompt_is_the_default_and_takes_one_draw():
    """context=N is an N-token prompt: nothing is drawn, so whatever ``draws`` asks the run is one."""
    kw = dict(context=4000, output=4, concurrency=2, requests=2)
    default = predict("sac-testbed", "cxl", draws=8, **kw)
    assert default.spread == {} and default.config.get("prompts") == "shared"
    assert default.ttft_mean_ms == predict("sac-testbed", "cxl", exact_prompt=True, draws=1, **kw).ttft_mean_ms
