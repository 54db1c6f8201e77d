"""Qwen3.5's text models (`qwen3_5_text`, `qwen3_5_moe_text`): Qwen3-Next's hybrid of gated
delta-rule layers and gated softmax attention (`qwen3_next.read_hybrid`), with two differences
that matter here:

- the delta-rule projections are unfused per kind and not grouped per key head: in_proj_qkv
  holds every query head, then every key head, then every value head (the order of the
  convolution's channels); in_proj_z, in_proj_b and in_proj_a one row block per value head.
  So q, k and v are row ranges and z, b and a whole tensors (Qwen3-Next's in_proj_qkvz holds
  them per key head g: [q_g, k_g, v and z of g's value heads]).
- RoPE is transformers' multimodal form: three position streams (time, height, width), each
  frequency's angle taken from one of them, interleaved by `mrope_section` (Qwen3.5's rotary
  embedding interleaves whatever `mrope_interleaved` says): `rope(..., mrope = [t, h, w],
  mrope_interleaved = true)`, the model taking position_ids [3, B, L]. A text token's
  streams are all its position.

The dense model runs swiglu(intermediate_size) in every layer; the mixture runs in every layer
of the MoE model: top-k of a softmax, always renormalised, beside a sigmoid-gated shared
expert."""

from __future__ import annotations

from dataclasses import replace

from .base import Family
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded
from .names import Names, rows
from .qwen3_next import DELTA_KEPT, MIXTURE, read_hybrid
from .rope import interleaved_mrope, num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    if read_hybrid(s, padding) is None:
        return
    params = s.cfg.get("rope_parameters") or {}
    sections = params.get("mrope_section") or [11, 11, 10]  # Qwen3_5TextRotaryEmbedding's
    for attention in s.attentions.values():  # its frequencies always interleaved
        if "position" in attention:
            position = interleaved_mrope(s, attention["position"], sections)
            if position is None:
                return
            attention["position"] = position
    layers, eps = s.get("num_hidden_layers"), s.get("rms_norm_eps")
    if s.cfg.get("model_type") == "qwen3_5_moe_text":
        ffn = (f"moe(experts = {s.need('num_experts')}, top_k = "
               f"{s.need('num_experts_per_tok')}, expert = "
               f"swiglu({s.need('moe_intermediate_size')}), normalize = true, shared = "
               f"swiglu({s.need('shared_expert_intermediate_size')}), shared_gate = true)")
    else:
        ffn = f"swiglu({s.need('intermediate_size')})"
    s.stack = {"layers": str(layers), "ffn": ffn,
               "norm": f"rmsnorm(pre, eps = {num(eps)}, unit_offset = true)"}


def _key_rows(a, cfg) -> int:
    """The rows of every key head's (or query head's) features in in_proj_qkv."""
    return a.kernel.key_heads * a.head_dim


_LA = "linear_attn."
_QKV = f"{_LA}in_proj_qkv.weight"
_DELTA = {
    "self_attn.q_proj.weight": (_QKV, rows(lambda a, c: 0, _key_rows)),
    "self_attn.k_proj.weight": (_QKV, rows(_key_rows, _key_rows)),
    "self_attn.v_proj.weight": (_QKV, rows(lambda a, c: 2 * _key_rows(a, c),
                                           lambda a, c: a.heads * a.value_dim)),
    **{f"self_attn.{p}_proj.weight": f"{_LA}in_proj_{p}.weight" for p in "zba"},
    **DELTA_KEPT}
# transformers loads Qwen3.5's own checkpoints from `model.language_model.`; what
# Qwen3_5ForCausalLM leaves unloaded: the multi-token prediction module and the vision tower
_OUTSIDE = (r"mtp(\.\w+)*\.(weight|bias)", r"visual\..+")
_BASES = ("model.language_model.", *LLAMA.bases)
_DENSE = Names("layers.{i}.", LLAMA.names, LLAMA.top, _BASES, by_kernel={"DeltaRule": _DELTA},
               outside=_OUTSIDE)
_MOE = replace(_DENSE, names={**{k: v for k, v in LLAMA.names.items()
                                 if not k.startswith("mlp.")}, **MIXTURE})

# transformers' defaults (Qwen3_5TextConfig, Qwen3_5MoeTextConfig, 5.23) for the fields the
# import reads
_SHARED_DEFAULTS = {
    "num_attention_heads": 16, "hidden_act": "silu", "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "attention_bias": False, "head_dim": 256,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32}
FAMILIES = [
    Family("qwen3_5_text", _read, _DENSE, {
        **_SHARED_DEFAULTS, "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 32, "num_key_value_heads": 4}, lm=True),
    Family("qwen3_5_moe_text", _read, _MOE, {
        **_SHARED_DEFAULTS, "hidden_size": 2048, "num_hidden_layers": 40,
        "num_key_value_heads": 2, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8, "num_experts": 256},
        inert=ROUTER_INERT, lm=True, weights_for=expanded(_MOE)),
]
