"""QK-norm (`qk_norm = rmsnorm(eps = 1e-6)`): each query and key head normed over its
head_dim features before RoPE (Qwen3, Gemma 3, Llama 4's l2norm); with `across_heads = true`
(OLMo 2) q is normed over all heads of a token at once, and k over its kv heads, before the
heads are split. The norms are the stack norms' (no bias); weights `q_norm.weight` and
`k_norm.weight`."""

from __future__ import annotations

from typing import Any, ClassVar

from ..blocks import Norm
from ..ir.graph import Op
from ..shapes import T
from ..weight_table import Weight
from .base import Mechanism, Site

__all__ = ["MECHANISM"]


class _QkNorm(Mechanism):
    key = "qk_norm"
    hook = "heads"  # `projected` with across_heads (`hook_of`)
    forms: ClassVar = {"layernorm": (("eps", False), ("across_heads", False)),
                       "rmsnorm": (("eps", False), ("unit_offset", False),
                                   ("across_heads", False)),
                       "l2norm": (("eps", False), ("across_heads", False))}
    with_delta = "its queries and keys are L2-normed already"

    def hook_of(self, value: Norm) -> str:
        return "projected" if value.across_heads else "heads"

    def read(self, c: Any, e: Any) -> Norm | None:
        if getattr(e, "id", None) == "none":
            return None
        from ..check.values import Param

        table = {name: tuple(Param(p, required) for p, required in params)
                 for name, params in self.forms.items()}
        return c.norm_value(e, placement=False, table=table)[0]

    def weights(self, value: Norm, spec: Any, prefix: str) -> list[Weight]:
        if not value.weighted:
            return []
        init = "norm_offset" if value.unit_offset else "norm_weight"
        return [Weight(f"{prefix}{part}_norm.weight",
                       (spec.head_dim * (heads if value.across_heads else 1),), init)
                for part, heads in (("q", spec.heads), ("k", spec.kv_heads))]

    def expand(self, site: Site, value: Norm, x: str, part: str) -> str:
        if part == "v":  # (the `projected` hook's values: queries and keys alone are normed)
            return x
        s = site.spec
        heads, n = (s.heads, "L") if part == "q" else (s.kv_heads, site.n)
        shape = (T("B", n, heads * s.head_dim) if value.across_heads else
                 T("B", heads, n, s.head_dim))
        return site.b.emit(Op.NORM, f"{site.p}{part}_normed", (x,), shape, kind=value.kind,
                           eps=value.eps, unit_offset=value.unit_offset,
                           module=f"{site.prefix}{part}_norm", bias=False)


MECHANISM = _QkNorm()
