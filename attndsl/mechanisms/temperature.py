"""Llama 4's attention temperature tuning (`temperature = log(floor = f, scale = a)`): the
query at token position p is multiplied by 1 + a * ln(1 + floor((p + 1) / f)), in float32."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site

__all__ = ["MECHANISM", "Temperature"]

@dataclass(frozen=True)
class Temperature:
    """The spec's value: queries at position p scaled by 1 + scale * ln(1 + floor((p + 1) /
    floor))."""

    floor: int
    scale: float


class _Temperature(Mechanism):
    key = "temperature"
    hook = "query"
    forms: ClassVar = {"log": (("floor", True), ("scale", True))}
    with_delta = "its queries are L2-normed per token"
    attributes = ("floor", "scale")
    reads_positions = True

    def read(self, c: Any, e: Any) -> Temperature | None:
        name, args = c.call(e, self.forms, "temperature")
        if name is None:
            return None
        from ..check.values import FLOAT32_MAX

        scale = c.number(args["scale"])
        if not 0.0 <= scale <= FLOAT32_MAX:
            raise c.error(f"the temperature scale must be a number >= 0 that float32 can "
                          f"hold, found {scale:g}", args["scale"].span)
        return Temperature(c.positive(args["floor"], "the temperature floor"), scale)

    def expand(self, site: Site, value: Temperature, x: str, part: str) -> str:
        s = site.spec  # queries only, at their token positions
        return site.b.emit(Op.APPLY, f"{site.p}q_scaled", (x, *site.pos),
                           T("B", s.heads, "L", s.head_dim), mechanism=self.key,
                           floor=value.floor, scale=value.scale)

    def apply(self, xp: Any, x: Any, pos: Any, *, floor: int, scale: float) -> Any:
        """x (..., n, d) times 1 + scale * ln(1 + floor((p + 1) / floor)) at its int64 token
        positions p (n, 1) or (B, 1, n, 1), the floor division exact in int64; the product
        in float32, then the model dtype."""
        steps = xp.astype((pos + 1) // floor, "float32")
        factor = xp.log(steps + 1.0) * scale + 1.0
        return xp.astype(xp.astype(x, "float32") * factor, xp.dtype(x))


MECHANISM = _Temperature()
