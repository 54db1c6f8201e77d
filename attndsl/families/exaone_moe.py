"""EXAONE MoE: a pre-norm RMSNorm decoder whose q and k heads are RMS-normed before RoPE,
whose sliding layers (layer_types) rotate q and k and whose full layers have no positions
(NoPE; every layer is rotated and full when sliding_window is null); mlp_layer_types' `dense`
layers run a SwiGLU of intermediate_size and the `sparse` ones DeepSeek-V3's mixture: a
sigmoid router choosing by score plus e_score_correction_bias among the topk_group best of
n_group groups, renormalised with norm_topk_prob, times routed_scaling_factor, over SwiGLU
experts of moe_intermediate_size beside num_shared_experts shared ones."""

from __future__ import annotations

from .base import Family
from .moe import ROUTER_INERT, expanded, grouped_sigmoid, layer_kinds, mixture
from .names import ATTN, LM, Names
from .rope import num, rope
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES"]


def _types(s: SpecText, layers: int) -> tuple[list[str], list[str]]:
    """layer_types and mlp_layer_types, derived as ExaoneMoeConfig derives them when absent."""
    window = s.get("sliding_window")
    every = s.need("sliding_window_pattern") if window else 0
    types = s.get("layer_types") or [
        "sliding_attention" if every and (i + 1) % every else "full_attention"
        for i in range(layers)]
    return layer_kinds(s, layers, types, "EXAONE MoE")


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    layers, eps = s.need("num_hidden_layers"), num(s.need("rms_norm_eps"))
    types, mlps = _types(s, layers)
    window = s.get("sliding_window")
    base = {"d_model": str(d), "heads": str(heads),
            "kv_heads": str(s.get("num_key_value_heads", default=heads)),
            "head_dim": str(head_dim), "bias": "false", "qk_norm": f"rmsnorm(eps = {eps})"}
    names = {}
    for kind in dict.fromkeys(types):
        slide = kind == "sliding_attention"
        roped = slide or not window  # ExaoneMoeAttention: full layers are NoPE beside windows
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
        name = names[kind] = "exaone_moe_local" if slide else "exaone_moe_global"
        s.attentions[name] = dict(
            base, position=rope(s, cfg.get("rope_parameters"), head_dim) if roped else "none",
            mask=mask(True, padding, (window or 1) if slide else None))
        s.comments[name] = (f"sliding_window = {window}, RoPE" if slide else
                            "a full layer with RoPE" if roped else
                            "a full layer: no position encoding (NoPE)")
    s.pattern = [names[k] for k in period(types)]
    if act(s, "hidden_act", s.need("hidden_act"), gated=True) != "silu":
        s.refuse("hidden_act", "EXAONE MoE's MLPs and experts are imported as SwiGLU (silu)")
    hidden = s.need("moe_intermediate_size")
    ffn = grouped_sigmoid(s, "num_experts", "num_shared_experts", "swiglu", hidden)
    dense = [i for i, m in enumerate(mlps) if m == "dense"]
    s.stack = {"layers": str(layers),
               "ffn": mixture(ffn, dense, layers, s.need("intermediate_size")),
               "norm": f"rmsnorm(pre, eps = {eps})"}


_P = ("gate_proj", "up_proj", "down_proj")
_EXAONE_MOE = Names("layers.{i}.", {
    **ATTN, "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    **{f"mlp.{p}.weight": f"mlp.{p}.weight" for p in _P},
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.weight",
    # where transformers 5.23 saves it (and reads it back from): beside the gate, not in it
    "mlp.router.selection_bias": "mlp.e_score_correction_bias",
    **{f"mlp.shared.{p}.weight": f"mlp.shared_experts.{p}.weight" for p in _P}},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

_DERIVED = "read into {} by ExaoneMoeConfig; the import reads it only when {} is absent"
# transformers' defaults (ExaoneMoeConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("exaone_moe", _read, _EXAONE_MOE, {
        "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": 4096,
        "sliding_window_pattern": 4, "first_k_dense_replace": 1, "moe_intermediate_size": 1024,
        "num_experts": 64, "num_experts_per_tok": 8, "num_shared_experts": 1,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "n_group": 1, "topk_group": 1},
        inert={**ROUTER_INERT,
               "sliding_window_pattern": _DERIVED.format("layer_types", "layer_types"),
               "first_k_dense_replace": _DERIVED.format("mlp_layer_types", "mlp_layer_types")},
        lm=True, weights_for=expanded(_EXAONE_MOE)),
]
