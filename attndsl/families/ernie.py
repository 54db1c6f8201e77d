"""ERNIE 4.5 (Baidu): a Llama decoder whose RoPE pairs features 2i and 2i + 1 over the whole
head (transformers' cos/sin halves repeat_interleave'd, GLM's rotate_half: `rope(interleaved =
true)`), with `use_bias` putting biases on every projection (q, k, v, o and the SwiGLU's three)
and a tied embedding by default. ERNIE 4.5 MoE (`ernie4_5_moe`): the same attention, and on
the layers from moe_layer_start_index to moe_layer_end_index whose index + 1 is a multiple of
moe_layer_interval a mixture: a softmax router choosing the top moe_k by probability plus
`moe_statics.e_score_correction_bias` (`selection_bias`), the chosen probabilities
renormalised, SwiGLU experts without biases beside moe_num_shared_experts shared ones (with
use_bias's biases); with use_bias the LM head has a bias too."""

from __future__ import annotations

from typing import Any

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .moe import ROUTER_INERT, expanded
from .names import Names
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


def _read_moe(s: SpecText, padding: str | None) -> None:
    _read(s, padding)
    layers, bias = s.need("num_hidden_layers"), ", bias = true" if s.get("use_bias") else ""
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "ERNIE 4.5 MoE's experts are SwiGLU (silu)")
    start, every = s.get("moe_layer_start_index", default=1), s.get("moe_layer_interval",
                                                                     default=1)
    end = s.get("moe_layer_end_index", default=-1)
    end = layers - 1 if end == -1 else end  # as Ernie4_5_MoeConfig reads -1
    dense = [i for i in range(layers) if not ((i + 1) % max(every, 1) == 0 and start <= i <= end)]
    if len(dense) == layers:  # every layer dense: the stack's MLP as ERNIE 4.5's
        return
    hidden = s.need("moe_intermediate_size")
    ffn = (f"moe(experts = {s.need('moe_num_experts')}, top_k = {s.need('moe_k')}, "
           f"expert = swiglu({hidden}), selection_bias = true")
    if shared := s.get("moe_num_shared_experts", default=0):
        ffn += f", shared = swiglu({hidden * shared}{bias})"
    if dense:
        ffn += f", dense = swiglu({s.need('intermediate_size')}{bias}), dense_layers = {dense}"
    s.stack["ffn"] = ffn + ")"
    if bias:
        s.head["head_bias"] = "true"


def _flat(t: Any, a: Any, cfg: dict) -> Any:
    """moe_statics.e_score_correction_bias [1, experts] (one group) as [experts]."""
    return t.reshape(-1)


_GATED = ("gate_proj", "up_proj", "down_proj")
_ERNIE_MOE = Names("layers.{i}.", {
    **LLAMA.names,
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _GATED},
    **{f"mlp.shared.{p}.{t}": f"mlp.shared_experts.{p}.{t}" for p in _GATED
       for t in ("weight", "bias")},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.selection_bias": ("mlp.moe_statics.e_score_correction_bias", _flat)},
    {**LLAMA.top, "lm_head.bias": "lm_head.bias"}, LLAMA.bases)


def _ernie_moe_names(cfg: dict) -> Names:
    """The table with its experts expanded (their count is moe_num_experts)."""
    return expanded(_ERNIE_MOE)({"num_experts": cfg.get("moe_num_experts") or 0})


# transformers' defaults (Ernie4_5Config, Ernie4_5_MoeConfig, 5.23) for the fields the import
# reads
FAMILIES = [
    Family("ernie4_5", _read, LLAMA, {
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
        "num_attention_heads": 16, "num_key_value_heads": 2, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "use_bias": False,
        "head_dim": 128}, lm=True,
        rope={"rope_type": "default", "rope_theta": 500000.0}),
    Family("ernie4_5_moe", _read_moe, _ERNIE_MOE, {
        "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
        "num_attention_heads": 20, "num_key_value_heads": 4, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "use_bias": False,
        "moe_intermediate_size": 1536, "moe_k": 6, "moe_num_experts": 64,
        "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
        "moe_layer_interval": 1, "moe_norm_min": 1e-12},
        inert=ROUTER_INERT,
        refused={"moe_norm_min": (lambda v: isinstance(v, int | float) and v > 1e-6,
                                  "the floor of the chosen experts' probability sum before "
                                  "renormalising: attndsl renormalises by the sum itself, the "
                                  "same above the floor (1e-12 by default); a floor this high "
                                  "would bind")},
        lm=True, weights_for=_ernie_moe_names,
        rope={"rope_type": "default", "rope_theta": 500000.0}),
]
