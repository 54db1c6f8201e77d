"""Source text and spans: `Source(name, text)` in, "file:line:col" and caret renderings out."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["Source", "Span"]


@dataclass(frozen=True, eq=False)
class Source:
    """A named source text; line starts are computed once so spans render in O(log n)."""

    name: str
    text: str
    _line_starts: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        starts = [0]
        starts.extend(i + 1 for i, ch in enumerate(self.text) if ch == "\n")
        object.__setattr__(self, "_line_starts", tuple(starts))

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def line_text(self, line: int) -> str:
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start : len(self.text) if end < 0 else end].rstrip("\r")

    def span(self, start: int, end: int) -> Span:
        return Span(self, start, end)


@dataclass(frozen=True, eq=False)
class Span:
    """A half-open character range [start, end) of a Source."""

    source: Source
    start: int
    end: int

    def __repr__(self) -> str:
        return f"Span({self.location})"

    @property
    def location(self) -> str:
        line, col = self.source.line_col(self.start)
        return f"{self.source.name}:{line}:{col}"

    def snippet(self) -> list[str]:
        """The source line with a caret run under the span (first line only if it spans more)."""
        line, col = self.source.line_col(self.start)
        text = self.source.line_text(line)
        end_line, end_col = self.source.line_col(self.end)
        width = (end_col - col) if end_line == line else (len(text) - col + 1)
        width = max(1, min(width, max(1, len(text) - col + 1)))
        gutter = " " * len(str(line))
        shown = text.replace("\t", " ")
        if len(shown) > 200:  # a single huge line (minified or binary input): show a window
            lo = max(0, col - 80)
            shown, col = shown[lo : lo + 160], col - lo
            width = min(width, 160 - col + 1)
        return [
            f"{gutter} |",
            f"{line} | {shown}",
            f"{gutter} | {' ' * (col - 1)}{'^' * width}",
        ]
