"""Inkling (`inkling_text`, Thinking Machines): no rotary positions; each layer's score bias is
its relative logits (`relative_logits(d_rel, extent)`: r_proj's relative states per head mixing
the bank rel_logits_proj.proj of bias-by-distance profiles), its extent rel_extent on the full
(`hybrid`) layers and the window on the sliding (`hybrid_sliding`) ones, which have their own
head counts and sizes (swa_*); the full layers scale queries and relative states by
1 + log_scaling_alpha ln(max((p + 1) / log_scaling_n_floor, 1)) (`temperature = log_ratio`);
scores are scaled by 1 / head_dim over q and k RMS-normed per head; residual short convolutions
(u + conv(u) over the last conv_kernel_size tokens) on the keys, the values, the attention's
output (attn_sconv) and the feed-forward's output (mlp_sconv); pre-norm RMSNorm blocks, the
token embeddings RMS-normed (embed_tokens.embed_norm), the logits read from the final hidden
states divided by logits_mup_width_multiplier. Its dense layers' MLP times a learned
global_scale is read with the scale folded into down_proj. Its sparse layers' mixture of
experts: a sigmoid router choosing top_k by score plus e_score_correction_bias, the chosen
experts' and the n_shared_experts shared experts' scores (their own router rows)
renormalised together (transformers' softmax of their log-sigmoids), times route_scale and
the router's global_scale (folded into every expert's down_proj): `sink_experts`, the shared
experts read as sink experts after the routed ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..spec import Attention
from .base import Family
from .moe import ROUTER_INERT, mixture
from .names import ATTN, GATED, Names
from .rope import num
from .text import SpecText, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("hybrid", "hybrid_sliding")


def _attention(s: SpecText, sliding: bool, padding: str | None, width: int, eps: str) -> dict:
    """One layer kind's entries: the sliding layers' swa_* sizes and window, the full
    layers' sizes, relative extent and logarithmic scaling."""
    pre = "swa_" if sliding else ""
    heads = s.need(f"{pre}num_attention_heads")
    head_dim = s.need(f"{pre}head_dim")
    window = _field(s, "sliding_window_size") if sliding else None
    extent = window if sliding else s.need("rel_extent")
    entries = {"d_model": str(s.need("hidden_size")), "heads": str(heads),
               "kv_heads": str(s.need(f"{pre}num_key_value_heads")),
               "head_dim": str(head_dim), "bias": "false",
               "scale": num(1 / head_dim) if head_dim else "auto",  # (none: refused)
               "qk_norm": f"rmsnorm(eps = {eps})",
               "position": f"relative_logits(d_rel = {s.need('d_rel')}, extent = {extent})"}
    floor, alpha = s.get("log_scaling_n_floor"), s.need("log_scaling_alpha")
    if floor is not None and not sliding:
        entries["temperature"] = f"log_ratio(floor = {floor}, scale = {num(alpha)})"
    entries["residual_conv"] = f"conv(width = {width})"
    entries["mask"] = mask(True, padding, window)
    return entries


# InklingTextConfig's attribute_map: a checkpoint's config may name these fields so
_ALIASES = {"conv_kernel_size": "sconv_kernel_size", "sliding_window_size": "sliding_window",
            "n_routed_experts": "num_local_experts",
            "logits_mup_width_multiplier": "embedding_multiplier"}


def _field(s: SpecText, key: str) -> Any:
    """A field, read under its alias where the config names that (as transformers reads it)."""
    value = s.need(key)  # (read either way: the defaults hold it)
    alias = s.get(_ALIASES[key]) if key in _ALIASES else None
    return alias if alias is not None else value


