"""A query temperature by token position, in float32: Llama 4's attention temperature tuning
(`temperature = log(floor = f, scale = a, offset = 1)`), 1 + a * ln(1 + floor((p + offset) /
f)), Llama 4 counting from p + 1 and Ministral 3 (`offset = 0`) from p; Beam's scalable
softmax (`temperature = power(base = b, exponent = e, offset = 1)`), (1 + (p + offset) / b) ** e;
and Inkling's logarithmic logit scaling (`temperature = log_ratio(floor = n, scale = a, offset
= 1)`), 1 + a * ln(max((p + offset) / n, 1)). With `relative_logits` positions it scales each
query's relative states too, so their bias is scaled as the query's scores are."""

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
    offset) / floor)) (`kind` log), by (1 + (p + offset) / floor) ** scale (`kind` power:
    `floor` its base, `scale` its exponent), or by 1 + scale * ln(max((p + offset) / floor,
    1)) (`kind` log_ratio)."""

    floor: int
    scale: float
    offset: int = 1
    kind: str = "log"


class _Temperature(Mechanism):
    key = "temperature"
    hook = "query"
    forms: ClassVar = {"log": (("floor", True), ("scale", True), ("offset", False)),
                       "power": (("base", True), ("exponent", True), ("offset", False)),
                       "log_ratio": (("floor", True), ("scale", True), ("offset", False))}
    with_recurrent = "its queries are L2-normed per token"
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
        return Temperature(c.positive(args["floor"], "the temperature floor"), scale, offset,
                           name)

    def expand(self, site: Site, value: Temperature, x: str, part: str) -> str:
        s = site.spec  # queries (and Inkling's relative states, `r`), at their positions
        width = s.position.d_rel if part == "r" else s.head_dim
        return site.b.emit(Op.APPLY, f"{site.p}{part}_scaled", (x, *site.pos),
                           T("B", s.heads, "L", width), mechanism=self.key,
                           floor=value.floor, scale=value.scale, offset=value.offset,
                           kind=value.kind)

    def apply(self, xp: Any, x: Any, pos: Any, *, floor: int, scale: float,
              offset: int, kind: str) -> Any:
        """x (..., n, d) times 1 + scale * ln(1 + floor((p + offset) / floor)) at its int64
        token positions p (n, 1) or (B, 1, n, 1), the floor division exact in int64 (`log`),
        times exp(scale * ln(1 + (p + offset) / floor)) (`power`), or times 1 + scale *
        ln(max((p + offset) / floor, 1)) (`log_ratio`); the product in float32, then the
        model dtype."""
        shifted = pos + offset if offset else pos
        if kind == "power":
            factor = xp.exp(xp.log(xp.astype(shifted, "float32") / float(floor) + 1.0) * scale)
        elif kind == "log_ratio":
            ratio = xp.maximum(xp.astype(shifted, "float32") / float(floor), 1.0)
            factor = xp.log(ratio) * scale + 1.0
        else:
            factor = xp.log(xp.astype(shifted // floor, "float32") + 1.0) * scale + 1.0
        return xp.astype(xp.astype(x, "float32") * factor, xp.dtype(x))


MECHANISM = _Temperature()
