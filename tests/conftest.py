"""Shared fixtures. Goldens are rewritten with ATTNDSL_UPDATE_GOLDEN=1 (then review the diff)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.attn"))
UPDATE = bool(os.environ.get("ATTNDSL_UPDATE_GOLDEN"))


@pytest.fixture(autouse=True)
def _in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root so paths in diagnostics are stable."""
    monkeypatch.chdir(ROOT)


def golden(path: Path, actual: str) -> None:
    if UPDATE or not path.exists():
        if not UPDATE:
            raise AssertionError(f"missing golden {path}; run with ATTNDSL_UPDATE_GOLDEN=1")
        path.write_text(actual)
    assert actual == path.read_text(), f"output differs from golden {path.name}"
