"""OLMo Hybrid (`olmo_hybrid`): gated delta-rule layers (`linear_attention`: Gated DeltaNet with
its own q, k, v, a, b and g projections, beta doubled where linear_allow_neg_eigval, so that the
state's transition may have a negative eigenvalue; its output RMSNorm's eps 1e-5) among OLMo 3's
softmax layers (`full_attention`: q and k RMS-normed over all heads, RoPE as transformers 5.23
builds it, from rope_parameters, theta 10000 where none is given), as layer_types says. The
delta-rule blocks put their norms before the sublayers, the softmax blocks after them (OLMo
2's): `placements`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Family
from .names import ATTN, GATED, LM, Names
from .rope import num, rope
from .text import SpecText, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("linear_attention", "full_attention")


def _types(s: SpecText, layers: int) -> list:
    """layer_types, else every fourth layer full (the last one where none is), as
    OlmoHybridConfig derives them."""
    types = s.get("layer_types")
    if types is None:
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
        if "full_attention" not in types and types:
            types[-1] = "full_attention"
    return types


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    layers, eps = s.need("num_hidden_layers"), s.need("rms_norm_eps")
    types = _types(s, layers)
    if not isinstance(types, list) or len(types) != layers or \
            not all(t in _KINDS for t in types):
        s.refuse("layer_types", f"one entry per layer ({layers}), each linear_attention or "
                                "full_attention")
        return
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "the delta rule's convolution and the MLPs use silu")
    key_heads = s.get("linear_num_key_heads", default=heads)
    value_heads = s.get("linear_num_value_heads", default=heads)
    key_dim = s.get("linear_key_head_dim", default=int(0.75 * d / max(key_heads, 1)))
    value_dim = s.get("linear_value_head_dim", default=2 * key_dim)
    negative = "true" if s.get("linear_allow_neg_eigval", default=True) else "false"
    linear, full = f"{s.name}_linear", f"{s.name}_full"
    s.attentions[linear] = {
        "d_model": str(d), "heads": str(value_heads), "head_dim": str(key_dim),
        "value_dim": str(value_dim), "bias": "false",
        "kernel": f"delta_rule(key_heads = {key_heads}, conv = "
                  f"{s.need('linear_conv_kernel_dim')}, chunk = 64, eps = 1e-5, "
                  f"negative_eigenvalues = {negative})",
        "mask": mask(True, padding)}
    s.comments[linear] = ("gated delta rule (linear attention): a state per value head; "
                          "padding slots are skipped")
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    s.attentions[full] = {
        "d_model": str(d), "heads": str(heads),
        "kv_heads": str(s.get("num_key_value_heads", default=heads)),
        "head_dim": str(head_dim), "bias": "true" if cfg.get("attention_bias") else "false",
        "qk_norm": f"rmsnorm(eps = {num(eps)}, across_heads = true)",
        # (transformers 5.23 rotates whatever config.json says: its rope_parameters default to
        # theta 10000, and an old top-level rope_theta is read into them)
        "position": rope(s, cfg.get("rope_parameters"), head_dim),
        "mask": mask(True, padding)}
    names = {"linear_attention": linear, "full_attention": full}
    kinds = period(types)
    s.pattern = [names[t] for t in kinds]
    for kind in set(_KINDS) - set(types):
        del s.attentions[names[kind]]
    s.stack = {"layers": str(layers), "ffn": f"swiglu({s.need('intermediate_size')})",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}
    if "full_attention" in types:
        s.stack["placements"] = "[" + ", ".join(
            "pre" if t == "linear_attention" else "output" for t in kinds) + "]"


def _joined(t: list, a: Any, cfg: dict) -> Any:
    """The convolution's channels [q | k | v], stored as three tensors (as save_pretrained
    writes them, in three row blocks whatever their widths)."""
    return np.concatenate([np.asarray(x) for x in t], axis=0)


_LA = "linear_attn."
# as the checkpoints hold them (transformers renames attention_layer_norm to input_layernorm,
# feedforward_layer_norm to post_attention_layernorm, and joins the three convolutions)
_OLMO_HYBRID = Names("layers.{i}.", {
    **ATTN, **GATED, "post_attn_norm.weight": "feedforward_layer_norm.weight",
    "post_ffn_norm.weight": "post_feedforward_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",),
    by_kernel={"DeltaRule": {
        **{f"self_attn.{p}_proj.weight": f"{_LA}{q}_proj.weight"
           for p, q in (("q", "q"), ("k", "k"), ("v", "v"), ("z", "g"), ("b", "b"),
                        ("a", "a"), ("o", "o"))},
        **{f"self_attn.{n}": f"{_LA}{n}" for n in ("dt_bias", "A_log")},
        "self_attn.conv1d.weight": (f"{_LA}q_conv1d.weight", _joined,
                                    (f"{_LA}k_conv1d.weight", f"{_LA}v_conv1d.weight")),
        "self_attn.norm.weight": f"{_LA}o_norm.weight",
        "attn_norm.weight": "attention_layer_norm.weight",
        "ffn_norm.weight": "feedforward_layer_norm.weight"}})

# transformers' defaults (OlmoHybridConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("olmo_hybrid", _read, _OLMO_HYBRID, {
        "hidden_size": 3840, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 30, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "attention_bias": False, "linear_conv_kernel_dim": 4,
        "linear_allow_neg_eigval": True},
        inert={"linear_a_log_min": "the initial A_log's range (training)",
               "linear_a_log_max": "the initial A_log's range (training)",
               "linear_dt_min": "the initial dt's range (training)",
               "linear_dt_max": "the initial dt's range (training)",
               "linear_dt_init_floor": "the initial dt's floor (training)"},
        lm=True, types={"linear_allow_neg_eigval": ("bool", None)}),
]
