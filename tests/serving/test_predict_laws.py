"""``predict``'s metrics and limits against hand-worked cases (campaign 2 of issue 23, second sample)."""
import pytest

from sacmodel import predict
from sacmodel.serving.predict import ConfigError

DRAM = dict(context=12288, output=64, concurrency=32, requests=32, device_buffer=6144, prompts="distinct")


def test_a_server_that_stops_is_infeasible_as_false_not_as_a_missing_value():
    # HiSparse: 6144 + 64 = 6208 slots per request and rank; 32 requests over 8 ranks is 4 a rank. 20,000 slots
    # hold 3 (18,624): the fourth allocation stops the server before any request completes. The round-robin
    # starts at rank 1 (the warm-up request and the first round went before), so rank 1's fourth request comes
    # first (the 25th) and fails. 30,000 hold all 4 (and their host pool, 60,000 slots, their 4 x 12,350)
    p = predict("sac-testbed", "dram", max_total_tokens=20000, **DRAM)
    assert p.feasible is False and p.to_dict()["feasible"] is False
    assert p.limit == ("max_total_tokens: device-buffer allocation of 6208 slots failed on rank 1 "
                       "(18624 of 20000 slots in use)")
    assert p.success_fraction == 0.0
    ok = predict("sac-testbed", "dram", max_total_tokens=30000, **DRAM)
    assert ok.feasible is True and ok.limit is None and ok.success_fraction == 1.0


# every request in flight at once: the users start together (staggered users would not all be in flight)
HOST = dict(context=16384, output=64, device_buffer=6144, max_total_tokens=30000, prompts="distinct", start="together")


def test_the_host_pool_holds_floor_of_its_slots_over_a_request_and_one_more_stops_the_server():
    # the host pool of a rank: 2 x 30,000 = 60,000 slots; a request holds its 16,384-token prompt and 62 decode
    # tokens backed up (64 - 2: the first step backs nothing up, the last token is never written): 16,446, so
    # 3 fit (49,338) and a 4th does not. The device pool holds 4 (4 x 6,208 = 24,832 of 30,000): only the host
    # pool binds. SGLang does not admit by it: the 4th prompt's staging finds it full and the server stops
    three = predict("sac-testbed", "dram", concurrency=24, requests=24, **HOST)
    assert three.feasible and three.success_fraction == 1.0
    assert three.capacity["host_pool_tokens"] == 60000 and three.capacity["host_requests_per_rank"] == 3
    held = three.capacity["usage"]["host_pool"]
    assert held["used"] == 3 * 16446 and held["capacity"] == 60000
    # the engine's peak: the three at once, less a token for each request that joined decode a step later
    assert held["used"] - 3 <= three.breakdown["peak_host_tokens_per_rank"] <= held["used"]
    four = predict("sac-testbed", "dram", concurrency=32, requests=32, **HOST)
    assert not four.feasible and four.success_fraction == 0.0
    assert four.limit.startswith("host_pool: HiSparse host pool allocation of 16384 tokens failed")
    assert four.capacity["usage"]["host_pool"]["used"] == 4 * 16446 > 60000    # the table says it overflows


def test_a_shared_prompt_is_held_once_in_the_host_pool():
    # 24 requests a rank of 32K prompts (the device pool holds them: 24 x 6,208 + the shared prefix's pages of
    # 200,000). The host pool (400,000 slots) holds one prompt's entry and each request's tail (at most a page)
    # and 62 decode tokens; 24 distinct prompts (24 x 32,830) overflow it and stop the server
    kw = dict(context=32768, output=64, concurrency=192, requests=192, device_buffer=6144)
    shared = predict("sac-testbed", "dram", prompts="shared", **kw)
    assert shared.feasible and shared.success_fraction == 1.0
    assert shared.breakdown["peak_host_tokens_per_rank"] <= 32768 + 24 * (64 + 62)
    distinct = predict("sac-testbed", "dram", prompts="distinct", **kw)
    assert not distinct.feasible and distinct.limit.startswith("host_pool:")


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
