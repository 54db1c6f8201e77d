"""Source -> AST. grammars/attn.lark through Lark's LALR parser; lark types never leave here.

Every failure is a SpecError with a located diagnostic: bad bytes, oversized files, nesting
too deep for a readable spec, literals too large, and Lark's own parse errors."""

from __future__ import annotations

import functools
import math
import os
from importlib import resources
from pathlib import Path

import lark

from . import ast
from .errors import Diagnostic, SpecError, UsageError
from .source import Source, Span

__all__ = ["MAX_BYTES", "MAX_DEPTH", "decode", "parse", "read_source"]

MAX_BYTES = 1 << 20  # a spec is a few hundred lines; anything near this is not a spec
MAX_DEPTH = 64  # nesting of ( [ ! - and operator chains that a person could still read
_MAX_DIGITS = 30

_TOKEN_NAMES = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "LBRACE": "`{`",
    "RBRACE": "`}`", "LPAR": "`(`", "RPAR": "`)`", "LSQB": "`[`", "RSQB": "`]`", "EQUAL": "`=`",
    "COMMA": "`,`", "VBAR": "`|`", "AMPERSAND": "`&`", "BANG": "`!`", "PLUS": "`+`",
    "MINUS": "`-`", "STAR": "`*`", "__ANON_0": "`//`", "LET": "`let`", "MASK": "`mask`",
    "ATTENTION": "`attention`", "TRANSFORMER": "`transformer`", "$END": "end of file",
}


def shipped_text(package: str, folder: str, name: str) -> str:
    """A file attndsl ships as data (`attndsl.grammars`, `attndsl.docs`), as installed; run from
    a checkout that is not installed (PYTHONPATH at the repository, as on a machine where
    nothing can be installed), the file in the repository's `folder`."""
    try:
        return resources.files(package).joinpath(name).read_text("utf-8")
    except ModuleNotFoundError:
        return (Path(__file__).resolve().parent.parent / folder / name).read_text("utf-8")


@functools.cache
def _lark() -> lark.Lark:
    grammar = shipped_text("attndsl.grammars", "grammars", "attn.lark")
    return lark.Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True,
                     maybe_placeholders=True)


