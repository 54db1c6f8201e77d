"""QK-norm after RoPE (`qk_norm_after_rope = rmsnorm(eps = 1e-5)`, Hunyuan's order): each
query and key head is normed after its rotation, so the cache holds normed rotated keys. The
same norms as `qk_norm` (per head), with its tensors `q_norm.weight` and `k_norm.weight`."""

from __future__ import annotations

from typing import Any, ClassVar

from ..blocks import Norm
from ..ir.graph import Op
from ..shapes import T
from ..weight_table import Weight
from .base import Mechanism, Site, Where

__all__ = ["MECHANISM"]


class _QkNormAfterRope(Mechanism):
    key = "qk_norm_after_rope"
    hook = "rotated"
    forms: ClassVar = {"rmsnorm": (("eps", False), ("unit_offset", False)),
                       "layernorm": (("eps", False),), "l2norm": (("eps", False),)}
    with_recurrent = "its queries and keys are L2-normed already"

    def read(self, c: Any, e: Any) -> Norm | None:
        kind, args = c.call(e, self.forms, self.key)
        if kind is None:
            return None
        eps = c.eps(args, Norm.default_eps(kind), "the norm's")
        offset = "unit_offset" in args and c.boolean(args["unit_offset"], "unit_offset")
        return Norm(kind, eps, offset)

    def conflicts(self, c: Any, value: Norm, where: Where) -> bool:
        from . import kernel_fact

        entries, problem = where.entries, None
        if "qk_norm" in entries and not _none(entries["qk_norm"].value):
            problem = ("one qk norm: `qk_norm` norms q and k before RoPE, "
                       "`qk_norm_after_rope` after it", "remove one of them")
        elif kernel_fact(where.kernel, "shares_keys"):
            return False  # keys that are the queries: the kernel refuses every q, k transform
        elif "position" not in entries or _none(entries["position"].value):
            problem = ("`qk_norm_after_rope` norms the rotated q and k: without `position = "
                       "rope(...)` nothing is rotated", "use `qk_norm` instead")
        if problem:
            c.error(problem[0], where.at(self.key), hint=problem[1])
        return problem is not None

    def weights(self, value: Norm, spec: Any, prefix: str) -> list[Weight]:
        if not value.weighted:
            return []
        init = "norm_offset" if value.unit_offset else "norm_weight"
        return [Weight(f"{prefix}{part}_norm.weight", (spec.head_dim,), init)
                for part in ("q", "k")]

    def expand(self, site: Site, value: Norm, x: str, part: str) -> str:
        s = site.spec
        heads, n = (s.heads, "L") if part == "q" else (s.kv_heads, site.n)
        return site.b.emit(Op.NORM, f"{site.p}{part}_rope_normed", (x,),
                           T("B", heads, n, s.head_dim), kind=value.kind, eps=value.eps,
                           unit_offset=value.unit_offset, module=f"{site.prefix}{part}_norm",
                           bias=False)


def _none(e: Any) -> bool:
    return getattr(e, "id", None) == "none"


MECHANISM = _QkNormAfterRope()
