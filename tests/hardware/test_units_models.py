import json

import pytest

from sacmodel.hardware.models import ModelError, from_hf_config, get_model
from sacmodel.hardware.units import UnitError, parse_quantity


@pytest.mark.parametrize("text,dim,value", [
    ("26 GB/s", "bandwidth", 26e9), ("750 ns", "time", 750e-9), ("96 GiB", "bytes", 96 * 2**30),
    ("100 Gbit/s", "bandwidth", 12.5e9), ("1 TB", "bytes", 1e12), ("148 TFLOP/s", "flops", 148e12),
])
def test_parse_quantity(text, dim, value):
    assert parse_quantity(text, dim) == pytest.approx(value)


@pytest.mark.parametrize("text,dim", [("26 GB", "bandwidth"), ("5 ns", "bytes"), ("fast", "time"), (12, "time"),
                                      ("", "time")])
def test_parse_quantity_rejects(text, dim):
    with pytest.raises(UnitError, match="value"):
        parse_quantity(text, dim)


def test_deepseek_v32_exact_bytes():
    m = get_model("deepseek-v3.2")
    assert (m.kv_bytes("fp8"), m.kv_bytes("bf16"), m.index_key_bytes, m.topk) == (656, 1152, 132, 2048)
    assert m.kind == "mla" and m.sparse and m.layers == 61 and m.moe_layers == 58
    assert m.params_total() == pytest.approx(671e9, rel=0.01)
    assert m.params_active() == pytest.approx(37e9, rel=0.05)
    # constants.md 1c: sparse MLA 0.570 GFLOP / layer / query at k = 2048; indexer 0.537 GFLOP at 32K
    assert m.flops_sparse_attn(2048) == pytest.approx(0.570e9, rel=1e-3)
    assert m.flops_indexer(32768) == pytest.approx(0.537e9, rel=1e-3)
    assert m.attention_entries(1000) == 1000 and m.attention_entries(10**6) == 2048


def test_deepseek_v3_dense_and_llama_gqa():
    v3 = get_model("deepseek-v3")
    assert not v3.sparse and v3.kv_bytes("fp8") == 656 and v3.attention_entries(50000) == 50000
    ll = get_model("llama-3.1-70b")
    assert ll.kind == "gqa" and ll.kv_bytes("bf16") == 2 * 8 * 128 * 2
    assert ll.params_total() == pytest.approx(70.6e9, rel=0.01)


def test_from_hf_config_file(tmp_path):
    cfg = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
           "vocab_size": 1000, "intermediate_size": 512}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = get_model(p)
    assert m.kind == "gqa" and m.kv_bytes("fp8") == 2 * 2 * 32
    del cfg["hidden_size"]
    p.write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="hidden_size"):
        from_hf_config(p)
    p.write_text("{not json")
    with pytest.raises(ModelError, match="line 1"):
        from_hf_config(p)


def test_unknown_model():
    with pytest.raises(ModelError, match="unknown model"):
        get_model("gpt-17")
