"""How an IR attribute value is written in the IR text, and read back: exactly, so that a
graph printed and parsed again is equal to the graph.

A value is plain: `None`, `True` / `False`, an int, a float (Python's repr: `0.25`, `1e-06`,
`inf`), a string (bare where it reads as a name, `q_proj.weight`; else JSON-quoted), a tuple
`(a, b)` (`(a,)` with one item), or a frozen dataclass of plain values from `VALUE_CLASSES`
(the mask nodes, a mask's sparsity, RoPE's scalings), written `Name(field=value, ...)` with
the fields that differ from their defaults."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from .. import masks, rope_scaling
from ..spec import Sparsity

__all__ = ["VALUE_CLASSES", "Reader", "is_plain", "render"]

# every class whose instances may stand in an attribute, by the name the text writes
VALUE_CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (masks.Full, masks.Causal, masks.Window, masks.Dilated, masks.Chunked,
                masks.Strided, masks.Global, masks.Prefix, masks.Random, masks.Padding,
                masks.Document, masks.Compare, masks.Index, masks.And, masks.Or, masks.Not,
                masks.Cover,
                Sparsity, *rope_scaling.SCALINGS)
}
_WORDS = {"None": None, "True": True, "False": False}
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_TOKEN = re.compile(r"""\s*(?:
    (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?(?:inf|nan|\d+\.\d*(?:e[+-]?\d+)?|\d+e[+-]?\d+|\d+))
  | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[(),=])
)""", re.VERBOSE)


def render(value: Any) -> str:
    """The text of an attribute value (`Reader(text).value()` reads it back, equal)."""
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        bare = _BARE.fullmatch(value) and value not in _WORDS and value not in ("inf", "nan")
        return value if bare else json.dumps(value)
    if isinstance(value, tuple):
        items = [render(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    cls = type(value)
    if VALUE_CLASSES.get(cls.__name__) is cls:
        fields = [f"{f.name}={render(getattr(value, f.name))}"
                  for f in dataclasses.fields(value) if not _default(value, f)]
        return f"{cls.__name__}({', '.join(fields)})"
    raise TypeError(f"{type(value).__name__} is not a plain IR attribute value: {value!r}")


def is_plain(value: Any) -> bool:
    """Whether `value` is one `render` writes (a plain value, no live object)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, tuple):
        return all(is_plain(v) for v in value)
    cls = type(value)
    return VALUE_CLASSES.get(cls.__name__) is cls and all(
        is_plain(getattr(value, f.name)) for f in dataclasses.fields(value))


def _default(value: Any, f: dataclasses.Field) -> bool:
    if f.default is not dataclasses.MISSING:
        return getattr(value, f.name) == f.default
    return False


class Reader:
    """Reads values from `text` starting at `pos`; `value()` reads one, `pos` is then past
    it."""

    def __init__(self, text: str, pos: int = 0):
        self.text, self.pos = text, pos

    def peek(self) -> tuple[str, str] | None:
        m = _TOKEN.match(self.text, self.pos)
        return (m.lastgroup, m.group(m.lastgroup)) if m else None

    def take(self) -> tuple[str, str]:
        m = _TOKEN.match(self.text, self.pos)
        if not m:
            raise ValueError(f"unreadable value at column {self.pos + 1}: "
                             f"{self.text[self.pos:self.pos + 20]!r}")
        self.pos = m.end()
        return m.lastgroup, m.group(m.lastgroup)

    def expect(self, punct: str) -> None:
        kind, text = self.take()
        if (kind, text) != ("punct", punct):
            raise ValueError(f"expected `{punct}` before column {self.pos + 1}, found {text!r}")

    def value(self) -> Any:
        kind, text = self.take()
        if kind == "string":
            return json.loads(text)
        if kind == "number":
            return int(text) if text.lstrip("-").isdigit() else float(text)
        if kind == "punct" and text == "(":
            items: list[Any] = []
            while self.peek() != ("punct", ")"):
                items.append(self.value())
                if self.peek() == ("punct", ","):
                    self.take()
            self.take()
            return tuple(items)
        if kind == "name":
            if text in _WORDS:
                return _WORDS[text]
            if self.peek() == ("punct", "(") and text in VALUE_CLASSES:
                self.take()
                fields: dict[str, Any] = {}
                while self.peek() != ("punct", ")"):
                    _, key = self.take()
                    self.expect("=")
                    fields[key] = self.value()
                    if self.peek() == ("punct", ","):
                        self.take()
                self.take()
                return VALUE_CLASSES[text](**fields)
            return text
        raise ValueError(f"unexpected {text!r} at column {self.pos}")
