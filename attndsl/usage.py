"""What a caller asks of the Python API, checked before anything is built: integer ranges
(the command line's), targets, dtypes, and whether a layer's weights fit in this machine."""

from __future__ import annotations

import os

from . import spec as s
from .errors import UsageError
from .targets import get

__all__ = ["BUILD_COPIES", "HEADS", "PADDINGS", "check_choice", "check_dtype", "check_ints",
           "check_memory", "check_path", "check_target", "check_token_ids",
           "check_torch_program"]


# `attndsl import`'s (and `attndsl.load`'s) choices for a checkpoint's spec
PADDINGS = ("auto", "none", "left", "right")
HEADS = ("auto", "lm", "none")


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """UsageError unless `value` is one of `choices` (the command line's for that option)."""
    if value not in choices:
        raise UsageError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")


def check_ints(name: str, values: tuple, lo: int, hi: int) -> None:
    """UsageError unless every value is an integer in [lo, hi] (the command line's ranges)."""
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise UsageError(f"{name}: expected an integer in [{lo}, {hi}], got {v!r}")


def check_token_ids(rows, vocab: int, what: str = "`input_ids`") -> None:
    """UsageError unless every token id of `rows` (a (batch, length) array, or prompts of any
    lengths) is an integer in [0, vocab), naming the first outside it by (batch, position).
    Checked at every entry point that takes ids (run, generate, the torch module, the
    reference): a negative id would wrap to a real token (-100, Hugging Face's ignore index,
    becomes the 100th from the end) and one past the table fails deep in the runtime."""
    import numpy as np

    first, count = None, 0
    for b, row in enumerate(rows):
        row = np.asarray(row)
        if row.size and row.dtype.kind not in "iu":  # a float id is no token
            raise UsageError(f"{what} must hold integer token ids, found {row.dtype}")
        outside = np.flatnonzero((row < 0) | (row >= vocab))
        if outside.size and first is None:
            first = (b, int(outside[0]), int(row.reshape(-1)[outside[0]]))
        count += outside.size
    if first is None:
        return
    b, t, value = first
    more = f" (and {count - 1} more)" if count > 1 else ""
    why = "\n  = help: -100 is Hugging Face's ignore index for labels, not a token" \
        if value == -100 else ""
    raise UsageError(f"{what}: token id {value} at (batch {b}, position {t}) is outside the "
                     f"vocabulary of {vocab} tokens, ids 0 to {vocab - 1}{more}{why}")


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


def check_torch_program(spec: s.Layer) -> None:
    """SpecError, at the attention, for what a torch.export program cannot hold yet."""
    from .errors import Diagnostic, SpecError
    from .mechanisms import selector_of

    switched = next((a for a in s.attentions_of(spec) if a.variants), None)
    if switched is not None:
        selector = selector_of(switched.variants)
        why, hint = selector.unexportable
        raise SpecError([Diagnostic(f"`{switched.name}` {why}", switched.span(selector.key),
                                    hint=hint)])


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
