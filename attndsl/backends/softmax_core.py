"""The fused softmax core's arithmetic that the torch module and the ONNX lowering share, over
the array namespace of `backends.formulas` (`TorchArrays`, `OnnxArrays`): the score bias
(`score_bias`: ALiBi, T5 relative positions or relative logits) and the block-sparse form
(`block_sparse`).
What differs per backend, the scores (q.k with the score bias and modifiers), the masked
softmax @ v and the runtime mask inputs, each backend passes in (`CoreOps`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import masks
from ..ir import Node
from ..positions import alibi_slopes, t5_bucket_float32
from ..targets import lacks_bfloat16_cuda_kernel
from . import formulas

__all__ = ["CoreOps", "block_sparse", "relative_2d", "relative_logits", "score_bias"]

Array = Any


@dataclass(frozen=True)
class CoreOps:
    """A backend's parts of an attention core. `scores(q, k, q_pos, k_pos)`: the float32
    scores (scale * q.k, its bias at positions q_pos and k_pos, its score modifiers) of q (B,
    Hkv, g, ..., n, d) and k (B, Hkv, 1, ..., m, d); `attend(s, visible, v)`: the masked
    softmax of s @ v (B, Hkv, 1, ..., m, dv), rows with no visible key zeros, `visible` as
    `masks.evaluate` gives it; `context()`: the mask context at the core's lengths."""

    scores: Callable[[Array, Array, Array, Array], Array]
    attend: Callable[[Array, Array, Array], Array]
    context: Callable[[], masks.MaskContext]


def score_bias(xp, attrs: dict, heads: int, lead: tuple[int, ...], table: Array | None,
               q_pos: Array, k_pos: Array, rows: Array | None = None) -> Array:
    """The float32 score bias of ALiBi, T5 relative positions or relative logits
    (docs/LANGUAGE.md), at the broadcast of the positions q_pos (n, 1) and k_pos (1, m), its
    heads on leading axes `lead`: (heads,) or (kv_heads, heads // kv_heads). `attrs`: a
    score_bias node's, or an attention core's (the kind as `bias`); `table`: the relative
    bias's (buckets, heads) weight, or the relative logits' bank (d_rel, extent) (None for
    ALiBi); `rows`: the relative logits' relative states (B, heads, n, d_rel), whose bias is
    then (B, *lead, n, m), or a `keys` hook mechanism's selection (B, n, m) (`indexed`: 0 or
    -inf)."""
    nd = max(q_pos.ndim, k_pos.ndim)
    kind = attrs.get("bias", attrs.get("kind"))
    if kind == "relative_logits":
        return relative_logits(xp, rows, table, attrs["extent"], q_pos, k_pos, lead)
    if kind == "relative_2d":
        return relative_2d(xp, rows, table, attrs["window"], attrs["class_token"], q_pos,
                           k_pos, lead)
    if kind == "indexed":  # a selection of keys (B, n, m): the same for every head
        return xp.reshape_axes(xp.astype(rows, "float32"), 0, 1, [-1, *[1] * len(lead)])
    if kind == "alibi":
        # nested Python lists of the slopes, in the shape lead + (1,) * nd (plain values:
        # FlexAttention's score_mod, compiled, takes them as a constant)
        slopes: list = alibi_slopes(heads, attrs["slopes"], attrs["max_bias"], attrs["factor"],
                                    attrs["rounding"])
        for _ in range(nd):
            slopes = [[s] for s in slopes]
        if len(lead) == 2:
            slopes = [slopes[i * lead[1]:(i + 1) * lead[1]] for i in range(lead[0])]
        return formulas.alibi_bias(xp, xp.asarray(slopes, "float32"), q_pos, k_pos,
                                   attrs["rounding"], attrs["factor"])
    bucket = t5_bucket_float32(xp, k_pos - q_pos, attrs["buckets"], attrs["max_distance"],
                               attrs["bidirectional"])
    # (..., H) -> (H, ...): the heads first
    bias = xp.move_last_first(xp.astype(xp.embedding(table, bucket), "float32"))
    return bias if len(lead) == 1 else xp.reshape_axes(bias, 0, 1, list(lead))


