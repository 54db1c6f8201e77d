"""Clamped projections (`clip_qkv = c`; DBRX's clip_qkv, OLMo's and OLMoE's): each of the
q, k and v projections' outputs, their bias included, clamped to [-c, c] before the heads are
split (so before any norm, RoPE or cache)."""

from __future__ import annotations

from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site

__all__ = ["MECHANISM"]


class _ClipQkv(Mechanism):
    key = "clip_qkv"
    hook = "projected"
    with_recurrent = "its q, k and v come through its own projections and convolution"
    attributes = ("limit",)
    hf_types: ClassVar = {"clip_qkv": ("num", 0)}

    def read(self, c: Any, e: Any) -> float | None:
        """`none`, or a limit: a number > 0 that float32 holds."""
        from ..check.values import FLOAT32_MAX, FLOAT32_TINY

        value = c.word_or_number(
            e, self.key, "none", FLOAT32_TINY, FLOAT32_MAX,
            f"clip_qkv must be a number > 0 that float32 can hold ([{FLOAT32_TINY:.3g}, "
            f"{FLOAT32_MAX:.3g}]), found {{:g}}", "DBRX's clip_qkv is 8")
        return None if value == "none" else value

    def expand(self, site: Site, value: float, x: str, part: str) -> str:
        s = site.spec
        width = {"q": s.heads * s.head_dim, "k": s.kv_heads * s.head_dim,
                 "v": s.kv_heads * s.value_dim}[part]
        return site.b.emit(Op.APPLY, f"{site.p}{part}_clipped", (x,),
                           T("B", "L" if part == "q" else site.n, width), mechanism=self.key,
                           limit=value)

    def apply(self, xp: Any, x: Any, pos: Any, *, limit: float) -> Any:
        """x clamped to [-limit, limit], in its dtype."""
        return xp.minimum(xp.maximum(x, -limit), limit)


MECHANISM = _ClipQkv()
