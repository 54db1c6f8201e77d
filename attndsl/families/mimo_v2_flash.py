"""MiMo-V2-Flash: query and key heads of head_dim (192) features and value heads of v_head_dim
(128) (`value_dim`), values scaled by attention_value_scale; sliding layers (`layer_types`,
else full at layer 0 and where (i + 1) % 6 = 0, as MiMoV2FlashConfig derives them) with twice
num_key_value_heads and a learned sink per head (`sinks = learned`, `attention_sink_bias`),
full layers without sinks; RoPE per layer kind on partial_rotary_factor of each head (0.334
by default); DeepSeek-V3's mixture of experts without shared experts, the layers whose
mlp_layer_types entry is "dense" (else layer 0) a dense SwiGLU."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names
from .rope import num, rope
from .text import SpecText, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("full_attention", "sliding_attention")


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv, layers = s.need("num_key_value_heads"), s.need("num_hidden_layers")
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    value_dim = s.need("v_head_dim")
    types = s.get("layer_types") or ["full_attention" if i == 0 or (i + 1) % 6 == 0 else
                                     "sliding_attention" for i in range(layers)]
    if any(t not in _KINDS for t in types):
        s.refuse("layer_types", "MiMo-V2-Flash's layers are sliding_attention or "
                                "full_attention")
        return
    params = s.get("rope_parameters") or {}
    window = s.get("sliding_window")
    names = {"full_attention": "mimo_global", "sliding_attention": "mimo_local"}
    for kind in dict.fromkeys(types):
        slide = kind == "sliding_attention"
        p = params.get(kind) if isinstance(params, dict) else None
        if not isinstance(p, dict) or "rope_theta" not in p:
            s.refuse("rope_parameters", f"MiMo-V2-Flash's RoPE is given per layer kind: "
                                        f"`{kind}` with its rope_theta is needed")
            p = {}
        if p.get("rope_type", "default") == "default":  # its own default's partial factor
            p = {"partial_rotary_factor": 0.334, **p}
        if int(head_dim * p.get("partial_rotary_factor", 1.0)) % 2:
            s.refuse("rope_parameters", f"`{kind}` rotates int(head_dim x partial_rotary_factor)"
                                        " features, an odd number, which RoPE pairs do not fill")
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
            window = 1
        entries = {"d_model": str(d), "heads": str(heads),
                   "kv_heads": str(2 * kv if slide else kv), "head_dim": str(head_dim),
                   "value_dim": str(value_dim),
                   "bias": "[q, k, v]" if cfg.get("attention_bias") else "false",
                   "position": rope(s, p, head_dim)}
        if slide:
            entries["sinks"] = "learned"
        entries["mask"] = mask(True, padding, window if slide else None)
        s.attentions[names[kind]] = entries
        scale = s.get("attention_value_scale", default=1.0)
        s.comments[names[kind]] = (
            (f"sliding_window = {window}, {2 * kv} kv heads, learned sinks; " if slide else
             f"{kv} kv heads, no sinks; ") +
            f"v_proj is read times attention_value_scale ({num(scale)})")
    s.pattern = [names[k] for k in period(types)]
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "MiMo-V2-Flash's MLPs and experts are SwiGLU (silu)")
    ffn = (f"moe(experts = {s.need('n_routed_experts')}, top_k = "
           f"{s.need('num_experts_per_tok')}, expert = swiglu({s.need('moe_intermediate_size')})"
           f", routed_scale = {num(s.need('routed_scaling_factor'))}, router = sigmoid, "
           f"normalize = {'true' if s.need('norm_topk_prob') else 'false'}, "
           "selection_bias = true")
    groups, top = s.get("n_group", default=1) or 1, s.get("topk_group", default=1) or 1
    if groups > 1:
        ffn += f", groups = {groups}, top_groups = {top}"
    kinds = s.get("mlp_layer_types") or ["dense"] + ["sparse"] * (layers - 1)
    if not isinstance(kinds, list) or len(kinds) != layers or \
            any(k not in ("dense", "sparse") for k in kinds):
        s.refuse("mlp_layer_types", f"a list of {layers} entries, each dense or sparse")
        kinds = ["sparse"] * layers
    dense = [i for i, k in enumerate(kinds) if k == "dense"]
    s.stack = {"layers": str(layers),
               "ffn": mixture(ffn, dense, layers, s.need("intermediate_size")),
               "norm": f"rmsnorm(pre, eps = {num(s.need('rms_norm_eps'))})"}


def _scaled(t: Any, a: Attention, cfg: dict) -> Any:
    """v_proj's weight or bias times attention_value_scale: transformers scales the values
    it projects (a constant, so the projection's rows carry it)."""
    scale = cfg.get("attention_value_scale", 0.707)  # (null: none, as transformers reads it)
    return t if scale is None else t * scale


_P = ("gate_proj", "up_proj", "down_proj")
_MIMO = Names("layers.{i}.", {
    **{f"self_attn.{p}.{t}": f"self_attn.{p}.{t}" for p in ("q_proj", "k_proj", "o_proj")
       for t in ("weight", "bias")},
    **{f"self_attn.v_proj.{t}": (f"self_attn.v_proj.{t}", _scaled) for t in ("weight", "bias")},
    "self_attn.sinks": "self_attn.attention_sink_bias",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    **{f"mlp.{p}.weight": f"mlp.{p}.weight" for p in _P},
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.selection_bias": "mlp.gate.e_score_correction_bias"},
    LLAMA.top, LLAMA.bases)

# transformers' defaults (MiMoV2FlashConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("mimo_v2_flash", _read, _MIMO, {
        "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 48,
        "num_attention_heads": 64, "num_key_value_heads": 4, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "attention_bias": False,
        "moe_intermediate_size": 2048, "num_experts_per_tok": 8, "n_routed_experts": 256,
        "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
        "head_dim": 192, "v_head_dim": 128, "sliding_window": 129,
        "attention_value_scale": 0.707},
        inert=ROUTER_INERT, lm=True, weights_for=expanded(_MIMO)),
]
