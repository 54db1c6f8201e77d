"""The checker's base: diagnostics, `let` constants, arithmetic, words and call arguments. The
mask and layer checks build on it (`masks.py`, `layers.py`)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import ast
from ..errors import Diagnostic
from ..source import Span

__all__ = ["FLOAT32_MAX", "FLOAT32_TINY", "Entries", "Invalid", "Param", "Values", "describe",
           "one_of"]

_MAX_INT = 1 << 62
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38  # smallest normal float32


class Invalid(Exception):
    """Raised inside the checker after a diagnostic was recorded; the key is skipped."""


@dataclass(frozen=True)
class Param:
    name: str
    required: bool = False


class Entries:
    """A definition's `key = value` entries, parsed key by key: a key whose value fails reads
    as None and sets `failed` (its diagnostic is recorded), so every key of a block is
    checked and all problems are reported at once."""

    def __init__(self, checker: Values, entries: dict[str, ast.Entry], what: str,
                 d: ast.AttentionDef | ast.TransformerDef):
        self.checker, self.entries, self.failed = checker, entries, False
        self.what, self.d = what, d

    def require(self, *keys: str) -> None:
        for key in keys:
            if key not in self.entries:
                self.checker.error(f"{self.what} `{self.d.name}` is missing `{key}`",
                                   self.d.name_span, hint=f"add `{key} = ...` to the block")
                self.failed = True

    def __call__(self, key: str, parse: Callable[[ast.Expr], Any], default: Any = None) -> Any:
        if key not in self.entries:
            return default
        try:
            return parse(self.entries[key].value)
        except Invalid:
            self.failed = True
            return None


class Values:
    """Diagnostics and plain values. State lives in `Checker.__init__`."""

    diags: list[Diagnostic]
    lets: dict[str, ast.LetDef]
    let_values: dict[str, int]
    _evaluating: list[tuple[str, Span]]
    _failed: set[str]

    # -- plumbing ---------------------------------------------------------------------------
    def error(self, message: str, span: Span | None, hint: str | None = None,
              notes: tuple[tuple[str, Span], ...] = ()) -> Invalid:
        self.diags.append(Diagnostic(message, span, hint, notes))
        return Invalid()

    # -- constants and arithmetic ---------------------------------------------------------------
    def let_value(self, name: str, use: Span) -> int | float:
        return self.resolve(name, use, self.let_values, self.lets, self.arithmetic,
                            "`let` constants", "a constant must not depend on itself")

    def resolve(self, name: str, use: Span, done: dict[str, Any], defs: dict[str, Any],
                evaluate: Callable[[ast.Expr], Any], what: str, hint: str | None = None) -> Any:
        """The value of definition `name` (a `let` or a `mask`), evaluated once; a cycle of
        definitions is one diagnostic, and a failed definition is never reported twice."""
        if name in done:
            return done[name]
        if name in self._failed:
            raise Invalid()
        d = defs[name]
        if any(n == name for n, _ in self._evaluating):
            cycle = [n for n, _ in self._evaluating] + [name]
            self._failed.update(cycle)
            raise self.error(f"{what} refer to each other in a cycle: "
                             f"{' -> '.join(cycle[cycle.index(name):])}", d.name_span, hint=hint)
        self._evaluating.append((name, use))
        try:
            value = evaluate(d.value)
        except Invalid:
            self._failed.add(name)
            raise
        finally:
            self._evaluating.pop()
        done[name] = value
        return value

    def integer(self, e: ast.Expr, allow_negative: bool = False) -> int:
        value = self.arithmetic(e, "an integer")
        if isinstance(value, float):
            raise self.error(f"expected an integer, found {_number_text(e, value)}", e.span,
                             hint="`/`, `**` with a negative exponent, `sqrt` and literals "
                                  "with a `.` or an exponent give numbers; `//` divides "
                                  "integers")
        if not allow_negative and value < 0:
            raise self.error(f"expected a non-negative integer, found {value}", e.span)
        return value

    def number(self, e: ast.Expr) -> float:
        return float(self.arithmetic(e))

    def eps(self, args: dict, default: float, what: str) -> float:
        """A call's `eps` (`default` where not given), in [FLOAT32_TINY, 1]: an error naming
        `what` ("the norm's") otherwise."""
        if "eps" not in args:
            return default
        eps = self.number(args["eps"])
        if not FLOAT32_TINY <= eps <= 1.0:
            raise self.error(f"{what} eps must be in [{FLOAT32_TINY:.3g}, 1], found {eps:g}",
                             args["eps"].span)
        return eps

    def arithmetic(self, e: ast.Expr, expected: str = "a number") -> int | float:
        """An integer or a number: integers stay exact under + - * // and ** with a
        non-negative integer exponent; `/`, `sqrt` and any float operand give a float."""
        match e:
            case ast.Int(value=v):
                value: int | float = v
            case ast.Float(value=v):
                value = v
            case ast.Paren(inner=inner):
                value = self.arithmetic(inner)
            case ast.Neg(operand=x):
                value = -self.arithmetic(x)
            case ast.Name(id=name):
                if name not in self.lets:
                    raise self.error(f"unknown constant `{name}`", e.span,
                                     hint=self._suggest(name, self.lets, "define it with `let"
                                                        f" {name} = ...`"))
                value = self.let_value(name, e.span)
            case ast.Call(func="sqrt", args=args):
                if len(args) != 1 or args[0].name is not None:
                    raise self.error("`sqrt` takes one positional argument", e.span,
                                     hint="write `sqrt(x)`")
                x = self.arithmetic(args[0].value)
                if x < 0:
                    raise self.error(f"`sqrt` of a negative number ({x:g})", e.span)
                value = math.sqrt(x)
            case ast.BinOp(op=op, left=a, right=b) if op in _ARITHMETIC:
                value = self._binary(op, self.arithmetic(a), self.arithmetic(b), e, b)
            case _:
                raise self.error(f"expected {expected}, found {describe(e)}", e.span)
        if isinstance(value, int) and abs(value) > _MAX_INT:
            raise self.error(f"integer is too large (limit is 2**62 = {_MAX_INT})", e.span)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error("this number is too large to represent", e.span,
                             hint="numbers must be finite; float32 holds at most about 3.4e38")
        return value

    def _binary(self, op: str, x: int | float, y: int | float, e: ast.Expr,
                right: ast.Expr) -> int | float:
        if op in ("/", "//", "%") and y == 0:
            kind = {"//": "integer division", "/": "division", "%": "modulo"}[op]
            raise self.error(f"{kind} by zero", right.span)
        if op in ("//", "%") and (isinstance(x, float) or isinstance(y, float)):
            raise self.error(f"`{op}` takes integers", e.span, hint="use `/` for numbers")
        if op != "**":
            return {"+": x + y, "-": x - y, "*": x * y, "/": x / y if op == "/" else 0,
                    "//": x // y if op == "//" else 0, "%": x % y if op == "%" else 0}[op]
        if x == 0 and y < 0:
            raise self.error("0 to a negative power", e.span)
        if x < 0 and isinstance(y, float) and not y.is_integer():
            raise self.error(f"a negative number ({x:g}) to a fractional power is not a real "
                             "number", e.span)
        if isinstance(x, int) and isinstance(y, int) and y >= 0:
            if abs(x) > 1 and y > 62:
                raise self.error(f"integer is too large (limit is 2**62 = {_MAX_INT})", e.span)
            return x**y
        try:
            return float(x) ** float(y)
        except OverflowError:
            raise self.error("this number is too large to represent", e.span,
                             hint="numbers must be finite; float32 holds at most about "
                                  "3.4e38") from None

    def positive(self, e: ast.Expr, what: str) -> int:
        value = self.integer(e, allow_negative=True)
        if value <= 0:
            raise self.error(f"{what} must be a positive integer, found {value}", e.span)
        return value

    def non_negative(self, e: ast.Expr, what: str) -> int:
        value = self.integer(e, allow_negative=True)
        if value < 0:
            raise self.error(f"{what} must be >= 0, found {value}", e.span)
        return value

    def word(self, e: ast.Expr, choices: tuple[str, ...], what: str) -> str:
        if isinstance(e, ast.Name) and e.id in choices:
            return e.id
        found = f"`{e.id}`" if isinstance(e, ast.Name) else describe(e)
        hint = None
        if isinstance(e, ast.Name):
            hint = self._suggest(e.id, choices, None)
        raise self.error(f"{what} must be one of {one_of(choices)}; found {found}", e.span,
                         hint=hint)

    def boolean(self, e: ast.Expr, what: str) -> bool:
        return self.word(e, ("true", "false"), what) == "true"

    def word_list(self, e: ast.List, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
        """The distinct words of a list, each one of `choices` (a word listed twice refused),
        in the order of `choices`."""
        chosen: list[str] = []
        for item in e.items:
            name = self.word(item, choices, what)
            if name in chosen:
                raise self.error(f"`{name}` is listed twice", item.span)
            chosen.append(name)
        return tuple(p for p in choices if p in chosen)

    def _suggest(self, name: str, candidates: Any, fallback: str | None) -> str | None:
        close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
        return f"did you mean `{close[0]}`?" if close else fallback

    # -- calls --------------------------------------------------------------------------------
    def bind(self, e: ast.Expr, name: str, params: tuple[Param, ...]) -> dict[str, ast.Expr]:
        """Arguments of a call (or a bare name, meaning all defaults) by parameter name."""
        if isinstance(e, ast.Name):
            missing = [p.name for p in params if p.required]
            if missing:
                raise self.error(f"`{name}` needs arguments: {', '.join(missing)}", e.span,
                                 hint=f"write `{name}({', '.join(p + ' = ...' for p in missing)})`")
            return {}
        assert isinstance(e, ast.Call)
        if not params and e.args:
            raise self.error(f"`{name}` takes no arguments", e.args[0].span,
                             hint=f"write `{name}`")
        bound: dict[str, ast.Expr] = {}
        names = [p.name for p in params]
        positional = True
        for i, arg in enumerate(e.args):
            if arg.name is None:
                if not positional:
                    raise self.error("positional argument after a keyword argument", arg.span)
                if i >= len(params):
                    raise self.error(f"`{name}` takes at most {len(params)} argument"
                                     f"{'s' if len(params) != 1 else ''}", arg.span,
                                     hint=f"parameters: {', '.join(names)}")
                bound[params[i].name] = arg.value
                continue
            positional = False
            if arg.name not in names:
                raise self.error(f"`{name}` has no parameter `{arg.name}`", arg.name_span,
                                 hint=self._suggest(arg.name, names,
                                                    f"parameters: {', '.join(names)}"))
            if arg.name in bound:
                raise self.error(f"argument `{arg.name}` given twice", arg.name_span)
            bound[arg.name] = arg.value
        missing = [p.name for p in params if p.required and p.name not in bound]
        if missing:
            raise self.error(f"`{name}` is missing argument{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(f'`{x}`' for x in missing)}", e.span)
        return bound

    def callee(self, e: ast.Expr, table: dict[str, Any], what: str) -> tuple[str, Span]:
        if isinstance(e, ast.Call):
            name, span = e.func, e.func_span
        elif isinstance(e, ast.Name):
            name, span = e.id, e.span
        else:
            raise self.error(f"expected {what}, found {describe(e)}", e.span,
                             hint=f"one of {one_of(tuple(table))}")
        if name not in table:
            raise self.error(f"unknown {what} `{name}`", span,
                             hint=self._suggest(name, table, f"one of {one_of(tuple(table))}"))
        return name, span


_ARITHMETIC = ("+", "-", "*", "/", "//", "%", "**")
COMPARISONS = ("<", "<=", "==", "!=", ">=", ">")


def _number_text(e: ast.Expr, value: float) -> str:
    return f"the number {e.text}" if isinstance(e, ast.Float) else f"the number {value:g}"


def describe(e: ast.Expr) -> str:
    match e:
        case ast.Int():
            return f"the integer {e.text}"
        case ast.Float():
            return f"the number {e.text}"
        case ast.Name():
            return f"`{e.id}`"
        case ast.Call():
            return f"a call to `{e.func}`"
        case ast.List():
            return "a list"
        case ast.BinOp(op="&" | "|") | ast.Not():
            return "a mask expression"
        case ast.BinOp(op=op) if op in COMPARISONS:
            return f"a comparison (`{op}`), which is a mask"
        case ast.Paren():
            return describe(e.inner)
    return "an arithmetic expression"


def one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(f"`{c}`" for c in choices)
