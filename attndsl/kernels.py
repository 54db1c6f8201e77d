"""The attention kernels a layer's `kernel` names (docs/LANGUAGE.md, Kernels): the softmax;
every other kernel is a module of attndsl/mechanisms/ holding its own value. Part of the
resolved spec (`spec` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Kernel", "Softmax"]


@dataclass(frozen=True)
class Softmax:
    pass


# or a kernel module's value (`mechanisms.KERNELS`)
Kernel = Softmax | object
