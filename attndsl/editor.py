"""What an editor asks of a `.attn` text, answered without an editor (the language server,
`lsp.py`, wraps these): diagnostics, the formatted text, hover, completion and definitions.
Positions are 0-based (line, character) as the Language Server Protocol counts them, characters
as Python counts them (the server declares UTF-32 position encoding where the client allows)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .check.vocabulary import DEFINITIONS, KEYS, VALUES, WORDS, calls
from .errors import AttnError, SpecError
from .parser import shipped_text

__all__ = ["Completion", "Problem", "completions", "definition", "diagnostics", "formatted",
           "hover"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINED = re.compile(r"^[ \t]*(let|mask|attention|transformer)[ \t]+([A-Za-z_][A-Za-z0-9_]*)",
                      re.MULTILINE)


@dataclass(frozen=True)
class Problem:
    """One diagnostic: its range, message (with the help line) and related locations."""

    start: tuple[int, int]
    end: tuple[int, int]
    message: str
    related: tuple[tuple[tuple[int, int], tuple[int, int], str], ...] = ()


@dataclass(frozen=True)
class Completion:
    label: str
    kind: str  # keyword | key | function | parameter | value | reference
    detail: str
    insert: str


def _range(span) -> tuple[tuple[int, int], tuple[int, int]]:
    (l0, c0), (l1, c1) = span.source.line_col(span.start), span.source.line_col(span.end)
    return (l0 - 1, c0 - 1), (l1 - 1, max(c1 - 1, c0 if l1 == l0 else 0))


def diagnostics(text: str, name: str = "<buffer>") -> list[Problem]:
    """Every problem `attndsl check` reports for `text`, located (an unlocated one: line 1)."""
    from .api import loads

    try:
        loads(text, name)
    except SpecError as exc:
        out = []
        for d in exc.diagnostics:
            message = d.message + (f"\nhelp: {d.hint}" if d.hint else "")
            where = _range(d.span) if d.span else ((0, 0), (0, 1))
            related = tuple((*_range(s), note) for note, s in d.notes)
            out.append(Problem(*where, message, related))
        return out
    except AttnError as exc:
        return [Problem((0, 0), (0, 1), exc.render())]
    return []


def formatted(text: str, name: str = "<buffer>") -> str | None:
    """`attndsl fmt`'s text for `text`, or None where it does not parse."""
    from .fmt import format_module
    from .parser import decode, parse

    try:
        return format_module(parse(decode(text.encode("utf-8"), name)))
    except AttnError:
        return None


def _offset(text: str, line: int, character: int) -> int:
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    line = max(0, min(line, len(starts) - 1))
    end = starts[line + 1] - 1 if line + 1 < len(starts) else len(text)
    return min(starts[line] + character, end)


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


def _word(text: str, offset: int) -> tuple[str, int] | None:
    for m in _NAME.finditer(text, max(0, offset - 200), offset + 200):
        if m.start() <= offset <= m.end() and not text[m.start() - 1:m.start()].isdigit():
            return m.group(), m.start()
    return None


@dataclass(frozen=True)
class _Context:
    block: str | None  # attention | transformer | None (top level)
    key: str | None  # the key whose value the offset is in
    call: str | None  # the innermost call whose parentheses hold the offset
    at_key: bool  # where a key (or a definition keyword) begins


def _context(text: str, offset: int) -> _Context:
    """What surrounds `offset`, read from the text before it (which need not parse)."""
    before = re.sub(r"#[^\n]*", "", text[:offset])
    block, depth, opened = None, 0, []
    for m in re.finditer(r"(attention|transformer)\s+[A-Za-z_]\w*\s*\{|[{}()\[\]]", before):
        tok = m.group()
        if tok.endswith("{") and len(tok) > 1:
            block, depth, opened = m.group(1), 1, []
        elif tok == "}":
            depth -= 1
            block = block if depth > 0 else None
        elif tok in "([":
            j = m.start() - 1
            while j >= 0 and before[j] in " \t":
                j -= 1
            word = _word(before, j) if tok == "(" and j >= 0 and before[j].isalnum() else None
            opened.append(word[0] if word else tok)
        elif tok in ")]" and opened:
            opened.pop()
    keys = list(re.finditer(r"([A-Za-z_]\w*)\s*=(?!=)", before))
    tail = before[keys[-1].end():] if keys else before
    key = keys[-1].group(1) if keys and (block or not opened) else None
    call = next((c for c in reversed(opened) if c not in "(["), None)
    line = before[before.rfind("\n") + 1:]
    at_key = not opened and bool(re.fullmatch(r"\s*[A-Za-z_]*", line)) and (
        block is not None or key is None or not tail.strip())
    return _Context(block, key if not at_key else None, call, at_key)


