"""IBM Granite (3.x): a Llama decoder with four multipliers: the embeddings times
embedding_multiplier, scores scaled by attention_multiplier (instead of 1 / sqrt(head_dim)),
each sublayer's output times residual_multiplier and the logits divided by logits_scaling."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    for entries in s.attentions.values():
        entries["scale"] = num(s.need("attention_multiplier"))
    # need() gives 0 for a missing field, having recorded the problem: nothing is written then
    if (residual := s.need("residual_multiplier")) not in (0, 1):
        s.stack["residual_scale"] = num(residual)
    if (embedding := s.need("embedding_multiplier")) not in (0, 1):
        s.head["embedding_scale"] = num(embedding)
    if (logits := s.need("logits_scaling")) not in (0, 1):
        s.head["logit_scale"] = f"1 / {num(logits)}"


# transformers' defaults (GraniteConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("granite", _read, LLAMA, {
        **LLAMA_DEFAULTS, "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "rms_norm_eps": 1e-6,
        "embedding_multiplier": 1.0, "logits_scaling": 1.0, "residual_multiplier": 1.0,
        "attention_multiplier": 1.0}, lm=True),
]
