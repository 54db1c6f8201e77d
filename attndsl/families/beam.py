"""Beam (Reflection's Beam-1.0): AFMoE's attention (q and k RMS-normed per head; each head's
output gated elementwise by the sigmoid of its own projection, `gate_proj`, plus a learned bias
per head, `gate_bias`: attndsl keeps the gate rows after each head's query rows and the bias in
the query projection's bias, zero on the query rows; sliding layers rotated, full layers NoPE
with Beam's scalable-softmax query scale, `temperature = power(base = 2048, exponent = 0.1)`,
(1 + (p + 1) / 2048) ** 0.1); sandwich RMSNorms, each sublayer joining the residual depth-scaled
(`residual_scale = depth`: the n-th sublayer's output times 1/sqrt(n), the residual times
sqrt((n - 1)/n)); DeepSeek-V3's grouped sigmoid router, renormalised with norm_topk_prob, times
routed_scaling_factor, the layers mlp_layer_types names `dense` a SwiGLU; Gemma 2's final logit
softcap."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import Attention
from .base import Family
from .llama import LLAMA, read_nope_full
from .moe import ROUTER_INERT, expanded, grouped_sigmoid, mixture
from .names import Names, gate_joined
from .text import SpecText

__all__ = ["FAMILIES"]

# Beam's scalable-softmax query scale on its NoPE layers (compute_attention_scaling)
_SCALE = "power(base = 2048, exponent = 0.1)"


def _read(s: SpecText, padding: str | None) -> None:
    layers = s.need("num_hidden_layers")
    if not s.get("layer_types"):  # as BeamConfig derives them: every sixth and the last full
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
        s.cfg["layer_types"] = [*types[:-1], "full_attention"] if types else types
    ropes = s.get("rope_parameters") or {}
    if isinstance(ropes, dict) and ropes.get("full_attention") is not None:
        s.refuse("rope_parameters", "Beam's full layers run without RoPE (`full_attention`: "
                                    "null), with its scalable-softmax query scale")
    eps = read_nope_full(s, padding, output_gate="sigmoid")
    for name, entries in s.attentions.items():
        entries["bias"] = "[q]"  # (the gate's bias, in the query projection's gate rows)
        if name.endswith("_nope"):  # the full layers: queries scaled by position
            kept = entries.pop("mask")
            entries.update(temperature=_SCALE, mask=kept)
    moe = grouped_sigmoid(s, "num_experts", "n_shared_experts", "swiglu",
                          s.need("moe_intermediate_size"))
    kinds = s.get("mlp_layer_types")
    if kinds is None:  # as BeamConfig derives them: three dense layers, then sparse ones
        kinds = ["dense"] * min(3, layers) + ["sparse"] * max(0, layers - 3)
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= {"dense",
                                                                               "sparse"}:
        s.refuse("mlp_layer_types", f"{layers} entries, each `dense` or `sparse`, are needed")
        kinds = ["dense"] * layers
    s.stack["ffn"] = mixture(moe, [i for i, k in enumerate(kinds) if k == "dense"], layers,
                             s.need("intermediate_size"))
    s.stack["norm"] = f"rmsnorm(sandwich, eps = {eps})"
    s.stack["residual_scale"] = "depth"


def _gate_bias(t: Any, a: Attention, cfg: dict) -> Any:
    """The query projection's bias: per head zeros on its head_dim query rows, then its gate
    bias on each of its gate rows."""
    from ..mechanisms import MECHANISMS

    rows = MECHANISMS["output_gate"].query_rows(a, a.mechanism("output_gate"))
    bias = np.asarray(t).reshape(a.heads, 1)
    return np.concatenate([np.zeros((a.heads, a.head_dim), bias.dtype),
                           np.repeat(bias, rows, axis=1)], axis=1).reshape(-1)


_P = ("gate_proj", "up_proj", "down_proj")
_BEAM = Names(LLAMA.layer, {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("self_attn.q_proj.")},
    "self_attn.q_proj.weight": gate_joined("self_attn.gate_proj.weight")[
        "self_attn.q_proj.weight"],
    "self_attn.q_proj.bias": ("self_attn.gate_bias", _gate_bias),
    "post_attn_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffn_norm.weight": "post_feedforward_layernorm.weight",
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.selection_bias": "mlp.gate.e_score_correction_bias"}, LLAMA.top, LLAMA.bases)

# transformers' defaults (BeamConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("beam", _read, _BEAM, {
        "hidden_size": 5120, "intermediate_size": 20480, "num_hidden_layers": 52,
        "num_attention_heads": 48, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
        "sliding_window": 512, "moe_intermediate_size": 2560, "num_experts_per_tok": 8,
        "num_experts": 256, "norm_topk_prob": True, "head_dim": 128, "n_group": 8,
        "topk_group": 4, "routed_scaling_factor": 2.5, "final_logit_softcapping": 30.0},
        inert=ROUTER_INERT,
        refused={"attention_bias": (bool, "Beam's attention with biases has no import yet "
                                          "(its gate's bias shares the query projection's)"),
                 "hidden_act": (lambda v: v not in ("silu", "swish"),
                                "Beam's MLPs and experts are SwiGLU")},
        lm=True, weights_for=expanded(_BEAM)),
]
