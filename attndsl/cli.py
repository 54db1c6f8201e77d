"""The command line. Thin: parses arguments, calls the library, renders errors, sets exit codes
(0 ok, 1 verification mismatch or fmt --check difference, 2 bad spec or usage, 3 export or
runtime failure)."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from . import __version__
from .api import read_source
from .check import check
from .errors import AttnError, SpecError, UsageError
from .fmt import format_module
from .output import write_atomic
from .parser import parse

__all__ = ["main"]

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str) -> Callable[[Callable[[argparse.Namespace], int]],
                                   Callable[[argparse.Namespace], int]]:
    def register(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        _COMMANDS[name] = fn
        return fn
    return register


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="attndsl", description="Declarative attention layers for ONNX Runtime.")
    p.add_argument("--version", action="version", version=f"attndsl {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("check", help="check spec files; print diagnostics")
    c.add_argument("files", nargs="+")

    f = sub.add_parser("fmt", help="format spec files canonically (in place)")
    f.add_argument("files", nargs="+")
    f.add_argument("--check", action="store_true", help="exit 1 if a file is not formatted")
    f.add_argument("--diff", action="store_true", help="print a diff instead of writing")
    for extend in _EXTENSIONS:
        extend(sub)
    return p


_EXTENSIONS: list[Callable[[argparse._SubParsersAction], None]] = []


@command("check")
def _check(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            program = check(parse(read_source(path)))
        except SpecError as exc:
            print(exc.render(), file=sys.stderr)
            print(file=sys.stderr)
            failed = max(failed, exc.exit_code)
            continue
        except AttnError as exc:
            print(exc.render(), file=sys.stderr)
            failed = max(failed, exc.exit_code)
            continue
        names = ", ".join(f"{type(v).__name__.lower()} {k}" for k, v in program.layers.items())
        print(f"{path}: ok ({names or 'no layers'})")
    return failed


@command("fmt")
def _fmt(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            source = read_source(path)
            formatted = format_module(parse(source))
        except AttnError as exc:
            print(exc.render(), file=sys.stderr)
            status = max(status, exc.exit_code)
            continue
        if formatted == source.text:
            continue
        if args.diff:
            sys.stdout.writelines(difflib.unified_diff(
                source.text.splitlines(keepends=True), formatted.splitlines(keepends=True),
                f"{path}", f"{path} (formatted)"))
        if args.check:
            print(f"{path}: would reformat", file=sys.stderr)
            status = max(status, 1)
        elif not args.diff:
            write_atomic(Path(path), formatted.encode("utf-8"))
            print(f"{path}: formatted")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return _COMMANDS[args.command](args)
    except AttnError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # last resort: a bug in attndsl must still not dump a traceback
        if os.environ.get("ATTNDSL_TRACEBACK"):
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {exc}\n"
              "  = help: this is a bug in attndsl; rerun with ATTNDSL_TRACEBACK=1 and report it",
              file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
