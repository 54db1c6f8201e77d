"""Strategy `dense`: the masked L x S form in standard ops."""

from __future__ import annotations

from .. import masks
from ..backends.cache_slots import decoding_visible
from ..backends.lower.attend import (
    extra_logits,
    masked_attend,
    qk_float32,
    runtime_masks,
    scores,
    with_head_axes,
)
from ..backends.lower.builder import Lowering, Sym, arg, bsh
from ..backends.lower.sym import OnnxArrays
from ..ir import Node
from ..planner.cores import Core
from .base import Context, Match, Reject, Strategy

__all__ = ["STRATEGY", "decoding_visibility"]


def match(a: Core, ctx: Context) -> Match | Reject:
    """Asked for (`sparsity = dense`); otherwise the form every attention falls back to when
    no strategy before it applies (`strategies.DEFAULT`)."""
    if a.sparsity.mode == "dense":
        return Match({}, ("sparsity = dense asks for the dense masked form",))
    return Reject()


def lower(lw: Lowering, node: Node) -> str:
    """The masked L x S form, with kv heads broadcast (never copied) over their query groups."""
    b = lw.b
    heads, kv = node.attr("heads"), node.attr("kv_heads")
    g = heads // kv
    q, k = qk_float32(lw, node)
    q = b.op("Reshape", q, b.op("Concat", b.i64(0, kv, g), b.op("Shape", q, start=2),
                                axis=0))  # (B, Hkv, g, L, d)
    k = b.op("Unsqueeze", k, b.i64(2))  # (B, Hkv, 1, S, d)
    v = b.op("Unsqueeze", arg(lw, node, 2), b.i64(2))
    keys = lw.dim(arg(lw, node, 1), 2) if lw.decoding else None  # a bounded cache: fewer
    memory = lw.decoding and node.attr("kind") == "cross"  # keys: the cached memory rows
    if memory:  # its mask reads the key's index alone (decoding.check_decodable)
        q_pos = Sym(b, b.op("Unsqueeze", lw.arange(lw.L).name, b.i64(1)), "int64", 2)
        k_pos = Sym(b, b.op("Unsqueeze", lw.arange(keys).name, b.i64(0)), "int64", 2)
    else:
        q_pos, k_pos = lw.indices(keys)  # (L, 1), (1, S)
    s = scores(lw, node, q, k, q_pos, k_pos, 5)
    if memory:
        visible = masks.evaluate(node.attr("expr"), q_pos, k_pos,
                                 runtime_masks(lw, lw.L, keys))
        visible = with_head_axes(visible, node.attr("expr"))
    elif lw.decoding:
        visible = decoding_visibility(lw, node.attr("expr"), keys)
    else:
        visible = masks.evaluate(node.attr("expr"), q_pos, k_pos,
                                 runtime_masks(lw, lw.L, lw.S))
        visible = with_head_axes(visible, node.attr("expr"))
    o = masked_attend(lw, s, visible, v, extra_logits(lw, node, 5))  # (B, Hkv, g, L, dv)
    o = b.op("Reshape", o, b.op("Concat", b.i64(0, heads), b.op("Shape", o, start=3), axis=0))
    return bsh(lw, o)


def decoding_visibility(lw: Lowering, expr: masks.Mask, keys: Sym) -> Sym:
    """(B, 1, 1, L, K): `cache_slots.decoding_visible` for the K = `keys` keys of the call
    (the cache's and the new); once per model for each mask expression (which fixes how many
    keys its cache keeps)."""
    key = ("visible", expr)
    if key not in lw.memo:
        b = lw.b
        mask = Sym(b, lw.env["attention_mask"], "int64", 2)
        x = Sym(b, lw.env["x"], "float32", 3)  # (its shape alone is read)
        visible = decoding_visible(OnnxArrays(b), expr, mask, x, keys)
        lw.memo[key] = Sym(b, b.op("Unsqueeze", visible.name, b.i64(1, 2)), "bool", 5)
    return lw.memo[key]


STRATEGY = Strategy("dense", 40, match, lambda params: 2, lower)
