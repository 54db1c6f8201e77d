"""Hunyuan (dense, `hunyuan_v1_dense`): a Llama decoder whose q and k heads are RMS-normed
after RoPE (`qk_norm_after_rope`, its `query_layernorm` and `key_layernorm`), with RoPE's
fixed NTK alpha (`rope_type` "dynamic" with `alpha`: the base theta * alpha ** (d / (d - 2)),
the same at every length)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA_DEFAULTS
from .llama import read as read_llama
from .names import ATTN, GATED, LM, Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    params = s.get("rope_parameters")
    if isinstance(params, dict) and params.get("alpha") and \
            params.get("rope_type", params.get("type")) == "dynamic":
        d, heads = s.need("hidden_size"), s.need("num_attention_heads")
        dim = s.get("head_dim", default=d // max(heads, 1))
        theta = params.get("rope_theta", 10000.0) * params["alpha"] ** (dim / (dim - 2))
        s.cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    read_llama(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for entries in s.attentions.values():
        entries["qk_norm_after_rope"] = f"rmsnorm(eps = {eps})"


_HUNYUAN = Names("layers.{i}.", {
    **{k: v for k, v in ATTN.items() if "_norm." not in k}, **GATED,
    "self_attn.q_norm.weight": "self_attn.query_layernorm.weight",
    "self_attn.k_norm.weight": "self_attn.key_layernorm.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (HunYuanDenseV1Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("hunyuan_v1_dense", _read, _HUNYUAN, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if k != "mlp_bias"}, "rms_norm_eps": 1e-5},
        inert={"eod_token_id": "the tokenizer's end-of-document id: generation stops at "
                               "eos_token_id",
               "pretraining_tp": "how training sharded the projections; transformers' "
                                 "Hunyuan ignores it"}, lm=True),
]
