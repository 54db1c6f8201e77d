"""Cohere 2 MoE: Cohere 2's parallel block (one pre-norm feeding attention and the MLP, a
LayerNorm without bias, or an RMSNorm when rms_norm_eps is set), its sliding layers with
interleaved RoPE and its full NoPE layers (the dense prefix layers' full ones keep RoPE when
prefix_dense_sliding_window_pattern is 1), and a mixture as its MLP: the router's top k
logits softmaxed (the softmax's top k renormalised) or passed through a sigmoid (renormalised
with norm_topk_prob), SwiGLU experts, num_shared_experts shared experts as one wider SwiGLU,
summed with the experts or averaged (`average`: the experts' gates and the shared expert's
down projection halved, exactly); mlp_layer_types' `dense` layers run a SwiGLU of
prefix_dense_intermediate_size."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .moe import ROUTER_INERT, expanded, layer_kinds, mixture
from .names import ATTN, LM, Names
from .rope import num, rope
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES"]


def _types(s: SpecText, layers: int) -> tuple[list[str], list[str]]:
    """layer_types and mlp_layer_types, derived as Cohere2MoeConfig derives them when absent
    (first_k_dense_replace dense layers, each pattern's every n-th layer full)."""
    first = s.get("first_k_dense_replace", default=0)
    types = s.get("layer_types") or [
        "sliding_attention" if (i + 1) % s.need("prefix_dense_sliding_window_pattern")
        else "full_attention" for i in range(first)] + [
        "sliding_attention" if (i + 1) % s.need("sliding_window_pattern") else "full_attention"
        for i in range(layers - first)]
    return layer_kinds(s, layers, types, "Cohere 2 MoE")


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    layers = s.need("num_hidden_layers")
    types, mlps = _types(s, layers)
    # Cohere2MoeAttention's force_rope: a dense layer rotates q and k even when full
    forced = s.get("prefix_dense_sliding_window_pattern") == 1
    kinds = [(t == "sliding_attention", t == "sliding_attention" or (m == "dense" and forced))
             for t, m in zip(types, mlps, strict=True)]
    window = s.get("sliding_window")
    base = {"d_model": str(d), "heads": str(heads),
            "kv_heads": str(s.get("num_key_value_heads", default=heads)),
            "head_dim": str(head_dim), "bias": "true" if cfg.get("attention_bias") else "false"}
    names = {}
    for slide, roped in dict.fromkeys(kinds):
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
            window = 1
        name = names[slide, roped] = ("cohere2_moe_local" if slide else "cohere2_moe_global"
                                      + ("_rope" if roped else ""))
        s.attentions[name] = dict(
            base, position=rope(s, cfg.get("rope_parameters"), head_dim, interleaved=True)
            if roped else "none", mask=mask(True, padding, window if slide else None))
        s.comments[name] = (f"sliding_window = {window}, RoPE (interleaved)" if slide else
                            "a full dense layer: RoPE (interleaved)" if roped else
                            "a full layer: no position encoding (NoPE)")
    s.pattern = [names[k] for k in period(kinds)]
    gate = act(s, "hidden_act", s.need("hidden_act"), gated=True)
    unit = "swiglu" if gate == "silu" else "geglu"
    width = s.need("intermediate_size")
    router = s.need("expert_selection_fn")
    if router not in ("softmax", "sigmoid"):
        s.refuse("expert_selection_fn", "Cohere 2 MoE's routers are softmax and sigmoid")
    # the softmax of the top k logits is always renormalised; norm_topk_prob is the sigmoid's
    normalize = bool(cfg.get("norm_topk_prob")) or router == "softmax"
    ffn = (f"moe(experts = {s.need('num_experts')}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = {unit}({width}), router = {'sigmoid' if router == 'sigmoid' else 'softmax'}"
           f", normalize = {'true' if normalize else 'false'}")
    how = s.need("shared_expert_combination_strategy")  # (with shared experts)
    if shared := s.get("num_shared_experts", default=0):
        ffn += f", shared = {unit}({width * shared})"
        if how == "average":
            ffn += ", routed_scale = 0.5"
        elif how != "sum":
            s.refuse("shared_expert_combination_strategy", "Cohere 2 MoE sums or averages")
    dense = [i for i, m in enumerate(mlps) if m == "dense"]
    layer_eps = s.need("layer_norm_eps")  # the LayerNorm's, unless rms_norm_eps is set
    s.stack = {"layers": str(layers),
               "ffn": mixture(ffn, dense, layers,
                              s.get("prefix_dense_intermediate_size", default=width)),
               "norm": (f"rmsnorm(pre, eps = {num(cfg['rms_norm_eps'])})"
                        if cfg.get("rms_norm_eps") is not None else
                        f"layernorm(pre, eps = {num(layer_eps)}, bias = false)"),
               "residual": "parallel(shared_norm = true)"}
    if dense and unit != "swiglu":  # `mixture` writes the dense layers' MLP as a SwiGLU
        s.refuse("hidden_act", "Cohere 2 MoE's dense layers are imported as SwiGLU (silu)")
    if s.need("logit_scale") != 1:
        s.head["logit_scale"] = num(cfg["logit_scale"])


def _halved(t: Any, a: Attention, cfg: dict) -> Any:
    """The shared expert's down projection, halved when its output is averaged with the
    experts' (shared_expert_combination_strategy `average`; exact, a power of two)."""
    how = cfg.get("shared_expert_combination_strategy", "average")
    return t * 0.5 if how == "average" else t


_P = ("gate_proj", "up_proj", "down_proj")
_COHERE2_MOE = Names("layers.{i}.", {
    **ATTN, "attn_norm.weight": "input_layernorm.weight",
    **{f"mlp.{p}.weight": f"mlp.{p}.weight" for p in _P},
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.shared.gate_proj.weight": "mlp.shared_experts.gate_proj.weight",
    "mlp.shared.up_proj.weight": "mlp.shared_experts.up_proj.weight",
    "mlp.shared.down_proj.weight": ("mlp.shared_experts.down_proj.weight", _halved)},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

_DERIVED = "read into layer_types by Cohere2MoeConfig; the import reads it only when " \
    "layer_types is absent"
_ROPE = "standardised into rope_parameters by Cohere2MoeConfig; the import reads it only when " \
    "rope_parameters is absent"
# transformers' defaults (Cohere2MoeConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("cohere2_moe", _read, _COHERE2_MOE, {
        "hidden_size": 8192, "intermediate_size": 22528, "logit_scale": 0.0625,
        "num_hidden_layers": 40, "num_attention_heads": 64, "head_dim": 128,
        "hidden_act": "silu", "layer_norm_eps": 1e-5, "tie_word_embeddings": True,
        "rope_theta": 10000.0, "attention_bias": False, "sliding_window": 4096,
        "num_experts_per_tok": 2, "num_experts": 8, "num_shared_experts": 0,
        "shared_expert_combination_strategy": "average", "expert_selection_fn": "softmax",
        "prefix_dense_sliding_window_pattern": 1, "norm_topk_prob": True,
        "sliding_window_pattern": 4},
        inert={**ROUTER_INERT, "rope_theta": _ROPE, "rope_scaling": _ROPE,
               "sliding_window_pattern": _DERIVED},
        lm=True, weights_for=expanded(_COHERE2_MOE)),
]
