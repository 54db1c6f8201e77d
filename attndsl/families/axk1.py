"""A.X-K1 (SK Telecom): DeepSeek-V3 (multi-head latent attention, always with a query
bottleneck; a mixture routed by sigmoid score plus e_score_correction_bias among the topk_group
best of n_group groups, renormalised, times routed_scaling_factor, beside shared experts) with
one change: the mixture's output, routed plus shared, is RMS-normed before it joins the
residual (`post_mlp_layernorm`: the mixture's `output_norm`). The dense layers
(mlp_layer_types, or first_k_dense_replace and moe_layer_freq as AXK1Config derives them) have
no such norm."""

from __future__ import annotations

from dataclasses import replace

from .base import Family
from .deepseek import DEEPSEEK, moe_ffn
from .deepseek import read_v3 as read_deepseek
from .moe import ROUTER_INERT, expanded
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    if not isinstance(cfg.get("mlp_layer_types"), list):  # as AXK1Config derives them
        first = cfg.get("first_k_dense_replace", 1)
        every = cfg.get("moe_layer_freq", 1)
        cfg["mlp_layer_types"] = ["sparse" if i >= first and i % every == 0 else "dense"
                                  for i in range(s.need("num_hidden_layers"))]
    if not cfg.get("q_lora_rank"):
        s.refuse("q_lora_rank", "A.X-K1's attention always has a query bottleneck")
    read_deepseek(s, padding)
    eps = num(s.need("rms_norm_eps"))
    s.stack["ffn"] = moe_ffn(s, extra=f", output_norm = rmsnorm(eps = {eps})")


_AXK1 = replace(DEEPSEEK, names={**DEEPSEEK.names,
                                 "mlp.output_norm.weight": "post_mlp_layernorm.weight"})

_DERIVED = "read into mlp_layer_types by AXK1Config; the import reads it only when " \
    "mlp_layer_types is absent"
# transformers' defaults (AXK1Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("axk1", _read, _AXK1, {
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
        "n_shared_experts": 1, "n_routed_experts": 192, "routed_scaling_factor": 2.5,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "rope_interleave": True, "attention_bias": False},
        inert={**ROUTER_INERT,
               "first_k_dense_replace": _DERIVED, "moe_layer_freq": _DERIVED,
               "head_dim": "AXK1Config sets it to qk_rope_head_dim",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
               "pretraining_tp": "transformers' A.X-K1 forward does not read it"},
        lm=True, weights_for=expanded(_AXK1)),
]
