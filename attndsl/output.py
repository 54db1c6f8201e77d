"""Atomic output: write to a temporary file beside the target, then rename over it, so a failed
or interrupted write never leaves a partial file and never replaces a good one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import ExportError, UsageError

__all__ = ["ensure_dir", "write_atomic"]


def ensure_dir(path: Path) -> Path:
    """Create an output folder (and parents); a clear UsageError if that is impossible."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{path}: cannot create output folder: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"{path}: output folder is not writable")
    return path


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` all at once or not at all."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"{path.parent}: cannot write here: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ExportError(f"{path}: write failed: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
