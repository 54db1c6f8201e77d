"""ERNIE 4.5 (Baidu): a Llama decoder whose RoPE pairs features 2i and 2i + 1 over the whole
head (transformers' cos/sin halves repeat_interleave'd, GLM's rotate_half: `rope(interleaved =
true)`), with `use_bias` putting biases on every projection (q, k, v, o and the SwiGLU's three)
and a tied embedding by default."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .text import SpecText

__all__ = ["FAMILIES", "biased"]


def biased(s: SpecText) -> None:
    """`use_bias`: a bias on every attention projection and on the MLP's three linears."""
    if not s.get("use_bias", default=False):
        return
    for entries in s.attentions.values():
        entries["bias"] = "true"
    ffn = s.stack["ffn"]
    if ffn.startswith(("swiglu(", "geglu(")) and "bias" not in ffn:
        s.stack["ffn"] = ffn[:-1] + ", bias = true)"


def _read(s: SpecText, padding: str | None) -> None:
    if s.get("partial_rotary_factor", default=1.0) != 1.0 or (
            s.cfg.get("rope_parameters") or {}).get("partial_rotary_factor", 1.0) != 1.0:
        s.refuse("rope_parameters", "ERNIE 4.5 rotates every feature of a head (its "
                                    "apply_rotary_pos_emb has no pass-through part)")
    read_llama(s, padding, interleaved=True)
    biased(s)


# transformers' defaults (Ernie4_5Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("ernie4_5", _read, LLAMA, {
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
        "num_attention_heads": 16, "num_key_value_heads": 2, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "use_bias": False,
        "head_dim": 128}, lm=True),
]
