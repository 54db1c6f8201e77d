"""DeepSeek-V3.2 (`deepseek_v32`) and GLM-5 (`glm_moe_dsa`, its indexer's RoPE interleaved):
DeepSeek-V3's model, its RoPE always interleaved, with
DeepSeek sparse attention in every layer: a lightning indexer (`indexer = lightning(heads =
index_n_heads, head_dim = index_head_dim, top_k = index_topk)`, its RoPE rotate-half on the first
qk_rope_head_dim features) chooses the keys each query's latent attention reads. Its tensors
are transformers' DeepseekV32Indexer's, `self_attn.indexer.*`."""

from __future__ import annotations

from .base import Family
from .deepseek import DEEPSEEK, read_v3
from .deepseek import FAMILIES as DEEPSEEK_FAMILIES
from .moe import ROUTER_INERT, expanded
from .names import Names
from .text import SpecText

__all__ = ["FAMILIES", "read_indexed"]


def read_indexed(s: SpecText, padding: str | None, rope: str = "half") -> None:
    """DeepSeek-V3's spec with the lightning indexer on its attention; every layer must be an
    indexed one (`layer_types`); `rope`: the indexer's RoPE layout."""
    read_v3(s, padding, interleaved=True)
    layers = s.need("num_hidden_layers")
    kinds = s.get("layer_types")
    if isinstance(kinds, list) and (len(kinds) != layers
                                    or set(kinds) != {"indexed_attention"}):
        s.refuse("layer_types", f"{layers} entries, each `indexed_attention`, are needed")
    shared = s.get("indexer_types")
    if isinstance(shared, list) and set(shared) - {"full"}:
        s.refuse("indexer_types", "a layer that reuses an earlier layer's choice of keys "
                                  "(`shared`) has no form in attndsl yet: every entry must be "
                                  "`full`")
    s.attentions["deepseek_mla"]["indexer"] = (
        f"lightning(heads = {s.need('index_n_heads')}, head_dim = "
        f"{s.need('index_head_dim')}, top_k = {s.need('index_topk')}"
        + (", rope = interleaved" if rope == "interleaved" else "") + ")")
    s.comments["deepseek_mla"] = "multi-head latent attention over the keys its indexer picks"


_INDEXER = {f"self_attn.indexer.{p}.weight": f"self_attn.indexer.{p}.weight"
            for p in ("wq_b", "wk", "weights_proj", "k_norm")} | {
    "self_attn.indexer.k_norm.bias": "self_attn.indexer.k_norm.bias"}
INDEXED = Names(DEEPSEEK.layer, {**DEEPSEEK.names, **_INDEXER}, DEEPSEEK.top, DEEPSEEK.bases,
                past_layers=True)

_V3 = next(f for f in DEEPSEEK_FAMILIES if f.model_type == "deepseek_v3")
# transformers' defaults (DeepseekV32Config, 5.23: DeepseekV3Config's, without rope_interleave,
# and its indexer's) for the fields the import reads
FAMILIES = [
    Family("deepseek_v32", read_indexed, INDEXED, {
        **{k: v for k, v in _V3.defaults.items() if k != "rope_interleave"},
        "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64, "head_dim": 64,
        "mlp_bias": False},
        inert={**ROUTER_INERT,
               "head_dim": "DeepseekV32Config sets it to qk_rope_head_dim",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
               "mlp_bias": "transformers' DeepSeek-V3.2 MLPs have no biases whatever it says",
               "first_k_dense_replace": "DeepseekV32Config derives mlp_layer_types from it, "
                                        "which the import reads"},
        kinds=("indexed_attention",), lm=True, weights_for=expanded(INDEXED)),
    # GLM-5 (GLM-MoE-DSA): DeepSeek-V3.2's model, its indexer's RoPE interleaved; every layer
    # runs its own indexer (`indexer_types` all `full`, GlmMoeDsaConfig's default)
    Family("glm_moe_dsa", lambda s, padding: read_indexed(s, padding, rope="interleaved"),
           INDEXED, {
               "hidden_size": 6144, "intermediate_size": 12288, "moe_intermediate_size": 2048,
               "num_hidden_layers": 78, "num_attention_heads": 64, "num_key_value_heads": 64,
               "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5,
               "kv_lora_rank": 512, "q_lora_rank": 2048, "qk_rope_head_dim": 64,
               "v_head_dim": 256, "qk_nope_head_dim": 192, "n_group": 1, "topk_group": 1,
               "num_experts_per_tok": 8, "first_k_dense_replace": 3, "norm_topk_prob": True,
               "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
               "attention_bias": False, "index_topk": 2048, "index_head_dim": 128,
               "index_n_heads": 32, "head_dim": 64, "mlp_bias": False},
           inert={**ROUTER_INERT,
                  "head_dim": "GlmMoeDsaConfig sets it to qk_rope_head_dim",
                  "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
                  "mlp_bias": "transformers' GLM-MoE-DSA MLPs have no biases whatever it says",
                  "first_k_dense_replace": "GlmMoeDsaConfig derives mlp_layer_types from it, "
                                           "which the import reads"},
           kinds=("indexed_attention",), lm=True, weights_for=expanded(INDEXED),
           types={"indexer_types": ("list", None)}),
]
