"""InternLM3: transformers runs it as Llama (its model classes are Llama's). Its own config
names, `qkv_bias` and `bias`, are transformers' aliases of `attention_bias` and `mlp_bias`,
which must agree (InternLM3Config refuses them apart)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    for alias, key in (("qkv_bias", "attention_bias"), ("bias", "mlp_bias")):
        if s.get(alias) is not None:  # InternLM3Config.attribute_map
            s.cfg[key] = s.cfg[alias]
    if bool(s.get("attention_bias")) != bool(s.get("mlp_bias")):
        s.refuse("attention_bias", f"InternLM3 runs as Llama, whose attention_bias and "
                                   f"mlp_bias (qkv_bias and bias) agree; mlp_bias is "
                                   f"{str(bool(s.get('mlp_bias'))).lower()}")
    read_llama(s, padding)


# transformers' defaults (InternLM3Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("internlm3", _read, LLAMA, {
        **LLAMA_DEFAULTS, "intermediate_size": 10240, "num_hidden_layers": 48,
        "num_key_value_heads": 2, "head_dim": 128, "rms_norm_eps": 1e-5}, lm=True),
]
