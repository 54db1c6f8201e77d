"""LFM2 (`lfm2`): a hybrid of gated short convolutions (`conv` layers: in_proj's B, C and x, C *
conv(B * x) over the last conv_L_cache tokens, out_proj) and grouped-query softmax attention
(`full_attention`: q and k RMS-normed per head before RoPE, no biases), as layer_types (or
full_attn_idxs) says; pre-norm RMSNorm blocks (operator_norm, ffn_norm), the final norm named
embedding_norm, a SwiGLU MLP (w1, w3, w2) whose width LFM2 adjusts (block_auto_adjust_ff_dim).

LFM3 (`lfm3`): the same hybrid with `sliding_attention` layers besides (a window of
sliding_window keys), each attention kind with its own RoPE (`rope_parameters[kind]`; the full
layers' proportional by default), each head's output times sigmoid of its own `g_proj` row
(`use_attention_gate`), sandwich RMSNorms (`use_sandwich_norm`: post_operator_norm and
post_ffn_norm) and an unadjusted SwiGLU of intermediate_size.

LFM2-MoE (`lfm2_moe`): LFM2's layers with a mixture of experts after the first
num_dense_layers (an unadjusted SwiGLU of intermediate_size there): SwiGLU experts of
moe_intermediate_size, a sigmoid router choosing by score plus expert_bias
(`use_expert_bias`), renormalised with norm_topk_prob, times routed_scaling_factor."""

from __future__ import annotations

from dataclasses import replace

from .base import Family
from .moe import ROUTER_INERT, expanded, mixture
from .names import ATTN, LM, Names, gate_joined, linear
from .rope import num, rope
from .text import SpecText, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("conv", "full_attention")


def _own(s: SpecText, key: str):
    """An LFM2 field, Lfm2Config's default where config.json omits it (a null multiplier
    stays null: no rounding)."""
    return s.cfg[key] if key in s.cfg else _OWN[key]


