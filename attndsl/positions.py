"""Position-encoding formulas shared by the fast backends (torch, the ONNX lowering, show):
RoPE inverse frequencies, ALiBi slopes and T5 relative buckets (the latter a plain function of
an array module, numpy or torch). Each is the definition docs/LANGUAGE.md gives; the NumPy
reference has its own reading. Sinusoidal tables are built by each backend."""

from __future__ import annotations

import math

__all__ = ["alibi_slopes", "rope_inv_freq", "sinusoidal_inv_freq", "t5_bucket_float32"]


def alibi_slopes(heads: int) -> list[float]:
    """Press et al.'s slopes: a geometric sequence for 2**n heads; otherwise the slopes of the
    nearest lower power of two, then every other slope of the next power of two."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start ** (i + 1) for i in range(n)]

    if math.log2(heads).is_integer():
        return power_of_two(heads)
    closest = 2 ** math.floor(math.log2(heads))
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][: heads - closest]


def sinusoidal_inv_freq(d: int) -> list[float]:
    """10000 ** (-2i / d) for i in 0 .. d/2 - 1: PE[p, 2i] = sin(p * f_i), PE[p, 2i+1] = cos."""
    return rope_inv_freq(10000.0, d)


def rope_inv_freq(theta: float, dim: int) -> list[float]:
    """theta ** (-2i / dim) for i in 0 .. dim/2 - 1."""
    return [theta ** (-(2 * i) / dim) for i in range(dim // 2)]


def t5_bucket_float32(xp, relative_position, buckets: int, max_distance: int,
                      bidirectional: bool):
    """T5's relative_position_bucket(k - q), computed as Hugging Face's T5 does, with the
    logarithm in float32, so every backend (and HF) draws the same bucket boundaries.
    `xp` is numpy or torch; `relative_position` is an int64 array. (NumPy 2 keeps float32
    arithmetic with Python scalars float32, as torch does.)"""

    def cast(x, dtype):
        return x.to(dtype) if xp.__name__ == "torch" else x.astype(dtype)

    n = buckets
    ret = relative_position * 0
    if bidirectional:
        n //= 2
        ret = ret + cast(relative_position > 0, xp.int64) * n
        rel = xp.abs(relative_position)
    else:
        rel = -xp.minimum(relative_position, relative_position * 0)
    max_exact = n // 2
    # log(0) is never selected (position 0 is "small"); clamp so no -inf is ever computed
    relf = xp.maximum(cast(rel, xp.float32), cast(rel * 0 + 1, xp.float32))
    large = max_exact + cast(
        xp.log(relf / max_exact) / math.log(max_distance / max_exact) * (n - max_exact),
        xp.int64)
    large = xp.minimum(large, large * 0 + (n - 1))
    return ret + xp.where(rel < max_exact, rel, large)
