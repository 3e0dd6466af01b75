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


# ---- laws of the tables and closed forms the engine reads (campaign 3 of issue 23) ---------------------------
def test_the_shipped_table_is_built_on_the_declared_axes():
    """``access_table.npz`` is current: its axes are the ones :func:`build_table` would use now (a changed axis
    needs the table rebuilt), and its values are finite."""
    z = np.load(access.TABLE_PATH)
    assert np.array_equal(z["log_one_minus_phi"], access.TABLE_LOG_ONE_MINUS_PHI)
    assert np.array_equal(z["log2_l_over_k"], access.TABLE_LOG2_L_OVER_K)
    assert np.array_equal(z["b_over_k"], access.TABLE_B_OVER_K)
    shape = (len(access.TABLE_LOG_ONE_MINUS_PHI), len(access.TABLE_LOG2_L_OVER_K), len(access.TABLE_B_OVER_K))
    assert z["log_miss_share"].shape == z["log_fill_scale"].shape == shape
    assert np.isfinite(z["log_miss_share"]).all() and np.isfinite(z["log_fill_scale"]).all()


def assert_independent_steps_cell(r, b, g, tau, tol):
    """Laws of a table cell at phi = 0 (k = 1, L = r) for the B/k nodes ``b``. Independent steps select the
    tokens uniformly: a full LRU buffer holds B of the L tokens, each with probability B / L, so a step misses
    k (1 - B / L): m / (L - B) = 1 / r (and the limit B -> L, 1 - lam_1, is 1 / r too). The buffer fills when
    D(T) = L (1 - q^T), q = 1 - 1/r, reaches B, at T = ln(1 - B/L) / ln q; T_C interpolates D linearly between
    integers and D is concave, so T <= T_C < T + 1; beyond the context the limit -1 / ln q."""
    assert g == pytest.approx(np.full(len(b), -math.log(r)), abs=tol)
    swap = b < r
    T = np.log1p(-b[swap] / r) / math.log1p(-1.0 / r)
    tc = np.exp(tau[swap]) * -np.log1p(-b[swap] / r)
    assert np.all(tc >= T * (1 - tol)) and np.all(tc < T * (1 + tol) + 1)
    assert tau[~swap] == pytest.approx(np.full((~swap).sum(), -math.log(-math.log1p(-1.0 / r))), abs=tol)


def test_independent_steps_row_of_the_shipped_table_obeys_its_laws():
    z = np.load(access.TABLE_PATH)
    assert z["log_one_minus_phi"][-1] == 0.0                                  # the last row is phi = 0
    b = z["b_over_k"]
    for j, rho in enumerate(z["log2_l_over_k"]):
        assert_independent_steps_cell(2.0 ** rho, b, z["log_miss_share"][-1, j], z["log_fill_scale"][-1, j], 2e-6)


@pytest.mark.parametrize("r", [2.0 ** (1 / 16), 8.0, 1024.0, 2.0 ** 25])
def test_independent_steps_table_cell_obeys_its_laws(r):
    """The cell as :func:`build_table` computes it, its node B = L (r = 8, 1024, 2^25) included."""
    b = access.TABLE_B_OVER_K
    g, tau = access._table_cell(0.0, r)
    assert_independent_steps_cell(r, b, g, tau, 1e-9)


def test_build_table_writes_every_cell_on_its_axes(tmp_path, monkeypatch):
    """A small table (two correlations, three L/k, five B/k): written whole where asked (no temporary file
    left), on the axes it was given, each cell at its place."""
    monkeypatch.setattr(access, "TABLE_LOG_ONE_MINUS_PHI", np.array([math.log(0.5), 0.0]))
    monkeypatch.setattr(access, "TABLE_LOG2_L_OVER_K", np.array([1.0, 3.0, 6.5]))
    monkeypatch.setattr(access, "TABLE_B_OVER_K", np.array([1.0, 1.5, 4.0, 8.0, 128.0]))
    path = access.build_table(str(tmp_path / "small.npz"))
    assert path == tmp_path / "small.npz" and sorted(p.name for p in tmp_path.iterdir()) == ["small.npz"]
    z = np.load(path)
    assert z["log_one_minus_phi"].tolist() == [math.log(0.5), 0.0] and z["b_over_k"].tolist()[-1] == 128.0
    assert z["log_miss_share"].shape == (2, 3, 5) == z["log_fill_scale"].shape
    b = np.array([1.0, 1.5, 4.0, 8.0, 128.0])
    for j, rho in enumerate((1.0, 3.0, 6.5)):
        assert_independent_steps_cell(2.0 ** rho, b, z["log_miss_share"][1, j], z["log_fill_scale"][1, j], 2e-6)
        # phi = 0.5 (1 - phi = e^x): the correlated steps' cell, placed in the first row
        g, tau = access._table_cell(0.5, 2.0 ** rho)
        assert z["log_miss_share"][0, j] == pytest.approx(g, rel=1e-6)
        assert z["log_fill_scale"][0, j] == pytest.approx(tau, rel=1e-6)
        swap = b < 2.0 ** rho                    # correlated steps select again what they held: fewer misses
        assert np.all(z["log_miss_share"][0, j][swap] < -rho * math.log(2.0))


