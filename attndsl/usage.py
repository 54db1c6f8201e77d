"""What a caller asks of the Python API, checked before anything is built: integer ranges
(the command line's), targets, dtypes, and whether a layer's weights fit in this machine."""

from __future__ import annotations

import os

from . import spec as s
from .errors import UsageError
from .targets import get

__all__ = ["BUILD_COPIES", "check_dtype", "check_ints", "check_memory", "check_path",
           "check_target"]


def check_ints(name: str, values: tuple, lo: int, hi: int) -> None:
    """UsageError unless every value is an integer in [lo, hi] (the command line's ranges)."""
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise UsageError(f"{name}: expected an integer in [{lo}, {hi}], got {v!r}")


BUILD_COPIES = 3  # a build holds the weights as a module, as arrays and in the ONNX model


def check_memory(name: str, spec: s.Layer) -> None:
    """UsageError, before anything is allocated, where BUILD_COPIES float32 copies of the
    layer's weights would not fit in the machine's physical memory."""
    from .ir import parameter_count

    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows): nothing to check
        return
    params = parameter_count(spec)
    need = params * 4 * BUILD_COPIES
    if need > have:
        raise UsageError(f"`{name}` holds {params:,} weights: building it takes about "
                         f"{need / 1024**3:,.1f} GiB ({BUILD_COPIES} float32 copies) and this "
                         f"machine has {have / 1024**3:,.1f} GiB; build it on a larger machine "
                         "or make it smaller")


def check_target(target: str) -> None:
    get(target)


def check_dtype(dtype: str) -> None:
    from .dtypes import DTYPES

    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype `{dtype}`: choose from {', '.join(DTYPES)}")


def check_path(path: str) -> None:
    """A torch module's attention path (planner.torch_paths.PATHS)."""
    from .planner.torch_paths import PATHS

    if path not in PATHS:
        raise UsageError(f"unknown torch path `{path}`: choose from {', '.join(PATHS)}")
