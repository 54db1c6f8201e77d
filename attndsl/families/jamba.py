"""Jamba (`jamba`): Mamba layers (`mamba(..., norm = weighted)`: its dt, B and C RMSNorms with
weights) with an attention layer every attn_layer_period layers (at attn_layer_offset; GQA, no
positions), each followed by a SwiGLU MLP or, every expert_layer_period layers (at
expert_layer_offset), a mixture of num_experts SwiGLU experts under a softmax router whose top
num_experts_per_tok weights are not renormalised; pre-norm RMSNorms."""

from __future__ import annotations

from .base import Family
from .mamba import MAMBA_COMMENT, dt_rank, mamba_names
from .moe import ROUTER_INERT, expanded, mixture
from .names import ATTN, LM, Names
from .rope import num
from .text import SpecText, mask, period

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv, layers, eps = s.get("num_key_value_heads", default=heads), \
        s.need("num_hidden_layers"), s.need("rms_norm_eps")
    for key in ("attn_layer_period", "expert_layer_period"):
        if s.need(key) < 1:
            s.refuse(key, "a period of at least 1 is needed")
            return
    for key, want in (("hidden_act", "silu"), ("mamba_proj_bias", False)):
        if s.get(key, default=want) != want:
            s.refuse(key, "Jamba's MLPs and convolution are imported with silu, and its Mamba "
                          "projections without biases (a padding slot's would reach the "
                          "convolution)")
    rank = dt_rank(s, "mamba_dt_rank", d)
    if rank is None:
        return
    s.attentions["jamba_mamba"] = {
        "d_model": str(d), "heads": str(s.need("mamba_expand") * d),
        "head_dim": str(s.need("mamba_d_state")), "value_dim": "1", "bias": "false",
        "kernel": (f"mamba(rank = {rank}, conv = {s.need('mamba_d_conv')}, conv_bias = "
                   f"{'true' if s.need('mamba_conv_bias') else 'false'}, norm = weighted, "
                   f"eps = {num(eps)})"),
        "mask": mask(True, padding)}
    s.comments["jamba_mamba"] = MAMBA_COMMENT
    s.attentions["jamba_attn"] = {
        "d_model": str(d), "heads": str(heads), "kv_heads": str(kv),
        "head_dim": str(d // max(heads, 1)), "bias": "false", "mask": mask(True, padding)}
    s.comments["jamba_attn"] = "Jamba's attention: no positions (its Mamba layers order tokens)"
    attn_period, attn_offset = s.need("attn_layer_period"), s.need("attn_layer_offset")
    kinds = ["jamba_attn" if i % attn_period == attn_offset else "jamba_mamba"
             for i in range(layers)]
    s.pattern = period(kinds)
    for name in {"jamba_attn", "jamba_mamba"} - set(kinds):
        del s.attentions[name]
    width, experts = s.need("intermediate_size"), s.need("num_experts")
    every, at = s.need("expert_layer_period"), s.need("expert_layer_offset")
    dense = [i for i in range(layers) if experts <= 1 or i % every != at]
    ffn = (f"moe(experts = {experts}, top_k = {s.need('num_experts_per_tok')}, expert = "
           f"swiglu({width}), normalize = false")
    s.stack = {"layers": str(layers), "ffn": mixture(ffn, dense, layers, width),
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


_JAMBA = Names("layers.{i}.", {
    **ATTN,
    **{f"mlp.{p}_proj.weight": f"feed_forward.{p}_proj.weight" for p in ("gate", "up", "down")},
    **{f"mlp.experts.{{e}}.{p}_proj.weight": f"feed_forward.experts.{{e}}.{p}_proj.weight"
       for p in ("gate", "up", "down")},
    "mlp.router.weight": "feed_forward.router.weight",
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "pre_ff_layernorm.weight"},
    {"norm.weight": "final_layernorm.weight", **LM}, ("model.",),
    by_kernel={"Mamba": mamba_names("mamba.")})

# transformers' defaults (JambaConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("jamba", _read, _JAMBA, {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "num_experts_per_tok": 2,
        "num_experts": 16, "expert_layer_period": 2, "expert_layer_offset": 1,
        "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4,
        "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False},
        inert={**ROUTER_INERT,
               "use_mamba_kernels": "which implementation of the scan transformers runs",
               "use_mambapy": "which implementation of the scan transformers runs",
               "use_associative_scan": "which implementation of the scan transformers runs",
               "max_position_embeddings": "Jamba's attention has no positions",
               "num_logits_to_keep": "how many positions' logits generation computes"},
        lm=True, weights_for=expanded(_JAMBA),
        types={**dict.fromkeys(("attn_layer_period", "expert_layer_period", "mamba_d_state",
                                "mamba_d_conv", "mamba_expand"), ("int", 1)),
               **dict.fromkeys(("attn_layer_offset", "expert_layer_offset"), ("int", 0)),
               "mamba_conv_bias": ("bool", None), "mamba_proj_bias": ("bool", None)}),
]
