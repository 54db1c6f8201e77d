"""Diagnostics: `Diagnostic(message, span, hint, notes)` rendered through its span, and the
exceptions that carry them out of the library (`SpecError` for bad specs, exit code 2)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .source import Span

__all__ = ["AttnError", "Diagnostic", "ExportError", "SpecError", "UsageError"]


@dataclass(frozen=True)
class Diagnostic:
    message: str
    span: Span | None = None
    hint: str | None = None
    notes: tuple[tuple[str, Span], ...] = ()

    def render(self) -> str:
        lines = [f"error: {self.message}"]
        if self.span is not None:
            lines.append(f" --> {self.span.location}")
            lines.extend(self.span.snippet())
        for note, span in self.notes:
            lines.append(f"note: {note}")
            lines.append(f" --> {span.location}")
            lines.extend(span.snippet())
        if self.hint:
            lines.append(f"  = help: {self.hint}")
        return "\n".join(lines)


class AttnError(Exception):
    """Base of every error attndsl raises on purpose; `exit_code` is the CLI's (README,
    Commands)."""

    exit_code = 3

    def render(self) -> str:
        return f"error: {self}"


class SpecError(AttnError):
    """A spec (or its weights) is invalid. Carries every diagnostic found, in source order."""

    exit_code = 2

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        super().__init__(self.render())

    def render(self) -> str:
        return "\n\n".join(d.render() for d in self.diagnostics)


class UsageError(AttnError):
    """Bad command-line use or an unusable file (missing, unreadable): exit 2."""

    exit_code = 2


class ExportError(AttnError):
    """Export or runtime failure (exporter, ONNX Runtime, missing provider): exit 3."""

    exit_code = 3
