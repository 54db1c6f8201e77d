"""AST (+ comments) -> canonical source text. Idempotent; keeps every comment and the meaning.

Layout: one definition per paragraph, blocks indented by four spaces with `=` aligned, a list
too long for one line written one item per line (a call, one argument per line), single
spaces around binary operators, parentheses where precedence needs them and where the author
grouped an operation (`(a * b) + c` stays: it says how to read it), not around a name, number,
call or list, nor around a whole value, nor doubled; literals exactly as written, and at most
one blank line wherever the author left one or more."""

from __future__ import annotations

from . import ast

__all__ = ["format_expr", "format_module"]

_COMPARE = ("<", "<=", "==", "!=", ">=", ">")
_LEVEL = {"|": 1, "&": 2, **dict.fromkeys(_COMPARE, 3.5), "+": 4, "-": 4, "*": 5, "//": 5,
          "/": 5, "%": 5, "**": 7}
_INDENT = "    "
_ATOM = 8  # names, numbers, calls, lists: bind tighter than any operator
_WIDTH = 100  # a list or call longer than this on one line: one item (argument) per line


def format_expr(e: ast.Expr) -> str:
    return _expr(e, 0)


def _level(e: ast.Expr) -> int:
    match e:
        case ast.BinOp(op=op):
            return _LEVEL[op]
        case ast.Not():
            return 3
        case ast.Neg():
            return 6
        case ast.Paren(inner=inner):
            return _level(inner)
    return _ATOM


def _expr(e: ast.Expr, parent: int) -> str:
    match e:
        case ast.Paren(inner=inner):
            while isinstance(inner, ast.Paren):  # ((x)) groups no more than (x)
                inner = inner.inner
            if parent == 0 or _level(inner) == _ATOM:  # they group nothing there
                return _expr(inner, parent)
            return f"({_expr(inner, 0)})"  # the author's grouping, needed or not
        case ast.Int(text=text) | ast.Float(text=text):
            out = text
        case ast.Name(id=name):
            out = name
        case ast.List(items=items):
            out = "[" + ", ".join(_expr(i, 0) for i in items) + "]"
        case ast.Call(func=func, args=args):
            out = func + "(" + ", ".join(
                (f"{a.name} = " if a.name else "") + _expr(a.value, 0) for a in args) + ")"
        case ast.Not(operand=x):  # `!(q < k)`, not the misleading `!q < k`
            inner = x.inner if isinstance(x, ast.Paren) else x
            compare = isinstance(inner, ast.BinOp) and inner.op in _COMPARE
            out = "!" + _expr(x, 4 if compare else 3)
        case ast.Neg(operand=x):
            out = "-" + _expr(x, 6)
            if out.startswith("--"):
                out = "-(" + out[1:] + ")"
        case ast.BinOp(op="**", left=a, right=b):
            # right-associative, and its right operand may be a signed power: 2 ** -3 ** 2
            out = f"{_expr(a, 8)} ** {_expr(b, 6)}"
        case ast.BinOp(op=op, left=a, right=b) if op in _COMPARE:  # not chained: a < b < c
            out = f"{_expr(a, 4)} {op} {_expr(b, 4)}"
        case ast.BinOp(op=op, left=a, right=b):
            level = _LEVEL[op]
            # Left-associative: a right operand at the same level keeps its parentheses.
            out = f"{_expr(a, level)} {op} {_expr(b, level + 1)}"
        case _:
            raise AssertionError(f"unknown expression {e!r}")
    return f"({out})" if _level(e) < parent else out


