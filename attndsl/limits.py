"""Where something bounds the lengths a layer takes (a table of learned positions, a kernel
with a column per key), and why: what verify, bench, show, run and the export's metadata read."""

from __future__ import annotations

from .mechanisms import kernel_of
from .spec import Layer, Learned, attentions_of

__all__ = ["beyond_limits", "length_limits"]


def length_limits(spec: Layer) -> dict[str, tuple[int, str]]:
    """Where something bounds the lengths a layer takes: axis (`length` for the queries,
    `memory_length` for a cross attention's memory rows) -> (the longest, why). Learned
    positions have a table of max_len rows; a kernel module may take at most so many keys
    (`Kernel.key_limit`: a projection with a column per key)."""
    limits: dict[str, tuple[int, str]] = {}

    def bound(axis: str, n: int, why: str) -> None:
        if axis not in limits or n < limits[axis][0]:
            limits[axis] = (n, why)
        elif n == limits[axis][0] and why not in limits[axis][1]:
            limits[axis] = (n, f"{limits[axis][1]}; {why}")

    for a in attentions_of(spec):
        if isinstance(a.position, Learned):
            bound("length", a.position.max_len,
                  f"`{a.name}` has learned positions for max_len = {a.position.max_len} tokens")
        for core in a.cores:
            module = kernel_of(core.kernel)
            limit = module.key_limit(core.kernel) if module else None
            if limit is not None:
                bound("memory_length" if core.kind == "cross" else "length", limit[0],
                      f"`{a.name}`'s {limit[1]}")
    return limits


def beyond_limits(limits: dict[str, tuple[int, str]], length: int,
                  memory_length: int | None = None) -> str | None:
    """Why a layer with these `length_limits` cannot take these lengths, or None."""
    for axis, n, what in (("length", length, "tokens"),
                          ("memory_length", memory_length, "memory rows")):
        if n is not None and axis in limits and n > limits[axis][0]:
            return f"{n} {what}, more than the {limits[axis][0]} it takes: {limits[axis][1]}"
    return None
