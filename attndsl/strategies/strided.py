"""Strategy `strided`: masks within a band and one residue class (Sparse Transformer's strided
pattern, `causal & (window(left = n - 1, right = 0) | strided(n))`). Each query scores the
w keys of its band, gathered per query, and the L / n keys of its residue class mod n, in a
layout where the class is contiguous; one softmax over both (a key in both counts once, in
the class): work and memory grow with L x (w + L / n), not L x L. Float32 throughout, in the
(B, kv_heads, groups, ...) layout of the other softmax strategies."""

from __future__ import annotations

from .. import masks
from ..backends import formulas
from ..backends.lower.attend import extra_logits, qk_float32, runtime_masks, scores
from ..backends.lower.builder import Lowering, OnnxArrays, Sym, arg, bsh, static_last
from ..ir import Node
from ..ir.ops import BIAS_OPERANDS
from ..planner.cores import Core
from ..planner.cover import cover
from .base import Context, Match, Reject, Strategy

__all__ = ["MAX_STRIDED_BAND", "STRATEGY"]

MAX_STRIDED_BAND = 1024  # strided execution gathers the band's keys for every query


def match(a: Core, ctx: Context) -> Match | Reject:
    """A cover of one band and one residue class mod n, nothing else."""
    c = cover(a.mask, self_attention=a.kind == "self")
    if not c.strides:
        return Reject()
    why_not = []
    if len(c.strides) > 1:
        why_not.append(f"it mixes strides {', '.join(map(str, c.strides))}")
    if c.randoms or c.q_first or c.q_tokens or c.k_first or c.k_tokens:
        why_not.append("it has global or random parts besides the stride")
    if a.bias_kind in BIAS_OPERANDS:
        why_not.append("its score bias reads rows of each query's own (relative logits)")
    if not c.banded or c.left + c.right + 1 > MAX_STRIDED_BAND:
        why_not.append(f"its band is wider than {MAX_STRIDED_BAND} keys")
    if why_not:
        return Reject("dense masked form: not strided execution: " + "; ".join(why_not))
    n, left, right = c.strides[0], int(c.left), int(c.right)
    return Match({"stride": n, "left": left, "right": right},
                 (f"strided in standard ops: {c.describe()}; each query scores its band of "
                  f"{left + right + 1} keys and its residue class mod {n} (L / {n} keys), so "
                  f"work and memory grow with L x (L / {n} + {left + right + 1}), not L x S",))


def growth(params) -> float:
    """L x (w + L / n): quadratic at a fixed stride (L / n keys per query)."""
    return 2


