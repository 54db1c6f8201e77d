"""Atomic output: every file attndsl writes appears whole or not at all, and the files of one
command appear together or not at all (`Outputs`). A failed or interrupted write never leaves a
partial file, never replaces a good one, and leaves no temporary file behind.

Data is first written to an unnamed file in the target folder (Linux O_TMPFILE: a process
killed with -9 at that point leaves nothing), which is then linked in under a temporary name and
renamed over the target. Where O_TMPFILE is missing, a named temporary file is used instead; its
name carries the writer's pid, so the next write removes what a killed writer left. Writing to
a symbolic link writes the file it points to and keeps the link."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .errors import ExportError, UsageError

__all__ = ["Outputs", "Stream", "check_writable", "file_sha256", "write_atomic"]


class Stream:
    """A file's contents produced piece by piece as it is written (a model's tensors read one
    at a time): `size` bytes in all, from `chunks()`, which can be called again. `hashed`:
    each full pass over it leaves the contents' `sha256` (hex), so that the file need not be
    read once more to say it."""

    def __init__(self, size: int, chunks: Callable[[], Iterable[bytes | memoryview]],
                 hashed: bool = False):
        self.size = size
        self._chunks = chunks
        self._hashed = hashed
        self.sha256: str | None = None

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes | memoryview]:
        written = 0
        digest = hashlib.sha256() if self._hashed else None
        for chunk in self._chunks():
            written += len(chunk)
            if digest is not None:
                digest.update(chunk)
            yield chunk
        if written != self.size:  # a length prefix already written would be wrong
            raise ExportError(f"internal error: a streamed file has {written} bytes, "
                              f"{self.size} were announced")
        if digest is not None:
            self.sha256 = digest.hexdigest()

    def bytes(self) -> bytes:
        """The whole contents in memory."""
        return b"".join(self)


def _write_all(fd: int, data: bytes | Stream) -> None:
    """Write `data` to the open file `fd`, a stream chunk by chunk."""
    for chunk in (data,) if isinstance(data, bytes) else data:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]


def check_writable(path: Path) -> None:
    """UsageError unless `path` can be written as a file: not a folder, in a writable folder."""
    if path.is_dir():
        raise UsageError(f"{path}: is a folder; expected a file name")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{parent}: no such folder")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{parent}: folder is not writable")


def write_atomic(path: Path, data: bytes | Stream) -> None:
    """Write `data` to `path` all at once or not at all."""
    outputs = Outputs()
    outputs.file(Path(path), data)
    outputs.commit()


def _target(path: Path) -> Path:
    """Where a write to `path` lands: through a symbolic link, the file it points to."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.attndsl-{os.getpid()}.tmp")


def _remove_stale(path: Path) -> None:
    """Remove temporaries that killed writers left beside `path` (named by their pid)."""
    for stale in path.parent.glob(f".{path.name}.attndsl-*.tmp"):
        pid = stale.name.rsplit("-", 1)[-1].removesuffix(".tmp")
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _File:
    """One staged file: data written and synced, not yet visible under its name."""

    def __init__(self, path: Path, data: bytes | Stream):
        self.path = path
        self.temp = _temp_name(path)
        self.fd: int | None = None
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        _remove_stale(path)
        try:
            self.fd = os.open(path.parent, os.O_TMPFILE | os.O_WRONLY, 0o600)
        except (AttributeError, OSError):  # no O_TMPFILE here: a named temporary
            self.fd = None
        try:
            if self.fd is None:
                fd = os.open(self.temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            else:
                fd = self.fd
            _write_all(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
            if self.fd is None:
                os.close(fd)
        except BaseException:
            self.abort()
            raise

    def commit(self) -> None:
        if self.fd is not None:
            # linkat with AT_SYMLINK_FOLLOW (CPython uses it only given a dir fd): the unnamed
            # file gets the temporary name, a moment before it is renamed over the target
            folder = os.open(self.temp.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(f"/proc/self/fd/{self.fd}", self.temp.name, dst_dir_fd=folder,
                        follow_symlinks=True)
            finally:
                os.close(folder)
            os.close(self.fd)
            self.fd = None
        os.replace(self.temp, self.path)

    def abort(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        self.temp.unlink(missing_ok=True)


class _Tree:
    """One staged folder of files (a Triton model repository), renamed into place."""

    def __init__(self, path: Path, files: dict[str, bytes | Stream]):
        self.path = path
        _remove_stale(path)
        self.temp = _temp_name(path)
        try:
            for rel, data in files.items():
                (self.temp / rel).parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.temp / rel, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o666)
                try:
                    _write_all(fd, data)
                finally:
                    os.close(fd)
            os.chmod(self.temp, 0o755)
        except BaseException:
            self.abort()
            raise

    def commit(self) -> None:
        backup = self.path.with_name(f".{self.path.name}.attndsl-{os.getpid()}.old.tmp")
        if self.path.exists():
            os.replace(self.path, backup)
        try:
            os.replace(self.temp, self.path)
        except OSError:
            if backup.exists():
                os.replace(backup, self.path)
            raise
        shutil.rmtree(backup, ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(self.temp, ignore_errors=True)


class Outputs:
    """The outputs of one command: staged one by one (`file`, `tree`), made visible together by
    `commit`. Folders that must be created are created only at commit, and removed again if the
    commit fails; until then nothing is visible."""

    def __init__(self) -> None:
        self.items: list[tuple[Path, bytes | Stream | dict[str, bytes | Stream]]] = []

    def file(self, path: Path, data: bytes | Stream) -> None:
        self.items.append((path, data))

    def tree(self, path: Path, files: dict[str, bytes | Stream]) -> None:
        self.items.append((path, files))

    def commit(self) -> None:
        created = self._make_folders()
        staged: list[_File | _Tree] = []
        try:
            for path, content in self.items:
                target = _target(path)
                if target.is_dir() and not isinstance(content, dict):
                    raise UsageError(f"{path}: is a folder; cannot write a file there")
                staged.append(_Tree(target, content) if isinstance(content, dict)
                              else _File(target, content))
            for item in staged:
                item.commit()
        except BaseException as exc:
            for item in staged:
                item.abort()
            self._remove(created)
            if isinstance(exc, OSError):
                raise ExportError(f"write failed: {exc.strerror or exc}"
                                  + (f": {exc.filename}" if exc.filename else "")) from None
            raise

    def _make_folders(self) -> list[Path]:
        """Create the missing parent folders; return them, outermost first."""
        created: list[Path] = []
        for path, _ in self.items:
            missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
            for folder in reversed(missing):
                if folder.exists():
                    continue
                try:
                    folder.mkdir()
                except OSError as exc:
                    self._remove(created)
                    raise UsageError(f"{folder}: cannot create output folder: "
                                     f"{exc.strerror or exc}") from None
                created.append(folder)
        for path, _ in self.items:
            parent = path.parent
            if not parent.is_dir():
                self._remove(created)
                raise UsageError(f"{parent}: exists and is not a folder")
            if not os.access(parent, os.W_OK):
                self._remove(created)
                raise UsageError(f"{parent}: output folder is not writable")
        return created

    @staticmethod
    def _remove(created: list[Path]) -> None:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()


def file_sha256(path: str | Path) -> str:
    """Of a file; of a folder, over its files' names and contents in name order."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            h.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
