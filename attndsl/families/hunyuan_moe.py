"""Hunyuan's mixture of experts (`hunyuan_v1_moe`): Hunyuan dense's attention (q and k heads
RMS-normed after RoPE, RoPE's fixed NTK alpha) and a mixture as its MLP: a softmax router
(`mlp.gate.wg`) whose top moe_topk are renormalised, over SwiGLU experts of
intermediate_size, plus a shared SwiGLU expert of the same width (`mlp.shared_mlp`) added
ungated."""

from __future__ import annotations

from .base import Family
from .hunyuan import FAMILIES as _DENSE
from .moe import ROUTER_INERT, expanded
from .names import Names
from .text import SpecText

__all__ = ["FAMILIES"]

_HUNYUAN = next(f for f in _DENSE if f.model_type == "hunyuan_v1_dense")


def _read(s: SpecText, padding: str | None) -> None:
    _HUNYUAN.read(s, padding)
    expert = s.stack["ffn"]  # the dense reader's MLP of intermediate_size and hidden_act
    s.stack["ffn"] = (f"moe(experts = {s.need('num_experts')}, top_k = {s.need('moe_topk')}, "
                      f"expert = {expert}, shared = {expert})")


_P = ("gate_proj", "up_proj", "down_proj")
_HUNYUAN_MOE = Names(_HUNYUAN.weights.layer, {
    **{k: v for k, v in _HUNYUAN.weights.names.items() if not k.startswith("mlp.")},
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight" for p in _P},
    "mlp.router.weight": "mlp.gate.wg.weight",
    **{f"mlp.shared.{p}.weight": f"mlp.shared_mlp.{p}.weight" for p in _P}},
    _HUNYUAN.weights.top, _HUNYUAN.weights.bases)

# transformers' defaults (HunYuanMoEV1Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("hunyuan_v1_moe", _read, _HUNYUAN_MOE, {
        **_HUNYUAN.defaults, "num_experts": 1, "moe_topk": 1},
        inert={**_HUNYUAN.inert, **ROUTER_INERT}, lm=True, weights_for=expanded(_HUNYUAN_MOE)),
]
