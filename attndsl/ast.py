"""The syntax tree: frozen, keyword-only dataclasses, each with a Span. No lark types here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .source import Span

__all__ = [
    "Arg", "AttentionDef", "BinOp", "Call", "Comment", "Definition", "Entry", "Expr", "Float",
    "Int", "LetDef", "List", "MaskDef", "Module", "Name", "Neg", "Not", "Paren", "TransformerDef",
    "walk",
]

_KW = {"frozen": True, "slots": True, "kw_only": True}


@dataclass(**_KW)
class Int:
    value: int
    text: str  # as written, so fmt never changes a literal
    span: Span


@dataclass(**_KW)
class Float:
    value: float
    text: str
    span: Span


@dataclass(**_KW)
class Name:
    id: str
    span: Span


@dataclass(**_KW)
class Arg:
    name: str | None  # None for a positional argument
    name_span: Span | None
    value: Expr
    span: Span


@dataclass(**_KW)
class Call:
    func: str
    func_span: Span
    args: tuple[Arg, ...]
    span: Span


@dataclass(**_KW)
class List:
    items: tuple[Expr, ...]
    span: Span


@dataclass(**_KW)
class BinOp:
    op: str  # one of | & + - * // / % ** and the comparisons < <= == != >= >
    left: Expr
    right: Expr
    span: Span


@dataclass(**_KW)
class Not:
    operand: Expr
    span: Span


@dataclass(**_KW)
class Neg:
    operand: Expr
    span: Span


@dataclass(**_KW)
class Paren:
    """Kept in the tree so fmt can tell written parentheses from needed ones; meaningless."""

    inner: Expr
    span: Span


Expr = Int | Float | Name | Call | List | BinOp | Not | Neg | Paren


@dataclass(**_KW)
class Entry:
    key: str
    key_span: Span
    value: Expr
    span: Span


@dataclass(**_KW)
class LetDef:
    name: str
    name_span: Span
    value: Expr
    span: Span


@dataclass(**_KW)
class MaskDef:
    name: str
    name_span: Span
    value: Expr
    span: Span


@dataclass(**_KW)
class AttentionDef:
    name: str
    name_span: Span
    entries: tuple[Entry, ...]
    span: Span


@dataclass(**_KW)
class TransformerDef:
    name: str
    name_span: Span
    entries: tuple[Entry, ...]
    span: Span


Definition = LetDef | MaskDef | AttentionDef | TransformerDef


@dataclass(**_KW)
class Comment:
    text: str  # including the leading '#'
    span: Span


@dataclass(**_KW)
class Module:
    definitions: tuple[Definition, ...]
    comments: tuple[Comment, ...]
    span: Span


def walk(e: Expr) -> Iterator[Expr]:
    """`e` and every expression inside it, depth first."""
    yield e
    match e:
        case Paren(inner=x) | Neg(operand=x) | Not(operand=x):
            yield from walk(x)
        case BinOp(left=a, right=b):
            yield from walk(a)
            yield from walk(b)
        case Call(args=args):
            for a in args:
                yield from walk(a.value)
        case List(items=items):
            for x in items:
                yield from walk(x)
