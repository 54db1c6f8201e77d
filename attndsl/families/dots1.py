"""dots.llm1 (`dots1`, rednote): a Qwen3 decoder (q and k heads RMS-normed before RoPE,
`layer_types` of full and sliding layers, else sliding from max_window_layers on when a
sliding_window is set, as Dots1Config derives them) whose MLPs after the first
first_k_dense_replace layers are DeepSeek-V3's mixture: a sigmoid router choosing by score plus
`e_score_correction_bias` among the topk_group best of n_group groups (each scored by its two
best), renormalised with norm_topk_prob, times routed_scaling_factor, over SwiGLU experts of
moe_intermediate_size, beside n_shared_experts shared experts as one SwiGLU, added ungated."""

from __future__ import annotations

from .base import Family
from .deepseek import DEEPSEEK
from .llama import LLAMA, LLAMA_DEFAULTS, read_qk_normed
from .moe import ROUTER_INERT, expanded, grouped_sigmoid, mixture
from .names import ATTN, Names
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg, layers = s.cfg, s.need("num_hidden_layers")
    if not cfg.get("layer_types"):  # as Dots1Config derives them
        window, first = s.get("sliding_window"), s.need("max_window_layers")
        cfg["layer_types"] = ["sliding_attention" if window is not None and i >= first
                              else "full_attention" for i in range(layers)]
    read_qk_normed(s, padding, "dots.llm1")
    if s.get("n_routed_experts") is None:
        s.refuse("n_routed_experts", "Dots1MoE's experts: a count is needed")
        return
    hidden = s.need("moe_intermediate_size")
    moe = grouped_sigmoid(s, "n_routed_experts", "n_shared_experts", "swiglu", hidden)
    dense = list(range(min(s.need("first_k_dense_replace"), layers)))
    s.stack["ffn"] = mixture(moe, dense, layers, s.need("intermediate_size"))


# where transformers 5.23 saves each tensor: Qwen3's attention, DeepSeek-V3's mixture
_DOTS1 = Names(LLAMA.layer, {
    **ATTN, **{k: v for k, v in DEEPSEEK.names.items() if k.startswith("mlp.")},
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight"}, LLAMA.top, LLAMA.bases)

# transformers' defaults (Dots1Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("dots1", _read, _DOTS1, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if k != "mlp_bias"}, "hidden_size": 4608,
        "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 62,
        "num_key_value_heads": 32, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0,
        "norm_topk_prob": False, "routed_scaling_factor": 1.0, "sliding_window": 4096,
        "max_window_layers": 62},
        inert={**ROUTER_INERT, "max_window_layers": (
            "read into layer_types by Dots1Config; the import reads it only when layer_types is "
            "absent")}, lm=True, weights_for=expanded(_DOTS1)),
]
