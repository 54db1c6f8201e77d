"""An op's attributes as a typed record. The op registry (`ops.py`) declares each attribute
`name: kind` (a trailing `?`: it may be None); `record` makes the op's frozen dataclass of
those fields, and `Record.of(node)` reads a node into it, each value checked against its
kind, so a builder that writes the wrong kind of value is caught by the verifier where it
happens. An open op (a planned attention core, a module's node) keeps the attributes it does
not declare in `more`, each a plain value (`literals.is_plain`).

The kinds: `int`, `number` (an int or a float), `bool`, `str`, `strs` and `ints` (tuples of
them), `mask` (a mask expression node), `sparsity`, `scaling` (a RoPE scaling), `cover`,
`region` (a switch's branches: tuples of nodes) and `plain` (any plain value)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from .. import masks, rope_scaling
from ..spec import Sparsity
from .literals import is_plain

__all__ = ["KINDS", "Record", "declared", "record"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_SCALINGS = rope_scaling.SCALINGS

# kind -> whether a value is of it
KINDS: dict[str, Callable[[Any], bool]] = {
    "int": _is_int,
    "number": lambda v: _is_int(v) or isinstance(v, float),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "strs": lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
    "ints": lambda v: isinstance(v, tuple) and all(_is_int(x) for x in v),
    "mask": lambda v: isinstance(v, masks.MaskNode),
    "sparsity": lambda v: isinstance(v, Sparsity),
    "scaling": lambda v: isinstance(v, _SCALINGS),
    "cover": lambda v: isinstance(v, masks.Cover),
    "region": lambda v: isinstance(v, tuple),
    "plain": is_plain,
}


def declared(entry: str) -> tuple[str, str, bool]:
    """(name, kind, may be None) of a declaration `name: kind` or `name: kind?`."""
    name, _, kind = (part.strip() for part in entry.partition(":"))
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    assert kind in KINDS, f"attribute {name}: no kind {kind!r}"
    return name, kind, optional


class Record:
    """The base of every op's attribute record (a frozen dataclass made by `record`)."""

    kinds: ClassVar[dict[str, tuple[str, bool]]] = {}
    open: ClassVar[bool] = False

    @classmethod
    def of(cls, attrs: tuple[tuple[str, Any], ...]) -> Record:
        """The record of a node's attributes, or TypeError naming the attribute whose value is
        not of its kind (KeyError: one missing; ValueError: one not the op's)."""
        values: dict[str, Any] = {}
        more = []
        for key, value in attrs:
            if key not in cls.kinds and not cls.open:
                raise ValueError(key)
            kind, optional = cls.kinds.get(key, ("plain", True))
            if kind != "region" and not is_plain(value):
                raise TypeError(f"attribute {key} holds a live {type(value).__name__}, "
                                "not a plain value")
            if key not in cls.kinds:
                more.append((key, value))
                continue
            if not (value is None and optional) and not KINDS[kind](value):
                raise TypeError(f"attribute {key} holds {type(value).__name__} {value!r}, "
                                f"not {'None or ' if optional else ''}{kind}")
            values[key] = value
        return cls(**values, **({"more": tuple(more)} if cls.open else {}))


def record(name: str, required: tuple[str, ...], optional: tuple[str, ...],
           open_: bool) -> type[Record]:
    """The frozen dataclass `<name>Attributes` of an op's declared attributes: the required
    ones first (no default), then the optional ones (None unless given), then, for an open op,
    `more` (the undeclared pairs, in order)."""
    fields: list[Any] = []
    kinds: dict[str, tuple[str, bool]] = {}
    for entry in required:
        key, kind, may_be_none = declared(entry)
        kinds[key] = (kind, may_be_none)
        fields.append((key, Any))
    for entry in optional:
        key, kind, _ = declared(entry)
        kinds[key] = (kind, True)
        fields.append((key, Any, dataclasses.field(default=None)))
    if open_:
        fields.append(("more", tuple, dataclasses.field(default=())))
    cls = dataclasses.make_dataclass(f"{name}Attributes", fields, bases=(Record,), frozen=True)
    cls.kinds, cls.open = kinds, open_
    return cls
