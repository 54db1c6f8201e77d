"""CWM (Meta's Code World Model): a Llama decoder without attention biases whose layers are
sliding or full per `layer_types` (else every 4th layer from the first full, as CwmConfig
derives them), with Llama 3 RoPE scaling by default."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .text import SpecText

__all__ = ["FAMILIES"]

# CwmConfig's rope_parameters when config.json gives none (whatever rope_theta says)
_ROPE = {"rope_type": "llama3", "rope_theta": 1000000.0, "factor": 16.0,
         "high_freq_factor": 4.0, "low_freq_factor": 1.0,
         "original_max_position_embeddings": 8192}


def _read(s: SpecText, padding: str | None) -> None:
    if s.get("rope_parameters") is None:
        s.cfg["rope_parameters"] = dict(_ROPE)
    if not s.get("layer_types"):
        s.cfg["layer_types"] = ["full_attention" if i % 4 == 0 else "sliding_attention"
                                for i in range(s.need("num_hidden_layers"))]
    read_llama(s, padding)
    for entries in s.attentions.values():
        entries["bias"] = "false"  # CwmAttention's projections never have one


# transformers' defaults (CwmConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("cwm", _read, LLAMA, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if k != "attention_bias"},
        "hidden_size": 6144, "intermediate_size": 21504, "num_hidden_layers": 64,
        "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
        "rms_norm_eps": 1e-5, "sliding_window": 8192}, lm=True),
]
