"""Each op's arithmetic, written once over an array namespace `xp`, for the torch backend
(`backends.torch.TorchArrays`, eager tensors) and the ONNX lowering (`lower.builder.OnnxArrays`,
symbolic tensors whose operators emit nodes). A new meaning (a norm variant, a RoPE scaling,
an ALiBi schedule) is written here, and both backends have it. The NumPy reference keeps its
own, deliberately independent reading of docs/LANGUAGE.md: it is what these are tested against.

What an `xp` provides, beyond the arithmetic, comparison and logical operators of its arrays,
`x[..., a:b:c]` slices of the last axis and `None` (new axis) indexing:
    asarray(values, dtype)     a constant (dtype: "float32", "int64", ...)
    astype(x, dtype), dtype(x) casts by dtype name (a no-op when already that type)
    cos sin tanh sqrt sigmoid relu elu(x, alpha) gelu(x, approximate) abs log exp
    where(c, a, b) minimum(a, b) maximum(a, b)
    concat(xs, axis) interleave(a, b)   (a0 b0 a1 b1 ... on the last axis)
    mean / sum / amax(x, axis, keepdims) matmul(a, b) swap_last(x) softmax(x, axis)
    layer_norm(x, weight, bias, eps)
    shape(x, axis) reshape(x, dims) arange(n) pad(x, axis, n) (n zeros after the end)
    slice(x, axis, start, stop) take(x, indices, axis) (NumPy's take) argmax(x, axis)
    reshape_axes(x, start, stop, dims) (axes start .. stop - 1 reshaped to dims)
    expand(x, dims) (broadcast against dims) expand_rows(x, like) ((1, m) to like's rows)
    zeros_after(x, axis, n) (pad's zeros, in any dtype) head(x, axis, n) (the first n)
    sort(x) (ascending along the last axis: values, indices) cumsum(x, axis)
    take_along(x, indices, axis) (NumPy's take_along_axis)
    patch_conv(x, w, b, size) (a convolution of stride = kernel = size over (B, C, H, W))
    resize_bicubic(x, like) (x's last two axes to like's sizes: torch's bicubic, a = -0.75)
where a dimension, `n` or `stop` may be a length of the input (a symbolic scalar).

Dtype rule (docs/LANGUAGE.md, "Numerics"): scores, biases, softmax, RMS statistics, position
tables and linear attention's sums are float32 whatever the model dtype."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..positions import axial_inv_freq, mrope_streams, rope_inv_freq, sinusoidal_inv_freq
from ..rope_scaling import DynamicScaling, LongRopeScaling, RopeScaling
from ..targets import lacks_bfloat16_cuda_kernel

__all__ = ["LOWEST", "activation", "alibi_bias", "axial_positions", "document_positions",
           "grid_positions", "masked_softmax", "mrope_positions", "norm", "patch_embed", "rope",
           "rope_frequencies", "sinusoidal_table", "sinusoidal_variant"]

Array = Any
LOWEST = float(np.finfo(np.float32).min)


def sinusoidal_table(xp, pos: Array, d: int, layout: str = "interleaved", offset: int = 0,
                     frequencies: str = "vaswani") -> Array:
    """PE[p, 2i] = sin(p * 10000^(-2i/d)), PE[p, 2i+1] = cos(...); pos: float32 (L, 1) ->
    float32 (L, d). Its variant (docs/LANGUAGE.md): the angle (p + offset) * f_i, f_i of
    `frequencies`, and the `halves` layout: every sine, then every cosine."""
    if offset:
        pos = pos + float(offset)
    angle = pos * xp.asarray(sinusoidal_inv_freq(d, frequencies), "float32")  # (L, d/2)
    if layout == "halves":
        return xp.concat([xp.sin(angle), xp.cos(angle)], axis=-1)
    return xp.interleave(xp.sin(angle), xp.cos(angle))


def sinusoidal_variant(node) -> dict:
    """The sinusoidal variant's attributes an `add_position` node sets (the rest default)."""
    attrs = dict(node.attrs)
    return {k: attrs[k] for k in ("layout", "offset", "frequencies") if k in attrs}


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


def mrope_positions(xp, pos: Array, sections: tuple[int, int, int], interleaved: bool,
                    half: int) -> Array:
    """Multimodal RoPE's positions per frequency: pos, the time, height and width streams as
    float32 (3, B, n, 1), -> (B, 1, n, half), frequency i at its stream's position
    (`positions.mrope_streams`): one stream times 1 plus the others times 0, exact."""
    streams = mrope_streams(sections, interleaved, half)
    pick = [[[[1.0 if s == j else 0.0 for s in streams]]] for j in range(3)]  # (3, 1, 1, half)
    return xp.sum(pos * xp.asarray(pick, "float32"), axis=0)[:, None]


