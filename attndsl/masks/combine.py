"""`&`, `|` and `!` of masks."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .base import MaskContext, MaskNode, render
from .cover import INF, Cover, fix
from .primitives import Full

__all__ = ["And", "Not", "Or"]


@dataclass(frozen=True)
class And(MaskNode):
    left: MaskNode
    right: MaskNode

    level = 2

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return self.left.visible(q, k, ctx) & self.right.visible(q, k, ctx)

    def text(self) -> str:
        return f"{render(self.left, 2)} & {render(self.right, 3)}"

    def cover(self, self_attention: bool) -> Cover:
        """The cheapest of either side's cover and their intersected band with both sides'
        global and random parts."""
        ca, cb = self.left.cover(self_attention), self.right.cover(self_attention)
        both = fix(Cover(min(ca.left, cb.left), min(ca.right, cb.right)).union(
            replace(ca, left=-INF, right=-INF)).union(replace(cb, left=-INF, right=-INF)))
        return min((fix(ca), fix(cb), both), key=Cover.cost)

    def reach_back(self) -> int | None:  # the nearer bound
        ra, rb = self.left.reach_back(), self.right.reach_back()
        return rb if ra is None else ra if rb is None else min(ra, rb)

    def kept_keys(self) -> tuple[int, int] | None:  # either side's bound, the smaller
        found = [k for k in (self.left.kept_keys(), self.right.kept_keys()) if k is not None]
        if (r := self.reach_back()) is not None:
            found.append((0, r))
        return min(found, key=sum, default=None)

    def real_keys(self) -> MaskNode:
        a, b = self.left.real_keys(), self.right.real_keys()
        return a if b == Full() else b if a == Full() else And(a, b)

    def children(self) -> tuple[MaskNode, ...]:
        return self.left, self.right


@dataclass(frozen=True)
class Or(MaskNode):
    left: MaskNode
    right: MaskNode

    level = 1

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return self.left.visible(q, k, ctx) | self.right.visible(q, k, ctx)

    def text(self) -> str:
        return f"{render(self.left, 1)} | {render(self.right, 2)}"

    def cover(self, self_attention: bool) -> Cover:
        return fix(self.left.cover(self_attention).union(self.right.cover(self_attention)))

    def reach_back(self) -> int | None:  # the farther bound
        ra, rb = self.left.reach_back(), self.right.reach_back()
        return None if ra is None or rb is None else max(ra, rb)

    def kept_keys(self) -> tuple[int, int] | None:  # both sides' keys
        ka, kb = self.left.kept_keys(), self.right.kept_keys()
        return None if ka is None or kb is None else (max(ka[0], kb[0]), max(ka[1], kb[1]))

    def real_keys(self) -> MaskNode:
        return Or(self.left.real_keys(), self.right.real_keys())

    def children(self) -> tuple[MaskNode, ...]:
        return self.left, self.right


@dataclass(frozen=True)
class Not(MaskNode):
    operand: MaskNode

    level = 3

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return ~self.operand.visible(q, k, ctx)

    def text(self) -> str:
        return f"!{render(self.operand, 4 if self.operand.level == 3.5 else 3)}"

    def real_keys(self) -> MaskNode:
        return Not(self.operand.real_keys())

    def children(self) -> tuple[MaskNode, ...]:
        return (self.operand,)