def relative_2d(xp, pos: Array, table: Array, window: int, class_token: bool, q_pos: Array,
                k_pos: Array, lead: tuple[int, ...]) -> Array:
    """BEiT's 2-D relative position bias (docs/LANGUAGE.md, relative_2d) -> (B, *lead, n, m):
    pos the tokens' rows and columns (2, B, L) int64 (gh = max row + 1, gw = max column + 1);
    table ((2w - 1)^2 (+ 3), heads), its grid of offsets bilinearly resized to (2gh - 1) x
    (2gw - 1) (torch's bilinear, align_corners = False) and read at each pair's offset, here
    as the four cells each reads; the class token's own rows where token 0 is one."""
    qi, ki = xp.reshape(q_pos, [-1]), xp.reshape(k_pos, [-1])
    size = 2 * window - 1

    def cells(p: Array) -> tuple[Array, Array, Array]:  # a pair's source cells, its weight
        g = p.max() + 1
        d = xp.take(p, qi, 1)[:, :, None] - xp.take(p, ki, 1)[:, None, :] + (g - 1)
        scale = xp.asarray(float(size), "float32") / xp.astype(g * 2 - 1, "float32")
        src = xp.maximum((xp.astype(d, "float32") + 0.5) * scale - 0.5, 0.0)
        low = xp.astype(src, "int64")  # (src >= 0: its floor)
        return low, xp.minimum(low + 1, size - 1), src - xp.astype(low, "float32")

    (r0, r1, fr), (c0, c1, fc) = (cells(xp.take(pos, xp.asarray(i, "int64"), 0))
                                  for i in (0, 1))
    t = xp.astype(table, "float32")

    def at(r: Array, c: Array, weight: Array) -> Array:  # (B, n, m, heads)
        return xp.embedding(t, r * size + c) * weight[..., None]

    bias = (at(r0, c0, (1.0 - fr) * (1.0 - fc)) + at(r0, c1, (1.0 - fr) * fc)
            + at(r1, c0, fr * (1.0 - fc)) + at(r1, c1, fr * fc))
    if class_token:  # rows size^2 .. + 2: the class token to a patch, a patch to it, itself
        first_q, first_k = (qi == 0)[:, None, None], (ki == 0)[None, :, None]
        extra = [xp.slice(t, 0, size * size + i, size * size + i + 1) for i in range(3)]
        bias = xp.where(first_q & first_k, extra[2], xp.where(
            first_q, extra[0], xp.where(first_k, extra[1], bias)))
    bias = xp.swap_first(xp.move_last_first(bias))  # (B, heads, n, m)
    return bias if len(lead) == 1 else xp.reshape_axes(bias, 1, 2, list(lead))


def relative_logits(xp, r: Array, bank: Array, extent: int, q_pos: Array, k_pos: Array,
                    lead: tuple[int, ...]) -> Array:
    """Relative logits (Inkling's): each query's mix of the bank's bias-by-distance profiles,
    R = r @ bank (B, heads, n, extent), read at its distance to each key, d = q - k:
    R[..., d] for 0 <= d < extent, else 0; float32 (B, *lead, n, m)."""
    mixed = xp.matmul(xp.astype(r, "float32"), xp.astype(bank, "float32"))
    if len(lead) == 2:
        mixed = xp.reshape_axes(mixed, 1, 2, list(lead))
    distance = q_pos - k_pos  # (n, m)
    at = xp.take_rows(mixed, xp.minimum(xp.maximum(distance, 0), extent - 1))
    inside = (distance >= 0) & (distance < extent)
    return xp.where(inside, at, xp.asarray(0.0, "float32"))