@pytest.mark.parametrize("phi,theta", [(0.9999, 2.0)])
def test_two_steps_below_on_the_cut_grid_is_the_bivariate_normal_probability(phi, theta):
    """Correlations so close to 1 that the quadrature grid is cut to N_MAX nodes (N_MAX s / 3 below theta):
    still the bivariate normal probability, to 1e-9."""
    from scipy.stats import multivariate_normal
    assert 3 * (theta - access.LO_FLOOR) / math.sqrt(1 - phi * phi) > access.N_MAX
    two = multivariate_normal(mean=[0, 0], cov=[[1, phi], [phi, 1]]).cdf([theta, theta])
    assert stay_below(phi, theta, [2])[0] == pytest.approx(two, abs=1e-9)


@pytest.mark.parametrize("B,m,tc", [(100, 90.0, 1.0), (150, 85.0, 14 / 9), (190, 81.0, 2.0), (271, 72.9, 3.0),
                                    (500, 50.0, 6 + (500 - 468.559) / 53.1441)])
def test_exact_steady_state_of_independent_steps_by_hand(B, m, tc):
    """L = 1000, k = 100, phi = 0: a step misses k (1 - B / L) (each selected token resident with probability
    B / L); D(t) = 1000 (1 - 0.9^t) = 100, 190, 271, 343.9, 409.51, 468.559, 521.7031, and T_C interpolates
    where it crosses B: a buffer of one selection (B = k) is full after the first step, B = D(t) after t."""
    got_m, got_tc = exact_steady_state(context=1000, topk=100, buffer_slots=B, correlation=0.0)
    assert got_m == pytest.approx(m, rel=1e-12) and got_tc == pytest.approx(tc, rel=1e-12)


@pytest.mark.parametrize("L,k", [(1000, 100), (8000, 512), (65536, 2048), (4096, 2048)])
@pytest.mark.parametrize("phi", [0.0, 0.9])
def test_a_buffer_of_one_selection_is_full_after_the_first_step(L, k, phi):
    m, tc = steady_state(context=L, topk=k, buffer_slots=k, correlation=phi)
    assert tc[0] == pytest.approx(1.0, rel=1e-6)
    assert exact_steady_state(context=L, topk=k, buffer_slots=k, correlation=phi)[1] == 1.0


@pytest.mark.parametrize("theta", [0.5, 1.0, 3.0, 5.4, 6.0])
def test_share_selected_anew_is_the_probability_of_entering_above_theta(theta):
    """P(s_1 <= theta < s_2): for independent steps Phi(theta) (1 - Phi(theta)), to 1e-12 up to 6 sd (L / k = 2^25
    is 5.4 sd, where the quadrature's second interval, beyond u = 12, carries 1e-10 of it); for correlated
    steps Phi(theta) - P(s_1 <= theta, s_2 <= theta), the bivariate normal."""
    from scipy.stats import multivariate_normal
    assert access._enter_next(0.0, theta) == pytest.approx(ndtr(theta) * ndtr(-theta), rel=1e-12, abs=0)
    if theta <= 3.0:
        for phi in (0.5, 0.9):
            both = multivariate_normal(mean=[0, 0], cov=[[1, phi], [phi, 1]]).cdf([theta, theta])
            assert access._enter_next(phi, theta) == pytest.approx(ndtr(theta) - both, rel=1e-8)


def test_access_counts_is_the_reference_counterpart_with_the_same_defaults():
    """``access_counts`` stands for :func:`reference.simulate`: the same horizon, buffer, entry and page by
    default, and, for a context its buffer holds, the same counts (loaded once, then every selection hits)."""
    import inspect

    from sacmodel.serving.reference import simulate
    ours, ref = inspect.signature(access_counts).parameters, inspect.signature(simulate).parameters
    for name in ("steps", "buffer_slots", "entry_bytes", "page_tokens"):
        assert ours[name].default == ref[name].default, name
    c = access_counts(context=1000, topk=100, correlation=0.9)
    s = simulate(context=1000, topk=100, correlation=0.9)
    assert c["misses"] == s["misses"] == 1000 and c["hits"] == s["hits"] == (ref["steps"].default - 1) * 100
