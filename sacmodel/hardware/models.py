"""Model catalog: the architecture numbers a cost model needs.

A :class:`ModelSpec` is built from a Hugging Face style ``config.json`` mapping; the catalog ships
DeepSeek-V3.2 (MLA + DeepSeek Sparse Attention), DeepSeek-V3 (same MLA, dense attention) and
Llama-3.1-70B (GQA). Sizes are in bytes, FLOPs are floating-point operations (multiply-add = 2).
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from .topology import Topology, TopologyError

QUANT_BLOCK = 128  # values per fp32 scale in the FP8 KV / indexer formats (constants.md 1b)


class ModelError(ValueError):
    """A model config that is missing a field or has an impossible value."""


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of one LLM. Attention ``kind`` is 'mla', 'gqa' or 'mha'."""

    name: str
    layers: int
    hidden: int
    heads: int
    kind: str
    vocab: int
    intermediate: int                 # dense MLP width
    dense_layers: int                 # layers with a dense MLP (the rest are MoE)
    kv_heads: int = 0                 # GQA/MHA
    head_dim: int = 0                 # GQA/MHA
    q_lora_rank: int = 0              # MLA
    kv_lora_rank: int = 0             # MLA
    qk_rope_dim: int = 0              # MLA
    qk_nope_dim: int = 0              # MLA
    v_head_dim: int = 0               # MLA
    moe_intermediate: int = 0
    routed_experts: int = 0
    shared_experts: int = 0
    experts_per_token: int = 0
    index_heads: int = 0              # DSA lightning indexer (0 = dense attention)
    index_head_dim: int = 0
    topk: int = 0                     # tokens selected per query (0 = dense attention)
    max_position: int = 0             # longest context the model takes (0 = not stated)
    source: str = ""
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    # ---- structure -------------------------------------------------------------------------------
    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.routed_experts else 0

    @property
    def sparse(self) -> bool:
        return self.topk > 0 and self.index_heads > 0

    # ---- KV-cache bytes --------------------------------------------------------------------------
    def kv_bytes(self, dtype: str = "fp8") -> float:
        """Main KV-cache bytes per token per layer for ``dtype`` ('fp8' or 'bf16').

        MLA FP8 follows the FlashMLA/SGLang layout: fp8 latent + one fp32 scale per 128 values + bf16 RoPE
        part (656 B for DeepSeek-V3.2); BF16 stores latent and RoPE in bf16 (1152 B).
        """
        if dtype not in ("fp8", "bf16", "fp16"):
            raise ModelError(f"{self.name}: unknown KV dtype {dtype!r} (use 'fp8' or 'bf16')")
        if self.kind == "mla":
            if dtype == "fp8":
                return self.kv_lora_rank + 4 * math.ceil(self.kv_lora_rank / QUANT_BLOCK) + 2 * self.qk_rope_dim
            return 2.0 * (self.kv_lora_rank + self.qk_rope_dim)
        per_value = 1.0 if dtype == "fp8" else 2.0
        return 2 * self.kv_heads * self.head_dim * per_value

    @property
    def index_key_bytes(self) -> float:
        """Indexer key bytes per token per layer: fp8 key + fp32 scale per 128 values (132 B for V3.2)."""
        if not self.sparse:
            return 0.0
        return self.index_head_dim + 4 * math.ceil(self.index_head_dim / QUANT_BLOCK)

    # ---- parameters ------------------------------------------------------------------------------
    def attn_params(self) -> float:
        """Attention weights of one layer (projections; indexer included)."""
        h, n = self.hidden, self.heads
        if self.kind == "mla":
            q = (h * self.q_lora_rank + self.q_lora_rank * n * (self.qk_nope_dim + self.qk_rope_dim)
                 if self.q_lora_rank else h * n * (self.qk_nope_dim + self.qk_rope_dim))
            kv = h * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank * n * (self.qk_nope_dim + self.v_head_dim)
            o = n * self.v_head_dim * h
            p = q + kv + o
        else:
            p = h * n * self.head_dim + 2 * h * self.kv_heads * self.head_dim + n * self.head_dim * h
        if self.sparse:
            q_in = self.q_lora_rank or h
            p += q_in * self.index_heads * self.index_head_dim + h * self.index_head_dim + h * self.index_heads
        return float(p)

    def expert_params(self) -> float:
        """Weights of one routed expert (gate, up, down)."""
        return 3.0 * self.hidden * self.moe_intermediate

    def dense_mlp_params(self) -> float:
        return 3.0 * self.hidden * self.intermediate

    def params_total(self) -> float:
        """All weights of the main model (embeddings and head included, MTP excluded)."""
        moe = self.moe_layers * ((self.routed_experts + self.shared_experts) * self.expert_params()
                                 + self.hidden * self.routed_experts)
        dense = (self.layers - self.moe_layers) * self.dense_mlp_params()
        return float(self.layers * self.attn_params() + moe + dense + 2 * self.vocab * self.hidden)

    def params_active(self) -> float:
        """Weights one token touches."""
        moe = self.moe_layers * ((self.experts_per_token + self.shared_experts) * self.expert_params()
                                 + self.hidden * self.routed_experts)
        dense = (self.layers - self.moe_layers) * self.dense_mlp_params()
        return float(self.layers * self.attn_params() + moe + dense + 2 * self.vocab * self.hidden)

    # ---- FLOPs per token per layer ---------------------------------------------------------------
    def flops_attn_proj(self) -> float:
        """Attention projections (and indexer projections) per token per layer."""
        return 2.0 * self.attn_params()

    def flops_mlp(self, moe: bool) -> float:
        """MLP per token per layer: active experts + shared + router for MoE, dense MLP otherwise."""
        if moe and self.routed_experts:
            return 2.0 * ((self.experts_per_token + self.shared_experts) * self.expert_params()
                          + self.hidden * self.routed_experts)
        return 2.0 * self.dense_mlp_params()

    def flops_indexer(self, context: float) -> float:
        """Lightning-indexer scores of one query over ``context`` keys, per layer."""
        return 2.0 * self.index_heads * self.index_head_dim * context if self.sparse else 0.0

    def _attn_flops_per_entry(self) -> float:
        if self.kind == "mla":  # MQA (absorbed) mode: K dim = latent + rope, V dim = latent
            return 2.0 * self.heads * (2 * self.kv_lora_rank + self.qk_rope_dim)
        return 2.0 * self.heads * 2 * self.head_dim

    def flops_sparse_attn(self, k: float) -> float:
        """Attention of one query over ``k`` selected entries, per layer."""
        return self._attn_flops_per_entry() * k

    def flops_dense_attn(self, context: float) -> float:
        """Attention of one query over all ``context`` entries, per layer."""
        return self._attn_flops_per_entry() * context

    def attention_entries(self, context: float) -> float:
        """Entries the main attention reads per query per layer: min(k, L) for DSA, L otherwise."""
        return min(self.topk, context) if self.sparse else context


