"""The value norm (`v_norm = rmsnorm(eps = 1e-6, affine = false)`; Gemma 4's `v_norm`): each
value head normed over its value_dim features as it is projected, before the cache, v =
norm(v_h). Gemma 4's has no weight (`affine = false`: RMSNorm's x / sqrt(mean(x^2) + eps) in
float32, narrowed); with a weight, `v_norm.weight` [value_dim]. It emits an existing `norm`
node, so the oracle's reading is its reading of that op."""

from __future__ import annotations

from typing import Any, ClassVar

from ..blocks import Norm
from ..ir.graph import Op
from ..shapes import T
from ..weight_table import Weight
from .base import Mechanism, Site

__all__ = ["MECHANISM"]


class _ValueNorm(Mechanism):
    key = "v_norm"
    hook = "heads"
    forms: ClassVar = {"rmsnorm": (("eps", False), ("unit_offset", False), ("affine", False)),
                       "layernorm": (("eps", False), ("affine", False))}
    with_recurrent = "its values are its own projections'"

    def read(self, c: Any, e: Any) -> Norm | None:
        return self.read_norm(c, e)

    def weights(self, value: Norm, spec: Any, prefix: str) -> list[Weight]:
        if not value.affine:
            return []
        init = "norm_offset" if value.unit_offset else "norm_weight"
        return [Weight(f"{prefix}v_norm.weight", (spec.value_dim,), init)]

    def expand(self, site: Site, value: Norm, x: str, part: str) -> str:
        if part != "v":  # (the `heads` hook's queries and keys)
            return x
        s = site.spec
        affine = {} if value.affine else {"affine": False}
        return site.b.emit(Op.NORM, f"{site.p}v_normed", (x,),
                           T("B", s.kv_heads, site.n, s.value_dim), kind=value.kind,
                           eps=value.eps, unit_offset=value.unit_offset,
                           module=f"{site.prefix}v_norm", bias=False, **affine)


MECHANISM = _ValueNorm()
