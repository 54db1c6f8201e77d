"""JetMoE: a Llama-like decoder (pre-norm RMSNorm, RoPE, tied embeddings by default) whose
attention is a mixture of attention heads (`head_experts = moa(...)`: each token's top k of
num_local_experts query and output projections, under `self_attention.experts`, beside one
shared key and value projection, `kv_proj`, and the output's bias) and whose MLP is a
mixture of SwiGLU experts stored as GraniteMoE's (`input_linear` gate and up rows,
`output_linear`) with one bias on the routed sum (`mlp.bias`). Both routers take the top k
logits and their softmax. Query heads: num_attention_heads = top_k x num_key_value_heads, as
JetMoeConfig derives it; head_dim is kv_channels."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .granitemoe import half, one_expert
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded
from .names import Names, rows
from .rope import num, rope
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    d, kv, head_dim = s.need("hidden_size"), s.need("num_key_value_heads"), s.need("kv_channels")
    experts, top_k = s.need("num_local_experts"), s.need("num_experts_per_tok")
    heads = s.get("num_attention_heads", default=kv * top_k)
    if heads != kv * top_k:
        s.refuse("num_attention_heads", f"JetMoE's query heads are num_experts_per_tok x "
                                        f"num_key_value_heads ({kv * top_k})")
    s.attentions["jetmoe_attn"] = {
        "d_model": str(d), "heads": str(kv * top_k), "kv_heads": str(kv),
        "head_dim": str(head_dim), "bias": "[o]",
        "head_experts": f"moa(experts = {experts}, top_k = {top_k})",
        "position": rope(s, s.cfg.get("rope_parameters"), head_dim),
        "mask": mask(True, padding)}
    s.pattern = ["jetmoe_attn"]
    gate = act(s, "activation_function", s.need("activation_function"), gated=True)
    expert = f"{'swiglu' if gate == 'silu' else 'geglu'}({s.need('intermediate_size')})"
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"moe(experts = {experts}, top_k = {top_k}, expert = {expert}, "
                      "output_bias = true)",
               "norm": f"rmsnorm(pre, eps = {num(s.need('rms_norm_eps'))})"}


def _stacked(t: Any, a: Attention, cfg: dict) -> Any:
    """[experts, out, in] -> [experts * out, in]: expert e's rows e out .. (e + 1) out."""
    return t.reshape(-1, t.shape[-1])


def _kv(a: Attention, cfg: dict) -> int:
    return a.kv_heads * a.head_dim


_A, _M = "self_attention.", "mlp."
_JETMOE = Names(LLAMA.layer, {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "self_attn.router.weight": f"{_A}experts.router.layer.weight",
    "self_attn.experts.q_proj.weight": (f"{_A}experts.input_linear.weight", _stacked),
    "self_attn.k_proj.weight": (f"{_A}kv_proj.weight", rows(lambda a, c: 0, _kv)),
    "self_attn.v_proj.weight": (f"{_A}kv_proj.weight", rows(_kv, _kv)),
    "self_attn.experts.o_proj.weight": (f"{_A}experts.output_linear.weight", _stacked),
    "self_attn.o_proj.bias": f"{_A}experts.bias",
    "mlp.router.weight": f"{_M}router.layer.weight",
    "mlp.experts.{e}.gate_proj.weight": (f"{_M}input_linear.weight", half(False, True)),
    "mlp.experts.{e}.up_proj.weight": (f"{_M}input_linear.weight", half(True, True)),
    "mlp.experts.{e}.down_proj.weight": (f"{_M}output_linear.weight", one_expert),
    "mlp.bias": f"{_M}bias"},
    LLAMA.top, LLAMA.bases)

# transformers' defaults (JetMoeConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("jetmoe", _read, _JETMOE, {
        "hidden_size": 2048, "num_hidden_layers": 12, "num_key_value_heads": 16,
        "kv_channels": 128, "intermediate_size": 5632, "activation_function": "silu",
        "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6},
        inert={**ROUTER_INERT, "aux_loss_coef": "the load-balancing loss's weight, for "
                                                "training"},
        refused={"rms_norm_eps": (lambda v: v != 1e-6,
                                  "JetMoE's layer norms take eps 1e-6 whatever it says (its "
                                  "final norm takes rms_norm_eps), and attndsl's stack norms "
                                  "share one eps")},
        lm=True, weights_for=expanded(_JETMOE)),
]
