"""The attention kernels a layer's `kernel` names: the softmax and the gated delta rule
(docs/LANGUAGE.md, Kernels); the kernels
that are modules of attndsl/mechanisms/ hold their own values. Part of the resolved spec
(`spec` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeltaRule", "Kernel", "Softmax"]


@dataclass(frozen=True)
class Softmax:
    pass


@dataclass(frozen=True)
class DeltaRule:
    """Gated delta-rule linear attention (Gated DeltaNet, Qwen3-Next's linear layers): a
    causal depthwise convolution of width `conv` on q, k and v, L2-normed q and k of
    `key_heads` heads (each serving heads / key_heads value heads), per-head beta and decay
    gates, the delta-rule state update, computed in chunks of `chunk` tokens; a gated RMSNorm
    (eps `eps`) on its output."""

    key_heads: int
    conv: int
    chunk: int
    eps: float


# or a kernel module's value (`mechanisms.KERNELS`)
Kernel = Softmax | DeltaRule | object
