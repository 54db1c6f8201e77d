"""Strategy `linformer`: softmax over the k projected rows of the keys (the `seq_project`
nodes before it), in standard ops: O(L k) time and memory."""

from __future__ import annotations

from ..backends.lower.attend import qk_float32, scores
from ..backends.lower.builder import Lowering, arg, bsh
from ..ir import Node
from ..planner.cores import Core
from .base import Context, Match, Reject, Strategy

__all__ = ["STRATEGY"]


def match(a: Core, ctx: Context) -> Match | Reject:
    if a.kernel != "linformer":
        return Reject()
    return Match({}, ("Linformer: keys and values projected to k rows, then the L x k softmax "
                      "in standard ops (O(L k) time and memory); no fused kernel takes "
                      "projected keys",))


def lower(lw: Lowering, node: Node) -> str:
    """q (B, H, L, d) against k, v rows (B, Hkv, k, d): kv heads broadcast over their query
    groups, no mask (the projection already dropped the keys the mask hides)."""
    b = lw.b
    heads, kv = node.attr("heads"), node.attr("kv_heads")
    q, k = qk_float32(lw, node)
    if heads == kv:  # no query groups: plain 4-D products, no reshapes
        s = scores(lw, node, q, k, None, None, 4)  # (B, H, L, k)
        return bsh(lw, b.op("MatMul", b.to_model(b.op("Softmax", s, axis=-1)),
                            arg(lw, node, 2)))
    q = b.op("Reshape", q, b.op("Concat", b.i64(0, kv, heads // kv),
                                b.op("Shape", q, start=2), axis=0))  # (B, Hkv, g, L, d)
    k = b.op("Unsqueeze", k, b.i64(2))  # (B, Hkv, 1, k, d)
    v = b.op("Unsqueeze", arg(lw, node, 2), b.i64(2))
    s = scores(lw, node, q, k, None, None, 5)  # no score bias: the checker refuses them
    o = b.op("MatMul", b.to_model(b.op("Softmax", s, axis=-1)), v)  # (B, Hkv, g, L, dv)
    o = b.op("Reshape", o, b.op("Concat", b.i64(0, heads), b.op("Shape", o, start=3), axis=0))
    return bsh(lw, o)


STRATEGY = Strategy("linformer", 30, match, lambda params: 1, lower)
