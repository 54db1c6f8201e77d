"""The NumPy reference's position arithmetic, read from docs/LANGUAGE.md: RoPE frequencies
under each scaling, ALiBi slopes and T5's relative-position buckets (no helper shared with the
backends)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from .reference_vision import relative_2d

__all__ = ["add_bias", "alibi_slopes", "axial_angles", "mrope_stream_of", "rope_frequencies",
           "t5_bucket"]


def axial_angles(pos: np.ndarray, theta: float, dim: int) -> np.ndarray:
    """docs/LANGUAGE.md, `axial`: pos the rows and columns (2, B | 1, n) -> the angle of each
    pair (B | 1, n, dim/2): pair i < dim/4 turns by row * theta^(-4i/dim), pair dim/4 + j by
    column * theta^(-(4j + 2)/dim)."""
    quarter = dim // 4
    angles = [pos[0] * theta ** (-4 * i / dim) for i in range(quarter)]
    angles += [pos[1] * theta ** (-(4 * j + 2) / dim) for j in range(quarter)]
    return np.stack(angles, axis=-1)


def mrope_stream_of(sections: tuple[int, int, int], interleaved: bool, half: int) -> list[int]:
    """docs/LANGUAGE.md, `mrope`: for each frequency i < dim/2 the stream whose position turns
    it, 0 (time), 1 (height) or 2 (width)."""
    t, h, w = sections
    out = []
    for i in range(half):
        if not interleaved:  # sections of t, then h, then w consecutive frequencies
            out.append(0 if i < t else (1 if i < t + h else 2))
        elif i % 3 == 1 and i < 3 * h:
            out.append(1)
        elif i % 3 == 2 and i < 3 * w:
            out.append(2)
        else:
            out.append(0)
    return out


def rope_frequencies(theta: float, dim: int, scaling: object,
                     S: int) -> tuple[np.ndarray, float]:
    """docs/LANGUAGE.md, "RoPE scaling": the inverse frequencies for S keys, and the factor on
    cos and sin."""
    i = np.arange(dim // 2)
    inv = theta ** (-2.0 * i / dim)
    kind = type(scaling).__name__
    if kind == "LinearScaling":
        return inv / scaling.factor, 1.0
    if kind == "DynamicScaling":
        f, orig = scaling.factor, scaling.original_max_position
        if orig < S:
            inv = (theta * (f * S / orig - (f - 1)) ** (dim / (dim - 2))) ** (-2.0 * i / dim)
        return inv, 1.0
    if kind == "Llama3Scaling":
        f, orig = scaling.factor, scaling.original_max_position
        low, high = scaling.low_freq_factor, scaling.high_freq_factor
        wavelen = 2 * np.pi / inv
        smooth = (orig / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / f + smooth * inv
        return np.where(wavelen < orig / high, inv,
                        np.where(wavelen > orig / low, inv / f, mid)), 1.0
    if kind == "YarnScaling":
        def turns_dim(rotations: float) -> float:
            return dim * np.log(scaling.original_max_position / (rotations * 2 * np.pi)) / (
                2 * np.log(theta))
        lo, hi = turns_dim(scaling.beta_fast), turns_dim(scaling.beta_slow)
        if scaling.truncate:
            lo, hi = np.floor(lo), np.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((i - lo) / (hi - lo), 0, 1)
        return inv / scaling.factor * ramp + inv * (1 - ramp), scaling.attention_factor
    if kind == "ProportionalScaling":  # pairs past `rotated` do not turn
        return np.where(i < scaling.rotated, inv / scaling.factor, 0.0), 1.0
    if kind == "LongRopeScaling":
        long = scaling.original_max_position < S
        factors = np.array(scaling.long_factor if long else scaling.short_factor)
        return inv / factors, scaling.attention_factor
    return inv, 1.0


def alibi_slopes(heads: int, schedule: str, max_bias: float) -> list[float]:
    """geometric: 2^(-max_bias (h+1) / H). press: the same for 2^n heads; otherwise the slopes
    of the largest power of two below, then every other slope of the next power of two."""

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-max_bias * (h + 1) / n) for h in range(n)]

    if schedule == "geometric":
        return geometric(heads)
    below = 1
    while below * 2 <= heads:
        below *= 2
    if below == heads:
        return geometric(heads)
    return geometric(below) + geometric(2 * below)[0::2][: heads - below]


def t5_bucket(relative: np.ndarray, buckets: int, max_distance: int,
               bidirectional: bool) -> np.ndarray:
    """T5's relative_position_bucket(k - q), its logarithm in float32 as Hugging Face takes it."""
    n = buckets // 2 if bidirectional else buckets
    out = np.where(relative > 0, n, 0) if bidirectional else np.zeros_like(relative)
    distance = np.abs(relative) if bidirectional else np.maximum(-relative, 0)
    exact = n // 2
    f32 = np.float32
    ratio = np.maximum(distance, 1).astype(f32) / f32(exact)
    log_part = np.log(ratio) / f32(math.log(max_distance / exact)) * f32(n - exact)
    large = np.minimum(exact + log_part.astype(np.int64), n - 1)
    return out + np.where(distance < exact, distance, large)


