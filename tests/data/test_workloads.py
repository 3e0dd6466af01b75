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