def axial_positions(xp, pos: Array, half: int) -> Array:
    """Axial 2-D RoPE's positions per pair: pos, the row and column streams as float32
    (2, B, n, 1), -> (B, 1, n, half): the first half / 2 pairs the row, the rest the column
    (one stream times 1 plus the other times 0, exact)."""
    pick = [[[[1.0 if (i >= half // 2) == bool(j) else 0.0 for i in range(half)]]]
            for j in range(2)]
    return xp.sum(pos * xp.asarray(pick, "float32"), axis=0)[:, None]


def rope_tables(xp, pos: Array, keys: Array, theta: float, dim: int,
                scaling: RopeScaling | None, dtype: str, axial: bool = False,
                ) -> tuple[Array, Array]:
    """cos and sin of the angles pos * inv_freq (see `rope_frequencies`; axial 2-D RoPE's
    order, `positions.axial_inv_freq`), pos a float32 (n, 1) column (or (B, 1, n, 1)): float32
    angles, times the scaling's attention factor (YaRN, longrope), narrowed to `dtype`. Every
    rotation at these positions shares them."""
    freq = xp.asarray(axial_inv_freq(theta, dim), "float32") if axial else \
        rope_frequencies(xp, theta, dim, scaling, keys)
    angle = pos * freq  # (n, dim/2)
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
         scaling: RopeScaling | None = None, mrope: tuple[int, int, int] | None = None,
         mrope_interleaved: bool = False, axial: bool = False) -> Array:
    """RoPE: `rotate` x by `rope_tables` at positions pos; multimodal (`mrope`): pos the
    three streams' float32 (3, B, n, 1), each frequency's position picked by
    `mrope_positions`; axial 2-D: the row and column streams, `axial_positions`."""
    if mrope is not None:
        pos = mrope_positions(xp, pos, mrope, mrope_interleaved, dim // 2)
    elif axial:
        pos = axial_positions(xp, pos, dim // 2)
    cos, sin = rope_tables(xp, pos, keys, theta, dim, scaling, xp.dtype(x), axial)
    return rotate(xp, x, cos, sin, dim, interleaved)


def norm(xp, x: Array, kind: str, weight: Array, bias: Array | None, eps: float,
         unit_offset: bool = False) -> Array:
    """LayerNorm: (x - mean) / sqrt(var + eps) * w + b. RMSNorm: x / sqrt(mean(x^2) + eps) * w,
    its statistics in float32 (x^2 overflows float16 from |x| = 256), as Hugging Face does:
    Llama's narrows to the model dtype before the weight; the unit-offset form (Gemma's)
    multiplies by 1 + w in float32 and then narrows; a unit-offset LayerNorm (Nemotron's
    LayerNorm1P) takes 1 + w as its weight, in the model dtype. l2norm, and an RMSNorm
    without a weight (`weight` None: NanoChat's): float32, then narrowed. A LayerNorm without
    a weight (and bias: OLMo's) computes in float32, as its F.layer_norm."""
    if kind == "layernorm" and weight is None:
        h = xp.astype(x, "float32")
        h = h - xp.mean(h, axis=-1, keepdims=True)
        h = h / xp.sqrt(xp.mean(h * h, axis=-1, keepdims=True) + eps)
        return xp.astype(h, xp.dtype(x))
    if kind == "layernorm":  # unit offset: Nemotron's LayerNorm1P, its gain 1 + w
        return xp.layer_norm(x, weight + 1.0 if unit_offset else weight, bias, eps)
    h = xp.astype(x, "float32")
    h = h / xp.sqrt(xp.mean(h * h, axis=-1, keepdims=True) + eps)
    if kind == "l2norm" or weight is None:
        return xp.astype(h, xp.dtype(x))
    if unit_offset:
        return xp.astype(h * (xp.astype(weight, "float32") + 1.0), xp.dtype(x))
    return xp.astype(h, xp.dtype(x)) * weight


def value_pairs(xp, v: Array, kv_heads: int) -> Array:
    """Values paired across kv heads (B, Hkv, S, dv) -> (B, Hkv, S, 2 dv): kv head j holds
    [v_j', v_j' + Hkv/2] with j' = j mod Hkv/2, so query heads i and i + H/2 weigh the same
    pair."""
    half = kv_heads // 2
    pair = xp.concat([xp.slice(v, 1, 0, half), xp.slice(v, 1, half, kv_heads)], axis=3)
    return xp.concat([pair, pair], axis=1)


def head_linear(xp, x: Array, w: Array, heads: int, block: int, start: int, stop: int,
                transposed: bool) -> Array:
    """(B, n, heads * i) -> (B, n, heads * o): head h's features times W_h, rows start ..
    stop - 1 of head h's block of w (heads * block, c) (i = stop - start, o = c), or times
    W_h^T if transposed (i = c, o = stop - start): a decoding form's absorbed projections."""
    W = xp.slice(xp.reshape(w, [heads, block, xp.shape(w, 1)]), 1, start, stop)
    if transposed:
        W = xp.swap_last(W)
    dims = [xp.shape(x, 0), xp.shape(x, 1)]
    y = xp.matmul(xp.reshape(x, [*dims, heads, 1, -1]), W)  # (B, n, heads, 1, o)
    return xp.reshape(y, [*dims, -1])


def activation(xp, h: Array, kind: str) -> Array:
    """relu, relu2 (relu(x) squared), silu (x * sigmoid(x)), sigmoid, softplus (ln(1 + e^x)),
    gelu (erf) or gelu_tanh; GELU and softplus of bfloat16 values are computed in float32 (ONNX
    Runtime's CUDA provider has no bfloat16 Gelu or Softplus kernel)."""
    if kind == "relu":
        return xp.relu(h)
    if kind == "relu2":
        r = xp.relu(h)
        return r * r
    if kind == "silu":
        return h * xp.sigmoid(h)
    if kind == "sigmoid":  # a gate
        return xp.sigmoid(h)
    if kind == "quick_gelu":  # CLIP's
        return h * xp.sigmoid(h * 1.702)
    if kind == "softplus":  # a gate
        if lacks_bfloat16_cuda_kernel("Softplus", xp.dtype(h)):
            return xp.astype(xp.softplus(xp.astype(h, "float32")), "bfloat16")
        return xp.softplus(h)
    approximate = "tanh" if kind == "gelu_tanh" else "none"
    dtype = xp.dtype(h)
    if lacks_bfloat16_cuda_kernel("Gelu", dtype):
        return xp.astype(xp.gelu(xp.astype(h, "float32"), approximate), dtype)
    return xp.gelu(h, approximate)


def clamped_glu(xp, gate: Array, up: Array, alpha: float, limit: float) -> Array:
    """gpt-oss's gated unit: (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g) with
    g = min(gate, limit)."""
    g = xp.minimum(gate, limit)
    return (xp.maximum(xp.minimum(up, limit), -limit) + 1.0) * g * xp.sigmoid(g * alpha)


def alibi_bias(xp, slopes: Array, q_pos: Array, k_pos: Array, rounding: str = "float32",
               factor: float = 1.0) -> Array:
    """-slope_h * |i - j| (float32), slopes (`positions.alibi_slopes`, already times the
    factor) shaped to broadcast against the distances. `bfloat16`: with r rounding to
    bfloat16 and the slopes already rounded, -factor * |r(slope_h * r(i)) - r(slope_h * r(j))|
    (Falcon-RW's r(r(slope) * r(j)) per key, which under a causal mask differs from this by a
    constant per row)."""
    if rounding == "float32":
        return -slopes * xp.astype(xp.abs(q_pos - k_pos), "float32")

    def r(x: Array) -> Array:
        return xp.astype(xp.astype(x, "bfloat16"), "float32")

    at_q = r(slopes * r(xp.astype(q_pos, "float32")))
    at_k = r(slopes * r(xp.astype(k_pos, "float32")))
    return xp.abs(at_q - at_k) * (-factor)


def masked_softmax(xp, s: Array, visible: Array, extra_logit: Array | None = None,
                   ) -> tuple[Array, Array]:
    """Softmax of float32 scores over the keys where `visible`, and each row's factor: 1 if it
    sees a key, else 0 (a row with no visible key gives zeros, not a uniform average). The
    factor is returned apart so a caller can apply it to the smaller of probabilities and
    output. `extra_logit`: float32 logits shaped to broadcast over the rows (a trailing axis
    of 1), each a key with no value that its rows see, joining their denominator:
    p = exp(s - m) / (sum exp(s - m) + exp(x - m)), m the larger of the row's largest visible
    score and the extra logit x (a `softmax` hook mechanism's, `mechanisms.softmax_logits`)."""
    additive = xp.where(visible, xp.asarray(0.0, "float32"), xp.asarray(LOWEST, "float32"))
    if extra_logit is None:
        probs = xp.softmax(s + additive, axis=-1)
    else:
        z = s + additive
        top = xp.maximum(xp.amax(z, axis=-1, keepdims=True), extra_logit)
        e = xp.exp(z - top)
        probs = e / (xp.sum(e, axis=-1, keepdims=True) + xp.exp(extra_logit - top))
    any_key = xp.amax(xp.astype(visible, "float32"), axis=-1, keepdims=True)
    return probs, any_key


def document_positions(xp, segment_ids: Array) -> Array:
    """Each token's position within its document (`qd`, `kd` of index masks), int64 [B, L]
    from segment_ids [B, L]: a document is a run of equal consecutive ids, and a token's
    position is its distance from the run's first token. O(L log L): the runs' first tokens,
    sorted to the front, are looked up by each token's run number."""
    L = xp.shape(segment_ids, 1)
    pos = xp.arange(L)  # (L,)
    later = xp.slice(segment_ids, 1, 1, None) != xp.slice(segment_ids, 1, 0, -1)  # (B, L - 1)
    first = xp.concat([xp.slice(segment_ids, 1, 0, 1) == xp.slice(segment_ids, 1, 0, 1),
                       later], axis=1)  # (B, L): a run starts here
    run = xp.cumsum(xp.astype(first, "int64"), 1) - 1  # (B, L): the token's run, from 0
    starts, _ = xp.sort(xp.where(first, pos, pos + L))  # the runs' first positions, in order
    return pos - xp.take_along(starts, run, 1)


def patch_embed(xp, pixels: Array, w: Mapping[str, Array | None], size: int,
                grid: int | None, d: int, antialias: bool = False) -> Array:
    """A vision stack's token rows (docs/LANGUAGE.md, "Vision encoders"): pixel_values
    (B, C, H, W) cut into size x size patches (gh = H // size rows of gw = W // size, the
    pixels past them left out), each projected (the patch convolution `w["weight"]`,
    `w["bias"]`), row-major; plus the learned grid x grid table's (`w["positions"]`) patch
    rows, bicubic-interpolated (`antialias`: PIL's antialiased bicubic) to gh x gw in float32
    and narrowed; before them the class token (plus the table's row 0), the distillation
    token (plus its row 1), then the register tokens (no position):
    (B, [1 +] [1 +] [R +] gh gw, d)."""
    table, registers = w.get("positions"), w.get("registers")
    tokens = [w[k] for k in ("class_token", "distillation_token") if w.get(k) is not None]
    x = xp.patch_conv(pixels, w["weight"], w.get("bias"), size)  # (B, d, gh, gw)
    rows = xp.swap_last(xp.reshape_axes(x, 2, 4, [-1]))
    if table is not None:
        patches = xp.slice(table, 0, len(tokens), None)  # (grid * grid, d)
        square = xp.reshape(xp.swap_last(xp.astype(patches, "float32")), [1, d, grid, grid])
        moved = xp.resize_bicubic(square, x, antialias)  # (1, d, gh, gw)
        rows = rows + xp.astype(xp.swap_last(xp.reshape_axes(moved, 2, 4, [-1])),
                                xp.dtype(rows))
    if not tokens and registers is None:
        return rows
    before = [xp.reshape(token, [1, d]) for token in tokens]  # each plus its position row
    if table is not None:
        before = [token + xp.slice(table, 0, i, i + 1) for i, token in enumerate(before)]
    if registers is not None:
        before.append(registers)
    alone = len(before) == 1 and registers is None  # the class token's (1, d) as it is
    prefix = before[0] if len(before) == 1 else xp.concat(before, axis=0)
    if not alone:  # the rows before the patches as one (1, prefix d)
        prefix = xp.reshape(prefix, [1, -1])
    prefix = xp.reshape_axes(xp.expand_rows(prefix, rows), 1, 2, [1 if alone else -1, d])
    return xp.concat([prefix, rows], axis=1)  # (B, prefix + gh gw, d)


def grid_positions(xp, pixels: Array, size: int, prefix: int) -> Array:
    """Each token's row and column in a vision stack's grid (docs/LANGUAGE.md, axial RoPE):
    int64 (2, 1, prefix + gh gw), patch t at (t // gw, t % gw), the prefix tokens (the class
    token) at (0, 0)."""
    gh, gw = xp.shape(pixels, 2) // size, xp.shape(pixels, 3) // size
    t = xp.maximum(xp.arange(gh * gw + prefix) - prefix, 0)
    rows = t // gw  # (and t - rows gw: torch.export has no remainder by a symbolic size)
    return xp.concat([rows[None], (t - rows * gw)[None]], axis=0)[:, None]