def completions(text: str, line: int, character: int) -> list[Completion]:
    """What may be typed at (line, character): keys at the start of an entry, definition
    keywords at the top level, a call's parameters inside its parentheses, and the calls,
    words and defined names a key's value takes."""
    offset = _offset(text, line, character)
    ctx = _context(text, offset)
    names = {m.group(2): m.group(1) for m in _DEFINED.finditer(text)}
    if ctx.at_key:
        if ctx.block is None:
            return [Completion(k, "keyword", f"define a {k}", f"{k} ") for k in DEFINITIONS]
        return [Completion(k, "key", f"{ctx.block} key", f"{k} = ") for k in KEYS[ctx.block]]
    known = calls()
    if ctx.call in known:
        return [Completion(p, "parameter", f"{ctx.call}: {'required' if req else 'optional'}",
                           f"{p} = ") for p, req in known[ctx.call]]
    table = VALUES.get(ctx.key or "", {})
    out = [Completion(n, "function", _signature(n, ps), _snippet(n, ps)) for n, ps in table.items()]
    out += [Completion(w, "value", f"{ctx.key} value", w) for w in WORDS.get(ctx.key or "", ())]
    wanted = {"mask": ("mask",), "attention": ("attention",)}.get(ctx.key or "", ("let",))
    out += [Completion(n, "reference", f"{kind} {n}", n) for n, kind in names.items()
            if kind in wanted]
    return out


def _signature(name: str, params: tuple[tuple[str, bool], ...]) -> str:
    return f"{name}({', '.join(p + ('' if req else '?') for p, req in params)})" if params \
        else name


def _snippet(name: str, params: tuple[tuple[str, bool], ...]) -> str:
    required = [p for p, req in params if req]
    if not required:
        return name
    return f"{name}({', '.join(f'{p} = ${{{i}}}' for i, p in enumerate(required, 1))})"


def definition(text: str, line: int, character: int) -> tuple[tuple[int, int],
                                                                    tuple[int, int]] | None:
    """The range of the name defined by `let`, `mask`, `attention` or `transformer` that the
    word at (line, character) refers to."""
    found = _word(text, _offset(text, line, character))
    if found is None:
        return None
    for m in _DEFINED.finditer(text):
        if m.group(2) == found[0]:
            return _position(text, m.start(2)), _position(text, m.end(2))
    return None


def hover(text: str, line: int, character: int, name: str = "<buffer>") -> str | None:
    """Markdown for the word at (line, character): a layer's plan and parameter count, a
    `let`'s or `mask`'s definition, or a key's, primitive's or parameter's entry in the
    language reference."""
    offset = _offset(text, line, character)
    found = _word(text, offset)
    if found is None:
        return None
    word, start = found
    defined = {m.group(2): m for m in _DEFINED.finditer(text)}
    if word in defined:
        m = defined[word]
        if m.group(1) in ("attention", "transformer"):
            return _layer_hover(text, word, m.group(1), name)
        end = text.find("\n", m.start())
        return f"```attn\n{text[m.start():len(text) if end < 0 else end].strip()}\n```"
    ctx = _context(text, start)
    rows = _reference()
    if ctx.at_key or (text[offset:].lstrip().startswith("=") and not ctx.call):
        section = "transformer" if ctx.block == "transformer" else "attention"
        return rows.get((section, word)) or rows.get(("any", word))
    if ctx.call and ctx.call != word:
        row = rows.get(("any", ctx.call))
        return f"parameter `{word}` of `{ctx.call}`\n\n{row}" if row else None
    return rows.get(("any", word))


def _layer_hover(text: str, word: str, kind: str, name: str) -> str:
    from .api import loads
    from .ir import parameter_count

    head = f"**{kind} `{word}`**"
    try:
        layer = loads(text, name)[word]
    except (AttnError, KeyError):
        return head + " (fix the file's errors to see its plan)"
    _, choices = layer.plan()
    plan = "\n".join(c.text() for c in choices)
    return (f"{head}: {parameter_count(layer.spec):,} parameters\n\n"
            f"plan for ort-cpu:\n```\n{plan}\n```")


@functools.cache
def _reference() -> dict[tuple[str, str], str]:
    """docs/LANGUAGE.md's table rows by (section, leading name): 'attention' for the attention
    keys and their values' tables, 'transformer' for the transformer keys, 'any' for all."""
    text = shipped_text("attndsl.docs", "docs", "LANGUAGE.md")
    rows: dict[tuple[str, str], str] = {}
    section = "any"
    for line in text.splitlines():
        if line.startswith("## "):
            section = "transformer" if "Transformer keys" in line else \
                "attention" if "Attention keys" in line else "other"
        m = re.match(r"\| `([A-Za-z_]\w*)([^`]*)`(.*)", line)
        if not m:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        doc = f"**{cells[0]}**: " + " — ".join(c.replace("\\|", "|") for c in cells[1:] if c)
        for where in (section, "any"):
            rows.setdefault((where, m.group(1)), doc)
    return rows
