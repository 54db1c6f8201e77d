"""Layering (issue 40, item 7): a lower layer never imports a higher one. Read from the source
with `ast` (module-level and function-level imports alike), so a lazy import counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "attndsl"


def _imports(path: Path, text: str | None = None) -> set[str]:
    """The attndsl modules `path` (or `text`, read as if at `path`) imports, as dotted names
    below `attndsl`."""
    here = path.relative_to(PACKAGE).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(here[: len(here) - node.level + 1])
            module = [*base, *(node.module.split(".") if node.module else [])]
            names = [a.name for a in node.names]
            found |= {".".join([*module, n]) if not node.module else ".".join(module)
                      for n in names}
        elif isinstance(node, ast.ImportFrom) and node.module == "attndsl":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attndsl."):
            found.add(node.module.removeprefix("attndsl."))
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("attndsl.") for a in node.names
                      if a.name.startswith("attndsl.")}
    return found


def test_imports_are_read_however_they_are_written() -> None:
    text = ("from ... import strategies\nimport attndsl.planner.cores\nimport numpy\n"
            "def f():\n    from attndsl import targets\n    from ..sym import Sym\n")
    found = _imports(PACKAGE / "backends" / "lower" / "probe.py", text)
    assert found == {"strategies", "planner.cores", "targets", "backends.sym"}


@pytest.mark.parametrize(("folder", "allowed"), [
    ("masks", ("masks", "shapes")),  # the masks know nothing of the spec that holds them
])
def test_a_lower_layer_imports_nothing_above_it(folder: str, allowed: tuple[str, ...]) -> None:
    for path in sorted((PACKAGE / folder).glob("*.py")):
        above = [m for m in _imports(path) if m.split(".")[0] not in allowed]
        assert not above, f"{path.name} imports {above}"


@pytest.mark.parametrize(("folder", "never"), [
    # the strategies' lowerings use the lowering's builder: build_model is passed them
    # (`strategies.LOWERINGS`) by its caller rather than importing them
    ("backends/lower", ("strategies", "planner")),
    # the checker reads the spec it resolves, not the graph built from it
    ("check", ("ir", "planner", "strategies", "backends")),
])
def test_a_layer_does_not_import_those_built_on_it(folder: str, never: tuple[str, ...]) -> None:
    for path in sorted((PACKAGE / folder).glob("*.py")):
        above = [m for m in _imports(path) if m.split(".")[0] in never]
        assert not above, f"{folder}/{path.name} imports {above}"


@pytest.mark.parametrize(("module", "never"), [
    ("bench_decode.py", ("cli", "cli_compile", "arguments")),  # the library, not argv
    ("genai.py", ("cli", "cli_compile", "arguments")),
])
def test_the_library_does_not_drive_the_command_line(module: str, never: tuple[str, ...]) -> None:
    imported = {m.split(".")[0] for m in _imports(PACKAGE / module)}
    assert not imported & set(never), imported & set(never)


def test_mechanism_modules_sit_below_the_checker_and_the_backends() -> None:
    for path in sorted((PACKAGE / "mechanisms").glob("*.py")):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level]
        modules = {(n.module or "").split(".")[0] for n in top}
        assert not modules & {"check", "backends", "planner", "strategies"}, path.name


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _runtime_text(path: Path) -> str:
    """The module's source without its `if TYPE_CHECKING:` blocks (imports for annotations
    alone, never run)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block:
                kept = [n for n in block if not (isinstance(n, ast.If) and isinstance(
                    n.test, ast.Name) and n.test.id == "TYPE_CHECKING")]
                setattr(node, field, kept or [ast.Pass()])
    return ast.unparse(tree)


def test_no_import_cycles() -> None:
    """No module reaches itself through the modules it imports (lazy imports included): each
    import names a module below it."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    edges = {name: {m for m in (resolve(i) for i in _imports(path, _runtime_text(path)))
                    if m and m != name} for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(name: str, path: list[str]) -> None:
        state[name] = 1
        for other in sorted(edges[name]):
            assert state.get(other) != 1, " -> ".join([*path, name, other])
            if other not in state:
                walk(other, [*path, name])
        state[name] = 2

    for name in sorted(modules):
        if name not in state:
            walk(name, [])
def test_strategies_register_no_op_lowering() -> None:
    """A strategy's lowering reaches build_model only through `strategies.LOWERINGS` (a
    kernel's own node by the kernel's name), never as an op's lowering that importing
    `attndsl.strategies` registers (`@lower`)."""
    for path in sorted((PACKAGE / "strategies").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and (n.module or "").endswith("lower.builder") for a in n.names}
        assert "lower" not in imported, f"strategies/{path.name} registers an op's lowering"
