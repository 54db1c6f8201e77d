"""Strategy `lsh`: Reformer's LSH attention, the kernel's own `lsh_attention` node in standard
ops (its arithmetic in `formulas.lsh_attention`): queries hashed into buckets by random
rotations, sorted, and attended in chunks with the previous chunk; O(L log L) time, O(L chunk)
memory."""

from __future__ import annotations

from .. import masks
from ..backends import formulas
from ..backends.lower.attend import kept_keys
from ..backends.lower.builder import Lowering, lower, static_last
from ..ir import Node, Op
from ..planner.cores import Core
from .base import Context, Match, Reject, Strategy

__all__ = ["STRATEGY"]


def match(a: Core, ctx: Context) -> Match | Reject:
    if a.kernel != "lsh":
        return Reject()
    return Match({}, ("LSH (Reformer): queries hashed into buckets, sorted, and attended in "
                      "chunks with the previous chunk, in standard ops (TopK sorts): "
                      "O(L log L) time, O(L chunk) memory; no fused kernel hashes",))


@lower(Op.LSH_ATTENTION)
def lower_lsh_attention(lw: Lowering, node: Node) -> str:
    q, v = lw.sym(node, 0), lw.sym(node, 1)
    kept = None
    if node.attr("keys") != masks.Full():  # the keys the padding mask shows, (B, L)
        n = lw.dim(q.name, 2)
        kept = lw.xp.reshape(kept_keys(lw, node.attr("keys"), n), [-1, n])
    heads = lw.graph_shapes[node.args[0]].dims[1]  # [B, H, L, d]
    dim = static_last(lw, node, 0)
    rotations = formulas.lsh_rotations(node.attr("seed"), heads, dim, node.attr("rounds"),
                                       node.attr("buckets"))
    return formulas.lsh_attention(lw.xp, q, v, kept, node.attr("causal"), rotations,
                                  node.attr("buckets"), node.attr("rounds"),
                                  node.attr("chunk"), node.attr("scale")).name


STRATEGY = Strategy("lsh", 20, match, lambda params: 1, lower_lsh_attention, fuses=False)
