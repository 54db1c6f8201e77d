"""AFMoE (Arcee's Trinity): a decoder whose attention RMS-norms q and k per head, gates each
head's output by sigmoid of its own projection (`gate_proj`: `output_gate = sigmoid`, whose
gate rows attndsl keeps after each head's query rows), rotates the sliding layers alone (full
layers have no positions; `layer_types`, else every global_attn_every_n_layers-th layer
full); sandwich RMSNorms around attention and MLP; a mixture of experts whose router takes
the sigmoid of its logits, chooses by them plus expert_bias, renormalises and scales by
route_scale, beside num_shared_experts shared experts, the first num_dense_layers layers a
dense SwiGLU; with mup_enabled the embeddings times sqrt(hidden_size)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, read_nope_full
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names, gate_joined
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    layers = s.need("num_hidden_layers")
    if not s.get("layer_types"):
        every = s.need("global_attn_every_n_layers") or 1
        s.cfg["layer_types"] = ["sliding_attention" if (i + 1) % every else "full_attention"
                                for i in range(layers)]
    eps = read_nope_full(s, padding, output_gate="sigmoid")
    experts, hidden = s.need("num_experts"), s.need("moe_intermediate_size")
    ffn = (f"moe(experts = {experts}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = swiglu({hidden}), routed_scale = {num(s.need('route_scale'))}, "
           "router = sigmoid, normalize = true, selection_bias = true")
    if shared := s.need("num_shared_experts"):
        ffn += f", shared = swiglu({hidden * shared})"
    dense = list(range(min(s.need("num_dense_layers"), layers)))
    s.stack["ffn"] = mixture(ffn, dense, layers, s.need("intermediate_size"))
    s.stack["norm"] = f"rmsnorm(sandwich, eps = {eps})"
    if s.need("mup_enabled"):
        s.head["embedding_scale"] = f"sqrt({s.need('hidden_size')})"


_P = ("gate_proj", "up_proj", "down_proj")
_AFMOE = Names(LLAMA.layer, {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("self_attn.q_proj.")},
    **gate_joined("self_attn.gate_proj.weight"),
    "post_attn_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_mlp_layernorm.weight",
    "post_ffn_norm.weight": "post_mlp_layernorm.weight",
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    **{f"mlp.shared.{p}.weight": f"mlp.shared_experts.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.router.gate.weight",
    "mlp.router.selection_bias": "mlp.expert_bias"}, LLAMA.top, LLAMA.bases)

# transformers' defaults (AfmoeConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("afmoe", _read, _AFMOE, {
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 1408,
        "num_hidden_layers": 32, "num_attention_heads": 16, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
        "num_experts": 64, "num_experts_per_tok": 6, "sliding_window": 1024,
        "attention_bias": False, "num_dense_layers": 1, "num_shared_experts": 2,
        "route_scale": 1.0, "global_attn_every_n_layers": 4, "mup_enabled": False},
        inert={**ROUTER_INERT, "global_attn_every_n_layers": (
            "read into layer_types by AfmoeConfig; the import reads it only when layer_types "
            "is absent")}, refused={"hidden_act": (
            lambda v: v not in ("silu", "swish"),
            "AFMoE's experts are SwiGLU; attndsl's mixture has one unit for them all")},
        lm=True, weights_for=expanded(_AFMOE)),
]
