"""The top-k access model (:mod:`sacmodel.serving.access`) against independent computations: scipy's grid
interpolation, bivariate normal probabilities, brute-force enumeration of pages and runs, and hand-worked crossings."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sacmodel.serving import access
from sacmodel.serving.access import (
    GridInterpolator,
    access_counts,
    check_process,
    correlation_for_overlap,
    distinct_selected,
    exact_steady_state,
    expected_pages,
    expected_runs,
    miss_series,
    ndtr,
    stay_below,
    steady_state,
    top_k_overlap,
)


# ---- grid interpolation ----------------------------------------------------------------------------------
def _axes(rng, sizes):
    return [np.sort(rng.choice(np.linspace(-3.0, 5.0, 400), size=s, replace=False)) for s in sizes]


@pytest.mark.parametrize("seed,sizes", [(0, (4, 5, 3)), (1, (2, 2, 2)), (2, (7, 3, 6)), (3, (3, 9, 2))])
def test_grid_interpolation_is_scipys_trilinear(seed, sizes):
    from scipy.interpolate import RegularGridInterpolator
    rng = np.random.default_rng(seed)
    axes = _axes(rng, sizes)
    values = rng.normal(size=sizes)
    pts = np.stack([rng.uniform(a[0], a[-1], size=200) for a in axes], axis=-1)
    pts[:len(axes[0]), 0] = axes[0]                               # grid nodes and the upper edges too
    pts[-1] = [a[-1] for a in axes]
    want = RegularGridInterpolator(axes, values, method="linear")(pts)
    assert GridInterpolator(axes, values)(pts) == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_grid_interpolation_reproduces_a_trilinear_function_exactly():
    axes = [np.array([0.0, 1.0, 3.0]), np.array([-1.0, 2.0]), np.array([0.0, 0.5, 1.0, 4.0])]
    f = lambda x, y, z: 1.0 + 2 * x - 3 * y + 0.5 * z + x * y * z    # noqa: E731  (trilinear in each cell)
    grid = f(*np.meshgrid(*axes, indexing="ij"))
    pts = np.array([[0.5, 0.5, 0.25], [2.0, -1.0, 3.0], [3.0, 2.0, 4.0], [0.0, -1.0, 0.0], [1.5, 1.0, 0.75]])
    assert GridInterpolator(axes, grid)(pts) == pytest.approx(f(*pts.T), rel=1e-12)


def test_a_nan_corner_makes_the_point_nan():
    axes = [np.array([0.0, 1.0])] * 3
    v = np.ones((2, 2, 2))
    v[1, 1, 1] = np.nan
    out = GridInterpolator(axes, v)(np.array([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]]))
    assert math.isnan(out[0])


# ---- the score process ------------------------------------------------------------------------------------
def test_normal_cdf_by_hand():
    assert ndtr(0.0) == 0.5 and ndtr(1.959963984540054) == pytest.approx(0.975, rel=1e-12)
    assert ndtr(np.array([-1.0, 0.0, 1.0])) == pytest.approx([0.15865525393145707, 0.5, 0.8413447460685429])


@pytest.mark.parametrize("kw,msg", [
    (dict(context=0, topk=10, buffer_slots=10, correlation=0.5), "positive"),
    (dict(context=10, topk=0, buffer_slots=10, correlation=0.5), "positive"),
    (dict(context=10, topk=5, buffer_slots=10, correlation=1.0), r"\[0, 1\)"),
    (dict(context=10, topk=5, buffer_slots=10, correlation=-0.1), r"\[0, 1\)"),
    (dict(context=10, topk=5, buffer_slots=4, correlation=0.5), "must hold one step's selection"),
    (dict(context=3, topk=5, buffer_slots=2, correlation=0.5), r"min\(topk, context\) = 3"),
])
def test_a_process_outside_its_domain_is_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        check_process(**kw)


@pytest.mark.parametrize("kw", [dict(context=1, topk=1, buffer_slots=1, correlation=0.0),
                                dict(context=10, topk=5, buffer_slots=5, correlation=0.999),
                                dict(context=3, topk=5, buffer_slots=3, correlation=0.5)])
def test_the_edges_of_the_domain_are_accepted(kw):
    check_process(**kw)


def test_independent_scores_stay_below_with_the_product_of_their_probabilities():
    theta = 0.8
    assert stay_below(0.0, theta, [1, 2, 5]) == pytest.approx(ndtr(theta) ** np.array([1, 2, 5]), rel=1e-15)


@pytest.mark.parametrize("phi,theta", [(0.5, 1.0), (0.9, 1.5), (0.97, 2.0), (0.3, 0.2)])
def test_two_steps_below_is_the_bivariate_normal_probability(phi, theta):
    from scipy.stats import multivariate_normal
    p = stay_below(phi, theta, [1, 2, 3])
    assert p[0] == pytest.approx(ndtr(theta), abs=1e-6)
    two = multivariate_normal(mean=[0, 0], cov=[[1, phi], [phi, 1]]).cdf([theta, theta])
    assert p[1] == pytest.approx(two, abs=1e-5)
    assert p[2] < p[1] < p[0] and p[2] >= ndtr(theta) ** 3                 # correlated: likelier than independent


def test_distinct_selected_when_every_token_is_selected():
    assert distinct_selected([1, 5], context=100, topk=100, correlation=0.9).tolist() == [100.0, 100.0]
    assert distinct_selected([3], context=50, topk=80, correlation=0.9).tolist() == [50.0]
    d = distinct_selected([1, 2, 50], context=1000, topk=100, correlation=0.9)
    assert d[0] == pytest.approx(100, rel=1e-6) and 100 < d[1] < d[2] < 1000


@pytest.mark.parametrize("L,k", [(1000, 100), (20000, 2048), (40, 39)])
def test_overlap_of_independent_steps_is_k_over_l(L, k):
    """Fresh scores every step: a token in this step's top-k is in the next with probability k / L."""
    assert top_k_overlap(context=L, topk=k, correlation=0.0) == pytest.approx(k / L, rel=1e-9)
    assert top_k_overlap(context=L, topk=L, correlation=0.3) == 1.0


