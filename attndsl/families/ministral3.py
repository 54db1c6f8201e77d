"""Ministral 3: Mistral's decoder (a window on every layer when `sliding_window` is set) with
YaRN by default and Llama 4's query scaling by position: after RoPE, the query at position p
times 1 + beta * ln(1 + floor(p / n)), beta = `llama_4_scaling_beta` and n =
`original_max_position_embeddings` of `rope_parameters` (`temperature = log(floor = n, scale =
beta, offset = 0)`)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]

# Ministral3Config's rope_parameters when config.json gives none (whatever rope_theta says)
_ROPE = {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
         "original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0,
         "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1}


def _read(s: SpecText, padding: str | None) -> None:
    if s.get("rope_parameters") is None:
        s.cfg["rope_parameters"] = dict(_ROPE)
    read_llama(s, padding)
    params = s.cfg["rope_parameters"]
    beta, span = params.get("llama_4_scaling_beta"), params.get(
        "original_max_position_embeddings")
    if not isinstance(beta, int | float) or isinstance(beta, bool) or beta < 0 or \
            not isinstance(span, int) or isinstance(span, bool) or span < 1:
        s.refuse("rope_parameters", "Ministral 3 scales its queries by `llama_4_scaling_beta` "
                                    "(a number >= 0) over `original_max_position_embeddings` "
                                    "(an integer >= 1), both in rope_parameters")
        return
    if beta:
        for entries in s.attentions.values():
            entries["temperature"] = f"log(floor = {span}, scale = {num(beta)}, offset = 0)"


# transformers' defaults (Ministral3Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("ministral3", _read, LLAMA, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if not k.endswith("_bias")},
        "intermediate_size": 14336, "num_hidden_layers": 34, "num_key_value_heads": 8,
        "head_dim": 128, "rms_norm_eps": 1e-5},
        inert={"layer_types": "Ministral3Config keeps it unused: every layer slides when "
                              "sliding_window is set, as Mistral's"}, lm=True),
]
