"""OLMo 2: a Llama decoder whose norms follow the sublayers (h = x + norm(attn(x)),
y = h + norm(mlp(h)): `rmsnorm(output)`) and whose q and k are RMS-normed over all heads of a
token before the heads are split (`qk_norm = rmsnorm(across_heads = true)`). OLMo 3 adds
sliding layers (`layer_types`, else every 4th layer full) with RoPE of their own (a scaling,
when there is one, on the full layers alone)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA_DEFAULTS
from .llama import read as read_llama
from .names import ATTN, GATED, LM, Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES", "OLMO2"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for entries in s.attentions.values():
        entries["qk_norm"] = f"rmsnorm(eps = {eps}, across_heads = true)"
    s.stack["norm"] = f"rmsnorm(output, eps = {eps})"


def _read_olmo3(s: SpecText, padding: str | None) -> None:
    """OLMo 3's rope_parameters and layer_types as Olmo3Config derives them: RoPE per layer
    kind, the old rope_scaling on the full layers, rope_theta (else 500000) for the full
    layers and 500000 for the sliding ones when they give none (Olmo3Config's reading)."""
    default = {"rope_type": "default"}
    given = s.get("rope_parameters") or {}
    full = dict(given.get("full_attention") or default)
    if scaling := s.get("rope_scaling"):  # over rope_type "default": a scaling named by the
        full.update(scaling)  # old key `type` alone stays unapplied, as in transformers
    full.setdefault("rope_theta", s.get("rope_theta", default=500000.0))
    sliding = dict(given.get("sliding_attention") or default)
    sliding.setdefault("rope_theta", 500000.0)
    s.cfg["rope_parameters"] = {"full_attention": full, "sliding_attention": sliding}
    if not s.get("layer_types"):
        s.cfg["layer_types"] = ["sliding_attention" if (i + 1) % 4 else "full_attention"
                                for i in range(s.need("num_hidden_layers"))]
    _read(s, padding)


OLMO2 = Names("layers.{i}.", {
    **ATTN, **GATED, "post_attn_norm.weight": "post_attention_layernorm.weight",
    "post_ffn_norm.weight": "post_feedforward_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (Olmo2Config, Olmo3Config, 5.23) for the fields the import reads
_DEFAULTS = {**{k: v for k, v in LLAMA_DEFAULTS.items() if k != "mlp_bias"},
             "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "rms_norm_eps": 1e-5}
FAMILIES = [
    Family("olmo2", _read, OLMO2, _DEFAULTS, lm=True),
    Family("olmo3", _read_olmo3, OLMO2, {**_DEFAULTS, "sliding_window": 4096}, lm=True),
]
