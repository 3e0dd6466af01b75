import numpy as np
import pint
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sacmodel.serving.costs import (
    check_dimensions,
    compile_expr,
    dma_time,
    fair_share_finish,
    gather_time,
    lines_per_entry,
    rdma_time,
    roofline_time,
    swap_in_time,
    sym,
)
from sacmodel.serving.step import eager_terms, fetch_terms, front_end_terms, prefill_terms, rank_terms, shared_terms


def all_expressions():
    exprs = {"gather": gather_time(), "dma": dma_time(), "rdma": rdma_time("x_"),
             "roofline": roofline_time("k_", "fp8"), "swap_in": swap_in_time()}
    for group in (rank_terms, shared_terms, eager_terms, prefill_terms, fetch_terms, front_end_terms):
        exprs.update(group())
    return exprs


@pytest.mark.parametrize("name", sorted(all_expressions()))
def test_every_cost_expression_is_a_time(name):
    check_dimensions(all_expressions()[name], "second")


def test_dimension_check_catches_mistakes():
    bad = sym("t_kernel", "second") + sym("cacheline", "byte")
    with pytest.raises(pint.DimensionalityError):
        check_dimensions(bad)
    with pytest.raises(pint.DimensionalityError):  # bytes / bandwidth is a time, not bytes
        check_dimensions(dma_time(), "byte")


def test_lambdified_equals_symbolic_evaluation():
    e = gather_time()
    vals = dict(n=2048, lines_per_entry=11, cacheline=64, bw=22.5e9, lat=1.6e-6, outstanding_lines=612,
                t_kernel=8.5e-6)
    f = compile_expr(e)
    ref = float(e.subs({sp.Symbol(k, positive=True): v for k, v in vals.items()}).evalf())
    assert f(**vals) == pytest.approx(ref, rel=1e-12)
    arr = f(**{**vals, "n": np.array([1, 10, 100])})
    assert arr.shape == (3,) and np.all(np.diff(arr) > 0)


def test_gather_latency_bound_vs_bandwidth_bound():
    f = compile_expr(gather_time())
    base = dict(n=10000, lines_per_entry=11, cacheline=64, outstanding_lines=612, t_kernel=0.0)
    slow = f(**base, bw=1e12, lat=2e-6)   # latency bound: achieved = 612 * 64 / 2 us
    assert slow == pytest.approx(2e-6 + 10000 * 11 * 64 / (612 * 64 / 2e-6))
    fast = f(**base, bw=1e9, lat=1e-9)    # bandwidth bound
    assert fast == pytest.approx(1e-9 + 10000 * 11 * 64 / 1e9)


@pytest.mark.parametrize("size,line,expect", [(656, 64, 11.0), (64, 64, 1.0), (1152, 64, 18.0), (32, 64, 1.0),
                                               (100, 64, 2.5)])
def test_lines_per_entry(size, line, expect):
    assert lines_per_entry(size, line) == pytest.approx(expect)


def test_swap_in_is_latency_bound_per_block_then_bandwidth_bound():
    """One block keeps 8 KiB in flight: b blocks move b x 8 KiB per round trip until the route's share binds."""
    f = compile_expr(swap_in_time())
    base = dict(t_kernel=0.0, swap_inflight=8192.0, sw_lat=2e-6, sw_bytes=1e6, sw_max_bytes=1e6 / 8)
    one = f(**dict(base, sw_max_bytes=1e6), sw_ctas=1, sw_bw=1e12)
    assert one == pytest.approx(2e-6 + 1e6 / (8192 / 2e-6))
    eight = f(**base, sw_ctas=8, sw_bw=1e12)
    assert eight == pytest.approx(2e-6 + 1e6 / (8 * 8192 / 2e-6))
    capped = f(**base, sw_ctas=8, sw_bw=5e9)                 # 8 blocks want 32.8 GB/s, the route gives 5
    assert capped == pytest.approx(2e-6 + 1e6 / 5e9)
    # a newly admitted request misses its whole top-k: its one block sets the kernel's length
    lopsided = f(**dict(base, sw_max_bytes=0.9e6), sw_ctas=8, sw_bw=1e12)
    assert lopsided == pytest.approx(2e-6 + 0.9e6 / (8192 / 2e-6))


def test_fair_share_finish_by_hand():
    """A route that moves one unit per second in all: k copies running move 1/k each. Demands 3, 1, 2: all three
    run until the smallest ends (1 unit each, 3 s), two until the next (1 more, 2 s), the last alone (1 s)."""
    assert fair_share_finish([3.0, 1.0, 2.0], lambda k: float(k)) == pytest.approx([6.0, 3.0, 5.0])
    assert fair_share_finish([0.0, 2.0], lambda k: float(k)) == pytest.approx([0.0, 2.0])   # nothing to copy
    assert fair_share_finish([], lambda k: 1.0) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=8), st.floats(1e-9, 1e-3))
def test_fair_share_laws(demands, u):
    """On one bottleneck (k copies each get 1/k of it) the last copy ends when every byte has passed; no copy ends
    later than under equal shares for all; a larger demand never ends sooner; equal demands end together."""
    n = len(demands)
    t = fair_share_finish(demands, lambda k: k * u)
    assert max(t) == pytest.approx(sum(demands) * u, rel=1e-9, abs=1e-15)
    for d, x in zip(demands, t):
        assert x <= d * n * u * (1 + 1e-9) + 1e-15
    order = np.argsort(demands, kind="stable")
    assert all(t[order[i]] <= t[order[i + 1]] * (1 + 1e-12) + 1e-15 for i in range(n - 1))
    same = fair_share_finish([demands[0]] * n, lambda k: k * u)
    assert same == pytest.approx([demands[0] * n * u] * n)
