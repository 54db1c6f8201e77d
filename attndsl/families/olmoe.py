"""The OLMo mixtures of experts: OLMoE (a Llama decoder, pre-norm, whose q and k are RMS-normed
over all heads of a token before the heads are split, and whose SwiGLU MLP is a mixture: a
softmax router's top k, renormalised with norm_topk_prob, under `mlp.gate`) and FlexOlmo
(the same attention and mixture with OLMo 2's norms after the sublayers)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .moe import ROUTER_INERT, expanded
from .names import ATTN, Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for entries in s.attentions.values():
        entries["qk_norm"] = f"rmsnorm(eps = {eps}, across_heads = true)"
    if s.cfg.get("model_type") == "flex_olmo":
        s.stack["norm"] = f"rmsnorm(output, eps = {eps})"
    expert = s.stack["ffn"]  # the dense reader's MLP of intermediate_size and hidden_act
    s.stack["ffn"] = (f"moe(experts = {s.need('num_experts')}, top_k = "
                      f"{s.need('num_experts_per_tok')}, expert = {expert}, normalize = "
                      f"{'true' if s.cfg.get('norm_topk_prob') else 'false'})")


def _table(norms: dict[str, str]) -> Names:
    """Llama's attention (with q_norm and k_norm) and `norms`, experts `mlp.experts.{e}.*` and
    the router `mlp.gate`."""
    names = {**ATTN, **norms}
    names |= {f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight"
              for p in ("gate_proj", "up_proj", "down_proj")}
    names["mlp.router.weight"] = "mlp.gate.weight"
    return Names(LLAMA.layer, names, LLAMA.top, LLAMA.bases)


_OLMOE = _table({"attn_norm.weight": "input_layernorm.weight",
                 "ffn_norm.weight": "post_attention_layernorm.weight"})
_FLEX_OLMO = _table({"post_attn_norm.weight": "post_attention_layernorm.weight",
                     "post_ffn_norm.weight": "post_feedforward_layernorm.weight"})

# transformers' defaults (OlmoeConfig, FlexOlmoConfig, 5.23) for the fields the import reads
_COMMON = {"hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
           "norm_topk_prob": False}
FAMILIES = [
    Family("olmoe", _read, _OLMOE, {
        **_COMMON, "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 16, "rms_norm_eps": 1e-5, "num_experts_per_tok": 8,
        "num_experts": 64},
        inert=ROUTER_INERT,
        refused={"clip_qkv": (lambda v: v is not None,
                              "OLMoE clamps q and k to [-clip_qkv, clip_qkv] after their "
                              "norm over all heads; attndsl's clip_qkv clamps the projections "
                              "before qk_norm")},
        lm=True, weights_for=expanded(_OLMOE)),
    Family("flex_olmo", _read, _FLEX_OLMO, {
        **_COMMON, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "rms_norm_eps": 1e-6, "num_experts_per_tok": 5,
        "num_experts": 7},
        inert=ROUTER_INERT, lm=True, weights_for=expanded(_FLEX_OLMO),
        rope={"rope_type": "default", "rope_theta": 500000.0}),
]
