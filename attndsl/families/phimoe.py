"""PhiMoE (Phi-3.5-MoE): Mixtral's layout (experts w1, w3, w2 and the router `gate` under
`block_sparse_moe`, every layer sliding when sliding_window is set) with LayerNorms with a
bias (eps = rms_norm_eps), biases on q, k, v and o with attention_bias, an LM head bias with
lm_head_bias, and the sparse-mixer router at inference: `router = sparsemixer, threshold = 2
x router_jitter_noise`, two experts (num_experts_per_tok must be 2). Its longrope takes the
short factors at every length (PhimoeRotaryEmbedding computes its frequencies without the
length) and scales cos and sin by short_mscale or long_mscale: read as longrope with both
factor lists the short ones and attention_factor the mscale, where the two mscales are equal
(else refused)."""

from __future__ import annotations

from .base import Family
from .llama import read as read_llama
from .moe import ROUTER_INERT, _experts, expanded
from .names import Names
from .rope import default_theta, num
from .text import SpecText

__all__ = ["FAMILIES"]


def _rope(s: SpecText) -> None:
    """rope_parameters as PhimoeRotaryEmbedding applies them (see the module's docstring)."""
    params = s.cfg.get("rope_parameters") or s.cfg.get("rope_scaling")
    if not isinstance(params, dict) or params.get("rope_type", params.get("type")) in (
            None, "default"):
        return
    short, long = params.get("short_mscale"), params.get("long_mscale")
    if short != long:
        s.refuse("rope_parameters", f"PhiMoE scales cos and sin by short_mscale ({short}) up to "
                                    f"original_max_position_embeddings and by long_mscale "
                                    f"({long}) past it; attndsl's longrope has one "
                                    "attention_factor")
        return
    key = "rope_parameters" if s.cfg.get("rope_parameters") else "rope_scaling"
    s.cfg[key] = {**params, "long_factor": params.get("short_factor"),
                  "attention_factor": short}


def _read(s: SpecText, padding: str | None) -> None:
    default_theta(s, 1000000.0)  # PhimoeConfig.default_theta
    layers = s.need("num_hidden_layers")
    if s.get("sliding_window") is not None and not s.cfg.get("layer_types"):
        # transformers masks every layer with the window when it is set (as Mixtral)
        s.cfg["layer_types"] = ["sliding_attention"] * (layers or 0)
    _rope(s)
    read_llama(s, padding)
    expert = s.stack["ffn"]  # swiglu(n) or geglu(n): hidden_act of each expert's gate
    top_k = s.need("num_experts_per_tok")
    if top_k != 2:
        s.refuse("num_experts_per_tok", "PhiMoE's sparse mixer picks 2 experts (transformers "
                                        "returns two at any num_experts_per_tok)")
    # PhimoeConfig's default; typed here, as the other mixtures leave it inert
    noise = s.get("router_jitter_noise", default=0.01)
    if isinstance(noise, bool) or not isinstance(noise, int | float) or not 0 <= noise < 1e30:
        s.refuse("router_jitter_noise", "the sparse mixer's relative threshold is twice it: a "
                                        "number >= 0")
        noise = 0.0
    s.stack["ffn"] = (f"moe(experts = {s.need('num_local_experts')}, top_k = 2, expert = "
                      f"{expert}, router = sparsemixer, threshold = {num(2 * noise)})")
    s.stack["norm"] = f"layernorm(pre, eps = {num(s.need('rms_norm_eps'))})"
    if s.get("lm_head_bias"):
        s.head["head_bias"] = "true"


_MIXTRAL = _experts("layers.{i}.", "block_sparse_moe", "w1", "w3", "w2", "gate", False)
_PHIMOE = Names(_MIXTRAL.layer, {
    **_MIXTRAL.names, "attn_norm.bias": "input_layernorm.bias",
    "ffn_norm.bias": "post_attention_layernorm.bias"},
    {**_MIXTRAL.top, "norm.bias": "norm.bias", "lm_head.bias": "lm_head.bias"}, _MIXTRAL.bases)

# transformers' defaults (PhimoeConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("phimoe", _read, _PHIMOE, {
        "hidden_size": 4096, "intermediate_size": 6400, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "num_experts_per_tok": 2,
        "num_local_experts": 16, "attention_bias": False,
        "lm_head_bias": False},
        inert={**ROUTER_INERT,
               "input_jitter_noise": "noise on the router's input in training"},
        lm=True, weights_for=expanded(_PHIMOE)),
]