def decode(data: bytes, name: str) -> Source:
    """Bytes -> Source, or a located diagnostic for input that is not a UTF-8 text spec."""
    if len(data) > MAX_BYTES:
        empty = Source(name, "")
        raise SpecError([Diagnostic(
            f"file is larger than {MAX_BYTES:,} bytes, the most a spec may be",
            empty.span(0, 0), hint="is this the right file? .attn specs are small text files")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        good = data[: exc.start].decode("utf-8")
        src = Source(name, good + "\ufffd" + data[exc.end:].decode("utf-8", "replace"))
        raise SpecError([Diagnostic(
            f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            src.span(len(good), len(good) + 1), hint="save the spec as UTF-8 text")]) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    nul = text.find("\x00")
    if nul >= 0:
        src = Source(name, text)
        raise SpecError([Diagnostic("file contains a NUL byte; is it a binary file?",
                                    src.span(nul, nul + 1), hint="pass an .attn text file")])
    return Source(name, text)


def parse(source: Source) -> ast.Module:
    """Source -> ast.Module (with comments kept for fmt). Raises SpecError."""
    comments: list[ast.Comment] = []
    _check_depth(source)
    try:
        tree = _lark().parse(source.text, on_error=None)
    except lark.exceptions.UnexpectedInput as exc:
        raise SpecError([_parse_diagnostic(source, exc)]) from None
    for start, end in _comment_ranges(source.text):
        comments.append(ast.Comment(text=source.text[start:end], span=source.span(start, end)))
    builder = _Builder(source)
    try:
        defs = tuple(builder.definition(child) for child in tree.children)
    except _TooDeep as exc:
        raise SpecError([Diagnostic(
            f"expression nested more than {MAX_DEPTH} levels deep (each operator of a chain "
            "such as `a | b | c` is a level)", exc.span,
            hint="split it into named `mask` or `let` definitions")]) from None
    if builder.diagnostics:
        raise SpecError(builder.diagnostics)
    return ast.Module(definitions=defs, comments=tuple(comments),
                      span=source.span(0, len(source.text)))


def _comment_ranges(text: str) -> list[tuple[int, int]]:
    """Offsets of `#` comments; the language has no strings, so every `#` starts one."""
    out = []
    pos = text.find("#")
    while pos >= 0:
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        out.append((pos, end))
        pos = text.find("#", end)
    return out


def _check_depth(source: Source) -> None:
    """Reject nesting deeper than MAX_DEPTH before parsing, so nothing downstream recurses deep."""
    depth = 0
    run = 0  # consecutive prefix operators ! and -, which also nest
    text = source.text
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        if ch in "!-":
            run += 1
        elif not ch.isspace():
            run = 0
        if depth > MAX_DEPTH or run > MAX_DEPTH:
            raise SpecError([Diagnostic(
                f"expression nested more than {MAX_DEPTH} levels deep",
                source.span(i, i + 1), hint="split it into named `mask` or `let` definitions")])
        i += 1


def _parse_diagnostic(source: Source, exc: lark.exceptions.UnexpectedInput) -> Diagnostic:
    expected: set[str] = set()
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        tok = exc.token
        expected = set(exc.accepts or exc.expected)
        if tok.type == "$END":
            pos = len(source.text.rstrip())
            span = source.span(pos, pos)
            what = "unexpected end of file"
        else:
            span = source.span(tok.start_pos, tok.end_pos)
            what = f"unexpected {_describe_token(tok)}"
    elif isinstance(exc, lark.exceptions.UnexpectedCharacters):
        pos = exc.pos_in_stream
        span = source.span(pos, pos + 1)
        ch = source.text[pos]
        what = f"unexpected character {ch!r}"
        expected = set(exc.allowed or ())
        if ch in "\"'":
            return Diagnostic(what, span, hint="the language has no strings; write names bare")
    else:  # UnexpectedEOF
        pos = len(source.text.rstrip())
        span = source.span(pos, pos)
        what = "unexpected end of file"
        expected = set(exc.expected)
    hint = _expected_hint(expected)
    if "RBRACE" in expected and what == "unexpected end of file":
        hint = "a block is not closed: add `}`"
    return Diagnostic(what, span, hint=hint)


def _describe_token(tok: lark.Token) -> str:
    if tok.type in ("NAME", "INT", "FLOAT"):
        return f"{_TOKEN_NAMES[tok.type].split()[-1]} `{tok}`"
    return f"`{tok}`"


def _expected_hint(expected: set[str]) -> str | None:
    names = sorted({_TOKEN_NAMES.get(t, t) for t in expected})
    if not names:
        return None
    if len(names) > 8:
        return "expected an expression or the end of one"
    return "expected " + (names[0] if len(names) == 1 else "one of " + ", ".join(names))


class _TooDeep(Exception):
    def __init__(self, span: Span):
        self.span = span


class _Builder:
    """Parse tree -> AST. Explicit, one method per rule, like lark's create_ast example.

    Expressions deeper than MAX_DEPTH (a chain of 500 `|` is 500 deep: the grammar nests it)
    are refused here, so no later stage (checker, fmt, masks, backends) ever recurses deeper."""

    def __init__(self, source: Source):
        self.source = source
        self.diagnostics: list[Diagnostic] = []

    def span(self, node: lark.Tree | lark.Token) -> Span:
        if isinstance(node, lark.Token):
            return self.source.span(node.start_pos, node.end_pos)
        return self.source.span(node.meta.start_pos, node.meta.end_pos)

    def definition(self, tree: lark.Tree) -> ast.Definition:
        name_tok = tree.children[0]
        common = {"name": str(name_tok), "name_span": self.span(name_tok), "span": self.span(tree)}
        if tree.data == "let_def":
            return ast.LetDef(value=self.expr(tree.children[1]), **common)
        if tree.data == "mask_def":
            return ast.MaskDef(value=self.expr(tree.children[1]), **common)
        entries = tuple(self.entry(e) for e in tree.children[1:])
        if tree.data == "attention_def":
            return ast.AttentionDef(entries=entries, **common)
        return ast.TransformerDef(entries=entries, **common)

    def entry(self, tree: lark.Tree) -> ast.Entry:
        key, value = tree.children
        return ast.Entry(key=str(key.children[0]), key_span=self.span(key), value=self.expr(value),
                         span=self.span(tree))

    def expr(self, node: lark.Tree, depth: int = 1) -> ast.Expr:
        """The AST of an expression rule: `_<rule>(kids, span, depth)`, one method per rule."""
        span = self.span(node)
        if depth > MAX_DEPTH:
            raise _TooDeep(span)
        rule = "_binop" if node.data in _BINOPS else f"_{node.data}"
        build = getattr(self, rule, None)
        if build is None:
            raise AssertionError(f"grammar rule {node.data!r} has no AST builder")
        return build(node, span, depth + 1)

    def _int_lit(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        text = str(node.children[0])
        if len(text) > _MAX_DIGITS:
            self.diagnostics.append(Diagnostic(
                f"integer literal has {len(text)} digits; at most {_MAX_DIGITS} are allowed",
                span))
            return ast.Int(value=0, text="0", span=span)
        return ast.Int(value=int(text), text=text, span=span)

    def _float_lit(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        text = str(node.children[0])
        value = float(text)
        if not math.isfinite(value):
            self.diagnostics.append(Diagnostic(
                f"number {text} is too large to represent", span,
                hint="numbers must be finite; float32 holds at most about 3.4e38"))
            value = 0.0
        return ast.Float(value=value, text=text, span=span)

    def _name(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        return ast.Name(id=str(node.children[0]), span=span)

    def _paren(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        return ast.Paren(inner=self.expr(node.children[0], deeper), span=span)

    def _not_op(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        return ast.Not(operand=self.expr(node.children[0], deeper), span=span)

    def _neg_op(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        return ast.Neg(operand=self.expr(node.children[0], deeper), span=span)

    def _cmp_op(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        left, op, right = node.children
        return ast.BinOp(op=str(op), left=self.expr(left, deeper),
                         right=self.expr(right, deeper), span=span)

    def _binop(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        left, right = node.children
        return ast.BinOp(op=_BINOPS[node.data], left=self.expr(left, deeper),
                         right=self.expr(right, deeper), span=span)

    def _list(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        items = tuple(self.expr(k, deeper) for k in node.children if k is not None)
        return ast.List(items=items, span=span)

    def _call(self, node: lark.Tree, span: Span, deeper: int) -> ast.Expr:
        func, *args = node.children
        return ast.Call(func=str(func), func_span=self.span(func), span=span,
                        args=tuple(self.arg(a, deeper) for a in args if a is not None))

    def arg(self, tree: lark.Tree, depth: int) -> ast.Arg:
        span = self.span(tree)
        if tree.data == "kwarg":
            name, value = tree.children
            return ast.Arg(name=str(name), name_span=self.span(name),
                           value=self.expr(value, depth), span=span)
        return ast.Arg(name=None, name_span=None, value=self.expr(tree.children[0], depth),
                       span=span)


_BINOPS = {"or_op": "|", "and_op": "&", "add_op": "+", "sub_op": "-", "mul_op": "*",
           "floordiv_op": "//", "div_op": "/", "pow_op": "**", "mod_op": "%"}


def read_source(path: str | os.PathLike[str]) -> Source:
    """Read a spec file; unreadable files are a UsageError (one line, exit 2)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_BYTES + 1)  # enough to tell it is too large (/dev/zero, a disk)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected an .attn file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode(data, str(path))
