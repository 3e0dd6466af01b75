"""The shared-prefix workload generator, against hand-worked cases."""
import numpy as np
import pytest

from sacmodel.data.records import DataError
from sacmodel.workloads import shared_prefix, stage_of


def _blocks(tr, i):
    return tr.blocks[tr.offsets[i]:tr.offsets[i + 1]].tolist()


def test_prompts_share_exactly_their_system_prompts_whole_blocks():
    # 128 system + 64 question tokens in 64-token blocks: 2 system blocks shared by the group, 1 of its own
    tr = shared_prefix(2, 3, 128, 64, 10, rate=1.0, requests=12, seed=0)
    assert list(tr.input_len) == [192] * 12 and list(tr.output_len) == [10] * 12
    prompts = {tuple(_blocks(tr, i)) for i in range(12)}
    assert len(prompts) == 6                                   # 2 groups x 3 prompts, cycled twice
    firsts = {p[:2] for p in prompts}
    assert len(firsts) == 2                                    # one system prompt per group
    assert len({p[2] for p in prompts}) == 6                   # every question its own
    # the fixed list is cycled: request i + 6 repeats request i whole
    assert all(_blocks(tr, i) == _blocks(tr, i + 6) for i in range(6))
    # cached (unbounded cache of the earlier prompts): a repeat finds all but its last token
    assert all(tr.cached[i + 6] == 191 for i in range(6))
    first_of_group = {}
    for i in range(6):
        g = tuple(_blocks(tr, i)[:2])
        assert tr.cached[i] == (128 if g in first_of_group else 0)
        first_of_group[g] = i


def test_a_ladder_of_poisson_stages_runs_back_to_back():
    stages = [(10.0, 20.0), (50.0, 10.0)]
    tr = shared_prefix(4, 4, 256, 64, 8, rate=stages, seed=3)
    st = stage_of(tr, stages)
    n0, n1 = int((st == 0).sum()), int((st == 1).sum())
    assert abs(n0 - 200) < 3 * 200 ** 0.5 and abs(n1 - 500) < 3 * 500 ** 0.5
    assert np.all(np.diff(tr.arrival) >= 0) and tr.arrival.max() < 30.0
    again = shared_prefix(4, 4, 256, 64, 8, rate=stages, seed=3)
    assert np.array_equal(again.arrival, tr.arrival) and np.array_equal(again.blocks, tr.blocks)


@pytest.mark.parametrize("kw,msg", [
    (dict(groups=0), "groups"), (dict(rate=-1.0), "rate"), (dict(rate=[(1.0, -5.0)]), "positive rate and duration"),
    (dict(rate="fast"), "rate is requests/s"), (dict(requests=10 ** 7), "requests"),
])
def test_bad_parameters_are_refused(kw, msg):
    args = dict(groups=2, prompts_per_group=2, system_tokens=100, question_tokens=10, output_tokens=5, rate=1.0)
    args.update(kw)
    with pytest.raises(DataError, match=msg):
        shared_prefix(**args)


def test_constant_arrivals_are_evenly_spaced_per_stage():
    """inference-perf's load.type constant: 1 / rate apart, each stage starting on its boundary."""
    from sacmodel.workloads import shared_prefix
    t = shared_prefix(2, 2, 100, 50, 10, rate=[(2, 2), (4, 1)], arrivals="constant")
    assert t.arrival.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.25, 2.5, 2.75]
    import pytest

    from sacmodel.data.records import DataError
    with pytest.raises(DataError, match="arrivals"):
        shared_prefix(2, 2, 100, 50, 10, rate=2.0, arrivals="bursty")


def _cached_by_an_unbounded_cache(tr) -> list[float]:
    """Each request's cached tokens by brute force: its leading blocks already seen in an earlier request."""
    seen, out = set(), []
    for i in range(len(tr)):
        row, k = _blocks(tr, i), 0
        while k < len(row) and row[k] in seen:
            k += 1
        out.append(float(min(k * tr.block_tokens, tr.input_len[i] - 1)))
        seen.update(row)
    return out


@pytest.mark.parametrize("groups,ppg,system,question,bt,requests", [
    (2, 3, 128, 64, 64, 12), (3, 2, 100, 50, 64, 9), (1, 4, 0, 300, 16, 10), (4, 1, 1000, 1, 512, 7),
    (2, 2, 63, 1, 64, 5)])
def test_cached_tokens_are_those_an_unbounded_cache_of_the_earlier_prompts_finds(groups, ppg, system, question,
                                                                                  bt, requests):
    tr = shared_prefix(groups, ppg, system, question, 4, rate=10.0, requests=requests, block_tokens=bt, seed=3)
    assert list(tr.cached) == _cached_by_an_unbounded_cache(tr)


@pytest.mark.long
def test_a_million_requests_are_generated_in_seconds():
    """Fuzzing (issue 36): shared_prefix(1, 1, 1, 1000, 1, requests=10**6, block_tokens=64), within its bounds
    (16M block ids), ran past the fuzz sandbox's 30 s: the cached tokens were counted by a loop over a set of
    every block id. Now counted per prompt and group at once (5 s on the loaded 2-core machine, 455 MB)."""
    import time
    t0 = time.perf_counter()
    tr = shared_prefix(1, 1, 1, 1000, 1, rate=1.0, requests=10**6, block_tokens=64)
    assert time.perf_counter() - t0 < 20
    assert len(tr) == 10**6 and tr.cached[0] == 0 and tr.cached[1] == 1000       # the one prompt again: all but 1
