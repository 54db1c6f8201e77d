"""Granite SWA (Granite Swash): IBM Granite's decoder (its four multipliers) with a learned
attention sink per head on every layer (`sinks = learned`: transformers rescales each head's
output by sigmoid(logsumexp(scores) - sink), the same as the sink's extra logit in the
softmax's denominator), sliding or full layers per `layer_types` (else every 4th layer from the
first full, as GraniteSWAConfig derives them), and a RoPE base per layer (`layer_rope_theta`;
0: a NoPE layer)."""

from __future__ import annotations

from collections.abc import Callable

from .base import Family
from .granite import FAMILIES as GRANITE
from .llama import LLAMA
from .names import Names
from .rope import rope
from .text import SpecText, period

__all__ = ["FAMILIES", "read_swa"]

# a family's reader: the config's text and the padding side
Reader = Callable[[SpecText, str | None], None]


def read_swa(s: SpecText, padding: str | None, dense: Reader | None = None) -> None:
    """Granite SWA's reader around `dense`, the reader of the decoder without sinks, sliding
    layers and per-layer bases (Granite's; GraniteMoE's for granitemoe_swa)."""
    layers = s.need("num_hidden_layers")
    if not s.get("layer_types"):
        s.cfg["layer_types"] = ["full_attention" if i % 4 == 0 else "sliding_attention"
                                for i in range(layers)]
    params = dict(s.get("rope_parameters") or {})
    params.setdefault("rope_theta", s.get("rope_theta", default=10000.0))
    thetas = s.get("layer_rope_theta") or [params["rope_theta"]] * layers
    if not isinstance(thetas, list) or len(thetas) != layers:
        s.refuse("layer_rope_theta", f"a list of {layers} entries (one per layer) is needed")
        thetas = [params["rope_theta"]] * layers
    s.cfg["no_rope_layers"] = [1 if theta else 0 for theta in thetas]  # llama's NoPE layers
    (dense or GRANITE[0].read)(s, padding)
    if not s.pattern:
        return
    # each layer's attention as the Granite reader named it by kind, then one per RoPE base
    template = [s.pattern[i % len(s.pattern)] for i in range(layers)]
    per_name: dict[str, list[float]] = {}
    for name, theta in zip(template, thetas, strict=True):
        per_name.setdefault(name, [])
        if theta not in per_name[name]:
            per_name[name].append(theta)
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    attentions, comments, names = {}, {}, []
    for name, theta in zip(template, thetas, strict=True):
        many = len(per_name[name]) > 1
        ours = f"{name}_{per_name[name].index(theta)}" if many else name
        names.append(ours)
        if ours in attentions:
            continue
        entries = dict(s.attentions[name], sinks="learned")
        if theta:
            entries["position"] = rope(s, {**params, "rope_theta": theta}, head_dim)
        mask = entries.pop("mask")  # the mask stays last
        entries["mask"] = mask
        attentions[ours] = entries
        if name in s.comments:
            comments[ours] = s.comments[name]
    s.attentions, s.comments = attentions, comments
    s.pattern = period(names)


_GRANITE_SWA = Names(LLAMA.layer, {**LLAMA.names, "self_attn.sinks": "self_attn.sinks"},
                     LLAMA.top, LLAMA.bases)

# transformers' defaults (GraniteSWAConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("granite_swa", read_swa, _GRANITE_SWA, {
        **GRANITE[0].defaults, "hidden_size": 2560, "intermediate_size": 8192,
        "num_hidden_layers": 24, "num_attention_heads": 20, "num_key_value_heads": 4,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "sliding_window": 128}, lm=True),
]
