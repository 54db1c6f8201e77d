"""Apertus (Swiss AI): a Llama decoder with q and k RMS-normed per head before RoPE (`q_norm`,
`k_norm`), its two norms named `attention_layernorm` and `feedforward_layernorm`, and an MLP
that is not gated, down(act(up(x))) without biases (Nemotron's), whose activation is xIELU by
default (`ffn = xielu(n)`: `mlp.act_fn.alpha_p` and `alpha_n` learned per layer). Its xIELU
constants beta and eps are buffers XIELUActivation builds (0.5, -1e-6; the config has no field
for them): the checkpoint's copies of them are not read."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA_DEFAULTS
from .names import ATTN, LM, Names, linear
from .rope import num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    entries = roped_attention(s, padding)
    eps = num(s.need("rms_norm_eps"))
    kept = entries.pop("mask")
    entries.update(qk_norm=f"rmsnorm(eps = {eps})", mask=kept)
    s.attentions["apertus_attn"] = entries
    s.pattern = ["apertus_attn"]
    hidden = s.need("intermediate_size")
    activation = s.need("hidden_act")
    if activation == "xielu":
        ffn = f"xielu({hidden})"
    else:  # ApertusMLP is Nemotron's: up, then ACT2FN[hidden_act], then down, no biases
        ffn = f"{act(s, 'hidden_act', activation)}({hidden}, bias = false)"
    s.stack = {"layers": str(s.need("num_hidden_layers")), "ffn": ffn,
               "norm": f"rmsnorm(pre, eps = {eps})"}


_APERTUS = Names("layers.{i}.", {
    **ATTN, **linear("mlp.fc1", "mlp.up_proj"), **linear("mlp.fc2", "mlp.down_proj"),
    "mlp.up_proj.weight": "mlp.up_proj.weight", "mlp.down_proj.weight": "mlp.down_proj.weight",
    "mlp.act_fn.alpha_p": "mlp.act_fn.alpha_p", "mlp.act_fn.alpha_n": "mlp.act_fn.alpha_n",
    "attn_norm.weight": "attention_layernorm.weight",
    "ffn_norm.weight": "feedforward_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",),
    # XIELUActivation's constant buffers: the spec's beta and eps (0.5, -1e-6)
    outside=(r"layers\.\d+\.mlp\.act_fn\.(beta|eps)",))

# transformers' defaults (ApertusConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("apertus", _read, _APERTUS, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if k != "mlp_bias"},
        "intermediate_size": 14336, "hidden_act": "xielu", "rms_norm_eps": 1e-5}, lm=True,
        rope={"rope_type": "llama3", "rope_theta": 12000000.0, "factor": 8.0,
              "original_max_position_embeddings": 8192, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0}),
]
