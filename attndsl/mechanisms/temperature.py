"""Llama 4's attention temperature tuning (`temperature = log(floor = f, scale = a, offset =
1)`): the query at token position p is multiplied by 1 + a * ln(1 + floor((p + offset) / f)),
in float32. Llama 4 counts from p + 1; Ministral 3 (`offset = 0`) from p."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site

__all__ = ["MECHANISM", "Temperature"]

@dataclass(frozen=True)
class Temperature:
    """The spec's value: queries at position p scaled by 1 + scale * ln(1 + floor((p +
    offset) / floor))."""

    floor: int
    scale: float
    offset: int = 1


class _Temperature(Mechanism):
    key = "temperature"
    hook = "query"
    forms: ClassVar = {"log": (("floor", True), ("scale", True), ("offset", False))}
    with_delta = "its queries are L2-normed per token"
    attributes = ("floor", "scale", "offset")
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
        offset = c.non_negative(args["offset"], "the temperature offset") \
            if "offset" in args else 1
        return Temperature(c.positive(args["floor"], "the temperature floor"), scale, offset)

    def expand(self, site: Site, value: Temperature, x: str, part: str) -> str:
        s = site.spec  # queries only, at their token positions
        return site.b.emit(Op.APPLY, f"{site.p}q_scaled", (x, *site.pos),
                           T("B", s.heads, "L", s.head_dim), mechanism=self.key,
                           floor=value.floor, scale=value.scale, offset=value.offset)

    def apply(self, xp: Any, x: Any, pos: Any, *, floor: int, scale: float,
              offset: int) -> Any:
        """x (..., n, d) times 1 + scale * ln(1 + floor((p + offset) / floor)) at its int64
        token positions p (n, 1) or (B, 1, n, 1), the floor division exact in int64; the
        product in float32, then the model dtype."""
        steps = xp.astype((pos + offset if offset else pos) // floor, "float32")
        factor = xp.log(steps + 1.0) * scale + 1.0
        return xp.astype(xp.astype(x, "float32") * factor, xp.dtype(x))


MECHANISM = _Temperature()
