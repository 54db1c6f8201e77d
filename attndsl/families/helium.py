"""Helium (Kyutai): a Llama decoder whose RoPE pairs features 2i and 2i + 1 (its
`apply_rotary_pos_emb` repeats each frequency twice: `interleaved = true`), whose
`attention_bias` gives q, k and v biases but never o_proj one, and whose RoPE base defaults
to 100000."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .rope import default_theta
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    default_theta(s, 100000.0)  # HeliumConfig.default_theta
    read_llama(s, padding, interleaved=True)
    for entries in s.attentions.values():
        entries["bias"] = "[q, k, v]" if s.cfg.get("attention_bias") else "false"


# transformers' defaults (HeliumConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("helium", _read, LLAMA, {
        **LLAMA_DEFAULTS, "hidden_size": 2560, "intermediate_size": 7040,
        "num_hidden_layers": 24, "num_attention_heads": 20, "num_key_value_heads": 20,
        "head_dim": 128, "rms_norm_eps": 1e-8}, lm=True),
]
