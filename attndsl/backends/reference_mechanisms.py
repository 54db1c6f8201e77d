"""The oracle's reading of each mechanism module's transform (`apply` nodes), written from
docs/LANGUAGE.md, sharing nothing with `attndsl/mechanisms/`: one function per mechanism,
(heads (B, h, n, d) in float64, the node's attributes, the weights) -> heads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["READINGS"]


def _temperature(x: np.ndarray, attrs: dict[str, Any],
                 w: Mapping[str, np.ndarray]) -> np.ndarray:
    """`temperature = log(floor = f, scale = a)`: the query at token position p times
    1 + a * ln(1 + floor((p + 1) / f))."""
    p = np.arange(x.shape[2])
    factor = 1.0 + attrs["scale"] * np.log1p(np.floor((p + 1) / attrs["floor"]))
    return x * factor[:, None]


READINGS: dict[str, Callable[[np.ndarray, dict[str, Any], Mapping[str, np.ndarray]],
                             np.ndarray]] = {"temperature": _temperature}
