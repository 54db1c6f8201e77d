"""Hugging Face model families: what `attndsl import` and `compile --weights` know of each
model type, one module per group of types that share a config reader (`llama`, `neox`,
`bert`, `t5`), each listing its `FAMILIES`. A module here is found by its presence: a new
family is one module (its reader, name table and transformers' defaults) plus its rows in
docs/CHECKPOINTS.md and its config class in the tests."""

from __future__ import annotations

import importlib
import pkgutil

from .base import Family, Refusal
from .names import LM_NAMES, Names

__all__ = ["FAMILIES", "LM_NAMES", "Family", "Names", "Refusal"]

_PARTS = {"base", "names", "rope", "text"}  # the pieces the family modules are built from


def _discover() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in _PARTS:
            continue
        for family in importlib.import_module(f"{__name__}.{info.name}").FAMILIES:
            if family.model_type in found:
                raise ImportError(f"model_type `{family.model_type}` is listed twice")
            found[family.model_type] = family
    return found


FAMILIES: dict[str, Family] = _discover()
