"""The attention kernels a layer's `kernel` names: the softmax, a linear feature map and
Linformer's projected keys (docs/LANGUAGE.md, Kernels); the kernels
that are modules of attndsl/mechanisms/ hold their own values. Part of the resolved spec
(`spec` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Kernel", "LinearKernel", "LinformerKernel", "Softmax"]


@dataclass(frozen=True)
class Softmax:
    pass


@dataclass(frozen=True)
class LinearKernel:
    feature: str  # elu | relu | softmax


@dataclass(frozen=True)
class LinformerKernel:
    """Keys and values projected along the sequence to `k` rows (Wang et al. 2020): E and F
    of [k, max_len], sliced to the keys' count. share: none (E, F per kv head), headwise (one
    E, one F for the layer's heads), kv (E = F), layerwise (one E for every layer of a stack,
    keys and values)."""

    k: int
    max_len: int
    share: str


# or a kernel module's value (`mechanisms.KERNELS`)
Kernel = Softmax | LinearKernel | LinformerKernel | object
