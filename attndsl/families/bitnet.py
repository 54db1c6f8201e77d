"""BitNet b1.58 (Microsoft), its float form: a Llama decoder whose merged heads are RMS-normed
before o_proj (`attn_sub_norm`: `sub_norm = rmsnorm(eps)`) and whose gated MLP (Gemma's, squared
ReLU by default: `relu2_glu`) has its hidden units RMS-normed before down_proj (`ffn_sub_norm`:
`ffn = sub_norm(relu2_glu(n), rmsnorm(eps))`). The released checkpoints' ternary weights (packed
2-bit values in uint8 tensors with a `weight_scale`, run with int8 activations: BitLinear)
are not read: the import takes the float checkpoint transformers builds from BitNetConfig; a
released one, whose config.json has a `quantization_config`, is refused at that field (as
every family's is)."""

from __future__ import annotations

from .base import Family
from .names import ATTN, GATED, LM, Names
from .rope import num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]

# GemmaMLP's act_fn (ACT2FN[hidden_act]) -> the gated MLP of that gate activation
_GATED = {"silu": "swiglu", "gelu_tanh": "geglu", "relu2": "relu2_glu"}


def _read(s: SpecText, padding: str | None) -> None:
    entries = roped_attention(s, padding)
    eps = num(s.need("rms_norm_eps"))
    kept = entries.pop("mask")
    entries.update(sub_norm=f"rmsnorm(eps = {eps})", mask=kept)
    s.attentions["bitnet_attn"] = entries
    s.pattern = ["bitnet_attn"]
    gate = act(s, "hidden_act", s.need("hidden_act"))
    if gate not in _GATED:
        s.refuse("hidden_act", "BitNet's MLP is gated: silu, gelu_tanh or relu2")
        gate = "relu2"
    ffn = f"sub_norm({_GATED[gate]}({s.need('intermediate_size')}), rmsnorm(eps = {eps}))"
    s.stack = {"layers": str(s.need("num_hidden_layers")), "ffn": ffn,
               "norm": f"rmsnorm(pre, eps = {eps})"}


_BITNET = Names("layers.{i}.", {
    **ATTN, **GATED, "self_attn.sub_norm.weight": "self_attn.attn_sub_norm.weight",
    "mlp.sub_norm.weight": "mlp.ffn_sub_norm.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (BitNetConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("bitnet", _read, _BITNET, {
        "hidden_size": 2560, "intermediate_size": 6912, "num_hidden_layers": 30,
        "num_attention_heads": 20, "num_key_value_heads": 5, "hidden_act": "relu2",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "attention_bias": False},
        lm=True,
        rope={"rope_type": "default", "rope_theta": 500000.0}),
]