def ffn_width(s: SpecText) -> int:
    """Lfm2MLP's width: intermediate_size (block_ff_dim where given), and with
    block_auto_adjust_ff_dim int(2 n / 3), then times block_ffn_dim_multiplier rounded up to
    a multiple of block_multiple_of where a multiplier is given."""
    n = s.get("block_ff_dim", "intermediate_size") or s.need("intermediate_size")
    if _own(s, "block_auto_adjust_ff_dim"):
        n = int(2 * n / 3)
        multiplier = _own(s, "block_ffn_dim_multiplier")
        if multiplier is not None:
            n = int(multiplier * n)
            step = _own(s, "block_multiple_of") or 1
            n = step * ((n + step - 1) // step)
    return n


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv = s.get("num_key_value_heads", default=heads)
    eps, layers = s.need("norm_eps"), s.need("num_hidden_layers")
    full = s.get("full_attn_idxs", default=list(range(layers)))
    types = s.get("layer_types") or ["full_attention" if i in full else "conv"
                                     for i in range(layers)]
    other = [t for t in dict.fromkeys(types) if t not in _KINDS]
    if len(types) != layers or other:
        s.refuse("layer_types", f"one entry per layer ({layers}), each conv or full_attention"
                 + (f"; attndsl does not import layer kind `{other[0]}` for it" if other
                    else ""))
        return
    bias = "true" if _own(s, "conv_bias") else "false"
    s.attentions["lfm2_conv"] = {
        "d_model": str(d), "heads": "1", "bias": bias,
        "kernel": f"short_conv(width = {_own(s, 'conv_L_cache')})", "mask": mask(True, padding)}
    s.comments["lfm2_conv"] = ("gated short convolution: C * conv(B * x) over the last "
                               "conv_L_cache tokens; padding slots read as 0")
    head_dim = d // max(heads, 1)
    s.attentions["lfm2_attn"] = {
        "d_model": str(d), "heads": str(heads), "kv_heads": str(kv), "head_dim": str(head_dim),
        "bias": "false", "qk_norm": f"rmsnorm(eps = {num(eps)})",
        "position": rope(s, cfg.get("rope_parameters"), head_dim), "mask": mask(True, padding)}
    names = {"conv": "lfm2_conv", "full_attention": "lfm2_attn"}
    s.pattern = [names[t] for t in period(types)]
    for kind in set(_KINDS) - set(types):  # one kind only: the other attention goes
        del s.attentions[names[kind]]
    s.stack = {"layers": str(layers), "ffn": f"swiglu({ffn_width(s)})",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


def _read_moe(s: SpecText, padding: str | None) -> None:
    _read(s, padding)
    if not s.stack:  # refused
        return
    layers = s.need("num_hidden_layers")
    bias = s.cfg.get("use_expert_bias", True)
    ffn = (f"moe(experts = {s.need('num_experts')}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = swiglu({s.need('moe_intermediate_size')}), router = sigmoid, "
           f"normalize = {'true' if s.need('norm_topk_prob') else 'false'}, selection_bias = "
           f"{'true' if bias else 'false'}, routed_scale = "
           f"{num(s.need('routed_scaling_factor'))}")
    dense = list(range(min(s.need("num_dense_layers"), layers)))
    s.stack["ffn"] = mixture(ffn, dense, layers, s.need("intermediate_size"))


def _own3(s: SpecText, key: str):
    """An LFM3 field, Lfm3Config's default where config.json omits it."""
    return s.cfg[key] if key in s.cfg else _OWN3[key]


def _read_lfm3(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv, head_dim = s.need("num_key_value_heads"), s.need("head_dim")
    eps, layers = s.need("norm_eps"), s.need("num_hidden_layers")
    types = s.get("layer_types") or [
        "full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0
        else "conv" for i in range(layers)]  # Lfm3Config's default
    other = [t for t in dict.fromkeys(types) if t not in _KINDS3]
    if len(types) != layers or other:
        s.refuse("layer_types", f"one entry per layer ({layers}), each conv, full_attention or "
                 "sliding_attention" + (f"; attndsl does not import layer kind `{other[0]}` "
                                        "for it" if other else ""))
        return
    if s.get("attention_bias") and _own3(s, "use_attention_gate"):
        s.refuse("attention_bias", "LFM3's attention biases beside its gate: q_proj's bias "
                 "would need its gate rows, which g_proj (bias-free) does not have")
        return
    params = cfg.get("rope_parameters") or _ROPE3
    s.attentions["lfm2_conv"] = {
        "d_model": str(d), "heads": "1", "bias": "true" if _own3(s, "conv_bias") else "false",
        "kernel": f"short_conv(width = {_own3(s, 'conv_L_cache')})", "mask": mask(True, padding)}
    s.comments["lfm2_conv"] = ("gated short convolution: C * conv(B * x) over the last "
                               "conv_L_cache tokens; padding slots read as 0")
    names = {"conv": "lfm2_conv", "full_attention": "lfm3_full",
             "sliding_attention": "lfm3_sliding"}
    for kind in ("full_attention", "sliding_attention"):
        if kind not in types:
            continue
        if kind not in params:
            s.refuse("rope_parameters", f"no entry for `{kind}` layers")
            return
        window = s.need("sliding_window") if kind == "sliding_attention" else None
        s.attentions[names[kind]] = {
            "d_model": str(d), "heads": str(heads), "kv_heads": str(kv),
            "head_dim": str(head_dim), "bias": "true" if s.get("attention_bias") else "false",
            "qk_norm": f"rmsnorm(eps = {num(eps)})",
            "position": rope(s, params[kind], head_dim), "mask": mask(True, padding, window)}
        if _own3(s, "use_attention_gate"):
            s.attentions[names[kind]]["output_gate"] = "sigmoid(per_head = true)"
    s.pattern = [names[t] for t in period(types)]
    if "conv" not in types:
        del s.attentions["lfm2_conv"]
    norm = "sandwich" if _own3(s, "use_sandwich_norm") else "pre"
    s.stack = {"layers": str(layers), "ffn": f"swiglu({s.need('intermediate_size')})",
               "norm": f"rmsnorm({norm}, eps = {num(eps)})"}


_CONV = {"self_attn.in_proj.weight": "conv.in_proj.weight",
         "self_attn.in_proj.bias": "conv.in_proj.bias",
         **linear("self_attn.conv", "conv.conv"), **linear("self_attn.o_proj", "conv.out_proj")}
_LFM2 = Names("layers.{i}.", {
    **{k: v for k, v in ATTN.items() if "norm" not in k and "o_proj" not in k},
    **linear("self_attn.o_proj", "self_attn.out_proj"),
    "self_attn.q_norm.weight": "self_attn.q_layernorm.weight",
    "self_attn.k_norm.weight": "self_attn.k_layernorm.weight",
    **{f"mlp.{ours}_proj.weight": f"feed_forward.{theirs}.weight"
       for ours, theirs in (("gate", "w1"), ("up", "w3"), ("down", "w2"))},
    "attn_norm.weight": "operator_norm.weight", "ffn_norm.weight": "ffn_norm.weight"},
    {"norm.weight": "embedding_norm.weight", **LM}, ("model.",),
    by_kernel={"ShortConv": _CONV})

_KINDS3 = ("conv", "full_attention", "sliding_attention")
_OWN3 = {"conv_bias": False, "conv_L_cache": 7, "use_sandwich_norm": True,
         "use_attention_gate": True}
_ROPE3 = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
          "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                             "partial_rotary_factor": 0.5}}  # Lfm3Config's default
_LFM3 = Names("layers.{i}.", {
    **ATTN,
    **{f"mlp.{ours}_proj.weight": f"feed_forward.{theirs}.weight"
       for ours, theirs in (("gate", "w1"), ("up", "w3"), ("down", "w2"))},
    "attn_norm.weight": "operator_norm.weight", "post_attn_norm.weight":
    "post_operator_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "post_ffn_norm.weight": "post_ffn_norm.weight"},
    {"norm.weight": "embedding_norm.weight", **LM}, ("model.",),
    by_kernel={"ShortConv": _CONV})
# with use_attention_gate (the default), g_proj (`gate_proj` on disk) joins q_proj per head
_LFM3_GATED = replace(_LFM3, names=_LFM3.names | gate_joined("self_attn.gate_proj.weight"))

_LFM2_MOE = Names(_LFM2.layer, {
    **_LFM2.names,
    **{f"mlp.experts.{{e}}.{ours}_proj.weight": f"feed_forward.experts.{{e}}.{theirs}.weight"
       for ours, theirs in (("gate", "w1"), ("up", "w3"), ("down", "w2"))},
    "mlp.router.weight": "feed_forward.gate.weight",
    "mlp.router.selection_bias": "feed_forward.expert_bias"}, _LFM2.top, _LFM2.bases,
    by_kernel=_LFM2.by_kernel)

# transformers' defaults (Lfm2Config, 5.23) for the typed fields the import reads; its own
# fields' defaults are `_OWN`'s, read where they are used
_DEFAULTS = {
    "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": True,
    "norm_eps": 1e-5}
_OWN = {"conv_bias": False, "conv_L_cache": 3, "block_multiple_of": 256,
        "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True}
FAMILIES = [
    Family("lfm2", _read, _LFM2, {**_DEFAULTS, **_OWN}, inert={
        "full_attn_idxs": "read into layer_types by Lfm2Config; the import reads it only "
                          "when layer_types is absent"}, lm=True,
        rope={"rope_type": "default", "rope_theta": 1000000.0}),
    # Lfm2MoeConfig's defaults, 5.23 (its layer_types has none: a checkpoint's config states
    # them, as transformers cannot build the model without)
    Family("lfm2_moe", _read_moe, _LFM2_MOE, {
        "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "tie_word_embeddings": True, "norm_eps": 1e-5, "num_dense_layers": 2,
        "num_experts_per_tok": 4, "num_experts": 32, "routed_scaling_factor": 1.0,
        "norm_topk_prob": True, "conv_bias": False, "conv_L_cache": 3},
        inert={**ROUTER_INERT}, lm=True,
        weights_for=expanded(_LFM2_MOE),
        rope={"rope_type": "default", "rope_theta": 1000000.0}),
    # Lfm3Config's defaults, 5.23
    Family("lfm3", _read_lfm3, _LFM3_GATED, {
        "hidden_size": 2048, "intermediate_size": 7680, "num_hidden_layers": 24,
        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
        "tie_word_embeddings": True, "norm_eps": 1e-5, "sliding_window": 256,
        "attention_bias": False, **_OWN3}, lm=True,
        weights_for=lambda cfg: _LFM3_GATED if cfg.get(
            "use_attention_gate", _OWN3["use_attention_gate"]) else _LFM3),
]
