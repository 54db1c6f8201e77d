"""Mask expressions: named masks, `& | !`, each primitive's parameters and the limits on an
expanded mask."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast
from .. import masks as m
from ..source import Span
from .values import COMPARISONS, Invalid, Param, Values, describe

__all__ = ["INDEX_NAMES", "MASK_PRIMITIVES", "MAX_MASK_DEPTH", "MAX_MASK_PRIMITIVES",
           "MAX_RANDOM_BLOCKS", "Masks"]

MAX_MASK_PRIMITIVES = 256  # after named masks are inlined
MAX_MASK_DEPTH = 64
MAX_RANDOM_BLOCKS = 64  # each draw is unrolled into the graph
_MAX_TOKENS = 4096  # positions in global(tokens = [...])
_MAX_INDEX_DEPTH = 32  # of an index expression's nesting
# the indices of index masks: query, key, and their positions within their documents
INDEX_NAMES = {"q": "the query index", "k": "the key index",
               "qd": "the query's position in its document",
               "kd": "the key's position in its document"}


class Masks(Values):
    masks: dict[str, ast.MaskDef]
    mask_values: dict[str, m.Mask]

    # -- masks --------------------------------------------------------------------------------
    def mask_def(self, name: str, use: Span) -> m.Mask:
        return self.resolve(name, use, self.mask_values, self.masks, self.mask, "masks")

    def mask(self, e: ast.Expr) -> m.Mask:
        match e:
            case ast.Paren(inner=inner):
                return self.mask(inner)
            case ast.Not(operand=x):
                return self._bounded(m.Not(self.mask(x)), e.span)
            case ast.BinOp(op="&" | "|", left=a, right=b):
                left, right = self._mask_or_none(a), self._mask_or_none(b)
                if left is None or right is None:
                    raise Invalid()
                both = m.And(left, right) if e.op == "&" else m.Or(left, right)
                return self._bounded(both, e.span)
            case ast.BinOp(op=op, left=a, right=b) if op in COMPARISONS:
                return m.Compare(op, self.index(a), self.index(b))
            case ast.Name(id="q" | "k" | "qd" | "kd") | ast.Call(func="abs" | "min" | "max"):
                raise self.error(f"{describe(e)} is an integer index expression, not a mask",
                                 e.span, hint="compare it to make a mask: `abs(q - k) <= 4`")
            case ast.Name(id=name) if name in self.masks:
                return self.mask_def(name, e.span)
            case ast.Name() | ast.Call():
                fname = e.id if isinstance(e, ast.Name) else e.func
                if fname in self.lets and isinstance(e, ast.Name):
                    raise self.error(f"`{fname}` is a `let` constant, not a mask", e.span)
                name, _ = self.callee(e, MASK_PRIMITIVES | dict.fromkeys(self.masks), "mask")
                if name in self.masks:
                    raise self.error(f"mask `{name}` takes no arguments", e.span,
                                     hint=f"write `{name}`")
                return MASK_PRIMITIVES[name](self, self.bind(e, name, _MASK_PARAMS[name]), e)
            case _:
                raise self.error(f"expected a mask expression, found {describe(e)}", e.span,
                                 hint="masks are built from primitives such as `causal` and "
                                      "`window(n)` with `&`, `|`, `!`")

    def index(self, e: ast.Expr, depth: int = 0) -> m.Index:
        """An integer expression of the query and key indices `q` and `k`, and of their
        positions within their documents `qd` and `kd` (docs/LANGUAGE.md, Index masks): + - *
        with constants and `let`s, // and % by a positive constant, abs(x), min(x, y),
        max(x, y)."""
        if depth > _MAX_INDEX_DEPTH:
            raise self.error(f"index expression nested deeper than {_MAX_INDEX_DEPTH}", e.span)
        match e:
            case ast.Paren(inner=inner):
                return self.index(inner, depth)
            case ast.Name(id="q" | "k" | "qd" | "kd"):
                return m.Index(e.id)
            case ast.Neg(operand=x):
                return m.Index("-", (m.Index("const"), self.index(x, depth + 1)))
            case ast.BinOp(op="+" | "-" | "*" as op, left=a, right=b):
                return m.Index(op, (self.index(a, depth + 1), self.index(b, depth + 1)))
            case ast.BinOp(op="//" | "%" as op, left=a, right=b):
                n = self._constant(b)
                if n is None or n <= 0:
                    raise self.error(f"the divisor of `{op}` in a mask must be a positive "
                                     "constant", b.span,
                                     hint="q and k may stand on its left: `q // W`, `k % W`")
                return m.Index(op, (self.index(a, depth + 1), m.Index("const", value=n)))
            case ast.Call(func="abs" | "min" | "max" as f, args=args):
                want = 1 if f == "abs" else 2
                if len(args) != want or any(a.name is not None for a in args):
                    raise self.error(f"`{f}` takes {want} positional argument"
                                     f"{'s' if want > 1 else ''}", e.span)
                return m.Index(f, tuple(self.index(a.value, depth + 1) for a in args))
        value = self._constant(e)
        if value is None:
            raise self.error(f"expected an integer expression of `q` and `k`, found "
                             f"{describe(e)}", e.span,
                             hint="for example `abs(q // W - k // W) <= 1`")
        return m.Index("const", value=value)

    def _constant(self, e: ast.Expr) -> int | None:
        """An integer constant (literals and `let`s), or None where `e` reads an index."""
        if any(isinstance(n, ast.Name) and n.id in INDEX_NAMES for n in ast.walk(e)):
            return None
        return self.integer(e, allow_negative=True)

    def _bounded(self, mask: m.And | m.Or | m.Not, span: Span) -> m.Mask:
        """`mask`, if it stays within MAX_MASK_PRIMITIVES and MAX_MASK_DEPTH once named masks
        are expanded: names can double a mask at each use, and every backend walks the whole
        expanded tree."""
        children = (mask.operand,) if isinstance(mask, m.Not) else (mask.left, mask.right)
        sizes = [self._mask_size.get(id(c), (1, 1)) for c in children]
        size, depth = sum(s for s, _ in sizes), 1 + max(d for _, d in sizes)
        if size > MAX_MASK_PRIMITIVES or depth > MAX_MASK_DEPTH:
            raise self.error(
                f"this mask expands to {size} primitives nested {depth} deep once named masks "
                f"are inlined; the limits are {MAX_MASK_PRIMITIVES} and {MAX_MASK_DEPTH}", span,
                hint="simplify the mask: a repeated term adds nothing to `&` or `|`")
        self._mask_size[id(mask)] = (size, depth)
        self._keep.append(mask)  # ids stay unique while the checker runs
        return mask

    def _mask_or_none(self, e: ast.Expr) -> m.Mask | None:
        try:
            return self.mask(e)
        except Invalid:
            return None

    def random_blocks(self, e: ast.Expr) -> int:
        value = self.positive(e, "random blocks")
        if value > MAX_RANDOM_BLOCKS:
            raise self.error(f"random blocks must be at most {MAX_RANDOM_BLOCKS}, found "
                             f"{value}", e.span, hint="each draw is a step of the exported "
                             "graph; more draws than that approach dense attention anyway")
        return value


_MASK_PARAMS: dict[str, tuple[Param, ...]] = {
    "full": (), "padding": (Param("side"),), "document": (),
    "causal": (Param("align"),),
    "window": (Param("left", True), Param("right"), Param("align")),
    "dilated": (Param("left", True), Param("right"), Param("dilation", True)),
    "chunked": (Param("n", True),),
    "strided": (Param("n", True),),
    "global": (Param("first"), Param("tokens")),
    "prefix": (Param("n", True),),
    "random": (Param("blocks", True), Param("block", True), Param("seed")),
}


def _window(c: Masks, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    left = c.non_negative(a["left"], "window left")
    right = c.non_negative(a["right"], "window right") if "right" in a else left
    return m.Window(left, right, _align(c, a))


def _dilated(c: Masks, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    left = c.non_negative(a["left"], "dilated left")
    right = c.non_negative(a["right"], "dilated right") if "right" in a else left
    return m.Dilated(left, right, c.positive(a["dilation"], "dilation"))


def _global(c: Masks, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    if ("first" in a) == ("tokens" in a):
        raise c.error("global needs exactly one of `first = n` or `tokens = [...]`", e.span)
    if "first" in a:
        return m.Global(first=c.positive(a["first"], "global first"))
    lst = a["tokens"]
    if not isinstance(lst, ast.List) or not lst.items:
        raise c.error("global tokens must be a non-empty list of positions, like [0, 5]",
                      lst.span)
    if len(lst.items) > _MAX_TOKENS:
        raise c.error(f"at most {_MAX_TOKENS} global tokens", lst.span)
    tokens = sorted({c.non_negative(t, "token position") for t in lst.items})
    return m.Global(tokens=tuple(tokens))


def _causal(c: Masks, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    return m.Causal(_align(c, a))


def _align(c: Masks, a: dict[str, ast.Expr]) -> str:
    return c.word(a["align"], ("top_left", "bottom_right"), "align") if "align" in a else (
        "top_left")


def _padding(c: Masks, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    return m.Padding(c.word(a["side"], ("right", "left"), "padding side") if "side" in a
                     else "right")


MASK_PRIMITIVES: dict[str, Callable[[Masks, dict[str, ast.Expr], ast.Expr], m.Mask]] = {
    "full": lambda c, a, e: m.Full(),
    "padding": _padding,
    "document": lambda c, a, e: m.Document(),
    "causal": _causal,
    "window": _window,
    "dilated": _dilated,
    "chunked": lambda c, a, e: m.Chunked(c.positive(a["n"], "chunk size")),
    "strided": lambda c, a, e: m.Strided(c.positive(a["n"], "stride")),
    "global": _global,
    "prefix": lambda c, a, e: m.Prefix(c.non_negative(a["n"], "prefix length")),
    "random": lambda c, a, e: m.Random(c.random_blocks(a["blocks"]),
                                       c.positive(a["block"], "random block size"),
                                       c.non_negative(a["seed"], "seed") if "seed" in a else 0),
}

