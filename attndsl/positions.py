"""Position-encoding formulas shared by the fast backends (torch, the ONNX lowering, show):
RoPE inverse frequencies, ALiBi slopes and T5 relative buckets (the latter a plain function of
an array module, numpy or torch). Each is the definition docs/LANGUAGE.md gives; the NumPy
reference has its own reading. Sinusoidal tables are built by each backend."""

from __future__ import annotations

import math

from .rope_scaling import (
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    ProportionalScaling,
    RopeScaling,
    YarnScaling,
)

__all__ = ["alibi_slopes", "mrope_streams", "rope_inv_freq", "sinusoidal_inv_freq",
           "t5_bucket_float32"]


def alibi_slopes(heads: int, schedule: str = "press", max_bias: float = 8.0,
                 factor: float = 1.0, rounding: str = "float32") -> list[float]:
    """`geometric`: 2^(-max_bias (h + 1) / H) for every H. `press` (Press et al., BLOOM): the
    same for 2**n heads; otherwise the slopes of the nearest lower power of two, then every
    other slope of the next power of two. Each times `factor` (the score scale of a `scaled`
    ALiBi, which adds its bias before scaling); with `rounding = bfloat16` rounded to bfloat16
    instead, the factor applying to the rounded bias (`formulas.alibi_bias`)."""
    if rounding == "bfloat16":
        import ml_dtypes
        import numpy as np

        return [float(v) for v in np.asarray(alibi_slopes(heads, schedule, max_bias),
                                             np.float32).astype(ml_dtypes.bfloat16)]

    def geometric(n: int) -> list[float]:
        return [factor * 2.0 ** (-max_bias * (i + 1) / n) for i in range(n)]

    if schedule == "geometric" or math.log2(heads).is_integer():
        return geometric(heads)
    closest = 2 ** math.floor(math.log2(heads))
    return geometric(closest) + geometric(2 * closest)[0::2][: heads - closest]


def sinusoidal_inv_freq(d: int, frequencies: str = "vaswani") -> list[float]:
    """10000 ** (-2i / d) for i in 0 .. d/2 - 1 (vaswani: PE[p, 2i] = sin(p * f_i),
    PE[p, 2i+1] = cos), or 10000 ** (-i / (d/2 - 1)) (tensor2tensor's, XGLM's)."""
    if frequencies == "tensor2tensor":
        return [10000.0 ** (-i / (d // 2 - 1)) for i in range(d // 2)]
    return rope_inv_freq(10000.0, d)


def rope_inv_freq(theta: float, dim: int, scaling: RopeScaling | None = None) -> list[float]:
    """theta ** (-2i / dim) for i in 0 .. dim/2 - 1, adjusted by a scaling that does not
    depend on the length (linear, llama3, yarn, proportional; longrope's short factors), in double
    precision, as docs/LANGUAGE.md states them."""
    base = [theta ** (-(2 * i) / dim) for i in range(dim // 2)]
    match scaling:
        case LinearScaling(factor=factor):
            return [f / factor for f in base]
        case Llama3Scaling(factor=factor, low_freq_factor=low, high_freq_factor=high,
                           original_max_position=orig):
            out = []
            for f in base:
                wavelen = 2 * math.pi / f
                if wavelen < orig / high:  # high frequencies: kept
                    out.append(f)
                elif wavelen > orig / low:  # low frequencies: interpolated
                    out.append(f / factor)
                else:
                    smooth = (orig / wavelen - low) / (high - low)
                    out.append((1 - smooth) * f / factor + smooth * f)
            return out
        case YarnScaling():
            low, high = _yarn_ramp(scaling, theta, dim)
            out = []
            for i, f in enumerate(base):
                ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: original, 1: f / factor
                out.append(f / scaling.factor * ramp + f * (1 - ramp))
            return out
        case LongRopeScaling(short_factor=short):
            return [f / s for f, s in zip(base, short, strict=True)]
        case ProportionalScaling(rotated=rotated, factor=factor):
            return [f / factor if i < rotated else 0.0 for i, f in enumerate(base)]
    return base


def mrope_streams(sections: tuple[int, int, int], interleaved: bool, half: int) -> list[int]:
    """The position stream (0 time, 1 height, 2 width) each of `half` frequencies reads under
    multimodal RoPE: sectioned, the first t frequencies time, the next h height, the rest
    width; interleaved, frequency i height if i = 1 (mod 3) and i < 3h, width if i = 2
    (mod 3) and i < 3w, else time."""
    t, h, w = sections
    if interleaved:
        return [1 if i % 3 == 1 and i < 3 * h else 2 if i % 3 == 2 and i < 3 * w else 0
                for i in range(half)]
    return [0 if i < t else 1 if i < t + h else 2 for i in range(half)]


def _yarn_ramp(s: YarnScaling, theta: float, dim: int) -> tuple[float, float]:
    """The pair indices where YaRN's ramp starts and ends: the dims that turn beta_fast and
    beta_slow times over original_max_position positions, floored/ceiled if `truncate`,
    clamped to [0, dim - 1], and never equal (the end moves by 0.001)."""

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(s.original_max_position / (rotations * 2 * math.pi))
                / (2 * math.log(theta)))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    return low, high + 0.001 if low == high else high


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


def axial_inv_freq(theta: float, dim: int) -> list[float]:
    """Axial 2-D RoPE's frequency per pair: RoPE's theta^(-2j/dim) of even j (the rows'),
    then of odd j (the columns'), as Pixtral orders them."""
    f = rope_inv_freq(theta, dim)
    return f[0::2] + f[1::2]