def _read(s: SpecText, padding: str | None) -> None:
    layers = s.need("num_hidden_layers")
    local = s.get("local_layer_ids")  # as InklingTextConfig derives layer_types without them
    local = set(local) if isinstance(local, list) else {i for i in range(layers) if (i + 1) % 6}
    types = s.get("layer_types") or ["hybrid_sliding" if i in local else "hybrid"
                                     for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(_KINDS):
        s.refuse("layer_types", f"{layers} entries, each `hybrid` or `hybrid_sliding`, are "
                                "needed")
        return
    dense = s.get("dense_mlp_idx") or 0  # (the first dense_mlp_idx layers dense by default)
    mlps = s.get("mlp_layer_types") or ["dense" if i < dense else "sparse" for i in range(layers)]
    widths = (s.need("intermediate_size"), s.need("moe_intermediate_size"))
    if s.get("dense_intermediate_size") is not None:  # then intermediate_size is the experts'
        widths = (s.get("dense_intermediate_size"), s.need("intermediate_size"))
    if not isinstance(mlps, list) or len(mlps) != layers or not set(mlps) <= {"dense",
                                                                             "sparse"}:
        s.refuse("mlp_layer_types", f"{layers} entries, each `dense` or `sparse`, are needed")
        return
    if "sparse" in mlps and s.need("n_shared_experts") < 1:
        s.refuse("n_shared_experts", "Inkling's router scores its shared experts beside the "
                                     "routed ones; transformers' needs at least one")
    unpadded = s.get("unpadded_vocab_size")
    if unpadded is not None and unpadded != s.get("vocab_size"):
        s.refuse("unpadded_vocab_size", "a head padded past the vocabulary (logits cut to "
                                        "unpadded_vocab_size) has no import yet")
    eps = num(s.need("rms_norm_eps"))
    width = _field(s, "conv_kernel_size")
    names = {"hybrid": "inkling_full", "hybrid_sliding": "inkling_sliding"}
    for kind in dict.fromkeys(types):
        s.attentions[names[kind]] = _attention(s, kind == "hybrid_sliding", padding, width, eps)
    s.pattern = [names[t] for t in period(types)]
    moe = (f"moe(experts = {_field(s, 'n_routed_experts')}, top_k = "
           f"{s.need('num_experts_per_tok')}, expert = swiglu({widths[1]}), router = sigmoid, "
           f"selection_bias = true, routed_scale = {num(s.need('route_scale'))}, "
           f"sink_experts = {s.get('n_shared_experts')}")
    ffn = mixture(moe, [i for i, k in enumerate(mlps) if k == "dense"], layers, widths[0])
    s.stack.update(layers=str(layers), ffn=ffn,
                   norm=f"rmsnorm(pre, eps = {eps})", ffn_conv=f"conv(width = {width})")
    s.cfg["tie_word_embeddings"] = False  # (InklingForCausalLM never ties embed and unembed)
    multiplier = _field(s, "logits_mup_width_multiplier")
    s.head.update(embedding_norm=f"rmsnorm(eps = {eps})",
                  logit_scale=f"1 / {num(multiplier)}" if multiplier != 1 else "1.0")


def _folded(tensors: list, a: Attention, cfg: dict) -> Any:
    """The dense MLP's down_proj times its learned global_scale (Inkling's InklingMLP
    multiplies the MLP's output by it)."""
    down, scale = tensors
    return down * scale.reshape(1, 1)[0, 0]


_INKLING = Names("layers.{i}.", {
    **ATTN, **GATED,
    "mlp.down_proj.weight": ("mlp.down_proj.weight", _folded, ("mlp.global_scale",)),
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "self_attn.r_proj.weight": "self_attn.r_proj.weight",
    "self_attn.rel_logits_proj.proj": "self_attn.rel_logits_proj.proj",
    **{f"self_attn.{p}_sconv.conv1d.weight": f"self_attn.{p}_sconv.conv1d.weight"
       for p in "kv"},
    "self_attn.out_sconv.conv1d.weight": "attn_sconv.conv1d.weight",
    "mlp_sconv.conv1d.weight": "mlp_sconv.conv1d.weight"},
    {"norm.weight": "norm.weight", "embed_tokens.weight": "embed_tokens.weight",
     "embedding_norm.weight": "embed_tokens.embed_norm.weight",
     "lm_head.weight": "lm_head.weight"}, ("model.",), outside=(r"mtp\..+",))

def _with_experts(cfg: dict) -> Names:
    """The table with each expert's tensors: routed expert e's gate and up rows from the fused
    gate_up_proj [experts, 2 n, d] and its down_proj [experts, d, n], shared expert j's as
    sink expert n_routed + j; every expert's down_proj times the router's global_scale (which
    multiplies every routed and shared weight)."""
    routed = cfg.get("num_local_experts") or cfg.get("n_routed_experts",
                                                     _DEFAULTS["n_routed_experts"])
    shared = cfg.get("n_shared_experts", _DEFAULTS["n_shared_experts"])
    gs = ("mlp.gate.global_scale",)
    out = dict(_INKLING.names)
    for e in range(routed + shared):
        own = f"mlp.experts.{e}."
        if e < routed:
            out |= {f"{own}gate_proj.weight": ("mlp.experts.gate_up_proj", _half(e, 0)),
                    f"{own}up_proj.weight": ("mlp.experts.gate_up_proj", _half(e, 1)),
                    f"{own}down_proj.weight": ("mlp.experts.down_proj", _scaled(e), gs)}
        else:
            j = e - routed
            out |= {f"{own}gate_proj.weight": ("mlp.shared_experts.gate_proj", _row(j)),
                    f"{own}up_proj.weight": ("mlp.shared_experts.up_proj", _row(j)),
                    f"{own}down_proj.weight": ("mlp.shared_experts.down_proj", _scaled(j),
                                               gs)}
    out |= {"mlp.router.weight": "mlp.gate.weight",
            "mlp.router.selection_bias": "mlp.gate.e_score_correction_bias"}
    return replace(_INKLING, names=out)


def _half(e: int, part: int):
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        n = t.shape[1] // 2
        return t[e, part * n:(part + 1) * n]
    return split


def _row(j: int):
    return lambda t, a, cfg: t[j]


def _scaled(e: int):
    def split(tensors: list, a: Attention, cfg: dict) -> Any:
        down, scale = tensors
        return down[e] * scale.reshape(1, 1)[0, 0]
    return split


_MTP = "the multi-token-prediction layers (model.mtp.*), which the model's forward never runs"
_INERT = {"num_mtp_layers": _MTP, "chain_hidden_post_norm": _MTP,
          "mtp_hidden_states_first": _MTP, "mtp_local_layer_ids": _MTP,
          "number_of_conv_states": "transformers' cache bookkeeping (4 convolutions a layer)",
          "rms_norm_eps_moe_gate": "transformers' Inkling router never norms its input",
          "shared_expert_sink": "transformers' Inkling router always scores the shared experts "
                                "beside the routed ones (the flag is unread)"}
# transformers' defaults (InklingTextConfig, 5.23) for the fields the import reads
_DEFAULTS = {
    "hidden_size": 6144, "num_hidden_layers": 66, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 128, "swa_num_attention_heads": 64,
    "swa_num_key_value_heads": 16, "swa_head_dim": 128, "sliding_window_size": 512,
    "d_rel": 16, "rel_extent": 1024, "log_scaling_alpha": 0.1, "rms_norm_eps": 1e-6,
    "conv_kernel_size": 4, "intermediate_size": 24576, "hidden_act": "silu",
    "moe_intermediate_size": 3072, "n_routed_experts": 256, "num_experts_per_tok": 6,
    "n_shared_experts": 2, "route_scale": 8.0, "logits_mup_width_multiplier": 24.0}
FAMILIES = [
    Family("inkling_text", _read, _INKLING, _DEFAULTS, inert={**ROUTER_INERT, **_INERT},
           refused={"hidden_act": (lambda v: v not in ("silu", "swish"),
                                   "Inkling's MLPs are SwiGLU")},
           lm=True, weights_for=_with_experts, kinds=_KINDS),
]
