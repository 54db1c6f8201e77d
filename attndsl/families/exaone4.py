"""EXAONE 4 (LG AI): OLMo 2's post-sublayer norms (`rmsnorm(output)`) with Qwen 3's per-head
q and k RMSNorm before RoPE, sliding and full layers (`layer_types`, else every
`sliding_window_pattern`-th layer full), and no position at all on the full layers of a
hybrid model (when `sliding_window` is set: "global NoPE"); without a window every layer is
full and rotated."""

from __future__ import annotations

from .base import Family
from .llama import read as read_llama
from .olmo2 import OLMO2
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    layers, window = s.need("num_hidden_layers"), s.get("sliding_window")
    types = s.get("layer_types")
    if not types:  # as Exaone4Config derives them, from an integer pattern
        every = s.get("sliding_window_pattern")
        if window is not None and (not isinstance(every, int) or every < 1):
            s.refuse("sliding_window_pattern", "Exaone4Config derives layer_types from an "
                                               "integer pattern >= 1 only: give layer_types")
            every = 1
        types = ["sliding_attention" if window is not None and (i + 1) % every else
                 "full_attention" for i in range(layers)]
        s.cfg["layer_types"] = types
    if window is not None and isinstance(types, list):  # Exaone4Attention: NoPE full layers
        s.cfg["no_rope_layers"] = [int(k == "sliding_attention") for k in types]
    read_llama(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for name, entries in list(s.attentions.items()):
        entries["qk_norm"] = f"rmsnorm(eps = {eps})"
        if name.endswith("_nope"):
            s.comments[name] = "a full layer of a hybrid model: no position encoding (NoPE)"
    s.stack["norm"] = f"rmsnorm(output, eps = {eps})"


# transformers' defaults (Exaone4Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("exaone4", _read, OLMO2, {
        "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": 4096,
        "sliding_window_pattern": 4},
        inert={"sliding_window_pattern": "derived by Exaone4Config into layer_types, which the "
                                         "import reads (the pattern only without them)"},
        lm=True),
]
