"""GLM-4 (`glm`) and GLM-4-0414 (`glm4`): a Llama decoder whose RoPE rotates the first
partial_rotary_factor of each head (0.5 by default) pairing features 2i and 2i + 1
(transformers' cos/sin halves repeat_interleave'd, GLM's rotate_half: `rope(dim = ...,
interleaved = true)`), with biases on q, k and v alone (`attention_bias`; o_proj has none) and
the MLP's gate and up rows fused in `gate_up_proj` (gate first, as Phi-3). `glm4` adds a norm
on each sublayer's output (post_self_attn_layernorm, post_mlp_layernorm): `rmsnorm(sandwich)`.
GLM-4.5 (`glm4_moe`): the same attention with rotate-half (GPT-NeoX's apply_rotary_pos_emb) on
the partial rotary features, each head of q and k RMS-normed before RoPE with use_qk_norm, and
DeepSeek-V3's mixture (sigmoid router, selection bias, groups, shared experts; the first
first_k_dense_replace layers dense)."""

from __future__ import annotations

from .base import Family
from .deepseek import DEEPSEEK, moe_ffn
from .llama import LLAMA, read
from .moe import ROUTER_INERT, expanded
from .names import Names, rows
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read(s, padding, interleaved=True)
    for entries in s.attentions.values():
        entries["bias"] = "[q, k, v]" if s.cfg.get("attention_bias") else "false"
    if s.cfg.get("model_type") == "glm4":
        s.stack["norm"] = s.stack["norm"].replace("rmsnorm(pre, ", "rmsnorm(sandwich, ")


def _read_moe(s: SpecText, padding: str | None) -> None:
    read(s, padding)  # rotate-half RoPE on partial_rotary_factor of each head
    for entries in s.attentions.values():
        entries["bias"] = "[q, k, v]" if s.cfg.get("attention_bias") else "false"
        if s.cfg.get("use_qk_norm"):  # per head, before RoPE
            entries["qk_norm"] = f"rmsnorm(eps = {num(s.need('rms_norm_eps'))})"
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "GLM-4.5's MLPs and experts are SwiGLU (silu)")
    s.stack["ffn"] = moe_ffn(s)


def _width(a: object, cfg: dict) -> int:
    return cfg["intermediate_size"]


_MLP = {"mlp.gate_proj.weight": ("mlp.gate_up_proj.weight", rows(lambda a, c: 0, _width)),
        "mlp.up_proj.weight": ("mlp.gate_up_proj.weight", rows(_width, _width)),
        "mlp.down_proj.weight": "mlp.down_proj.weight"}
# q, k and v with their biases, o without: LLAMA's attention entries less o_proj.bias and qk-norms
_ATTN = {k: v for k, v in LLAMA.names.items() if k.startswith("self_attn.")
         and k not in ("self_attn.o_proj.bias", "self_attn.q_norm.weight",
                       "self_attn.k_norm.weight")}
_GLM = Names("layers.{i}.", {**_ATTN, **_MLP, "attn_norm.weight": "input_layernorm.weight",
                             "ffn_norm.weight": "post_attention_layernorm.weight"},
             LLAMA.top, LLAMA.bases)
_GLM4 = Names("layers.{i}.", {
    **_ATTN, **_MLP,
    "attn_norm.weight": "input_layernorm.weight",
    "post_attn_norm.weight": "post_self_attn_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "post_ffn_norm.weight": "post_mlp_layernorm.weight"}, LLAMA.top, LLAMA.bases)

_GLM4_MOE = Names("layers.{i}.", {
    **_ATTN, "self_attn.q_norm.weight": "self_attn.q_norm.weight",
    "self_attn.k_norm.weight": "self_attn.k_norm.weight",
    **{k: v for k, v in DEEPSEEK.names.items() if not k.startswith("self_attn.")}},
    LLAMA.top, LLAMA.bases, past_layers=True)  # num_nextn_predict_layers: multi-token
# prediction, kept as layers past num_hidden_layers

# transformers' defaults (GlmConfig, Glm4Config, Glm4MoeConfig, 5.23) for the fields the import
# reads
_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
             "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
             "hidden_act": "silu", "rms_norm_eps": 1.5625e-07, "tie_word_embeddings": False,
             "attention_bias": True}
FAMILIES = [
    Family("glm", _read, _GLM, _DEFAULTS, lm=True),
    Family("glm4", _read, _GLM4, _DEFAULTS, lm=True),
    Family("glm4_moe", _read_moe, _GLM4_MOE, {
        "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
        "num_attention_heads": 96, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "attention_bias": False,
        "moe_intermediate_size": 1408, "num_experts_per_tok": 8, "n_shared_experts": 1,
        "n_routed_experts": 128, "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1,
        "first_k_dense_replace": 1, "norm_topk_prob": True, "use_qk_norm": False},
        inert={**ROUTER_INERT,
               "num_nextn_predict_layers": "multi-token prediction layers, for training and "
                                           "speculative decoding, not in the model's forward"},
        lm=True, weights_for=expanded(_GLM4_MOE)),
]
