"""Model types that transformers builds on an existing family and that compute exactly what it
does, read by that family's reader and name table: `iquestcoder` (IQuest-Coder, Llama's decoder
with its own defaults)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, read

__all__ = ["FAMILIES"]

# transformers' defaults (IQuestCoderConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("iquestcoder", read, LLAMA, {
        "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 80,
        "num_attention_heads": 40, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "attention_bias": False,
        "mlp_bias": False, "head_dim": 128}, lm=True),
]