def lower(lw: Lowering, node: Node) -> str:
    b, xp = lw.b, lw.xp
    expr = node.attr("expr")
    heads, kv = node.attr("heads"), node.attr("kv_heads")
    g = heads // kv
    n, left, right = node.attr("stride"), node.attr("left"), node.attr("right")
    w = left + right + 1
    d, dv = static_last(lw, node, 0), static_last(lw, node, 2)
    L = lw.L
    rows = (L + (n - 1)) // n  # Lc, a residue class's length
    Lp = rows * n

    def reshape(t: str, dims: list) -> str:  # 0 keeps the input's dimension
        return b.op("Reshape", t, xp.vector(dims))

    def padded(t: str) -> str:  # (B, h, L, x) -> (B, h, Lp, x), zeros after
        return xp.pad(Sym(b, t, "float32", 4), 2, Lp - L).name

    q, k = qk_float32(lw, node)
    q = reshape(padded(q), [0, kv, g, Lp, d])  # (B, Hkv, g, Lp, d)
    k = b.op("Unsqueeze", padded(k), b.i64(2))  # (B, Hkv, 1, Lp, d)
    v = b.op("Unsqueeze", padded(b.to_float32(arg(lw, node, 2))), b.i64(2))

    def classes(t: str, lead: int, width: int) -> str:
        """(B, Hkv, lead, Lp, x) -> (B, Hkv, lead, n, Lc, x): class r holds r, r + n, ..."""
        grid = reshape(t, [0, kv, lead, rows, n, width])
        return b.op("Transpose", grid, perm=[0, 1, 2, 4, 3, 5])

    def query_order(t: str, rank: int) -> str:  # (..., n, Lc, Lc) -> (..., Lp, Lc)
        perm = list(range(rank))
        perm[-3], perm[-2] = perm[-2], perm[-3]
        return reshape(b.op("Transpose", t, perm=perm), [0] * (rank - 3) + [Lp, rows])

    def int_sym(value, rank: int) -> Sym:
        return Sym(b, b.const(value, "int64"), "int64", rank)

    def unsqueezed(t: Sym, axis: int) -> Sym:
        return Sym(b, b.op("Unsqueeze", t.name, b.i64(axis)), t.dtype, t.ndim + 1)

    # the residue part: queries r + i n against keys r + j n, (B, Hkv, g, n, Lc, Lc)
    r = int_sym([[[i]] for i in range(n)], 3)  # (n, 1, 1)
    j = lw.arange(rows)
    q_res = r + unsqueezed(j, 1) * n  # (n, Lc, 1)
    k_res = r + unsqueezed(j, 0) * n  # (n, 1, Lc)
    q_at, k_at = OnnxArrays.minimum(q_res, L - 1), OnnxArrays.minimum(k_res, L - 1)
    s_res = scores(lw, node, classes(q, g, d), classes(k, 1, d), q_at, k_at, 6)
    seen_res = masks.evaluate(expr, q_at, k_at, runtime_masks(lw, L, L)) & (k_res < L)

    # the band part: query p against keys p - left .. p + right, (B, Hkv, g, Lp, 1, w)
    p = unsqueezed(lw.arange(Lp), 1)  # (Lp, 1)
    k_band = p + int_sym([list(range(-left, right + 1))], 2)  # (Lp, w)
    at = OnnxArrays.minimum(OnnxArrays.maximum(k_band, 0), L - 1)
    kg = b.op("Gather", k, at.name, axis=3)  # (B, Hkv, 1, Lp, w, d)
    vg = b.op("Gather", v, at.name, axis=3)  # (B, Hkv, 1, Lp, w, dv)
    q_pos = unsqueezed(OnnxArrays.minimum(p, L - 1), 2)  # (Lp, 1, 1)
    k_pos = unsqueezed(at, 1)  # (Lp, 1, w)
    s_band = scores(lw, node, b.op("Unsqueeze", q, b.i64(4)), kg, q_pos, k_pos, 6)
    in_class = Sym(b, b.const([[[o % n == 0 for o in range(-left, right + 1)]]], "bool"),
                   "bool", 3)  # counted in the residue part
    k_raw = unsqueezed(k_band, 1)
    seen_band = masks.evaluate(expr, q_pos, k_pos, runtime_masks(lw, L, L)) & \
        (k_raw >= 0) & (k_raw < L) & ~in_class  # (B|1, Lp, 1, w)

    # one softmax over both, in query order: (B, Hkv, g, Lp, w + Lc)
    s = xp.concat([Sym(b, b.op("Squeeze", s_band, b.i64(4)), "float32", 5),
                   Sym(b, query_order(s_res, 6), "float32", 5)], axis=-1)
    band = b.op("Squeeze", seen_band.name, b.i64(-2))  # (B|1, Lp, w)
    seen = xp.concat([Sym(b, band, "bool", seen_band.ndim - 1),
                      Sym(b, query_order(seen_res.name, seen_res.ndim), "bool",
                          seen_res.ndim - 1)], axis=-1)
    if masks.runtime_inputs(expr):  # (B, Lp, w + Lc) -> (B, 1, 1, Lp, w + Lc)
        seen = Sym(b, b.op("Unsqueeze", seen.name, b.i64(1, 2)), "bool", seen.ndim + 2)
    probs, any_key = formulas.masked_softmax(xp, s, seen, extra_logits(lw, node, 5))
    p_band = b.op("Slice", probs.name, b.i64(0), b.i64(w), b.i64(-1))  # (B, Hkv, g, Lp, w)
    p_res = b.op("Slice", probs.name, b.i64(w), b.i64(2**62), b.i64(-1))  # (.., Lp, Lc)
    o_band = b.op("MatMul", b.op("Unsqueeze", p_band, b.i64(4)), vg)  # (.., Lp, 1, dv)
    o_band = b.op("Squeeze", o_band, b.i64(4))  # (B, Hkv, g, Lp, dv)
    p_cls = b.op("Transpose", reshape(p_res, [0, kv, g, rows, n, rows]),
                 perm=[0, 1, 2, 4, 3, 5])  # (B, Hkv, g, n, Lc, Lc)
    o_res = b.op("MatMul", p_cls, classes(v, 1, dv))  # (B, Hkv, g, n, Lc, dv)
    o_res = reshape(b.op("Transpose", o_res, perm=[0, 1, 2, 4, 3, 5]), [0, kv, g, Lp, dv])
    o = b.op("Mul", b.op("Add", o_band, o_res), any_key.name)  # rows with no key: 0
    o = reshape(o, [0, heads, Lp, dv])
    o = b.op("Slice", o, b.i64(0), b.op("Unsqueeze", L.name, b.i64(0)), b.i64(2))
    return bsh(lw, b.to_model(o))


STRATEGY = Strategy("strided", 70, match, growth, lower)
