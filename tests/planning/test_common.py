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
    """A given mem_fraction stays; a given chunked_prefill_size is divided among the DP ranks (as --dp does);
    a hand-written scenario's per-rank settings (the testbed's) stay as written."""
    given, _ = _with_value(sacmodel.scenario("h200", mem_fraction=0.8, chunked_prefill=4096), "dp", 8)
    built = sacmodel.scenario("h200", mem_fraction=0.8, chunked_prefill=4096, dp=8)
    assert given.serving["mem_fraction"].value == 0.8 and given.serving["prefill_chunk"].value == 512
    assert built.serving["prefill_chunk"].value == 512
    back, _ = _with_value(built, "dp", 2)
    assert back.serving["prefill_chunk"].value == 2048
    testbed = sacmodel.load_topology("sac-testbed")
    t, _ = _with_value(testbed, "dp", 4)
    assert {k: t.serving[k].value for k in DERIVED if k in t.serving} == \
        {k: testbed.serving[k].value for k in DERIVED if k in testbed.serving}
