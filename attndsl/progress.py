"""Progress on long work (reading a checkpoint, compiling with weights, verify, bench,
generate): a tqdm bar on stderr when stderr is a terminal, nothing otherwise or when quiet.

A progress callback is `progress(message, done=None, total=None)`: with `total` the bar counts
`done` of `total`, without it the message alone (a stage) is shown; `progress.close()` clears
the bar. The command line makes one Bar per command and makes it current (`reporting`);
library code deep in a stage (a checkpoint's tensors, the lowering's nodes) calls `report`,
which does nothing when no Bar is current (the Python API, tests, a pipe)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["Bar", "current", "progress_bar", "report", "reporting"]


class Bar:
    """One line on stderr: a counted bar per `total`, a stage's message otherwise."""

    def __init__(self, stream: Any = None):
        self.stream = stream if stream is not None else sys.stderr
        self.bar = None

    def __call__(self, message: str, done: int | None = None, total: int | None = None) -> None:
        from tqdm import tqdm

        if self.bar is not None and self.bar.total != total:
            self.close()
        if self.bar is None:
            self.bar = tqdm(total=total, file=self.stream, leave=False, dynamic_ncols=True,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "[{elapsed}<{remaining}]" if total else "{desc} "
                                       "[{elapsed}]")
        self.bar.set_description_str(message, refresh=False)
        if done is not None:
            self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def progress_bar(quiet: bool = False, stream: Any = None) -> Bar | None:
    """A Bar on `stream` (stderr) where it is a terminal and not `quiet`; else None."""
    stream = stream if stream is not None else sys.stderr
    if quiet or not getattr(stream, "isatty", lambda: False)():
        return None
    return Bar(stream)


_CURRENT: ContextVar[Bar | None] = ContextVar("attndsl_progress", default=None)


@contextmanager
def reporting(bar: Bar | None) -> Iterator[Bar | None]:
    """Make `bar` current for the block (closed after it)."""
    token = _CURRENT.set(bar)
    try:
        yield bar
    finally:
        _CURRENT.reset(token)
        if bar is not None:
            bar.close()


def current() -> Bar | None:
    return _CURRENT.get()


def report(message: str, done: int | None = None, total: int | None = None) -> None:
    """Show progress on the current Bar, if any."""
    bar = _CURRENT.get()
    if bar is not None:
        bar(message, done, total)
