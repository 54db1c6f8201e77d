"""Mellum (JetBrains Mellum 2): Qwen3-MoE's attention (per-head q/k RMSNorm, q/k/v/o biases
with attention_bias) on sliding and full layers (`layer_types`, each kind its own RoPE from
`rope_parameters[kind]`), pre-norm blocks whose MLP is a mixture (softmax top-k, renormalised
with norm_topk_prob) or, where `mlp_layer_types` says `dense`, a SwiGLU of intermediate_size.
Its multi-token prediction module (`mtp.*`) is outside the forward pass."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    params = s.cfg.get("rope_parameters")
    for kind, p in (params.items() if isinstance(params, dict) else ()):
        if isinstance(p, dict) and p.get("partial_rotary_factor", 1.0) != 1.0:
            s.refuse("rope_parameters", f"Mellum rotates every feature of a head (its "
                                        f"apply_rotary_pos_emb has no pass-through part): "
                                        f"{kind}'s partial_rotary_factor must be 1")
    read_llama(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for entries in s.attentions.values():
        entries["qk_norm"] = f"rmsnorm(eps = {eps})"
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "Mellum's experts are SwiGLU (silu)")
    layers = s.need("num_hidden_layers")
    kinds = s.get("mlp_layer_types") or ["sparse"] * layers
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= {"dense",
                                                                                  "sparse"}:
        s.refuse("mlp_layer_types", f"{layers} entries, each `dense` or `sparse`, are needed")
        kinds = ["sparse"] * layers
    ffn = (f"moe(experts = {s.need('num_local_experts', 'num_experts')}, top_k = "
           f"{s.need('num_experts_per_tok')}, expert = swiglu({s.need('moe_intermediate_size')}"
           f"), normalize = {'true' if s.cfg.get('norm_topk_prob') else 'false'}")
    s.stack["ffn"] = mixture(ffn, [i for i, k in enumerate(kinds) if k == "dense"], layers,
                             s.need("intermediate_size"))


_MELLUM = Names("layers.{i}.", {
    **LLAMA.names,
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight"
       for p in ("gate_proj", "up_proj", "down_proj")},
    "mlp.router.weight": "mlp.gate.weight"}, LLAMA.top, LLAMA.bases,
    outside=(r"mtp(\.\w+)*\.(weight|bias)",))

_MTP = "its multi-token prediction module, for speculative decoding, not in the forward pass"
# transformers' defaults (MellumConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("mellum", _read, _MELLUM, {
        "hidden_size": 2304, "intermediate_size": 7168, "num_hidden_layers": 28,
        "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_act": "silu",
        "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "attention_bias": False,
        "sliding_window": 1024, "moe_intermediate_size": 896, "num_experts_per_tok": 8,
        "num_experts": 64, "norm_topk_prob": True, "head_dim": 128},
        inert={**ROUTER_INERT, "num_nextn_predict_layers": _MTP, "num_mtp_layers": _MTP,
               "mtp_layer_types": _MTP, "mtp_mlp_layer_types": _MTP,
               "num_experts": "saved as num_local_experts, which the import reads first"},
        lm=True, weights_for=expanded(_MELLUM)),
]
