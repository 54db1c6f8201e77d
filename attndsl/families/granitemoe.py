"""IBM Granite's mixtures of experts: GraniteMoE (Granite's decoder and four multipliers, its
MLP a mixture: a router's top k logits softmaxed, which is the softmax's top k renormalised,
over SwiGLU experts stored fused under `block_sparse_moe`) and GraniteMoeShared (a shared
SwiGLU expert beside them, `shared_mlp`, added to the mixture's output before the residual
multiplier; none when shared_intermediate_size is 0)."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .granite import FAMILIES as _GRANITE
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded
from .names import Names, Split
from .text import SpecText

__all__ = ["DEFAULTS", "FAMILIES", "GRANITEMOE_SHARED", "SHARED_TYPES", "half", "one_expert",
           "read_moe"]

_read_granite = next(f.read for f in _GRANITE if f.model_type == "granite")


# the model types whose layers hold a shared expert beside the mixture (granitemoe_swa is
# GraniteMoeShared's decoder with Granite SWA's attention)
SHARED_TYPES = ("granitemoeshared", "granitemoe_swa")


def read_moe(s: SpecText, padding: str | None) -> None:
    """Granite's reader, its MLP then made the mixture (and the shared expert, for a type of
    SHARED_TYPES with shared_intermediate_size > 0)."""
    _read_granite(s, padding)
    expert = s.stack["ffn"]  # the dense reader's MLP of intermediate_size and hidden_act
    ffn = (f"moe(experts = {s.need('num_local_experts')}, top_k = "
           f"{s.need('num_experts_per_tok')}, expert = {expert}")
    shared = s.get("shared_intermediate_size", default=0)
    if s.cfg.get("model_type") in SHARED_TYPES and shared:
        ffn += f", shared = {expert.split('(')[0]}({shared})"
    s.stack["ffn"] = ffn + ")"


def half(second: bool, per_expert: bool):
    """The gate (first half of the rows) or up (second half) of a fused input_linear: expert
    e's [2 n, d] of [experts, 2 n, d], or the shared MLP's [2 m, d]."""
    def cut(t: Any) -> Any:
        n = t.shape[0] // 2
        return t[n:] if second else t[:n]

    if not per_expert:
        return lambda t, a, cfg: cut(t)

    def make(e: int) -> Split:
        return lambda t, a, cfg: cut(t[e])
    return make


def one_expert(e: int) -> Split:
    """Expert e's output_linear [d, n] of [experts, d, n]."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        return t[e]
    return split


_M = "block_sparse_moe."
_GRANITEMOE = Names(LLAMA.layer, {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    "mlp.router.weight": f"{_M}router.layer.weight",
    "mlp.experts.{e}.gate_proj.weight": (f"{_M}input_linear.weight", half(False, True)),
    "mlp.experts.{e}.up_proj.weight": (f"{_M}input_linear.weight", half(True, True)),
    "mlp.experts.{e}.down_proj.weight": (f"{_M}output_linear.weight", one_expert)},
    LLAMA.top, LLAMA.bases)
GRANITEMOE_SHARED = Names(LLAMA.layer, {
    **_GRANITEMOE.names,
    "mlp.shared.gate_proj.weight": ("shared_mlp.input_linear.weight", half(False, False)),
    "mlp.shared.up_proj.weight": ("shared_mlp.input_linear.weight", half(True, False)),
    "mlp.shared.down_proj.weight": "shared_mlp.output_linear.weight"},
    LLAMA.top, LLAMA.bases)

# transformers' defaults (GraniteMoeConfig, GraniteMoeSharedConfig, 5.23) for the fields the
# import reads
DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "hidden_act": "silu", "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False, "attention_bias": False,
            "embedding_multiplier": 1.0, "logits_scaling": 1.0, "residual_multiplier": 1.0,
            "attention_multiplier": 1.0, "num_local_experts": 8, "num_experts_per_tok": 2}
FAMILIES = [
    Family("granitemoe", read_moe, _GRANITEMOE, DEFAULTS, inert=ROUTER_INERT, lm=True,
           weights_for=expanded(_GRANITEMOE)),
    Family("granitemoeshared", read_moe, GRANITEMOE_SHARED,
           {**DEFAULTS, "shared_intermediate_size": 0}, inert=ROUTER_INERT, lm=True,
           weights_for=expanded(GRANITEMOE_SHARED)),
]
