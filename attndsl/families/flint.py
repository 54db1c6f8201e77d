"""Flint: Qwen3-MoE's attention (q and k RMS-normed per head) with a learned sink per head on
every layer (`softmax_offset`, gpt-oss's extra logit: `sinks = learned`), sliding layers with
RoPE and full layers without positions (FlintAttention rotates the sliding layers alone;
`layer_types`, else full where i < 2, i % 4 = 1 or i is the last layer, as FlintConfig
derives them), and a mixture of experts whose router takes the sigmoid of its logits (top k,
renormalised with norm_topk_prob) beside an ungated shared expert, with dense layers
(`mlp_only_layers`, else [0, 1]; `decoder_sparse_step`)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA, read_nope_full
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    layers = s.need("num_hidden_layers")
    if not s.get("layer_types"):
        s.cfg["layer_types"] = ["full_attention" if i < 2 or i % 4 == 1 or i == layers - 1
                                else "sliding_attention" for i in range(layers)]
    read_nope_full(s, padding, sinks="learned")
    experts = s.need("num_experts")
    ffn = (f"moe(experts = {experts}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = swiglu({s.need('moe_intermediate_size')}), router = sigmoid, "
           f"normalize = {'true' if s.need('norm_topk_prob') else 'false'}, "
           f"shared = swiglu({s.need('shared_expert_intermediate_size')})")
    only = s.get("mlp_only_layers", default=[0, 1])
    step = s.need("decoder_sparse_step") or 1
    dense = [i for i in range(layers) if i in only or not experts or (i + 1) % step != 0]
    s.stack["ffn"] = mixture(ffn, dense, layers, s.need("intermediate_size"))


_P = ("gate_proj", "up_proj", "down_proj")
# the dense layers' MLP is Llama's `mlp.*`; the sinks are saved as `softmax_offset`
_FLINT = Names(LLAMA.layer, {
    **LLAMA.names, "self_attn.sinks": "self_attn.softmax_offset",
    "mlp.router.weight": "mlp.gate.weight",
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    **{f"mlp.shared.{p}.weight": f"mlp.shared_expert.{p}.weight" for p in _P}},
    LLAMA.top, LLAMA.bases)

# transformers' defaults (FlintConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("flint", _read, _FLINT, {
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 49,
        "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_act": "silu",
        "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "sliding_window": 513,
        "decoder_sparse_step": 1, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 1024, "num_experts_per_tok": 6, "num_experts": 256,
        "norm_topk_prob": True, "head_dim": 128, "attention_bias": False},
        inert=ROUTER_INERT, refused={"hidden_act": (
            lambda v: v not in ("silu", "swish"),
            "Flint's experts are SwiGLU; attndsl's mixture has one unit for them all")},
        lm=True, weights_for=expanded(_FLINT)),
]
