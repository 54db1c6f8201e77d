"""The attention softcap (`softcap = 50.0`, Gemma 2's attn_logit_softcapping): each float32
score s, after its scale and bias and before the mask, becomes cap * tanh(s / cap). A
by_length variant may set its own."""

from __future__ import annotations

from typing import Any

from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site

__all__ = ["MECHANISM"]


class _Softcap(Mechanism):
    key = "softcap"
    hook = "scores"
    per_variant = True
    with_latent = True
    with_delta = "it forms no scores"
    described = "a softcap"

    def read(self, c: Any, e: Any) -> float | None:
        value = c.cap_value(e, self.key)
        return None if value == "none" else value

    def expand(self, site: Site, value: float, x: str, part: str) -> str:
        s = site.spec
        return site.b.emit(Op.SOFTCAP, f"{site.p}capped", (x,), T("B", s.heads, "L", site.n),
                           cap=value)

    def apply(self, xp: Any, x: Any, pos: Any, **attrs: Any) -> Any:
        """cap * tanh(s / cap) of float32 scores s."""
        cap = attrs[self.key]
        return xp.tanh(x / cap) * cap


MECHANISM = _Softcap()
