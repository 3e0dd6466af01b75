"""The planners' one value of a varied quantity (planning.common._with_value)."""
import pytest

import sacmodel
from sacmodel.planning.common import _with_value

DERIVED = ("mem_fraction", "prefill_chunk", "cuda_graph_max_bs")


def test_varying_dp_on_a_built_machine_runs_what_dp_builds():
    """plan --vary dp and predict --set dp=N on a machine built with --gpu kept SGLang's dp=1 defaults: an
    8192-token chunk per rank where SGLang divides it by dp (1024 at dp 8) and mem_fraction 0.897 where DP
    attention's buffers leave 0.769, so --set dp=8 predicted TTFT 8.5 s against --dp 8's 98.6 s."""
    built = sacmodel.scenario("h200", dp=8)
    varied, _ = _with_value(sacmodel.scenario("h200"), "dp", 8)
    assert {k: varied.serving[k].value for k in DERIVED} == {k: built.serving[k].value for k in DERIVED}
    assert varied.serving["prefill_chunk"].value == 8192 // 8          # SGLang: chunked_prefill_size // dp_size
    two, _ = _with_value(sacmodel.scenario("h200"), "dp", 2)             # dp = GPUs: tp 2 as well
    # SGLang's rules for 143,771 MiB (under 160 GiB): cuda_graph_max_bs 256 below tp 4, chunk 8192 // dp
    assert (two.serving["cuda_graph_max_bs"].value, two.serving["prefill_chunk"].value) == (256, 4096)


def test_a_given_setting_follows_dp_as_sglang_takes_it():
    """A given mem_fraction stays; the chunked_prefill_size (given, or a hand-written scenario's per-rank value
    times its dp) is divided among the DP ranks at launch, as --dp and pareto's with_dp take it."""
    from sacmodel.planning.pareto import with_dp
    given, _ = _with_value(sacmodel.scenario("h200", mem_fraction=0.8, chunked_prefill=4096), "dp", 8)
    built = sacmodel.scenario("h200", mem_fraction=0.8, chunked_prefill=4096, dp=8)
    assert given.serving["mem_fraction"].value == 0.8 and given.serving["prefill_chunk"].value == 512
    assert built.serving["prefill_chunk"].value == 512
    back, _ = _with_value(built, "dp", 2)
    assert back.serving["prefill_chunk"].value == 2048
    testbed = sacmodel.load_topology("sac-testbed")      # 1024 a rank at dp 8: chunked_prefill_size 8192
    t, _ = _with_value(testbed, "dp", 4)
    assert t.serving["prefill_chunk"].value == 2048 == with_dp(testbed, 4).serving["prefill_chunk"].value
    assert t.serving["mem_fraction"].value == testbed.serving["mem_fraction"].value       # given: kept


def test_a_dp_sglang_would_not_launch_is_refused_and_a_plan_records_it():
    """dp = 7 GPUs of FP8 DeepSeek splits its 2048-wide experts into 292.6 columns, which SGLang's FP8 loader
    refuses (as a scenario built with --tp 7 is): plan --vary dp called dp 6 and 7 feasible."""
    from sacmodel.planning.common import RefusedValue
    from sacmodel.planning.plan import plan
    with pytest.raises(RefusedValue, match=r"dp=7 \(GPUs\): SGLang refuses FP8 block-quantised experts"):
        _with_value(sacmodel.scenario("h200"), "dp", 7)
    _with_value(sacmodel.scenario("h200", gpus=16, weights="bf16"), "dp", 7)   # BF16 experts split freely
    res = plan(sacmodel.scenario("h200"), "gpu", workload=dict(context=1024, output=16, concurrency=4),
               slo={"tbt_mean_ms": 1e6}, vary="dp", min_value=6, max_value=8)
    tried = {r["value"]: r for r in res.tried}
    assert [tried[v]["feasible"] for v in (6, 7)] == [False, False] and "128-wide blocks" in tried[7]["limit"]
    assert res.found and res.value == 8
