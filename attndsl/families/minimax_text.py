"""MiniMax-Text-01 (`minimax`): a hybrid of lightning attention layers (`linear_attention`:
`kernel = lightning(layers = num_hidden_layers)`, linear attention whose state decays by a
fixed rate per head, falling with the depth) and Mixtral's softmax attention (`full_attention`:
GQA, RoPE), as layer_types says, every layer's feed-forward Mixtral's mixture of SwiGLU
experts (top k renormalised). Its blocks keep the normed input as the residual, times the alpha
factors, the sublayers' outputs times the beta factors: `residual = normed(alpha)`,
`residual_scale = beta` (the three alphas equal, and the three betas). The lightning layers'
qkv_proj holds per head [q, k, v] rows; the decay buffers the checkpoint also holds
(slope_rate, query_decay, key_decay, diagonal_decay) are the config's, recomputed."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .moe import ROUTER_INERT, expanded
from .names import Names
from .rope import default_theta, num
from .text import SpecText, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("full_attention", "linear_attention")


def _read(s: SpecText, padding: str | None) -> None:
    cfg, layers = s.cfg, s.need("num_hidden_layers")
    types = s.get("layer_types") or ["full_attention" if (i + 1) % 2 else "linear_attention"
                                     for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(_KINDS):
        s.refuse("layer_types", f"{layers} entries, each full_attention or linear_attention, "
                                "are needed")
        return
    if s.get("sliding_window") is not None:
        s.refuse("sliding_window", "a window on MiniMax's softmax layers has no import yet "
                                   "(MiniMax-Text-01 sets none)")
    factors = {}
    for part in ("alpha", "beta"):
        values = {s.need(f"{kind}_{part}_factor") for kind in ("full_attn", "linear_attn", "mlp")}
        if len(values) > 1:
            s.refuse(f"full_attn_{part}_factor", f"one {part} factor for every sublayer is "
                                                 "what attndsl's residual takes (MiniMax-Text-01 "
                                                 "sets one)")
        factors[part] = values.pop()
    if s.get("num_experts") is not None:  # MiniMaxConfig's attribute_map: num_local_experts
        cfg["num_local_experts"] = cfg["num_experts"]
    default_theta(s, 1_000_000.0)  # MiniMaxConfig.default_theta
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "partial_rotary_factor" in params:
        # MiniMax's rotary embedding rotates the whole head whatever the factor says
        cfg["rope_parameters"] = {k: v for k, v in params.items()
                                  if k != "partial_rotary_factor"}
    s.get("partial_rotary_factor")  # (read, and inert as the one in rope_parameters)
    cfg.pop("partial_rotary_factor", None)
    cfg["layer_types"] = None  # (the softmax attention alone, as Mixtral's reader reads it)
    read_llama(s, padding)
    cfg["layer_types"] = types
    full = s.attentions.pop(next(iter(s.attentions)))
    full["bias"] = "false"  # (MiniMaxAttention's projections have none, whatever the config)
    heads, head_dim = s.need("num_attention_heads"), s.get("head_dim")
    head_dim = head_dim or s.need("hidden_size") // max(heads, 1)  # (0 heads: refused)
    names = {"full_attention": f"{s.name}_full", "linear_attention": f"{s.name}_lightning"}
    if "full_attention" in types:
        s.attentions[names["full_attention"]] = full
    if "linear_attention" in types:
        s.attentions[names["linear_attention"]] = {
            "d_model": str(s.need("hidden_size")), "heads": str(heads),
            "head_dim": str(head_dim), "bias": "false",
            "kernel": f"lightning(layers = {layers}, chunk = {s.need('block_size')})",
            "mask": mask(True, padding)}
        s.comments[names["linear_attention"]] = (
            "lightning attention (linear attention): a state per head, decaying at a fixed "
            "rate per head; padding slots are skipped")
    s.pattern = [names[t] for t in period(types)]
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "MiniMax's q, k and v activations and its experts use silu")
    s.stack["ffn"] = (f"moe(experts = {s.need('num_local_experts')}, top_k = "
                      f"{s.need('num_experts_per_tok')}, expert = "
                      f"swiglu({s.need('intermediate_size')}), normalize = true)")
    s.stack["residual"] = f"normed(alpha = {num(factors['alpha'])})"
    if factors["beta"] != 1:
        s.stack["residual_scale"] = num(factors["beta"])


def _qkv(part: int):
    """q (0), k (1) or v (2) of qkv_proj: per head [q, k, v] rows of head_dim each."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        return t.reshape(a.heads, 3, a.head_dim, *t.shape[1:])[:, part].reshape(
            a.heads * a.head_dim, *t.shape[1:])
    return split


_MOE = "block_sparse_moe"
_LIGHTNING = {
    **{f"self_attn.{p}_proj.weight": ("self_attn.qkv_proj.weight", _qkv(i))
       for i, p in enumerate("qkv")},
    "self_attn.g_proj.weight": "self_attn.output_gate.weight",
    "self_attn.norm.weight": "self_attn.norm.weight",
    "self_attn.o_proj.weight": "self_attn.out_proj.weight"}
_MINIMAX = Names("layers.{i}.", {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    **{f"mlp.experts.{{e}}.{ours}.weight": f"{_MOE}.experts.{{e}}.{theirs}.weight"
       for ours, theirs in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2"))},
    "mlp.router.weight": f"{_MOE}.gate.weight"}, LLAMA.top, LLAMA.bases,
    by_kernel={"Lightning": _LIGHTNING},
    # the lightning layers' decay buffers, which the config gives
    outside=(r"layers\.\d+\.self_attn\.(slope_rate|query_decay|key_decay|diagonal_decay)",))

_FACTORS = {f"{kind}_{part}_factor": 1 for kind in ("full_attn", "linear_attn", "mlp")
            for part in ("alpha", "beta")}
# transformers' defaults (MiniMaxConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("minimax", _read, _MINIMAX, {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "num_experts_per_tok": 2,
        "num_local_experts": 8, "block_size": 256, **_FACTORS},
        inert={**ROUTER_INERT, "router_jitter_noise": "noise on the router's logits in training"},
        lm=True, weights_for=expanded(_MINIMAX)),
]
