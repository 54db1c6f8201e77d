"""LongCat-Flash (`longcat_flash`, Meituan): each of its num_layers layers is two attndsl blocks
(`layers = 2 x num_layers`, the checkpoint's sublayers `self_attn.{0,1}`, `mlps.{0,1}`,
`input_layernorm.{0,1}`, `post_attention_layernorm.{0,1}`), each a pre-norm block of DeepSeek-V3's
multi-head latent attention (always interleaved RoPE) and a dense SwiGLU of ffn_hidden_size,
and a shortcut-connected mixture of experts per layer (`shortcut = moe(...)`): it reads the
first sublayer's normed feed-forward input and joins the second sublayer's output. Its router
is a softmax over n_routed_experts SwiGLU experts of expert_ffn_hidden_size and zero_expert_num
identity experts, choosing by score plus `e_score_correction_bias`, never renormalised, times
routed_scaling_factor. The latent attention scales its query by sqrt(hidden_size /
q_lora_rank) and its normed latent by sqrt(hidden_size / kv_lora_rank) ("LoRA scaling"), which
the import folds into q_b_proj's and kv_b_proj's weights (both linear and bias-free)."""

from __future__ import annotations

import math
from typing import Any

from ..spec import Attention
from .base import Family
from .deepseek import read_latent
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded
from .names import Names
from .rope import default_theta, num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    default_theta(s, 10_000_000.0)  # (LongcatFlashConfig's default_theta)
    s.cfg["rope_interleave"] = True  # (LongcatFlashMLA's RoPE is interleaved, always)
    eps = read_latent(s, padding, latent_eps=1e-6)  # (q_a_ and kv_a_layernorm: eps 1e-6)
    s.attentions["longcat_mla"] = s.attentions.pop("deepseek_mla")
    s.comments["longcat_mla"] = s.comments.pop("deepseek_mla")
    s.pattern = ["longcat_mla"]
    if s.get("head_dim", default=64) != s.cfg.get("qk_rope_head_dim"):
        s.refuse("head_dim", "LongCat-Flash's RoPE takes its frequencies from head_dim, which "
                             "must equal qk_rope_head_dim (its rotated features)")
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "LongCat-Flash's MLPs and experts are SwiGLU (silu)")
    moe = (f"moe(experts = {s.need('n_routed_experts')}, top_k = {s.need('moe_topk')}, "
           f"expert = swiglu({s.need('expert_ffn_hidden_size')}), normalize = false, "
           f"selection_bias = true, routed_scale = {num(s.need('routed_scaling_factor'))}")
    if zero := s.get("zero_expert_num", default=0):
        moe += f", zero_experts = {zero}"
    s.stack = {"layers": str(2 * s.need("num_layers")),
               "ffn": f"swiglu({s.need('ffn_hidden_size')})", "shortcut": moe + ")",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


def _lora_scaled(rank: str):
    """q_b_proj's (or kv_b_proj's) weight times sqrt(d_model / rank), the latent's `q_rank`
    or `kv_rank`: LongCat's scaling of the projection's output (q) or input (kv), as a
    scaling of the bias-free projection."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        return t * math.sqrt(a.d_model / getattr(a.projection, rank))
    return split


_A = "self_attn.{s}."
_LONGCAT = Names(LLAMA.layer, {
    **{f"self_attn.{p}.{t}": f"{_A}{p}.{t}"
       for p in ("q_a_proj", "kv_a_proj_with_mqa", "o_proj") for t in ("weight", "bias")},
    **{f"self_attn.{n}.weight": f"{_A}{n}.weight" for n in ("q_a_layernorm", "kv_a_layernorm")},
    "self_attn.q_b_proj.weight": (f"{_A}q_b_proj.weight", _lora_scaled("q_rank")),
    "self_attn.kv_b_proj.weight": (f"{_A}kv_b_proj.weight", _lora_scaled("kv_rank")),
    "attn_norm.weight": "input_layernorm.{s}.weight",
    "ffn_norm.weight": "post_attention_layernorm.{s}.weight",
    **{f"mlp.{p}.weight": f"mlps.{{s}}.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
    "shortcut_mlp.router.weight": "mlp.router.classifier.weight",
    "shortcut_mlp.router.selection_bias": "mlp.router.e_score_correction_bias",
    **{f"shortcut_mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight"
       for p in ("gate_proj", "up_proj", "down_proj")}},
    LLAMA.top, LLAMA.bases,
    # transformers saves a gate and up projection for every expert, identities too (its fused
    # gate_up_proj has n_routed_experts + zero_expert_num rows); an identity reads none; and
    # its router's bias (`router_bias`), which LongcatFlashTopkRouter never adds
    outside=(r"layers\.\d+\.mlp\.experts\.\d+\.(gate|up)_proj\.weight",
             r"layers\.\d+\.mlp\.router\.classifier\.bias"), sublayers=2)

# transformers' defaults (LongcatFlashConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("longcat_flash", _read, _LONGCAT, {
        "hidden_size": 6144, "num_layers": 28, "num_attention_heads": 64,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "attention_bias": False, "ffn_hidden_size": 12288, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "head_dim": 64, "moe_topk": 12, "n_routed_experts": 512, "zero_expert_num": 256,
        "expert_ffn_hidden_size": 2048, "routed_scaling_factor": 6.0},
        inert={**ROUTER_INERT,
               "router_bias": "LongcatFlashTopkRouter never adds its classifier's bias",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim"},
        lm=True, weights_for=expanded(_LONGCAT)),
]
