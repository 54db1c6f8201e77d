"""MiniMax-M2: a Mixtral-like decoder whose q and k are RMS-normed over their whole projected
width (all heads of a token at once, before the heads are split: `qk_norm = rmsnorm(across_heads
= true)`, as OLMo 2), rotated rotate-half on the first rotary_dim (partial_rotary_factor) of each
head, and whose experts are chosen by a sigmoid router plus `e_score_correction_bias` (the
selection bias), weighed by the sigmoid scores renormalised over the chosen ones."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .moe import ROUTER_INERT, expanded
from .names import Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    params = cfg.get("rope_parameters") or {}
    if cfg.get("rotary_dim") and "partial_rotary_factor" not in params:
        # as MiniMaxM2Config's convert_rope_params_to_dict reads an older config's rotary_dim
        cfg["partial_rotary_factor"] = cfg["rotary_dim"] / s.need("head_dim")
    read_llama(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for entries in s.attentions.values():
        entries["qk_norm"] = f"rmsnorm(eps = {eps}, across_heads = true)"
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "MiniMax-M2's experts are SwiGLU (silu)")
    s.stack["ffn"] = (f"moe(experts = {s.need('num_local_experts')}, top_k = "
                      f"{s.need('num_experts_per_tok')}, expert = swiglu("
                      f"{s.need('intermediate_size')}), router = sigmoid, normalize = true, "
                      "selection_bias = true)")


_MOE = "block_sparse_moe"
_MINIMAX_M2 = Names("layers.{i}.", {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    **{f"mlp.experts.{{e}}.{ours}.weight": f"{_MOE}.experts.{{e}}.{theirs}.weight"
       for ours, theirs in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2"))},
    "mlp.router.weight": f"{_MOE}.gate.weight",
    "mlp.router.selection_bias": f"{_MOE}.e_score_correction_bias"}, LLAMA.top, LLAMA.bases)

# transformers' defaults (MiniMaxM2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("minimax_m2", _read, _MINIMAX_M2, {
        "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
        "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
        "num_experts_per_tok": 8, "num_local_experts": 256},
        inert={**ROUTER_INERT, "router_jitter_noise": "noise on the router's input in training"},
        lm=True, weights_for=expanded(_MINIMAX_M2),
        rope={"rope_type": "default", "rope_theta": 5000000.0}),
]
