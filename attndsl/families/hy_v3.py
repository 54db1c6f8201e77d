"""Hy3 (`hy_v3`, Tencent Hunyuan 3): a Llama decoder whose q and k heads are RMS-normed before
RoPE (Apertus's attention: `q_norm`, `k_norm`), RoPE's base 11158840 by default, and per
mlp_layer_types (else the first layer dense, the others sparse, as HYV3Config derives them)
a dense SwiGLU of intermediate_size or a mixture: a sigmoid router choosing the top
num_experts_per_tok by score plus its selection bias (`expert_bias`), weighing them by their
sigmoid scores renormalised, times router_scaling_factor, over SwiGLU experts of
moe_intermediate_size, beside num_shared_experts shared experts as one SwiGLU of
moe_intermediate_size * num_shared_experts (intermediate_size when that is 0: HYV3MLP reads a
width of 0 as none given), added ungated."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA_DEFAULTS, read_qk_normed
from .moe import ROUTER_INERT, expanded
from .names import ATTN, GATED, LM, Names
from .rope import default_theta, num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    default_theta(s, 11_158_840.0)  # HYV3Config.default_theta
    read_qk_normed(s, padding, "Hy3")
    layers, hidden = s.need("num_hidden_layers"), s.need("moe_intermediate_size")
    bias = ", bias = true" if s.get("mlp_bias") else ""  # the dense and shared MLPs' own
    count = s.get("num_shared_experts")
    if count is None:
        s.refuse("num_shared_experts", "HYV3MoE builds its shared experts from it: a count "
                                       "is needed (0: one of intermediate_size)")
    shared = hidden * (count or 0) or s.need("intermediate_size")
    moe = (f"moe(experts = {s.need('num_experts')}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = swiglu({hidden}), router = sigmoid, normalize = true, selection_bias = "
           f"true, routed_scale = {num(s.need('router_scaling_factor'))}, shared = "
           f"swiglu({shared}{bias})")
    kinds = s.get("mlp_layer_types") or ["dense"] * min(layers, 1) + ["sparse"] * (layers - 1)
    if not isinstance(kinds, list) or len(kinds) != layers or \
            not set(kinds) <= {"dense", "sparse"}:
        s.refuse("mlp_layer_types", f"{layers} entries, each `dense` or `sparse`, are needed")
        kinds = ["sparse"] * layers
    dense = [i for i, k in enumerate(kinds) if k == "dense"]
    mlp = f"swiglu({s.need('intermediate_size')}{bias})"
    s.stack["ffn"] = (mlp if len(dense) == layers else
                      f"{moe}, dense = {mlp}, dense_layers = {dense})" if dense else moe + ")")


_P = ("gate_proj", "up_proj", "down_proj")
# where transformers 5.23 saves each tensor (and reads it back from: HYV3's conversion mapping
# renames mlp.router.gate, mlp.expert_bias and mlp.shared_mlp on loading)
_HY_V3 = Names("layers.{i}.", {
    **ATTN, **GATED, "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.router.gate.weight",
    "mlp.router.selection_bias": "mlp.expert_bias",
    **{f"mlp.shared.{p}.{t}": f"mlp.shared_mlp.{p}.{t}" for p in _P for t in ("weight", "bias")}},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (HYV3Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("hy_v3", _read, _HY_V3, {
        **LLAMA_DEFAULTS, "intermediate_size": 13312, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "rms_norm_eps": 1e-5, "num_experts": 192, "num_experts_per_tok": 8,
        "num_shared_experts": 1, "moe_intermediate_size": 1536, "router_scaling_factor": 2.826},
        inert={**ROUTER_INERT,
               "enable_moe_fp32_combine": "whether transformers adds the shared experts' output "
                                          "to the routed one in float32 or in the model's dtype: "
                                          "the same sum up to rounding",
               "num_local_experts": "HYV3Config's alias of num_experts, which the import reads"},
        lm=True, weights_for=expanded(_HY_V3)),
]
