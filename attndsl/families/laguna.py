"""Laguna (Poolside): AFMoE's attention (q and k RMS-normed per head before RoPE, a window on
the sliding layers of layer_types, every layer full by default) with its own head count per
layer (`num_attention_heads_per_layer`: one attention per layer kind and head count) and each
head's output times softplus of its own `g_proj` rows (`gating` true or "per-head": one row per
head, `output_gate = softplus(per_head = true)`; else one per output feature), computed from
the attention's input as q_proj is; RoPE on every layer, its parameters per layer kind
(`rope_parameters[kind]`: the full layers' theta 500000 on half of each head by default);
pre-norm RMSNorm blocks; the first layer (`mlp_layer_types`) a dense SwiGLU, the others a
mixture whose router takes the sigmoid of its logits, chooses by them plus
e_score_correction_bias, renormalises and scales by moe_routed_scaling_factor, beside an
ungated shared SwiGLU of shared_expert_intermediate_size."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names, gate_joined
from .rope import num, rope
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("full_attention", "sliding_attention")
# LagunaConfig's rope_parameters where config.json gives none (5.23)
_ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0,
                            "partial_rotary_factor": 0.5},
         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0,
                               "partial_rotary_factor": 1.0}}


def _layers(s: SpecText, layers: int) -> tuple[list[str], list[int], list[str]]:
    """layer_types, num_attention_heads_per_layer and mlp_layer_types, as read or as
    LagunaConfig derives them (every layer full, num_attention_heads each, the first dense),
    checked: one entry per layer, each of a known kind."""
    types = s.get("layer_types") or ["full_attention"] * layers
    heads = s.get("num_attention_heads_per_layer") or [s.need("num_attention_heads")] * layers
    mlps = s.get("mlp_layer_types") or ["dense"] * min(layers, 1) + ["sparse"] * (layers - 1)
    checks = (("layer_types", types, lambda t: t in _KINDS, "sliding_attention or "
               "full_attention"), ("num_attention_heads_per_layer", heads,
                                   lambda h: isinstance(h, int) and h > 0, "a head count > 0"),
              ("mlp_layer_types", mlps, lambda t: t in ("dense", "sparse"), "dense or sparse"))
    for key, values, good, what in checks:
        if not isinstance(values, list) or len(values) != layers or not all(map(good, values)):
            s.refuse(key, f"one entry per layer ({layers}), each {what}, is needed")
            return ["full_attention"] * layers, [1] * layers, ["dense"] * layers
    return types, heads, mlps


def _read(s: SpecText, padding: str | None) -> None:
    d, kv = s.need("hidden_size"), s.need("num_key_value_heads")
    layers, window = s.need("num_hidden_layers"), s.get("sliding_window")
    head_dim = s.get("head_dim", default=d // max(s.need("num_attention_heads"), 1))
    types, counts, mlps = _layers(s, layers)
    eps = num(s.need("rms_norm_eps"))
    params = s.get("rope_parameters") or _ROPE
    gating = s.get("gating", default=True)
    per_head = "true" if gating is True or gating == "per-head" else "false"
    several = len(set(counts)) > 1
    names = {}
    for kind, heads in dict.fromkeys(zip(types, counts, strict=True)):
        slide = kind == "sliding_attention"
        p = params.get(kind) if isinstance(params, dict) else None
        if not isinstance(p, dict) or "rope_theta" not in p:
            s.refuse("rope_parameters", f"Laguna's RoPE is given per layer kind: `{kind}` "
                                        "with its rope_theta is needed")
            p = {}
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
        name = f"laguna_{'local' if slide else 'global'}" + (f"_{heads}" if several else "")
        names[kind, heads] = name
        s.attentions[name] = {
            "d_model": str(d), "heads": str(heads), "kv_heads": str(kv),
            "head_dim": str(head_dim), "bias": "true" if s.get("attention_bias") else "false",
            "qk_norm": f"rmsnorm(eps = {eps})", "output_gate": f"softplus(per_head = {per_head})",
            "position": rope(s, p, head_dim),
            "mask": mask(True, padding, (window or 1) if slide else None)}
        s.comments[name] = (f"{heads} heads, " + (f"sliding_window = {window}" if slide else
                                                  "full") + "; gated by softplus(g_proj)")
    s.pattern = [names[k] for k in period(list(zip(types, counts, strict=True)))]
    if act(s, "hidden_act", s.need("hidden_act"), gated=True) != "silu":
        s.refuse("hidden_act", "Laguna's MLPs and experts are imported as SwiGLU (silu)")
    ffn = (f"moe(experts = {s.need('num_experts')}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = swiglu({s.need('moe_intermediate_size')}), router = sigmoid, "
           "normalize = true, selection_bias = true, routed_scale = "
           f"{num(s.need('moe_routed_scaling_factor'))}, shared = "
           f"swiglu({s.need('shared_expert_intermediate_size')})")
    dense = [i for i, t in enumerate(mlps) if t == "dense"]
    s.stack = {"layers": str(layers),
               "ffn": mixture(ffn, dense, layers, s.need("intermediate_size")),
               "norm": f"rmsnorm(pre, eps = {eps})"}


_P = ("gate_proj", "up_proj", "down_proj")
# where transformers 5.23 saves each tensor (and reads it back from: Laguna's conversion
# mapping renames mlp.experts.e_score_correction_bias and mlp.shared_expert on loading)
_LAGUNA = Names(LLAMA.layer, {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("self_attn.q_proj.")},
    **gate_joined("self_attn.g_proj.weight"),
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    **{f"mlp.shared.{p}.weight": f"mlp.shared_expert.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.selection_bias": "mlp.experts.e_score_correction_bias"}, LLAMA.top, LLAMA.bases)

# transformers' defaults (LagunaConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("laguna", _read, _LAGUNA, {
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 40,
        "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "sliding_window": 512, "attention_bias": False,
        "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "moe_routed_scaling_factor": 1.0,
        "moe_apply_router_weight_on_input": False},
        inert=ROUTER_INERT, refused={
            "moe_router_logit_softcapping": (
                lambda v: bool(v), "a tanh softcap on the router's logits: attndsl's mixture "
                                   "has no such router"),
            "moe_apply_router_weight_on_input": (
                lambda v: bool(v), "the router's weights applied to the experts' input "
                                   "(transformers refuses it too)")},
        lm=True, weights_for=expanded(_LAGUNA)),
]