def add_bias(s: np.ndarray, kind: str, attrs: Mapping[str, Any], w: Mapping[str, np.ndarray],
             q: np.ndarray | None = None, k: np.ndarray | None = None,
             states: np.ndarray | None = None) -> np.ndarray:
    """s (B, H, L, S) plus the score bias `kind` (alibi, relative_bias, relative_logits) of
    parameters `attrs` at query position q (B | 1, L, 1) and key position k (B | 1, 1, S):
    0 .. L - 1 and 0 .. S - 1 in one pass; `states`: relative logits' r (B, H, L, d_rel), or
    an indexer's selection (B, L, S)."""
    H, L, S = s.shape[1:]
    if q is None:
        q, k = np.arange(L)[None, :, None], np.arange(S)[None, None, :]
    if kind == "indexed":  # the keys an indexer kept: 0, the others -inf, for every head
        return s + states[:, None]
    if kind == "relative_2d":  # BEiT's: `states` the rows and columns (2, B | 1, L)
        return s + relative_2d(states, w[attrs["weight"]], attrs["window"],
                               attrs["class_token"])
    if kind == "relative_logits":  # b[h, i, j] = sum_c r_h(i)[c] P[c, i - j], 0 <= i - j < E
        bank = w[attrs["weight"]].astype(np.float64)  # (d_rel, extent)
        distance = np.broadcast_to(q - k, (s.shape[0], L, S))
        out = s.copy()
        for b in range(s.shape[0]):
            for i in range(L):  # query i's profile over distances, read at each key's
                profile = states[b, :, i, :].astype(np.float64) @ bank  # (H, extent)
                d = distance[b, i]
                seen = (d >= 0) & (d < attrs["extent"])
                out[b, :, i, seen] += profile[:, d[seen]].T
        return out
    if kind == "alibi":
        slopes = np.array(alibi_slopes(H, attrs["slopes"], attrs["max_bias"]))
        if attrs["rounding"] == "bfloat16":  # slope, positions and products in bfloat16
            def bf16(x: np.ndarray) -> np.ndarray:
                return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)

            slope = bf16(slopes)[None, :, None, None]
            at_q, at_k = bf16(slope * bf16(q)[:, None]), bf16(slope * bf16(k)[:, None])
            return s - attrs["factor"] * np.abs(at_q - at_k)
        slopes = slopes * attrs["factor"]
        return s - slopes[None, :, None, None] * np.abs(q - k)[:, None]
    bucket = t5_bucket(k - q, attrs["buckets"], attrs["max_distance"],
                       attrs["bidirectional"])  # (B | 1, L, S)
    table = w[attrs["weight"]]  # (buckets, H)
    return s + table[bucket].transpose(0, 3, 1, 2)
