"""The softcap: each float32 score s of the attention (`softcap = 50.0`, Gemma 2's
attn_logit_softcapping), after its scale and bias and before the mask, becomes
cap * tanh(s / cap). A language model's head applies the
same to its logits, after logit_scale (the transformer key `logit_softcap = 30.0`, Gemma 2's
final_logit_softcapping)."""

from __future__ import annotations

from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site

__all__ = ["MECHANISM"]


class _Softcap(Mechanism):
    key = "softcap"
    hook = "scores"
    per_variant = True
    with_projection = True
    with_recurrent = "it forms no scores"
    described = "a softcap"
    attributes = ("softcap",)
    head_key = "logit_softcap"
    head_field = "final_logit_softcapping"
    hf_types: ClassVar = {"attn_logit_softcapping": ("num", 0),
                          "final_logit_softcapping": ("num", 0)}
    hf_inert: ClassVar = {
        "final_logit_softcapping": "the LM head's softcap (read for a language model's head)"}

    def read(self, c: Any, e: Any) -> float | None:
        return _cap(c, e, self.key)

    def read_head(self, c: Any, e: Any) -> float | None:
        return _cap(c, e, self.head_key)

    def expand(self, site: Site, value: float, x: str, part: str) -> str:
        s = site.spec
        return site.b.emit(Op.APPLY, f"{site.p}capped", (x,), T("B", s.heads, "L", site.n),
                           mechanism=self.key, softcap=value)

    def head(self, b: Any, value: float, x: str, out: str, shape: Any) -> str:
        return b.emit(Op.APPLY, out, (x,), shape, mechanism=self.key, softcap=value)

    def apply(self, xp: Any, x: Any, pos: Any, **attrs: Any) -> Any:
        """cap * tanh(s / cap) of float32 scores or logits s."""
        cap = attrs[self.key]
        return xp.tanh(x / cap) * cap


def _cap(c: Any, e: Any, key: str) -> float | None:
    """`key = none`, or a cap: a number > 0 that float32 holds."""
    from ..check.values import FLOAT32_MAX, FLOAT32_TINY

    value = c.word_or_number(
        e, key, "none", FLOAT32_TINY, FLOAT32_MAX,
        f"softcap must be a number > 0 that float32 can hold ([{FLOAT32_TINY:.3g}, "
        f"{FLOAT32_MAX:.3g}]), found {{:g}}", "softcap is applied to float32 scores")
    return None if value == "none" else value


MECHANISM = _Softcap()
