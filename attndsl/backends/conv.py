"""A causal depthwise convolution's arithmetic (the `causal_conv` op: docs/LANGUAGE.md,
Kernels), once over an array namespace (`TorchArrays`, `OnnxArrays`) as `formulas` is: its
window of past and new inputs, and each channel's convolution over it (silu of it for a
kernel's own layer, its input added for a residual convolution)."""

from __future__ import annotations

from typing import Any

from .formulas import activation

__all__ = ["causal_conv", "conv_window", "new_tokens"]

Array = Any


def new_tokens(xp, attention_mask: Array, L: Any) -> Array:
    """A decoding call's real new tokens, float32 (B, L): 1 where the last L columns of the
    attention_mask are not 0."""
    mask = xp.slice(attention_mask, 1, xp.shape(attention_mask, 1) - L, None)
    return xp.astype(mask != 0, "float32")


def conv_window(xp, parts: list[Array], width: int, past: Array | None = None,
                real: Array | None = None) -> Array:
    """float32 (B, width - 1 + L, C): the inputs of parts (B, L, c_i) laid side by side,
    after those of `past` (B, width - 1, C) or zeros; a slot where `real` (B, L) is 0
    (padding) has zero inputs. Its last width - 1 rows are the next call's past."""
    x = xp.astype(xp.concat(parts, axis=2), "float32")
    if real is not None:
        x = x * xp.reshape(real, [xp.shape(x, 0), -1, 1])
    past = xp.pad(xp.slice(x, 1, 0, 0), 1, width - 1) if past is None else \
        xp.astype(past, "float32")
    return xp.concat([past, x], axis=1)


def causal_conv(xp, full: Array, w: Array, width: int, dtype: str,
                kind: str = "silu", bias: Array | None = None) -> Array:
    """silu(y) (`kind` silu, a kernel's own layer's), y (`none`) or x + y (`residual`) (B, L, C) in
    `dtype` over a `conv_window` of L + width - 1 rows: y_t[c] = sum_j w[c, 0, j]
    x_{t - width + 1 + j}[c] (+ bias[c])."""
    taps = xp.swap_last(xp.reshape(xp.astype(w, "float32"), [-1, width]))  # (width, C)
    L = xp.shape(full, 1) - (width - 1)
    y = None
    for j in range(width):
        term = xp.slice(full, 1, j, L + j) * xp.slice(taps, 0, j, j + 1)
        y = term if y is None else y + term
    if bias is not None:
        y = y + xp.astype(bias, "float32")
    if kind == "residual":  # the inputs added, in float32 (a residual convolution's)
        return xp.astype(y + xp.slice(full, 1, width - 1, None), dtype)
    return xp.astype(y if kind == "none" else activation(xp, y, kind), dtype)
