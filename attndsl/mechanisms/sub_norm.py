"""The attention's sub-norm (`sub_norm = rmsnorm(eps = 1e-5)`; BitNet's `attn_sub_norm`):
the merged heads of each token, its heads * value_dim features, normed before the output
projection, o = W_o norm(merge(heads)). The norms are the stack norms' (a layernorm without
bias); weight `sub_norm.weight` [heads * value_dim]. It emits an existing `norm` node, so the
oracle's reading is its reading of that op."""

from __future__ import annotations

from typing import Any, ClassVar

from ..blocks import Norm
from ..ir.graph import Op
from ..shapes import T
from ..weight_table import Weight
from .base import Mechanism, Site

__all__ = ["MECHANISM"]


class _SubNorm(Mechanism):
    key = "sub_norm"
    hook = "merged"
    forms: ClassVar = {"rmsnorm": (("eps", False), ("unit_offset", False)),
                       "layernorm": (("eps", False),)}
    with_recurrent = "its output has its own gated norm"

    def read(self, c: Any, e: Any) -> Norm | None:
        return self.read_norm(c, e)

    def weights(self, value: Norm, spec: Any, prefix: str) -> list[Weight]:
        init = "norm_offset" if value.unit_offset else "norm_weight"
        return [Weight(f"{prefix}sub_norm.weight", (spec.heads * spec.value_dim,), init)]

    def expand(self, site: Site, value: Norm, x: str, part: str) -> str:
        s = site.spec
        return site.b.emit(Op.NORM, f"{site.p}sub_normed", (x,),
                           T("B", "L", s.heads * s.value_dim), kind=value.kind, eps=value.eps,
                           unit_offset=value.unit_offset, module=f"{site.prefix}sub_norm",
                           bias=False)


MECHANISM = _SubNorm()
