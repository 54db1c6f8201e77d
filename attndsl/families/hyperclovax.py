"""HyperCLOVA X (SEED Think): Granite's decoder (scores scaled by attention_multiplier, each
sublayer's output times residual_multiplier, embeddings times embedding_multiplier) with an
RMSNorm on each sublayer's output before that scaling (use_post_norm, Peri-LN: x + m ·
post(sublayer(pre(x))): `rmsnorm(sandwich)` with `residual_scale`), and logits *multiplied* by
logits_scaling (Granite divides by it)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .names import Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    if (scale := s.get("attention_multiplier")) is not None:  # else head_dim ** -0.5
        for entries in s.attentions.values():
            entries["scale"] = num(scale)
    if s.get("use_post_norm", default=True):
        s.stack["norm"] = s.stack["norm"].replace("rmsnorm(pre, ", "rmsnorm(sandwich, ")
    if (residual := s.need("residual_multiplier")) not in (0, 1):
        s.stack["residual_scale"] = num(residual)
    if (embedding := s.need("embedding_multiplier")) not in (0, 1):
        s.head["embedding_scale"] = num(embedding)
    if (logits := s.need("logits_scaling")) not in (0, 1):
        s.head["logit_scale"] = num(logits)


def _names(cfg: dict) -> Names:
    """Llama's table, with the post-sublayer norms (post_norm1, post_norm2) when they exist."""
    if not cfg.get("use_post_norm", True):
        return LLAMA
    return Names(LLAMA.layer, {
        **{k: v for k, v in LLAMA.names.items() if not k.startswith(("attn_norm", "ffn_norm"))},
        "attn_norm.weight": "input_layernorm.weight", "post_attn_norm.weight": "post_norm1.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "post_ffn_norm.weight": "post_norm2.weight"}, LLAMA.top, LLAMA.bases)


# transformers' defaults (HyperCLOVAXConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("hyperclovax", _read, _names({}), {
        "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "hidden_act": "silu", "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "embedding_multiplier": 1.0, "logits_scaling": 1.0, "residual_multiplier": 1.0,
        "use_post_norm": True}, lm=True, weights_for=_names),
]
