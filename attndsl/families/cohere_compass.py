"""Cohere Compass's text model (`cohere_compass_text`): Cohere 2's blocks (one bias-free
LayerNorm feeding attention and the SwiGLU MLP in parallel; sliding and full layers by
`layer_types`; logits times logit_scale) with multimodal RoPE: each layer kind rotates by its
own `rope_parameters` entry (none: NoPE) in the rotate-half layout, its frequencies taking the
time, height and width position streams interleaved by `mrope_section` (Qwen3-VL's layout,
`rope(..., mrope = [t, h, w], mrope_interleaved = true)`; text positions, all three equal,
reduce it to 1-D RoPE). The model takes position_ids [3, B, L]: transformers' fourth (text)
row, which places its mask, is the first stream for text."""

from __future__ import annotations

from .base import Family
from .cohere2 import COHERE2, base_entries, blocks, known_kinds
from .rope import interleaved_mrope, rope
from .text import SpecText, mask

__all__ = ["FAMILIES"]

_SECTIONS = [24, 20, 20]  # CohereCompassRotaryEmbedding's default mrope_section


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = d // max(heads, 1)  # (CohereCompassTextConfig sets it so, whatever it reads)
    layers = s.need("num_hidden_layers")
    types = cfg.get("layer_types") or ["full_attention"] * layers
    if not known_kinds(s, types, "Cohere Compass"):
        return
    ropes = cfg.get("rope_parameters")
    if not isinstance(ropes, dict) or any(k not in ropes for k in dict.fromkeys(types)):
        s.refuse("rope_parameters", "Cohere Compass reads an entry per layer type (its "
                                    "parameters, or null for no positions)")
        return
    window, base = s.get("sliding_window"), base_entries(s, head_dim)
    for kind in dict.fromkeys(types):
        slide, params = kind == "sliding_attention", ropes[kind]
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
            window = 1
        position = "none" if params is None else interleaved_mrope(
            s, rope(s, params, head_dim), params.get("mrope_section") or _SECTIONS)
        if position is None:
            return
        name = "compass_local" if slide else "compass_global"
        s.attentions[name] = dict(base, position=position,
                                  mask=mask(True, padding, window if slide else None))
        s.comments[name] = (f"sliding_window = {window}" if slide else "a full layer") + (
            ", multimodal RoPE" if params is not None else ": no position encoding (NoPE)")
    blocks(s, layers, types, "compass", cfg.get("logit_scale"))


# transformers' defaults (CohereCompassTextConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("cohere_compass_text", _read, COHERE2, {
        "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
        "num_attention_heads": 64, "hidden_act": "silu", "layer_norm_eps": 1e-5,
        "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096},
        inert={"pooling": "an embedding model's pooling, not the language model's forward",
               "head_dim": "CohereCompassTextConfig sets it to hidden_size // "
                           "num_attention_heads, whatever config.json says"},
        lm=True),
]
