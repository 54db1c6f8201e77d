"""Each op's arithmetic, written once over an array namespace `xp`, for the torch backend
(`backends.torch.TorchArrays`, eager tensors) and the ONNX lowering (`lower.builder.OnnxArrays`,
symbolic tensors whose operators emit nodes). A new meaning (a norm variant, a RoPE scaling,
an ALiBi schedule) is written here, and both backends have it. The NumPy reference keeps its
own, deliberately independent reading of docs/LANGUAGE.md: it is what these are tested against.

What an `xp` provides, beyond the arithmetic and comparison operators of its arrays and
`x[..., a:b:c]` slices of the last axis:
    asarray(values, dtype)     a constant (dtype: "float32", "int64", ...)
    astype(x, dtype), dtype(x) casts by dtype name (a no-op when already that type)
    cos sin tanh sqrt sigmoid relu elu(x, alpha) gelu(x, approximate) abs log exp
    where(c, a, b) minimum(a, b) maximum(a, b)
    concat(xs, axis) interleave(a, b)   (a0 b0 a1 b1 ... on the last axis)
    mean / sum / amax(x, axis, keepdims) matmul(a, b) swap_last(x) softmax(x, axis)
    layer_norm(x, weight, bias, eps)

Dtype rule (docs/LANGUAGE.md, "Numerics"): scores, biases, softmax, RMS statistics, position
tables and linear attention's sums are float32 whatever the model dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..positions import rope_inv_freq, sinusoidal_inv_freq
from ..spec import DynamicScaling, LongRopeScaling, RopeScaling
from ..targets import lacks_bfloat16_cuda_kernel

__all__ = ["LOWEST", "activation", "alibi_bias", "linear_attention", "masked_softmax", "norm",
           "rope", "rope_frequencies", "sinusoidal_table", "softcap"]

Array = Any
LOWEST = float(np.finfo(np.float32).min)


def sinusoidal_table(xp, pos: Array, d: int) -> Array:
    """PE[p, 2i] = sin(p * 10000^(-2i/d)), PE[p, 2i+1] = cos(...); pos: float32 (L, 1) ->
    float32 (L, d)."""
    angle = pos * xp.asarray(sinusoidal_inv_freq(d), "float32")  # (L, d/2)
    return xp.interleave(xp.sin(angle), xp.cos(angle))


def rope_frequencies(xp, theta: float, dim: int, scaling: RopeScaling | None,
                     keys: Array) -> Array:
    """The float32 inverse frequencies (dim/2,) for a sequence of `keys` positions (an int64
    scalar): constants unless the scaling depends on the length. Dynamic NTK: theta' = theta *
    (factor * max(keys, orig) / orig - (factor - 1)) ** (dim / (dim - 2)); longrope: the long
    factors when keys > orig."""
    if isinstance(scaling, DynamicScaling):
        orig, factor = scaling.original_max_position, scaling.factor
        seen = xp.astype(xp.maximum(keys, orig), "float32")
        grown = (seen * (factor / orig) - (factor - 1.0)) ** (dim / (dim - 2))
        exponents = xp.asarray([-(2 * i) / dim for i in range(dim // 2)], "float32")
        return (grown * theta) ** exponents
    static = xp.asarray(rope_inv_freq(theta, dim, scaling), "float32")
    if isinstance(scaling, LongRopeScaling):
        long = [f / t for f, t in zip(rope_inv_freq(theta, dim), scaling.long_factor,
                                      strict=True)]
        return xp.where(keys > scaling.original_max_position, xp.asarray(long, "float32"),
                        static)
    return static


def rope_tables(xp, pos: Array, keys: Array, theta: float, dim: int,
                scaling: RopeScaling | None, dtype: str) -> tuple[Array, Array]:
    """cos and sin of the angles pos * inv_freq (see `rope_frequencies`), pos a float32 (n, 1)
    column (or (B, 1, n, 1)): float32 angles, times the scaling's attention factor (YaRN,
    longrope), narrowed to `dtype`. Every rotation at these positions shares them."""
    angle = pos * rope_frequencies(xp, theta, dim, scaling, keys)  # (n, dim/2)
    gain = getattr(scaling, "attention_factor", 1.0)
    return tuple(xp.astype(f(angle) * gain if gain != 1.0 else f(angle), dtype)
                 for f in (xp.cos, xp.sin))


def rotate(xp, x: Array, cos: Array, sin: Array, dim: int, interleaved: bool,
           width: int | None = None) -> Array:
    """Rotate the first `dim` features of x (..., n, d) by the angles of `rope_tables`: pairs
    (x_i, x_{i+dim/2}) (half-split) or (x_2i, x_2i+1) (interleaved). `width`: d when known
    (d = dim rotates everything: no pass-through slice)."""
    rest = None if width == dim else x[..., dim:]
    if interleaved:
        even, odd = x[..., 0:dim:2], x[..., 1:dim:2]
        rot = xp.interleave(even * cos - odd * sin, even * sin + odd * cos)
    else:
        half = dim // 2
        x1, x2 = x[..., :half], x[..., half:dim]
        rot = xp.concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rot if width == dim else xp.concat([rot, rest], axis=-1)


def rope(xp, x: Array, pos: Array, keys: Array, theta: float, dim: int, interleaved: bool,
         scaling: RopeScaling | None = None) -> Array:
    """RoPE: `rotate` x by `rope_tables` at positions pos."""
    cos, sin = rope_tables(xp, pos, keys, theta, dim, scaling, xp.dtype(x))
    return rotate(xp, x, cos, sin, dim, interleaved)


def norm(xp, x: Array, kind: str, weight: Array, bias: Array | None, eps: float,
         unit_offset: bool = False) -> Array:
    """LayerNorm: (x - mean) / sqrt(var + eps) * w + b. RMSNorm: x / sqrt(mean(x^2) + eps) * w,
    its statistics in float32 (x^2 overflows float16 from |x| = 256), as Hugging Face does:
    Llama's narrows to the model dtype before the weight; the unit-offset form (Gemma's)
    multiplies by 1 + w in float32 and then narrows."""
    if kind == "layernorm":
        return xp.layer_norm(x, weight, bias, eps)
    h = xp.astype(x, "float32")
    h = h / xp.sqrt(xp.mean(h * h, axis=-1, keepdims=True) + eps)
    if unit_offset:
        return xp.astype(h * (xp.astype(weight, "float32") + 1.0), xp.dtype(x))
    return xp.astype(h, xp.dtype(x)) * weight


def activation(xp, h: Array, kind: str) -> Array:
    """relu, silu (x * sigmoid(x)), gelu (erf) or gelu_tanh; GELU of bfloat16 values is
    computed in float32 (ONNX Runtime's CUDA provider has no bfloat16 Gelu kernel)."""
    if kind == "relu":
        return xp.relu(h)
    if kind == "silu":
        return h * xp.sigmoid(h)
    approximate = "tanh" if kind == "gelu_tanh" else "none"
    dtype = xp.dtype(h)
    if lacks_bfloat16_cuda_kernel("Gelu", dtype):
        return xp.astype(xp.gelu(xp.astype(h, "float32"), approximate), dtype)
    return xp.gelu(h, approximate)


def alibi_bias(xp, slopes: Array, q_pos: Array, k_pos: Array) -> Array:
    """-slope_h * |i - j| (float32); slopes shaped to broadcast against the distances."""
    return -slopes * xp.astype(xp.abs(q_pos - k_pos), "float32")


def softcap(xp, s: Array, cap: float) -> Array:
    """cap * tanh(s / cap)."""
    return xp.tanh(s / cap) * cap


def masked_softmax(xp, s: Array, visible: Array) -> tuple[Array, Array]:
    """Softmax of float32 scores over the keys where `visible`, and each row's factor: 1 if it
    sees a key, else 0 (a row with no visible key gives zeros, not a uniform average). The
    factor is returned apart so a caller can apply it to the smaller of probabilities and
    output."""
    additive = xp.where(visible, xp.asarray(0.0, "float32"), xp.asarray(LOWEST, "float32"))
    probs = xp.softmax(s + additive, axis=-1)
    any_key = xp.amax(xp.astype(visible, "float32"), axis=-1, keepdims=True)
    return probs, any_key


def feature_map(xp, x: Array, feature: str) -> Array:
    """phi: elu(x) + 1, relu(x) or softmax over the features."""
    if feature == "elu":
        return xp.elu(x, 1.0) + 1.0
    if feature == "relu":
        return xp.relu(x)
    return xp.softmax(x, axis=-1)


def linear_attention(xp, q: Array, k: Array, v: Array, feature: str,
                     causal: tuple[Array, Array] | None, real: Array | None = None) -> Array:
    """y_q = phi(q).sum_k phi(k) v_k^T / max(phi(q).sum_k phi(k), 1e-6), in float32 (the sums
    over keys overflow float16 at long lengths); causal (`causal`: the int64 query and key
    positions, (L, 1) and (1, S)) sums only k <= q, and only over keys where `real` (B, S), a
    decoding model's attention_mask, is non-zero. Returns the model dtype."""
    dtype = xp.dtype(v)
    q, k, v = (xp.astype(t, "float32") for t in (q, k, v))
    fq, fk = feature_map(xp, q, feature), feature_map(xp, k, feature)
    if causal is not None:
        q_pos, k_pos = causal
        keep = xp.astype(k_pos <= q_pos, "float32")  # (L, S)
        if real is not None:  # (B, S) -> (B, 1, 1, S)
            keep = keep * xp.astype(real, "float32")[:, None, None, :]
        weights = xp.matmul(fq, xp.swap_last(fk)) * keep  # (B, H, L, S)
        num = xp.matmul(weights, v)
        den = xp.sum(weights, axis=-1, keepdims=True)
    else:
        num = xp.matmul(fq, xp.matmul(xp.swap_last(fk), v))  # phi(q) (phi(k)^T v)
        den = xp.sum(fq * xp.sum(fk, axis=-2, keepdims=True), axis=-1, keepdims=True)
    return xp.astype(num / xp.maximum(den, xp.asarray(1e-6, "float32")), dtype)