def test_correlation_for_overlap_inverts_the_overlap():
    for phi in (0.6, 0.9):
        o = top_k_overlap(context=20000, topk=2048, correlation=phi)
        assert correlation_for_overlap(o, context=20000, topk=2048) == pytest.approx(phi, abs=1e-7)
    assert correlation_for_overlap(2048 / 20000, context=20000, topk=2048) == pytest.approx(0.0, abs=1e-6)
    assert correlation_for_overlap(0.01, context=20000, topk=2048) == 0.0           # less than independent
    for bad in (0.0, 1.0, -0.5):
        with pytest.raises(ValueError, match=r"overlap must be in \(0, 1\)"):
            correlation_for_overlap(bad, context=20000, topk=2048)






def test_table_edges_and_shapes():
    m, tc = steady_state(context=[1000, 5000], topk=512, buffer_slots=2048, correlation=0.99)
    assert m[0] == 0.0 and tc[0] == 1.0 and m[1] > 0 and tc[1] > 1      # the first fits its buffer
    m, tc = steady_state(context=5000, topk=512, buffer_slots=2048, correlation=0.99, need_fill=False)
    assert m[0] > 0 and math.isnan(tc[0])
    # topk above the context counts as the context
    assert steady_state(context=300, topk=512, buffer_slots=300, correlation=0.99)[0].tolist() == [0.0]


@pytest.mark.parametrize("L,k,B,phi", [(20000, 2048, 4096, 0.98), (8000, 512, 1024, 0.9), (60000, 2048, 6144, 0.995)])
def test_table_is_close_to_the_exact_form(L, k, B, phi):
    m, tc = steady_state(context=L, topk=k, buffer_slots=B, correlation=phi)
    em, etc = exact_steady_state(context=L, topk=k, buffer_slots=B, correlation=phi)
    assert m[0] == pytest.approx(em, rel=0.02) and tc[0] == pytest.approx(etc, rel=0.05)


# ---- miss series and counts ---------------------------------------------------------------------------------
def test_miss_series_of_a_context_that_fits():
    assert miss_series(context=500, topk=100, steps=4, buffer_slots=500, correlation=0.9).tolist() == \
        [500.0, 0.0, 0.0, 0.0]


def test_miss_series_fill_then_steady_by_hand():
    L, k, B, phi = 1000, 100, 300, 0.0
    s = miss_series(context=L, topk=k, steps=12, buffer_slots=B, correlation=phi)
    m, tc = exact_steady_state(context=L, topk=k, buffer_slots=B, correlation=phi)
    D = L * (1 - 0.9 ** np.arange(12))                      # independent steps: P(never selected in t) = 0.9^t
    assert s[0] == 100
    fill = [a for a in range(1, 12) if a < tc]
    assert s[fill] == pytest.approx(np.diff(D)[fill], rel=1e-9)
    assert s[int(math.ceil(tc)) + 1:] == pytest.approx(m, rel=1e-12)
    table = miss_series(context=L, topk=k, steps=12, buffer_slots=B, correlation=0.98, exact=False)
    exact = miss_series(context=L, topk=k, steps=12, buffer_slots=B, correlation=0.98)
    assert table == pytest.approx(exact, rel=0.03)


