"""Seed-OSS (ByteDance): a Llama decoder whose q, k and v biases (`attention_bias`) and o_proj
bias (`attention_out_bias`) are set apart."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    have = [p for p, on in (("q, k, v", s.cfg.get("attention_bias")),
                            ("o", s.cfg.get("attention_out_bias"))) if on]
    for entries in s.attentions.values():
        entries["bias"] = f"[{', '.join(have)}]" if have else "false"


# transformers' defaults (SeedOssConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("seed_oss", _read, LLAMA, {
        **LLAMA_DEFAULTS, "hidden_size": 4096, "intermediate_size": 27648,
        "num_hidden_layers": 64, "num_attention_heads": 80, "num_key_value_heads": 8,
        "head_dim": 128, "attention_bias": True, "attention_out_bias": False}, lm=True),
]
