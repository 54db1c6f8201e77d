"""Arcee (AFM): a Llama decoder whose MLP is not gated: down(act(up(x))) with `hidden_act`,
squared ReLU (`relu2`) by default, as Nemotron's."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA_DEFAULTS
from .llama import read as read_llama
from .names import ATTN, LM, Names, linear
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding, gated=False)


_ARCEE = Names("layers.{i}.", {
    **ATTN, **linear("mlp.fc1", "mlp.up_proj"), **linear("mlp.fc2", "mlp.down_proj"),
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (ArceeConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("arcee", _read, _ARCEE, {
        **LLAMA_DEFAULTS, "hidden_size": 2560, "intermediate_size": 18432,
        "hidden_act": "relu2", "rms_norm_eps": 1e-5}, lm=True),
]
