"""Index masks: comparisons of integer expressions of the query and key indices (NATTEN
neighbourhoods, per-image blocks: any rule of integer arithmetic on q and k)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .base import MaskContext, MaskNode
from .cover import INF, Cover

__all__ = ["Compare", "Index", "index_value", "render_index"]


@dataclass(frozen=True)
class Index:
    """An integer expression of the query and key indices: `q`, `k`, their positions within
    their documents `qd`, `kd`, a constant, `a op b` for op in + - * // % (the divisor of //
    and % a positive constant), or abs(a), min(a, b), max(a, b)."""

    op: str  # q | k | qd | kd | const | + | - | * | // | % | abs | min | max
    args: tuple[Index, ...] = ()
    value: int = 0  # of a const

    def constants(self) -> list[int]:
        return [self.value] if self.op == "const" else [c for a in self.args
                                                         for c in a.constants()]

    def uses_documents(self) -> bool:
        return self.op in ("qd", "kd") or any(a.uses_documents() for a in self.args)


@dataclass(frozen=True)
class Compare(MaskNode):
    """Visible where `left op right`, op in < <= == != >= >."""

    op: str
    left: Index
    right: Index

    level = 3.5

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        a = index_value(self.left, q, k, ctx.document_positions)
        b = index_value(self.right, q, k, ctx.document_positions)
        seen = {"<": lambda: a < b, "<=": lambda: a <= b, "==": lambda: a == b,
                "!=": lambda: a != b,
                ">=": lambda: a >= b, ">": lambda: a > b}[self.op]()
        return (q >= 0) & (k >= 0) & seen  # the full (L, S) shape, even for constants

    def text(self) -> str:
        return f"{render_index(self.left, 4)} {self.op} {render_index(self.right, 4)}"

    def cover(self, self_attention: bool) -> Cover:
        return _compare_cover(self.op, self.left, self.right) if self_attention else Cover()

    def parameters(self) -> set[int]:  # its constants (a NATTEN grid's width, a radius)
        return {abs(c) for c in self.left.constants() + self.right.constants() if c}


def index_value(e: Index, q: Any, k: Any, document_positions: Any = None) -> Any:
    """An index expression at query and key indices q, k (int64 arrays or ints), with the
    operators arrays, tensors and symbolic ONNX values share: `//` as (a - a % n) / n and
    min, max as (a + b -/+ |a - b|) / 2, both exact divisions, so floor semantics hold for
    negative values too (ONNX's integer Div truncates). `qd`, `kd` gather the [B, L]
    `document_positions` at q, k (a leading batch axis)."""
    match e.op:
        case "q":
            return q
        case "k":
            return k
        case "qd":
            return document_positions[:, q]
        case "kd":
            return document_positions[:, k]
        case "const":
            return e.value
        case "abs":
            return abs(index_value(e.args[0], q, k, document_positions))
    a, b = (index_value(x, q, k, document_positions) for x in e.args)
    match e.op:
        case "+":
            return a + b
        case "-":
            return a - b
        case "*":
            return a * b
        case "%":
            return a % b
        case "//":
            return (a - a % b) // b
        case "min":
            return (a + b - abs(a - b)) // 2
        case "max":
            return (a + b + abs(a - b)) // 2
    raise AssertionError(f"unknown index operator {e.op!r}")


def _offset(e: Index) -> tuple[int, int] | None:
    """(a, c) with e = a * (k - q) + c for every q, k, when e is such an affine function of
    the offset k - q, else None."""
    linear = _linear(e)
    if linear is None or linear[0] != -linear[1]:
        return None
    return linear[1], linear[2]


def _linear(e: Index) -> tuple[int, int, int] | None:
    """(x, y, c) with e = x q + y k + c, when e is affine in q and k (sums, differences,
    constant multiples), else None."""
    match e.op:
        case "q":
            return 1, 0, 0
        case "k":
            return 0, 1, 0
        case "const":
            return 0, 0, e.value
        case "+" | "-":
            a, b = _linear(e.args[0]), _linear(e.args[1])
            if a is None or b is None:
                return None
            sign = 1 if e.op == "+" else -1
            return a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2]
        case "*":
            a, b = _linear(e.args[0]), _linear(e.args[1])
            if a is None or b is None:
                return None
            if a[:2] == (0, 0):
                a, b = b, a
            if b[:2] != (0, 0):
                return None  # a product of two indices
            return a[0] * b[2], a[1] * b[2], a[2] * b[2]
    return None


def _compare_cover(op: str, left: Index, right: Index) -> Cover:
    """The band of an index comparison of the offset d = k - q alone: `a d + c op 0`, or
    `abs(a d + c) op' r` (op' one of < <=); no band for anything else."""
    def band(lo: float, hi: float) -> Cover:  # lo <= d <= hi
        return Cover(max(-lo, 0) if lo > -INF else INF, max(hi, 0) if hi < INF else INF)

    if left.op == "abs" and op in ("<", "<=") and right.op == "const":
        inner = _offset(left.args[0])
        if inner is not None and inner[0] != 0:  # |a d + c| <= r: -r - c <= a d <= r - c
            r = right.value - (op == "<")
            a, c = inner
            lo, hi = sorted(((-r - c) / a, (r - c) / a))
            return band(math.floor(lo), math.ceil(hi)) if r >= 0 else Cover(-INF, -INF)
        return Cover()
    diff = _offset(Index("-", (left, right)))  # `k <= q` too: its sides alone are not
    if diff is None:
        return Cover()
    a, c = diff  # a d + c op 0
    if a == 0:
        return Cover()
    strict = op in ("<", ">")
    if op == "==":
        return band(math.floor(-c / a), math.ceil(-c / a))
    if op == "!=":
        return Cover()
    upper = op in ("<", "<=")  # a d + c < 0 (or <=): d below -c/a when a > 0
    bound = -c / a
    if (a > 0) == upper:  # d <= bound
        return band(-INF, math.ceil(bound) - (strict and float(bound).is_integer()))
    return band(math.floor(bound) + (strict and float(bound).is_integer()), INF)


def render_index(e: Index, parent: int = 0) -> str:
    """Canonical text of an index expression."""
    levels = {"+": 4, "-": 4, "*": 5, "//": 5, "%": 5}
    match e.op:
        case "q" | "k" | "qd" | "kd":
            return e.op
        case "const":
            return str(e.value) if e.value >= 0 or parent < 6 else f"({e.value})"
        case "abs" | "min" | "max":
            return f"{e.op}({', '.join(render_index(a) for a in e.args)})"
    level = levels[e.op]
    a, b = e.args
    if e.op == "-" and a == Index("const"):  # a negation
        text = f"-{render_index(b, 6)}"
        return f"({text})" if parent > 6 else text
    text = f"{render_index(a, level)} {e.op} {render_index(b, level + 1)}"
    return f"({text})" if level < parent else text
