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
from .cohere2 import COHERE2, blocks
from .rope import rope
from .text import SpecText, mask

__all__ = ["FAMILIES"]

_SECTIONS = [24, 20, 20]  # CohereCompassRotaryEmbedding's default mrope_section


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = d // max(heads, 1)  # (CohereCompassTextConfig sets it so, whatever it reads)
    layers = s.need("num_hidden_layers")
    types = cfg.get("layer_types") or ["full_attention"] * layers
    if other := [t for t in dict.fromkeys(types) if t not in ("sliding_attention",
                                                              "full_attention")]:
        s.refuse("layer_types", "Cohere Compass's layers are sliding_attention or "
                                f"full_attention; attndsl does not import layer kind `{other[0]}`")
        return
    ropes = cfg.get("rope_parameters")
    if not isinstance(ropes, dict) or any(k not in ropes for k in dict.fromkeys(types)):
        s.refuse("rope_parameters", "Cohere Compass reads an entry per layer type (its "
                                    "parameters, or null for no positions)")
        return
    window = s.get("sliding_window")
    base = {"d_model": str(d), "heads": str(heads),
            "kv_heads": str(s.get("num_key_value_heads", default=heads)),
            "head_dim": str(head_dim), "bias": "true" if cfg.get("attention_bias") else "false"}
    for kind in dict.fromkeys(types):
        slide, params = kind == "sliding_attention", ropes[kind]
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
            window = 1
        position = "none"
        if params is not None:
            sections = params.get("mrope_section") or _SECTIONS
            if not (isinstance(sections, list) and len(sections) == 3 and all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0
                    for n in sections)):
                s.refuse("rope_parameters", "`mrope_section` must be three integers >= 0 "
                                            "(the time, height and width sections)")
                return
            t, h, w = sections
            position = (f"{rope(s, params, head_dim)[:-1]}, mrope = [{t}, {h}, {w}], "
                        "mrope_interleaved = true)")
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
