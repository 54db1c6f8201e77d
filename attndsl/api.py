"""The Python API: `load(path)` -> `Program`; `program["name"]` -> `Layer` with `.to_torch`,
`.export_onnx`, `.verify`. Everything here is a thin front over the pipeline stages."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import spec as s
from .check import check
from .errors import UsageError
from .parser import decode, parse
from .source import Source

__all__ = ["Layer", "Program", "load", "loads", "read_source"]


def read_source(path: str | os.PathLike[str]) -> Source:
    """Read a spec file; unreadable files are a UsageError (one line, exit 2)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected an .attn file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode(data, str(path))


def load(path: str | os.PathLike[str]) -> Program:
    """Parse and check a spec file. Raises SpecError (with rendered diagnostics) if invalid."""
    return Program(check(parse(read_source(path))))


def loads(text: str, name: str = "<string>") -> Program:
    """Parse and check spec text."""
    return Program(check(parse(decode(text.encode("utf-8"), name))))


class Program:
    """A checked spec file: its layers by name, in source order."""

    def __init__(self, resolved: s.Program):
        self.resolved = resolved

    @property
    def source(self) -> Source:
        return self.resolved.source

    def __getitem__(self, name: str) -> Layer:
        try:
            return Layer(self.resolved.layers[name], self.source)
        except KeyError:
            known = ", ".join(self.resolved.layers) or "none"
            raise UsageError(f"{self.source.name}: no layer named `{name}` (layers: {known})"
                             ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.resolved.layers)

    def __len__(self) -> int:
        return len(self.resolved.layers)

    def layer(self, name: str | None) -> Layer:
        """The named layer, or with no name the file's only layer (a transformer if it has
        one attention and one transformer using it)."""
        if name is not None:
            return self[name]
        layers = self.resolved.layers
        if len(layers) == 1:
            return self[next(iter(layers))]
        stacks = [n for n, v in layers.items() if isinstance(v, s.Transformer)]
        if len(stacks) == 1 and all(
                isinstance(v, s.Transformer) or v is layers[stacks[0]].attention
                for v in layers.values()):
            return self[stacks[0]]
        raise UsageError(f"{self.source.name} defines {len(layers)} layers "
                         f"({', '.join(layers)}): choose one with --name")


class Layer:
    """One attention or transformer of a checked program."""

    def __init__(self, spec: s.Layer, source: Source):
        self.spec = spec
        self.source = source

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"Layer({type(self.spec).__name__.lower()} {self.name!r})"

    def __getattr__(self, item: str) -> Any:  # pragma: no cover - filled by later stages
        raise AttributeError(item)
