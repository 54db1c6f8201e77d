"""QK-norm (`qk_norm = rmsnorm(eps = 1e-6)`): each query and key head normed over its
head_dim features before RoPE (Qwen3, Gemma 3, Llama 4's l2norm); with `across_heads = true`
(OLMo 2) q is normed over all heads of a token at once, and k over its kv heads, before the
heads are split. The norms are the stack norms'; weights `q_norm.weight` and `k_norm.weight`,
and with `layernorm(bias = true)` (Persimmon's, a LayerNorm with its bias over each head)
`q_norm.bias` and `k_norm.bias` beside them. With `layernorm(head_weights = true)` (StableLM
2's) each head has a weight (and bias) of its own: rows of [heads, head_dim] weights, applied
by this module's `apply` node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..blocks import Norm
from ..ir.graph import Op
from ..shapes import T
from ..weight_table import Weight
from .base import Mechanism, Site

__all__ = ["MECHANISM", "HeadWeighted"]


@dataclass(frozen=True)
class HeadWeighted(Norm):
    """A LayerNorm of each head whose weight (and bias) is that head's own row."""


class _QkNorm(Mechanism):
    key = "qk_norm"
    hook = "heads"  # `projected` with across_heads (`hook_of`)
    forms: ClassVar = {"layernorm": (("eps", False), ("across_heads", False), ("bias", False),
                                     ("head_weights", False)),
                       "rmsnorm": (("eps", False), ("unit_offset", False),
                                   ("across_heads", False)),
                       "l2norm": (("eps", False), ("across_heads", False))}
    with_recurrent = "its queries and keys are L2-normed already"
    attributes = ("eps", "weights")  # its `apply` nodes' (head_weights)

    def hook_of(self, value: Norm) -> str:
        return "projected" if value.across_heads else "heads"

    def read(self, c: Any, e: Any) -> Norm | None:
        if getattr(e, "id", None) == "none":
            return None
        from ..check.values import Param

        table = {name: tuple(Param(p, required) for p, required in params)
                 for name, params in self.forms.items()}
        norm = c.norm_value(e, placement=False, table=table)[0]
        own = c.bind(e, norm.kind, table[norm.kind]).get("head_weights")
        if own is None or not c.boolean(own, "head_weights"):
            return norm
        if norm.across_heads:
            raise c.error("`head_weights = true` gives each head its own weight; "
                          "`across_heads = true` norms the heads together", own.span,
                          hint="leave out one of them")
        return HeadWeighted(**vars(norm))

    def weights(self, value: Norm, spec: Any, prefix: str) -> list[Weight]:
        if not value.weighted:
            return []
        init = "norm_offset" if value.unit_offset else "norm_weight"
        out = []
        for part, heads in (("q", spec.heads), ("k", spec.kv_heads)):
            width = (spec.head_dim * (heads if value.across_heads else 1),)
            if isinstance(value, HeadWeighted):
                width = (heads, spec.head_dim)
            out.append(Weight(f"{prefix}{part}_norm.weight", width, init))
            if value.bias:
                out.append(Weight(f"{prefix}{part}_norm.bias", width, "norm_bias"))
        return out

    def expand(self, site: Site, value: Norm, x: str, part: str) -> str:
        if part == "v":  # (the `projected` hook's values: queries and keys alone are normed)
            return x
        s = site.spec
        heads, n = (s.heads, "L") if part == "q" else (s.kv_heads, site.n)
        shape = (T("B", n, heads * s.head_dim) if value.across_heads else
                 T("B", heads, n, s.head_dim))
        module = f"{site.prefix}{part}_norm"
        if isinstance(value, HeadWeighted):
            names = (f"{module}.weight", *((f"{module}.bias",) if value.bias else ()))
            return site.b.emit(Op.APPLY, f"{site.p}{part}_normed", (x,), shape,
                               mechanism=self.key, eps=value.eps, weights=names)
        return site.b.emit(Op.NORM, f"{site.p}{part}_normed", (x,), shape, kind=value.kind,
                           eps=value.eps, unit_offset=value.unit_offset,
                           module=module, bias=value.bias)

    def apply(self, xp: Any, x: Any, pos: Any, *, eps: float, weights: list[Any]) -> Any:
        """`head_weights = true`: heads x (B, h, n, d) LayerNormed over d in float32, head i
        times row i of the weight [h, d] (plus row i of the bias), narrowed to x's dtype."""
        h = xp.astype(x, "float32")
        h = h - xp.mean(h, axis=-1, keepdims=True)
        h = h / xp.sqrt(xp.mean(h * h, axis=-1, keepdims=True) + eps)
        rows = [xp.reshape(xp.astype(w, "float32"), [xp.shape(w, 0), 1, xp.shape(w, 1)])
                for w in weights]
        h = h * rows[0]
        if len(rows) > 1:
            h = h + rows[1]
        return xp.astype(h, xp.dtype(x))


MECHANISM = _QkNorm()
