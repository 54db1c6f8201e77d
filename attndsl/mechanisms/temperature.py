"""A query temperature by token position, in float32: Llama 4's attention temperature tuning
(`temperature = log(floor = f, scale = a, offset = 1)`), 1 + a * ln(1 + floor((p + offset) /
f)), Llama 4 counting from p + 1 and Ministral 3 (`offset = 0`) from p; and Beam's scalable
softmax (`temperature = power(base = b, exponent = e, offset = 1)`), (1 + (p + offset) / b) ** e.
"""

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
    offset) / floor)) (`kind` log), or by (1 + (p + offset) / floor) ** scale (`kind` power:
    `floor` its base, `scale` its exponent)."""

    floor: int
    scale: float
    offset: int = 1
    kind: str = "log"


class _Temperature(Mechanism):
    key = "temperature"
    hook = "query"
    forms: ClassVar = {"log": (("floor", True), ("scale", True), ("offset", False)),
                       "power": (("base", True), ("exponent", True), ("offset", False))}
    with_delta = "its queries are L2-normed per token"
    attributes = ("floor", "scale", "offset", "kind")
    reads_positions = True

    def read(self, c: Any, e: Any) -> Temperature | None:
        name, args = c.call(e, self.forms, "temperature")
        if name is None:
            return None
        from ..check.values import FLOAT32_MAX

        word = "exponent" if name == "power" else "scale"
        scale = c.number(args[word])
        if not 0.0 <= scale <= FLOAT32_MAX:
            raise c.error(f"the temperature {word} must be a number >= 0 that float32 can "
                          f"hold, found {scale:g}", args[word].span)
        offset = c.non_negative(args["offset"], "the temperature offset") \
            if "offset" in args else 1
        if name == "power":
            return Temperature(c.positive(args["base"], "the temperature base"), scale, offset,
                               "power")
        return Temperature(c.positive(args["floor"], "the temperature floor"), scale, offset)

    def expand(self, site: Site, value: Temperature, x: str, part: str) -> str:
        s = site.spec  # queries only, at their token positions
        return site.b.emit(Op.APPLY, f"{site.p}q_scaled", (x, *site.pos),
                           T("B", s.heads, "L", s.head_dim), mechanism=self.key,
                           floor=value.floor, scale=value.scale, offset=value.offset,
                           kind=value.kind)

    def apply(self, xp: Any, x: Any, pos: Any, *, floor: int, scale: float,
              offset: int, kind: str) -> Any:
        """x (..., n, d) times 1 + scale * ln(1 + floor((p + offset) / floor)) at its int64
        token positions p (n, 1) or (B, 1, n, 1), the floor division exact in int64 (`log`),
        or times exp(scale * ln(1 + (p + offset) / floor)) (`power`); the product in
        float32, then the model dtype."""
        shifted = pos + offset if offset else pos
        if kind == "power":
            factor = xp.exp(xp.log(xp.astype(shifted, "float32") / float(floor) + 1.0) * scale)
        else:
            factor = xp.log(xp.astype(shifted // floor, "float32") + 1.0) * scale + 1.0
        return xp.astype(xp.astype(x, "float32") * factor, xp.dtype(x))


MECHANISM = _Temperature()
