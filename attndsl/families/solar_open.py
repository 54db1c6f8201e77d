"""Solar Open: a Llama decoder (its attention_bias on q, k and v alone: o_proj has none) whose
MLP is DeepSeek-V3's mixture: a sigmoid router choosing by score plus
e_score_correction_bias among the topk_group best of n_group groups (each scored by its best
two), the chosen scores renormalised with norm_topk_prob and times routed_scaling_factor,
over SwiGLU experts of moe_intermediate_size, beside n_shared_experts shared experts (one
SwiGLU of moe_intermediate_size * n_shared_experts); every layer is a mixture."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .moe import ROUTER_INERT, expanded, grouped_sigmoid
from .names import Names
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    hidden = s.need("moe_intermediate_size")
    s.cfg.setdefault("intermediate_size", hidden)  # (Llama's dense MLP, replaced below)
    read_llama(s, padding)
    for entries in s.attentions.values():
        entries["bias"] = "[q, k, v]" if s.cfg.get("attention_bias") else "false"
    expert = s.stack["ffn"].split("(")[0]  # swiglu, or geglu by hidden_act
    ffn = grouped_sigmoid(s, "n_routed_experts", "n_shared_experts", expert, hidden)
    s.stack["ffn"] = ffn + ")"


_P = ("gate_proj", "up_proj", "down_proj")
_SOLAR_OPEN = Names(LLAMA.layer, {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.selection_bias": "mlp.gate.e_score_correction_bias",
    **{f"mlp.shared.{p}.weight": f"mlp.shared_experts.{p}.weight" for p in _P}},
    LLAMA.top, LLAMA.bases)

# transformers' defaults (SolarOpenConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("solar_open", _read, _SOLAR_OPEN, {
        "hidden_size": 4096, "num_hidden_layers": 48, "num_attention_heads": 64,
        "num_key_value_heads": 8, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "attention_bias": False, "moe_intermediate_size": 1280,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "n_routed_experts": 128,
        "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
        "head_dim": 128},
        inert=ROUTER_INERT, lm=True, weights_for=expanded(_SOLAR_OPEN),
        rope={"rope_type": "default", "rope_theta": 1000000.0}),
]