def _brute_pages(L, page, m):
    sizes = [min(page, L - s) for s in range(0, L, page)]
    owner = [i // page for i in range(L)]
    subsets = list(itertools.combinations(range(L), m))
    return sum(len({owner[t] for t in c}) for c in subsets) / len(subsets), len(sizes)


@pytest.mark.parametrize("L,page,m", [(8, 4, 2), (10, 4, 3), (10, 4, 1), (9, 3, 5), (7, 8, 2), (12, 5, 4)])
def test_expected_pages_by_enumeration(L, page, m):
    want, n_pages = _brute_pages(L, page, m)
    assert expected_pages(m, L, page) == pytest.approx(want, rel=1e-9)
    assert expected_pages(L, L, page) == n_pages == expected_pages(L + 3, L, page)
    assert expected_pages(0, L, page) == 0.0


@pytest.mark.parametrize("L,m", [(8, 2), (8, 3), (10, 5), (6, 6), (9, 1)])
def test_expected_runs_by_enumeration(L, m):
    subsets = list(itertools.combinations(range(L), m))
    runs = [sum(1 for i, t in enumerate(c) if i == 0 or c[i - 1] != t - 1) for c in subsets]
    assert expected_runs(m, L) == pytest.approx(max(1.0, sum(runs) / len(runs)), rel=1e-12)
    assert expected_runs(0, L) == 0.0


def test_access_counts_of_a_context_that_fits_by_hand():
    c = access_counts(context=1000, topk=100, steps=10, buffer_slots=1000, correlation=0.9, entry_bytes=64,
                      page_tokens=64)
    assert c == {"misses": 1000.0, "hits": 900.0, "bytes_fetched": 64000.0, "cachelines": 1000.0,
                 "pages": 16.0, "rdma_ops": 1.0}


def test_access_counts_add_up():
    c = access_counts(context=5000, topk=256, steps=40, buffer_slots=512, correlation=0.95, entry_bytes=656,
                      page_tokens=64)
    s = miss_series(context=5000, topk=256, steps=40, buffer_slots=512, correlation=0.95)
    assert c["misses"] == pytest.approx(s.sum(), rel=1e-12) and c["hits"] == pytest.approx(40 * 256 - s.sum())
    assert c["bytes_fetched"] == pytest.approx(656 * s.sum())
    assert c["pages"] == pytest.approx(sum(expected_pages(x, 5000, 64) for x in s))
    assert c["rdma_ops"] == pytest.approx(sum(expected_runs(x, 5000) for x in s))
    o = access_counts(context=5000, topk=256, steps=40, buffer_slots=512,
                      overlap=top_k_overlap(context=5000, topk=256, correlation=0.95))
    assert o["misses"] == pytest.approx(c["misses"], rel=1e-6)


@pytest.mark.parametrize("kw,msg", [(dict(correlation=0.9, overlap=0.5), "exactly one"), (dict(), "exactly one"),
                                    (dict(correlation=0.9, steps=0), "steps must be positive")])
def test_access_counts_refuses(kw, msg):
    with pytest.raises(ValueError, match=msg):
        access_counts(context=1000, topk=100, buffer_slots=200, **kw)


@settings(max_examples=30, deadline=None)
@given(st.integers(200, 5000), st.integers(16, 256), st.floats(0.0, 0.99), st.integers(1, 3))
def test_miss_series_total_never_exceeds_loading_every_selection(L, k, phi, bmul):
    k = min(k, L)
    B = min(L, k * (1 + bmul))
    s = miss_series(context=L, topk=k, steps=20, buffer_slots=B, correlation=phi)
    assert np.all(s >= -1e-9) and np.all(s[1:] <= k + 1e-9)        # a step loads at most its selection
    assert s.sum() <= (L if B >= L else 20 * k) + 1e-6
    assert s[0] == (L if B >= L else k)


# ---- where the table ends ----------------------------------------------------------------------------------
def _no_exact(monkeypatch):
    def refuse(**kw):
        raise AssertionError("the exact form was called")
    monkeypatch.setattr(access, "exact_steady_state", refuse)


@pytest.mark.parametrize("L", [4100.0, 4300.0, 5000.0])
def test_a_context_just_past_the_buffer_is_served_from_the_table(monkeypatch, L):
    """Next to the cells where the context fits the buffer (no steady state there) the misses come from the
    linear table, not from the minutes-long exact form; they go to 0 as the context comes down to the buffer."""
    _no_exact(monkeypatch)
    m, _ = steady_state(context=L, topk=2048, buffer_slots=4096, correlation=0.98, need_fill=False)
    assert np.isfinite(m[0]) and 0 <= m[0] < 2048





