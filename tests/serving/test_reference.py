import numpy as np
import pytest

from sacmodel.serving.reference import (
    KVPool,
    LRUBuffer,
    attention,
    decode_step,
    indexer_scores,
    lines_touched,
    select_topk,
    simulate,
)


def make(L=300, layers=2, d=24, v=16, seed=0):
    rng = np.random.default_rng(seed)
    pool = KVPool(layers, L, d * 4, page_tokens=16)
    K = rng.standard_normal((layers, L, d)).astype(np.float32)
    for layer in range(layers):
        pool.write(layer, np.arange(L), K[layer])
    idx_keys = rng.standard_normal((L, 8)).astype(np.float32)
    return rng, pool, K, idx_keys


def test_pool_roundtrip_is_layer_first():
    rng, pool, K, _ = make()
    sel = np.array([0, 7, 299])
    assert np.array_equal(pool.gather(1, sel), K[1, sel])
    assert pool.offset(1, 0) == 300 * pool.entry_bytes


@pytest.mark.parametrize("k", [1, 17, 64])
def test_sparse_attention_equals_dense_attention_over_selection(k):
    rng, pool, K, idx_keys = make()
    buf = LRUBuffer(300, 128)
    q_idx, w = rng.standard_normal((4, 8)), rng.random(4)
    q = rng.standard_normal((6, 24)).astype(np.float32)
    out = decode_step(pool, buf, 0, q_index=q_idx, index_weights=w, index_keys=idx_keys, q_attn=q, topk=k, v_dim=16)
    sel = out["selected"]
    assert len(sel) == k and np.array_equal(sel, select_topk(indexer_scores(q_idx, w, idx_keys), k))
    mask = np.zeros(300, bool)
    mask[sel] = True
    dense = attention(q, K[0], K[0][:, :16], mask)
    np.testing.assert_allclose(out["output"], dense, rtol=1e-5, atol=1e-6)
    assert out["counts"]["misses"] == k and out["counts"]["bytes_fetched"] == k * pool.entry_bytes


def test_topk_at_least_context_is_full_attention():
    rng, pool, K, idx_keys = make(L=50)
    buf = LRUBuffer(50, 64)
    q = rng.standard_normal((3, 24)).astype(np.float32)
    out = decode_step(pool, buf, 1, q_index=rng.standard_normal((2, 8)), index_weights=np.ones(2),
                      index_keys=idx_keys, q_attn=q, topk=4096, v_dim=16)
    np.testing.assert_allclose(out["output"], attention(q, K[1], K[1][:, :16]), rtol=1e-5, atol=1e-6)
    assert out["counts"]["misses"] == 50 and out["counts"]["rdma_ops"] == 1


def test_lru_evicts_least_recently_used():
    b = LRUBuffer(10, 3)
    assert b.access(np.array([0, 1]))[0] == 0
    b.access(np.array([2]))
    hits, miss = b.access(np.array([1, 3]))     # 0 is the oldest: evicted for 3
    assert hits == 1 and list(miss) == [3] and not b.resident[0] and b.resident[[1, 2, 3]].all()
    with pytest.raises(ValueError, match="do not fit"):
        b.access(np.array([4, 5, 6, 7]))


def test_step_accounting_details():
    assert lines_touched(np.array([0]), 656) == 11 and lines_touched(np.array([0, 1]), 64) == 2
    r = simulate(context=1000, topk=100, entry_bytes=100, steps=20, buffer_slots=200, correlation=0.9,
                 page_tokens=10, seed=3, dims=32)
    assert r["bytes_fetched"] == 100 * r["misses"]
    assert r["hits"] + r["misses"] == 20 * 100
    assert r["pages"] <= r["misses"] and r["rdma_ops"] <= r["misses"]
    assert simulate(context=1000, topk=100, steps=20, buffer_slots=200, correlation=0.9, seed=3) == \
        simulate(context=1000, topk=100, steps=20, buffer_slots=200, correlation=0.9, seed=3)


def test_buffer_starts_empty_and_a_still_query_stops_missing():
    r = simulate(context=500, topk=50, steps=5, buffer_slots=100, correlation=0.0, seed=1, dims=8, per_step=True)
    assert r["misses_per_step"][0] == 50          # admitted with an empty buffer: the whole top-k misses
    frozen = simulate(context=500, topk=50, steps=5, buffer_slots=100, correlation=[0.0] + [0.9999999] * 4,
                      seed=1, dims=8, per_step=True)
    assert frozen["misses_per_step"][1:].sum() <= 2


@pytest.mark.parametrize("kw,msg", [(dict(correlation=1.5), "correlation"), (dict(buffer_slots=10), "buffer_slots"),
                                    (dict(context=0), "positive")])
def test_simulate_rejects_bad_arguments(kw, msg):
    args = dict(context=100, topk=20, steps=3, buffer_slots=50, correlation=0.5)
    with pytest.raises(ValueError, match=msg):
        simulate(**{**args, **kw})