def block_sparse(xp, node: Node, q: Array, k: Array, v: Array, L: Any, S: Any, d: int, dv: int,
                 ops: CoreOps) -> Array:
    """A block_sparse attention node: per block of n queries, the K key blocks the planner's
    cover reaches (band, global and random blocks, each visited once), attended over those
    K * n keys (memory L x K * n); rows of global queries (which see every key) then
    recomputed against every key (G x S). q (B, H, L, d), k (B, Hkv, S, d), v (B, Hkv, S, dv);
    L, S: lengths (ints or int64 scalars). (B, H, L, dv)."""
    n, K, c = node.attr("block"), node.attr("key_blocks"), node.attr("cover")
    expr, heads, kv = node.attr("expr"), node.attr("heads"), node.attr("kv_heads")
    g = heads // kv
    nq, nk = (L + (n - 1)) // n, (S + (n - 1)) // n
    qb = xp.reshape_axes(xp.zeros_after(q, 2, nq * n - L), 1, 4,
                         [kv, g, nq, n, d])  # (B, Hkv, g, nq, n, d)
    kb = xp.reshape_axes(xp.zeros_after(k, 2, nk * n - S), 1, 4, [kv, nk, n, d])
    vb = xp.reshape_axes(xp.zeros_after(v, 2, nk * n - S), 1, 4, [kv, nk, n, dv])

    # the key blocks each query block visits: (nq, K)
    i = xp.arange(nq)[:, None]  # (nq, 1)
    lo, hi = -math.ceil(c.left / n), math.ceil(c.right / n)
    parts = [i + xp.asarray([list(range(lo, hi + 1))], "int64")]
    if c.global_key_blocks(n):
        parts.append(xp.expand_rows(xp.asarray([list(c.global_key_blocks(n))], "int64"), i))
    parts += [masks.random_key_block(r.seed, i, j, nk) for r in c.randoms
              for j in range(r.blocks)]
    raw = xp.concat(parts, axis=1)  # (nq, K)
    in_range = (raw >= 0) & (raw < nk)
    earlier = xp.asarray(np.tril(np.ones((K, K), bool), -1), "bool")
    prior = (raw[:, :, None] == raw[:, None, :]) & earlier & in_range[:, None, :]  # (nq, K, K)
    dup = xp.amax(xp.astype(prior, "int64"), axis=2) > 0
    slot_ok = in_range & ~dup  # (nq, K): each visited block once
    idx = xp.minimum(xp.maximum(raw, 0), nk - 1)
    kg = xp.reshape_axes(xp.take(kb, idx, 2), 2, 6, [1, -1, K * n, d])  # (B, Hkv, 1, nq, K*n, d)
    vg = xp.reshape_axes(xp.take(vb, idx, 2), 2, 6, [1, -1, K * n, dv])

    offsets = xp.asarray(list(range(n)), "int64")
    q_pos = (i * n + offsets)[:, :, None]  # (nq, n, 1)
    k_pos = xp.reshape_axes(idx[:, :, None] * n + offsets, 1, 3, [1, K * n])  # (nq, 1, K*n)
    ok = xp.reshape_axes(xp.expand(slot_ok[:, :, None], [1, 1, n]), 1, 3, [1, K * n])
    # clamped positions keep gathers of runtime inputs in range; out-of-range pairs are masked
    q_c, k_c = xp.minimum(q_pos, L - 1), xp.minimum(k_pos, S - 1)
    s = ops.scores(qb, kg, q_c, k_c)  # (B, Hkv, g, nq, n, K*n)
    visible = masks.evaluate(expr, q_c, k_c, ops.context())
    visible = visible & ok & (k_pos < S) & (q_pos < L)
    o = ops.attend(s, visible, vg)  # (B, Hkv, g, nq, n, dv)
    o = xp.head(xp.reshape_axes(o, 1, 6, [heads, -1, dv]), 2, L)  # (B, H, L, dv)
    rows = list(range(c.q_first)) + [t for t in c.q_tokens if t >= c.q_first]
    return _global_rows(xp, node, o, rows, q, k, v, L, S, ops) if rows else o


def _global_rows(xp, node: Node, o: Array, rows: list[int], q: Array, k: Array, v: Array,
                 L: Any, S: Any, ops: CoreOps) -> Array:
    """o with the rows of global queries (positions `rows`, those past L ignored) recomputed
    against every key."""
    heads, kv, expr = node.attr("heads"), node.attr("kv_heads"), node.attr("expr")
    at = xp.minimum(xp.asarray(rows, "int64"), L - 1)  # (G,)
    qg = xp.reshape_axes(xp.take(q, at, 2), 1, 2, [kv, heads // kv])  # (B, Hkv, g, G, d)
    kf, vf = k[:, :, None], v[:, :, None]
    q_pos, k_pos = at[:, None], xp.arange(S)[None, :]  # (G, 1), (1, S)
    s = ops.scores(qg, kf, q_pos, k_pos)
    visible = masks.evaluate(expr, q_pos, k_pos, ops.context())
    og = xp.reshape_axes(ops.attend(s, visible, vf), 1, 3, [heads])  # (B, H, G, dv)
    # rows[j] is the position of global row j; rows start with the prefix 0..first-1
    first = 0
    while first < len(rows) and rows[first] == first:
        first += 1
    pos = xp.arange(L)
    row = xp.minimum(pos, max(first - 1, 0))  # row j of og for position j < first
    is_global = pos < first
    for j, t in enumerate(rows[first:], start=first):
        hit = pos == t
        row = xp.where(hit, xp.asarray(j, "int64"), row)
        is_global = is_global | hit
    picked = xp.take(og, row, 2)  # (B, H, L, dv)
    chosen = is_global[:, None]  # (L, 1)
    if lacks_bfloat16_cuda_kernel("Where", xp.dtype(o)):  # an exact 0 / 1 blend instead
        w = xp.astype(chosen, xp.dtype(o))
        return picked * w + o * (1.0 - w)
    return xp.where(chosen, picked, o)
