"""Nemotron (Nemotron-3/4): a pre-norm decoder with LayerNorm1P, a LayerNorm with its bias
whose gain is 1 + weight (`layernorm(unit_offset = true)`), a squared-ReLU MLP without a gate
(`up_proj`, then `down_proj`), RoPE on half of each head (`partial_rotary_factor`, 0.5 by
default) and no biases unless `attention_bias` / `mlp_bias`."""

from __future__ import annotations

from .base import Family
from .jais2 import UNGATED
from .rope import default_partial, num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    default_partial(s, 0.5)  # NemotronConfig's default
    s.attentions["nemotron_attn"] = roped_attention(s, padding)
    s.pattern = ["nemotron_attn"]
    ffn = act(s, "hidden_act", s.need("hidden_act"))
    bias = "" if s.cfg.get("mlp_bias") else ", bias = false"
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{ffn}({s.need('intermediate_size')}{bias})",
               "norm": f"layernorm(pre, eps = {num(s.need('norm_eps'))}, unit_offset = true)"}


# transformers' defaults (NemotronConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("nemotron", _read, UNGATED, {
        "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 32,
        "num_attention_heads": 48, "hidden_act": "relu2", "norm_eps": 1e-05,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}, lm=True),
]
