"""GLM-4 (`glm`) and GLM-4-0414 (`glm4`): a Llama decoder whose RoPE rotates the first
partial_rotary_factor of each head (0.5 by default) pairing features 2i and 2i + 1
(transformers' cos/sin halves repeat_interleave'd, GLM's rotate_half: `rope(dim = ...,
interleaved = true)`), with biases on q, k and v alone (`attention_bias`; o_proj has none) and
the MLP's gate and up rows fused in `gate_up_proj` (gate first, as Phi-3). `glm4` adds a norm
on each sublayer's output (post_self_attn_layernorm, post_mlp_layernorm): `rmsnorm(sandwich)`."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, read
from .names import Names, rows
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read(s, padding, interleaved=True)
    for entries in s.attentions.values():
        entries["bias"] = "[q, k, v]" if s.cfg.get("attention_bias") else "false"
    if s.cfg.get("model_type") == "glm4":
        s.stack["norm"] = s.stack["norm"].replace("rmsnorm(pre, ", "rmsnorm(sandwich, ")


def _width(a: object, cfg: dict) -> int:
    return cfg["intermediate_size"]


_MLP = {"mlp.gate_proj.weight": ("mlp.gate_up_proj.weight", rows(lambda a, c: 0, _width)),
        "mlp.up_proj.weight": ("mlp.gate_up_proj.weight", rows(_width, _width)),
        "mlp.down_proj.weight": "mlp.down_proj.weight"}
# q, k and v with their biases, o without: LLAMA's attention entries less o_proj.bias and qk-norms
_ATTN = {k: v for k, v in LLAMA.names.items() if k.startswith("self_attn.")
         and k not in ("self_attn.o_proj.bias", "self_attn.q_norm.weight",
                       "self_attn.k_norm.weight")}
_GLM = Names("layers.{i}.", {**_ATTN, **_MLP, "attn_norm.weight": "input_layernorm.weight",
                             "ffn_norm.weight": "post_attention_layernorm.weight"},
             LLAMA.top, LLAMA.bases)
_GLM4 = Names("layers.{i}.", {
    **_ATTN, **_MLP,
    "attn_norm.weight": "input_layernorm.weight",
    "post_attn_norm.weight": "post_self_attn_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "post_ffn_norm.weight": "post_mlp_layernorm.weight"}, LLAMA.top, LLAMA.bases)

# transformers' defaults (GlmConfig, Glm4Config, 5.23) for the fields the import reads
_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
             "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
             "hidden_act": "silu", "rms_norm_eps": 1.5625e-07, "tie_word_embeddings": False,
             "attention_bias": True}
FAMILIES = [
    Family("glm", _read, _GLM, _DEFAULTS, lm=True),
    Family("glm4", _read, _GLM4, _DEFAULTS, lm=True),
]
