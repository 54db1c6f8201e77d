"""Shared fixtures. Goldens are rewritten with ATTNDSL_UPDATE_GOLDEN=1 (then review the diff)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

import attndsl

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.attn"))
UPDATE = bool(os.environ.get("ATTNDSL_UPDATE_GOLDEN"))


@pytest.fixture(autouse=True)
def _in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root so paths in diagnostics are stable."""
    monkeypatch.chdir(ROOT)


_EXPORTS: dict = {}


@pytest.fixture
def shared_exports(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The sweeps over every example layer export each (spec, target, seed, dtype) once per
    session and share it: `Layer.onnx_model` without a weights file returns the first export
    of the same arguments. Same inputs give the same bytes (tested afresh, without this
    fixture, by the byte-identity tests), so sharing changes no result. A test marked
    `fresh_exports` builds its own."""
    if request.node.get_closest_marker("fresh_exports"):
        return
    real = attndsl.Layer.onnx_model

    def onnx_model(self, *, target: str = "ort-cpu", seed: int = 0, weights=None,
                   dtype: str = "float32"):
        if weights is not None:
            return real(self, target=target, seed=seed, weights=weights, dtype=dtype)
        key = (self.spec, target, seed, dtype)
        if key not in _EXPORTS:
            _EXPORTS[key] = real(self, target=target, seed=seed, dtype=dtype)
        return _EXPORTS[key]

    monkeypatch.setattr(attndsl.Layer, "onnx_model", onnx_model)


def golden(path: Path, actual: str) -> None:
    if UPDATE or not path.exists():
        if not UPDATE:
            raise AssertionError(f"missing golden {path}; run with ATTNDSL_UPDATE_GOLDEN=1")
        path.write_text(actual)
    assert actual == path.read_text(), f"output differs from golden {path.name}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--deep", action="store_true",
                     help="the long property runs: thousands of random specs and fuzz inputs")
    parser.addoption("--deep-count", type=int, default=2000,
                     help="random specs checked with --deep (default 2000)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`spec_seed`: 24 random specs by default, --deep-count (2000) with --deep."""
    if "spec_seed" in metafunc.fixturenames:
        deep = metafunc.config.getoption("--deep")
        count = metafunc.config.getoption("--deep-count") if deep else 24
        metafunc.parametrize("spec_seed", range(count))


def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis tests: a fixed-seed slice by default (the same inputs on every run, so CI is
    # reproducible); --deep explores afresh with many more inputs.
    settings.register_profile("slice", derandomize=True, max_examples=150)
    settings.register_profile("deep", max_examples=3000)
    settings.load_profile("deep" if config.getoption("--deep") else "slice")
    config.addinivalue_line("markers", "fresh_exports: build every export afresh (no "
                            "sharing through the shared_exports fixture)")
