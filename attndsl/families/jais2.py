"""Jais 2: a Llama decoder with LayerNorms (with biases, `layer_norm_eps`) in place of its
RMSNorms and Nemotron's MLP without a gate, down(act(up(x))) with `hidden_act`, squared ReLU
(`relu2`) by default; biases on the projections and the MLP by default."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA_DEFAULTS
from .llama import read as read_llama
from .names import ATTN, LM, Names, linear, norms
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES", "UNGATED"]


def _read(s: SpecText, padding: str | None) -> None:
    eps = s.need("layer_norm_eps")
    s.cfg["rms_norm_eps"] = eps  # (Jais2Config has none: the Llama reader's norm, replaced)
    read_llama(s, padding, gated=False)
    s.stack["norm"] = f"layernorm(pre, eps = {num(eps)})"


# Llama's attention and norms with an MLP without a gate (fc1 = up_proj, fc2 = down_proj):
# Jais 2's names, and Nemotron's
UNGATED = Names("layers.{i}.", {
    **ATTN, **linear("mlp.fc1", "mlp.up_proj"), **linear("mlp.fc2", "mlp.down_proj"),
    **norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"})},
    {**linear("norm", "norm"), **LM}, ("model.",))

# transformers' defaults (Jais2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("jais2", _read, UNGATED, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if k != "rms_norm_eps"},
        "hidden_size": 3328, "intermediate_size": 26624, "num_hidden_layers": 32,
        "num_attention_heads": 26, "hidden_act": "relu2", "layer_norm_eps": 1e-05,
        "attention_bias": True, "mlp_bias": True}, lm=True),
]
