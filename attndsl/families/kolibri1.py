"""Kolibri 1 (Aleph Alpha): EXAONE 4's attention (q and k heads RMS-normed before RoPE; the
sliding layers of layer_types rotated, the full ones without positions while sliding_window is
set, every layer rotated without it), no biases, GLM-4's four RMSNorms per block
(`rmsnorm(sandwich)`), and in every layer a mixture of experts whose router chooses the top k
by its raw logits plus a correction bias (`select_by = logits, selection_bias = true`) and
weighs them by the sigmoid of their logits (renormalised with norm_topk_prob), beside an
ungated shared expert of shared_expert_intermediate_size."""

from __future__ import annotations

from .base import Family
from .moe import ROUTER_INERT, expanded
from .names import ATTN, LM, Names
from .rope import num
from .text import SpecText, act, mask, period, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    layers, window = s.need("num_hidden_layers"), s.get("sliding_window")
    types = s.get("layer_types") or [  # as Kolibri1Config derives them
        "full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(layers)]
    if len(types) != layers or not set(types) <= {"sliding_attention", "full_attention"}:
        s.refuse("layer_types", f"one entry per layer ({layers}), each sliding_attention or "
                                "full_attention, is needed")
        types = ["full_attention"] * layers
    eps = num(s.need("rms_norm_eps"))
    base = roped_attention(s, padding)
    base.update(bias="false", qk_norm=f"rmsnorm(eps = {eps})")
    for kind in dict.fromkeys(types):
        slide = kind == "sliding_attention"
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
        roped = slide or window is None  # Kolibri1Attention: NoPE full layers beside windows
        name = "kolibri1_local" if slide else "kolibri1_global"
        s.attentions[name] = dict(base, position=base["position"] if roped else "none",
                                  mask=mask(True, padding, (window or 1) if slide else None))
        s.comments[name] = (f"sliding_window = {window}, RoPE" if slide else
                            "a full layer with RoPE" if roped else
                            "a full layer: no position encoding (NoPE)")
    s.pattern = [("kolibri1_local" if k == "sliding_attention" else "kolibri1_global")
                 for k in period(types)]
    if act(s, "hidden_act", s.need("hidden_act"), gated=True) != "silu":
        s.refuse("hidden_act", "Kolibri's experts are imported as SwiGLU (silu)")
    hidden = s.need("moe_intermediate_size")
    ffn = (f"moe(experts = {s.need('num_local_experts', 'num_experts')}, top_k = "
           f"{s.need('num_experts_per_tok')}, expert = swiglu({hidden}), router = sigmoid, "
           f"select_by = logits, selection_bias = true, normalize = "
           f"{'true' if s.cfg.get('norm_topk_prob') else 'false'}, shared = "
           f"swiglu({s.need('shared_expert_intermediate_size')}))")
    s.stack = {"layers": str(layers), "ffn": ffn, "norm": f"rmsnorm(sandwich, eps = {eps})"}


_P = ("gate_proj", "up_proj", "down_proj")
# as Kolibri's checkpoints name them (transformers saves its own names back to these)
_KOLIBRI1 = Names("layers.{i}.", {
    **ATTN, "attn_norm.weight": "input_layernorm.weight",
    "post_attn_norm.weight": "post_attn_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "post_ffn_norm.weight": "post_ffn_norm.weight",
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.selection_bias": "moe.router.expert_bias",
    **{f"mlp.shared.{p}.weight": f"mlp.shared_experts.{p}.weight" for p in _P}},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (Kolibri1Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("kolibri1", _read, _KOLIBRI1, {
        "hidden_size": 2560, "num_hidden_layers": 50, "num_attention_heads": 48,
        "num_key_value_heads": 4, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "sliding_window": 513, "moe_intermediate_size": 512,
        "num_experts_per_tok": 6, "num_experts": 384, "norm_topk_prob": False,
        "head_dim": 128, "shared_expert_intermediate_size": 512},
        inert={**ROUTER_INERT,
               "num_experts": "saved as num_local_experts, which the import reads first"},
        lm=True, weights_for=expanded(_KOLIBRI1)),
]