def format_module(module: ast.Module) -> str:
    """Canonical text of a module. Comments are placed by source position."""
    text = module.span.source.text
    out: list[str] = []
    state = _Emitter(text, out)
    comments = list(module.comments)
    prev_def: ast.Definition | None = None
    for d in module.definitions:
        state.comments_before(comments, d.span.start, top=True,
                              force_blank=prev_def is not None and _is_block(prev_def))
        around_block = prev_def is not None and (_is_block(prev_def) or _is_block(d))
        blank = state.blank_between(d.span.start) or (around_block and not state.after_comment)
        if state.lines and blank and state.lines[-1] != "":
            out.append("")
        if isinstance(d, ast.LetDef | ast.MaskDef):
            keyword = "let" if isinstance(d, ast.LetDef) else "mask"
            state.code(f"{keyword} {d.name} = {format_expr(d.value)}", d.span)
            # comments inside a multi-line definition follow it
            state.comments_before(comments, d.span.end, top=True)
        else:
            keyword = "attention" if isinstance(d, ast.AttentionDef) else "transformer"
            state.code(f"{keyword} {d.name} {{", d.name_span)
            width = max((len(e.key) for e in d.entries), default=0)
            first = True
            for entry in d.entries:
                state.comments_before(comments, entry.span.start, indent=_INDENT,
                                      no_blank=first)
                if not first and state.blank_between(entry.span.start) and out[-1] != "":
                    out.append("")
                head = f"{_INDENT}{entry.key.ljust(width)} = "
                value = entry.value
                if isinstance(value, ast.List) and value.items and \
                        len(head + format_expr(value)) > _WIDTH:  # one item per line
                    state.code(head + "[", entry.key_span)
                    for item in value.items:
                        state.comments_before(comments, item.span.start, indent=_INDENT * 2,
                                              no_blank=True)
                        *lines, last = _broken(_INDENT * 2, item, _INDENT * 2)
                        for line in lines:
                            state.code(line, item.span)
                        state.code(last + ",", item.span)
                    state.comments_before(comments, value.span.end - 1, indent=_INDENT * 2,
                                          no_blank=True)
                    state.code(f"{_INDENT}]", value.span)
                else:
                    *lines, last = _broken(head, value, _INDENT)
                    for line in lines:
                        state.code(line, entry.key_span)
                    state.code(last, entry.span)
                state.comments_before(comments, entry.span.end, indent=_INDENT)
                first = False
            state.comments_before(comments, d.span.end - 1, indent=_INDENT, no_blank=first)
            state.code("}", d.span.source.span(d.span.end - 1, d.span.end))
        prev_def = d
    state.comments_before(comments, len(text) + 1, top=True,
                          force_blank=prev_def is not None and _is_block(prev_def))
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n" if out else ""


def _broken(head: str, value: ast.Expr, indent: str) -> list[str]:
    """`head` + the value on one line if it fits in _WIDTH, else a call written one argument
    per line (each argument broken the same way), closed at `indent`."""
    line = head + format_expr(value)
    inner = value.inner if isinstance(value, ast.Paren) else value
    if len(line) <= _WIDTH or not isinstance(inner, ast.Call) or not inner.args:
        return [line]
    lines = [f"{head}{inner.func}("]
    for a in inner.args:
        *first, last = _broken(indent + _INDENT + (f"{a.name} = " if a.name else ""), a.value,
                               indent + _INDENT)
        lines += [*first, last + ","]
    return [*lines, f"{indent})"]


def _is_block(d: ast.Definition) -> bool:
    return isinstance(d, ast.AttentionDef | ast.TransformerDef)


class _Emitter:
    def __init__(self, text: str, lines: list[str]):
        self.text = text
        self.lines = lines
        self.last_end = 0  # source offset where the last emitted thing ended
        self.last_line = -1  # source line of the last emitted code line's end
        self.after_comment = False

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset)

    def blank_between(self, start: int) -> bool:
        gap = self.text[self.last_end:start]
        return gap.count("\n") >= 2 and any(
            not line.strip() for line in gap.split("\n")[1:-1])

    def code(self, line: str, span: ast.Span) -> None:
        self.lines.append(line)
        self.last_end = span.end
        self.last_line = self.line_of(span.end)
        self.after_comment = False

    def comments_before(self, comments: list[ast.Comment], offset: int, *, indent: str = "",
                        top: bool = False, no_blank: bool = False,
                        force_blank: bool = False) -> None:
        while comments and comments[0].span.start < offset:
            c = comments.pop(0)
            start = c.span.start
            line_start = self.text.rfind("\n", 0, start) + 1
            trailing = bool(self.text[line_start:start].strip())
            if trailing and self.line_of(start) == self.last_line and self.lines:
                self.lines[-1] = f"{self.lines[-1]}  {c.text.rstrip()}"
                self.last_end = c.span.end
                continue
            blank = self.blank_between(start) or (force_blank and not self.after_comment)
            if self.lines and blank and not no_blank and self.lines[-1] != "":
                self.lines.append("")
            self.lines.append(f"{indent}{c.text.rstrip()}")
            self.last_end = c.span.end
            self.last_line = -1
            self.after_comment = True
            no_blank = False
            force_blank = False