# ---- construction from a Hugging Face config ------------------------------------------------------
CONFIG_LIMITS = {
    "file_bytes": 1 << 20,           # a config.json
    "json_depth": 20,
    "json_items": 100_000,
    "field": 1 << 24,                # any whole-number field (dimensions, heads, experts, vocabulary, top-k)
    "num_hidden_layers": 4096,
    "max_position_embeddings": 1 << 30,
}


# Sizes a config may leave out (or null) but never give as 0: each 0 would silently change the model (an MoE
# expert of width 0, no context limit, heads of no width) -- field -> what it sizes
POSITIVE_IF_GIVEN = {
    "intermediate_size": "the dense MLP width", "moe_intermediate_size": "the width of an expert",
    "max_position_embeddings": "the longest context", "head_dim": "an attention head",
    "num_key_value_heads": "the KV heads", "num_experts_per_tok": "the experts a token uses",
}


def _whole(cfg: dict, key: str, where: str, default: int = 0) -> int:
    """A whole-number field in [0, its limit] (absent or null: ``default``); anything else names the field.
    Numpy integers count as whole numbers; bools (Python or numpy) do not."""
    v = cfg.get(key)
    if v is None:
        return default
    hi = CONFIG_LIMITS.get(key, CONFIG_LIMITS["field"])
    is_bool = isinstance(v, bool) or (type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_"))
    ok = isinstance(v, numbers.Integral) or (isinstance(v, numbers.Real) and math.isfinite(v)
                                              and float(v).is_integer())
    if is_bool or not ok or not 0 <= v <= hi:
        raise ModelError(f"{where}: field {key!r} must be a whole number in [0, {hi:,}], got {str(v)[:40]!r}")
    return int(v)


def _req(cfg: dict, key: str, where: str) -> int:
    """A required whole-number field, positive."""
    if cfg.get(key) is None:
        raise ModelError(f"{where}: missing field {key!r}")
    v = _whole(cfg, key, where)
    if v == 0:
        raise ModelError(f"{where}: field {key!r} must be positive, got 0")
    return v


def _read_config(path, where: str) -> dict:
    """A ``config.json`` read through :mod:`sacmodel.util.reading` (a regular file within the size limit)."""
    from ..util.reading import read_json
    cfg = read_json(path, limit=CONFIG_LIMITS["file_bytes"], depth=CONFIG_LIMITS["json_depth"],
                    items=CONFIG_LIMITS["json_items"], what="model config", err=ModelError)
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: expected a JSON object")
    return cfg


def from_hf_config(cfg: dict | str | Path, name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` (path or parsed mapping); every field
    range-checked (:func:`_check_spec`)."""
    where = "config"
    if not isinstance(cfg, dict):
        if not isinstance(cfg, (str, Path)):
            raise ModelError(f"a model config is a mapping or a config.json path, not {type(cfg).__name__}")
        where = str(cfg)[:200]
        cfg = _read_config(cfg, where)
    g = lambda k, d=0: _whole(cfg, k, where, d)  # noqa: E731
    for key, what in POSITIVE_IF_GIVEN.items():
        if cfg.get(key) is not None and g(key) == 0:
            raise ModelError(f"{where}: field {key!r} must be positive ({what}), got 0")
    layers = _req(cfg, "num_hidden_layers", where)
    hidden = _req(cfg, "hidden_size", where)
    heads = _req(cfg, "num_attention_heads", where)
    vocab = _req(cfg, "vocab_size", where)
    mla = g("kv_lora_rank") > 0
    routed = g("n_routed_experts") or g("num_local_experts") or g("num_experts")
    kv_heads = g("num_key_value_heads", heads)
    kind = "mla" if mla else ("gqa" if kv_heads < heads else "mha")
    label = name or cfg.get("_name_or_path") or cfg.get("model_type", "custom")
    spec = ModelSpec(
        name=str(label)[:200],
        layers=layers, hidden=hidden, heads=heads, kind=kind, vocab=vocab,
        intermediate=g("intermediate_size"),
        dense_layers=g("first_k_dense_replace") if routed else layers,
        kv_heads=kv_heads, head_dim=g("head_dim") or hidden // heads,
        q_lora_rank=g("q_lora_rank"), kv_lora_rank=g("kv_lora_rank"), qk_rope_dim=g("qk_rope_head_dim"),
        qk_nope_dim=g("qk_nope_head_dim"), v_head_dim=g("v_head_dim"),
        moe_intermediate=g("moe_intermediate_size") or (g("intermediate_size") if routed else 0),
        routed_experts=routed, shared_experts=g("n_shared_experts"),
        experts_per_token=g("num_experts_per_tok"),
        index_heads=g("index_n_heads"), index_head_dim=g("index_head_dim"), topk=g("index_topk"),
        max_position=g("max_position_embeddings"), source=str(cfg.get("_source", where))[:4096],
    )
    _check_spec(spec, where)
    return spec


def _check_spec(m: ModelSpec, where: str) -> None:
    """What only the fields together tell: dense layers within the layers, the experts a token uses among the
    routed ones, positive attention dimensions, a sparse-attention indexer with positive sizes."""
    if m.routed_experts and not m.experts_per_token:
        raise ModelError(f"{where}: MoE config needs 'num_experts_per_tok'")
    if m.experts_per_token > max(m.routed_experts, 0) and m.routed_experts:
        raise ModelError(f"{where}: num_experts_per_tok {m.experts_per_token} is above the "
                         f"{m.routed_experts} routed experts")
    if m.dense_layers > m.layers:
        raise ModelError(f"{where}: first_k_dense_replace {m.dense_layers} is above num_hidden_layers {m.layers}")
    if m.kind == "mla" and (m.v_head_dim < 1 or m.qk_nope_dim + m.qk_rope_dim < 1):
        raise ModelError(f"{where}: an MLA config (kv_lora_rank) needs positive 'v_head_dim' and "
                         "'qk_nope_head_dim' + 'qk_rope_head_dim'")
    if m.kind != "mla" and (m.head_dim < 1 or m.kv_heads < 1):
        raise ModelError(f"{where}: 'head_dim' (or hidden_size / num_attention_heads) and "
                         "'num_key_value_heads' must be positive")
    if m.kv_heads > m.heads and m.kind != "mla":
        raise ModelError(f"{where}: num_key_value_heads {m.kv_heads} is above num_attention_heads {m.heads}")
    if m.kind != "mla" and m.heads % m.kv_heads:
        raise ModelError(f"{where}: num_attention_heads {m.heads} is not a multiple of num_key_value_heads "
                         f"{m.kv_heads} (each KV head serves a whole group of query heads)")
    if m.layers > m.moe_layers and m.intermediate < 1:
        raise ModelError(f"{where}: {m.layers - m.moe_layers} layer(s) have a dense MLP, but "
                         "'intermediate_size' is missing or 0")
    if m.routed_experts and m.moe_intermediate < 1:
        raise ModelError(f"{where}: a mixture-of-experts config needs a positive 'moe_intermediate_size' (or "
                         "'intermediate_size')")
    if m.topk and not m.index_heads:
        raise ModelError(f"{where}: 'index_topk' given without 'index_n_heads'")
    if m.index_heads and m.topk and m.index_head_dim < 1:
        raise ModelError(f"{where}: sparse attention (index_topk) needs a positive 'index_head_dim'")


_DSV3 = {
    "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
    "vocab_size": 129280, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "first_k_dense_replace": 3, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "max_position_embeddings": 163840,
}
CATALOG_CONFIGS: dict[str, dict] = {
    "deepseek-v3.2": {**_DSV3, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,
                      "_source": "constants.md 1a (DeepSeek-V3.2-Exp config_671B_v3.2.json)"},
    "deepseek-v3": {**_DSV3, "_source": "constants.md 1a (V3.2 = V3 architecture + DSA)"},
    "llama-3.1-70b": {"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                      "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                      "intermediate_size": 28672, "max_position_embeddings": 131072,
                      "_source": "meta-llama/Llama-3.1-70B config.json (Hugging Face model card)"},
    "llama-3.1-8b": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                     "intermediate_size": 14336, "max_position_embeddings": 131072,
                     "_source": "meta-llama/Llama-3.1-8B config.json (Hugging Face model card)"},
    "qwen3-32b": {"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64,
                  "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 25600,
                  "max_position_embeddings": 40960,
                  "_source": "Qwen/Qwen3-32B config.json (Hugging Face model card)"},
    "qwen3-14b": {"num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
                  "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 17408,
                  "max_position_embeddings": 40960,
                  "_source": "Qwen/Qwen3-14B config.json (Hugging Face model card)"},
    "qwen3-8b": {"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 12288,
                 "max_position_embeddings": 40960,
                 "_source": "Qwen/Qwen3-8B config.json (Hugging Face model card)"},
}
ALIASES = {"dsv32": "deepseek-v3.2", "deepseek-v3.2-exp": "deepseek-v3.2", "dsv3": "deepseek-v3",
           "deepseek-r1": "deepseek-v3", "deepseek-r1-0528": "deepseek-v3", "deepseek-v3-0324": "deepseek-v3",
           "llama-70b": "llama-3.1-70b", "llama-8b": "llama-3.1-8b", "qwen3-32b-instruct": "qwen3-32b",
           "qwen3-14b-fp8": "qwen3-14b", "qwen3-8b-fp8": "qwen3-8b"}


def get_model(name: str | Path) -> ModelSpec:
    """A catalog model by name (case-insensitive), or a model from a ``config.json`` path."""
    key = str(name).lower()
    key = ALIASES.get(key, key)
    if key in CATALOG_CONFIGS:
        return from_hf_config(CATALOG_CONFIGS[key], name=key)
    if not isinstance(name, (str, Path)):
        raise ModelError(f"a model is a catalog name or a config.json path, not {type(name).__name__}")
    try:
        exists = os.path.lexists(name)      # a dangling link is a path too (named as one when read)
    except (OSError, ValueError):
        exists = False
    if Path(str(name)).suffix == ".json" or exists:
        return from_hf_config(Path(name))
    raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(CATALOG_CONFIGS))} "
                     "(or give a path to a config.json)")


def catalog() -> list[str]:
    return sorted(CATALOG_CONFIGS)


def model_of(topo: Topology) -> ModelSpec:
    """The scenario's model, with any ``model_overrides`` (config.json fields) applied."""
    m = get_model(topo.model_name)
    if not topo.model_overrides:
        return m
    fields = {"index_topk": "topk", "index_n_heads": "index_heads", "index_head_dim": "index_head_dim"}
    unknown = set(topo.model_overrides) - set(fields)
    if unknown:
        raise TopologyError(f"{topo.name}: cannot override model field(s) {', '.join(sorted(unknown))}")
    return replace(m, **{fields[k]: v for k, v in topo.model_overrides.items()})


def entry_bytes(topo: Topology, model: ModelSpec | None = None) -> float:
    """Main KV entry bytes per token per layer for the scenario's KV dtype."""
    m = model or model_of(topo)
    dtype = topo.serving["kv_dtype"].raw if "kv_dtype" in topo.serving else "fp8"
    return m.kv_bytes(dtype)
