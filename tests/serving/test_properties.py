"""Property tests (hypothesis) of the access-count laws, the cost models and max-min sharing."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sacmodel.hardware.params import with_params
from sacmodel.hardware.scenarios import load_topology
from sacmodel.hardware.topology import max_min_share
from sacmodel.serving.access import (
    access_counts,
    correlation_for_overlap,
    exact_steady_state,
    miss_series,
    steady_state,
    top_k_overlap,
)
from sacmodel.serving.costs import compile_expr, gather_time
from sacmodel.serving.reference import lines_touched, simulate
from sacmodel.serving.systems import fetch_latency_us

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

configs = st.fixed_dictionaries({
    "context": st.integers(64, 3000), "topk": st.integers(8, 256), "entry_bytes": st.sampled_from([64, 100, 656, 1152]),
    "steps": st.integers(1, 25), "correlation": st.floats(0.0, 0.995), "page_tokens": st.sampled_from([1, 16, 64]),
}).flatmap(lambda c: st.builds(lambda b: {**c, "buffer_slots": b},
                                st.integers(min(c["topk"], c["context"]), 2 * c["context"])))


@FAST
@given(configs)
def test_deterministic_counts_equal_reference(c):
    """Counts that do not depend on randomness agree exactly with the reference."""
    r = simulate(**c, seed=1, dims=16)
    k = min(c["topk"], c["context"])
    assert r["bytes_fetched"] == r["misses"] * c["entry_bytes"]
    assert r["hits"] + r["misses"] == c["steps"] * k + (c["context"] - k if c["buffer_slots"] >= c["context"] else 0)
    if c["buffer_slots"] >= c["context"] or c["steps"] == 1:
        a = access_counts(**c)
        for key in ("misses", "hits", "bytes_fetched"):
            assert r[key] == pytest.approx(a[key], rel=1e-12, abs=1e-9)


@settings(max_examples=10, deadline=None)
@given(st.integers(3000, 8000), st.sampled_from([128, 256, 512]), st.floats(0.8, 0.995), st.integers(1, 3))
def test_fill_and_steady_state_agree_with_reference(L, k, phi, bmul):
    """Mean of 8 seeds of the literal process (keys, drifting query, top-k, LRU) vs the closed forms: the total
    over the first 60 steps and the steady-state misses, within 4 standard errors + 3%."""
    B = k * (1 + bmul)
    closed = miss_series(context=L, topk=k, steps=60, buffer_slots=B, correlation=phi, exact=True)
    m_ss, t_c = exact_steady_state(context=L, topk=k, buffer_slots=B, correlation=phi)
    sims = np.array([simulate(context=L, topk=k, steps=60, buffer_slots=B, correlation=phi, dims=256, seed=s,
                              per_step=True)["misses_per_step"] for s in range(8)])
    tot = sims.sum(axis=1)
    assert abs(tot.mean() - closed.sum()) <= 4 * tot.std(ddof=1) / math.sqrt(8) + 0.03 * closed.sum()
    if 2 * t_c < 40:
        tail = sims[:, 40:].mean(axis=1)
        assert abs(tail.mean() - m_ss) <= 4 * tail.std(ddof=1) / math.sqrt(8) + 0.03 * m_ss + 0.5


@FAST
@given(configs)
def test_limits(c):
    r = simulate(**{**c, "topk": c["context"], "buffer_slots": c["context"]}, seed=2, dims=8)
    assert r["misses"] == c["context"] and r["bytes_fetched"] == c["context"] * c["entry_bytes"]  # k >= L: once
    assert r["cachelines"] == lines_touched(np.arange(c["context"]), c["entry_bytes"])
    big = {**c, "buffer_slots": c["context"]}
    s = miss_series(context=big["context"], topk=big["topk"], steps=big["steps"], buffer_slots=big["buffer_slots"],
                    correlation=big["correlation"])
    assert np.all(s[1:] == 0) and s[0] == big["context"]


@FAST
@given(configs, st.integers(1, 200))
def test_larger_buffer_never_more_misses_after_first_step(c, extra):
    """LRU is a stack algorithm: same access sequence, a larger buffer never misses more (after step 0,
    which a whole-context preload may make larger); the closed form too."""
    def later(b):
        r = simulate(**{**c, "buffer_slots": b}, seed=7, dims=16, per_step=True)["misses_per_step"]
        return r[1:].sum()
    assert later(c["buffer_slots"] + extra) <= later(c["buffer_slots"])
    if c["buffer_slots"] + extra < c["context"]:
        a0, a1 = (access_counts(**{**c, "buffer_slots": b})["misses"] for b in (c["buffer_slots"], c["buffer_slots"] + extra))
        assert a1 <= a0 + 1e-6 * a0


@settings(max_examples=15, deadline=None)
@given(st.floats(0.5, 0.999), st.floats(0.5, 0.999), st.sampled_from([(32768, 4096), (131072, 6144), (16384, 8192)]))
def test_steady_misses_fall_as_the_query_drifts_slower(p1, p2, lb):
    L, B = lb
    lo, hi = sorted((p1, p2))
    m_lo = exact_steady_state(context=L, topk=2048, buffer_slots=B, correlation=lo)[0]
    m_hi = exact_steady_state(context=L, topk=2048, buffer_slots=B, correlation=hi)[0]
    assert m_hi <= m_lo * (1 + 1e-9)


def test_longer_context_churns_more_at_the_same_correlation():
    """The overlap of consecutive top-k follows from the correlation and k/L: it falls as L grows."""
    ov = [top_k_overlap(context=L, topk=2048, correlation=0.99) for L in (8192, 32768, 131072)]
    assert ov[0] > ov[1] > ov[2]
    assert correlation_for_overlap(ov[1], context=32768, topk=2048) == pytest.approx(0.99, abs=1e-6)


def test_table_matches_the_exact_form_where_the_model_runs():
    rng = np.random.default_rng(0)
    for _ in range(12):
        phi = 1 - math.exp(rng.uniform(math.log(1e-3), math.log(0.05)))
        L = int(2048 * 2 ** rng.uniform(3, 6.5))
        B = int(2048 * rng.choice([2, 3]))
        m, t = (float(x[0]) for x in steady_state(context=L, topk=2048, buffer_slots=B, correlation=phi))
        me, te = exact_steady_state(context=L, topk=2048, buffer_slots=B, correlation=phi)
        assert m == pytest.approx(me, rel=0.02) and t == pytest.approx(te, rel=0.02)


@FAST
@given(configs, st.integers(1, 100))
def test_larger_k_never_moves_fewer_bytes(c, dk):
    c = {**c, "buffer_slots": max(c["buffer_slots"], 2 * (c["topk"] + dk))}
    a0 = access_counts(**c)
    a1 = access_counts(**{**c, "topk": c["topk"] + dk})
    assert a1["bytes_fetched"] >= a0["bytes_fetched"] - 1e-6 * a0["bytes_fetched"]


@FAST
@given(st.floats(1e8, 1e11), st.floats(1.01, 10.0), st.integers(1, 5000), st.floats(1e-8, 1e-5))
def test_more_bandwidth_is_never_slower(bw, factor, n, lat):
    f = compile_expr(gather_time())
    base = dict(n=n, lines_per_entry=11, cacheline=64, lat=lat, outstanding_lines=612, t_kernel=8e-6)
    assert f(**base, bw=bw * factor) <= f(**base, bw=bw)


@settings(max_examples=6, deadline=None)
@given(st.floats(1.1, 4.0), st.sampled_from([64, 512, 2048]))
def test_faster_cxl_devices_never_slower_end_to_end(factor, k):
    t = load_topology("sac-testbed")
    bw = t.node("cxl_dev[0]")["bandwidth"]
    faster = with_params(t, {"node:cxl_device.bandwidth": bw * factor})
    assert fetch_latency_us(faster, "cxl", topk=k) <= fetch_latency_us(t, "cxl", topk=k)


TOPO = load_topology("sac-testbed")
SOURCES = TOPO.nodes_of("cxl_device") + TOPO.nodes_of("host_dram") + TOPO.nodes_of("rdma_nic")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SOURCES), st.sampled_from(TOPO.gpus),
                          st.one_of(st.just(math.inf), st.floats(1e8, 1e11))), min_size=1, max_size=10))
def test_max_min_sharing_conserves_capacity(flows):
    rates = max_min_share(TOPO, flows)
    used = {}
    for (src, dst, demand), r in zip(flows, rates):
        path = TOPO.route(src, dst)
        assert 0 < r <= min(demand, TOPO.flow_cap(path)) * (1 + 1e-9)
        for res in TOPO.resources(path):
            used[res] = used.get(res, 0.0) + r
    for res, u in used.items():
        assert u <= TOPO.capacity(res) * (1 + 1e-9)
    # max-min optimality: every flow is at its demand or crosses a saturated resource where it is largest
    for (src, dst, demand), r in zip(flows, rates):
        path = TOPO.route(src, dst)
        if r >= min(demand, TOPO.flow_cap(path)) * (1 - 1e-9):
            continue
        sat = [res for res in TOPO.resources(path) if used[res] >= TOPO.capacity(res) * (1 - 1e-9)]
        assert sat, "a flow below its demand must cross a saturated resource"


@settings(max_examples=5, deadline=None)
@given(st.floats(1.05, 3.0), st.sampled_from([32768, 131072]))
def test_serving_never_slower_with_faster_cxl_devices(factor, context):
    """End to end: raising the CXL device bandwidth never raises the predicted TBT or lowers throughput."""
    base = predict_point("sac-testbed", context)
    t = load_topology("sac-testbed")
    fast = predict_point(with_params(t, {"node:cxl_device.bandwidth": t.node("cxl_dev[0]")["bandwidth"] * factor}),
                         context)
    assert fast.tbt_mean_ms <= base.tbt_mean_ms * (1 + 1e-12)
    assert fast.output_throughput_tok_s >= base.output_throughput_tok_s * (1 - 1e-12)


def predict_point(scenario, context):
    from sacmodel.serving.predict import predict
    return predict(scenario, "cxl", context=context, output=256, concurrency=64)


# ---- the access model over its whole domain (issue 24): bounded time, agreement with the reference ----------
whole_domain = st.fixed_dictionaries({
    "context": st.integers(64, 3000), "topk": st.integers(1, 4096), "steps": st.integers(1, 120),
    "correlation": st.one_of(st.floats(0.0, 0.999), st.floats(0.99, 0.9995)),
}).flatmap(lambda c: st.builds(lambda b: {**c, "buffer_slots": b},
                                st.integers(min(c["topk"], c["context"]), 2 * c["context"])))


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(whole_domain, st.integers(16, 4000))
def test_access_model_covers_its_domain_quickly_and_agrees_with_reference(c, output):
    """Any context (within or beyond the top-k and the buffer), top-k, buffer and correlation: the closed forms
    the engine uses (the table's steady state, ``exact=False``) take well under a second, and their misses over
    ``steps`` agree with the mean of 6 seeds of the literal process within 4 standard errors + 5% of the total.
    A one-request prediction with that top-k, buffer and correlation, up to 4,000 tokens of output, finishes
    in bounded time with a finite positive TBT (it used to run the exact form at every decode age: minutes)."""
    import time

    from sacmodel.serving.predict import predict
    t0 = time.perf_counter()
    closed = miss_series(**c, exact=False)
    # bounded, not timed: the exact loop took minutes; 20 s holds on a loaded CI machine (the speed itself is
    # measured by benchmarks/short_prompts.py)
    assert time.perf_counter() - t0 < 20.0
    sims = np.array([simulate(**c, dims=256, seed=s, per_step=True)["misses_per_step"] for s in range(6)])
    tot = sims.sum(axis=1)
    assert abs(tot.mean() - closed.sum()) <= 4 * tot.std(ddof=1) / math.sqrt(6) + 0.05 * closed.sum() + 1e-9
    topo = with_params(TOPO, {"score_correlation": c["correlation"]})
    topo.model_overrides = {**topo.model_overrides, "index_topk": c["topk"]}
    t0 = time.perf_counter()
    p = predict(topo, "cxl", context=c["context"], output=output, concurrency=1, requests=1,
                device_buffer=max(c["buffer_slots"], c["topk"]))
    assert time.perf_counter() - t0 < 20.0
    assert math.isfinite(p.tbt_mean_ms) and p.tbt_mean_ms > 0
