"""OLMo (v1, AI2): a Llama decoder whose norms are LayerNorms without a weight or a bias
(OlmoLayerNorm: F.layer_norm(x, None, None, eps = 1e-5) in float32: `layernorm(pre, eps =
1e-05, affine = false)`), with biases on q, k, v and o when attention_bias is set, and its
optional clamp of q, k and v after their projections (`clip_qkv = c`)."""

from __future__ import annotations

from .base import Family
from .names import ATTN, GATED, LM, Names
from .rope import num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    s.attentions["olmo_attn"] = _clipped(s, roped_attention(s, padding))
    s.pattern = ["olmo_attn"]
    gate = act(s, "hidden_act", s.need("hidden_act"), gated=True)
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{'swiglu' if gate == 'silu' else 'geglu'}({s.need('intermediate_size')})",
               "norm": "layernorm(pre, eps = 1e-05, affine = false)"}  # OlmoLayerNorm's eps


def _clipped(s: SpecText, entries: dict) -> dict:
    """An attention's entries with `clip_qkv` (q, k and v clamped after their projections,
    as OLMoAttention does when it is set), its mask kept last."""
    if s.get("clip_qkv") is not None:
        kept = entries.pop("mask")
        entries.update(clip_qkv=num(s.cfg["clip_qkv"]), mask=kept)
    return entries


_OLMO = Names("layers.{i}.", {**{k: v for k, v in ATTN.items() if "_norm." not in k},
                              **{k: v for k, v in GATED.items() if k.endswith(".weight")}},
              dict(LM), ("model.",))

# transformers' defaults (OlmoConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("olmo", _read, _OLMO, {
        "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False}, lm=True),
]
