"""OLMo 2: a Llama decoder whose norms follow the sublayers (h = x + norm(attn(x)),
y = h + norm(mlp(h)): `rmsnorm(output)`) and whose q and k are RMS-normed over all heads of a
token before the heads are split (`qk_norm = rmsnorm(across_heads = true)`)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA_DEFAULTS
from .llama import read as read_llama
from .names import ATTN, GATED, LM, Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for entries in s.attentions.values():
        entries["qk_norm"] = f"rmsnorm(eps = {eps}, across_heads = true)"
    s.stack["norm"] = f"rmsnorm(output, eps = {eps})"


_OLMO2 = Names("layers.{i}.", {
    **ATTN, **GATED, "post_attn_norm.weight": "post_attention_layernorm.weight",
    "post_ffn_norm.weight": "post_feedforward_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (Olmo2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("olmo2", _read, _OLMO2, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if k != "mlp_bias"}, "hidden_size": 4096,
        "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
        "rms_norm_eps": 1e-5}, lm=True),
]
