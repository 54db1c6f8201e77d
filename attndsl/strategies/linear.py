"""Strategy `linear`: the linear kernel's own `kernel` node (mechanisms/linear.py), in standard
ops, lowered here by the kernel's name (`LOWERINGS`); causal linear attention in chunks: O(L)
time and memory instead of the L x L masked product. Within a chunk of C queries, the masked
C x C product; across chunks, the running sums of phi(k) v_k^T and phi(k) over every earlier
chunk (an exclusive CumSum of each chunk's own sums)."""

from __future__ import annotations

import numpy as np

from ..backends.lower.builder import Lowering, static_last
from ..backends.lower.ops import kernel_form
from ..ir import Node
from ..mechanisms.linear import feature_map
from ..planner.cores import Core
from .base import Context, Match, Reject, Strategy

__all__ = ["CHUNK", "STRATEGY"]

CHUNK = 64  # queries per chunk: a chunk's C x C product against the d x dv running sums


def match(a: Core, ctx: Context) -> Match | Reject:
    if a.kernel != "linear":
        return Reject()
    return Match({}, ("linear kernel: O(L) sums in standard ops (causal: in chunks of 64 "
                      "queries, running sums across chunks); no softmax kernel applies",))


def lower_linear_attention(lw: Lowering, node: Node) -> str:
    """O(L): running sums across chunks, over one sequence; else the module's form (cross
    attention's causal mask relates L queries to S memory rows; a decoding call's keys are
    the cache's, masked by attention_mask)."""
    if node.attr("causal") and not lw.decoding and "memory" not in lw.env:
        return causal_linear_attention(lw, node)
    return kernel_form(lw, node)


def causal_linear_attention(lw: Lowering, node: Node) -> str:
    """docs/LANGUAGE.md (Kernels), causal: y_q = phi(q) . S_q / max(phi(q) . z_q, 1e-6) with
    S_q = sum_{k <= q} phi(k) v_k^T and z_q = sum_{k <= q} phi(k), in float32, for q, k, v
    (B, H, L, d) of one sequence. Returns the model dtype."""
    b, xp = lw.b, lw.xp
    widths = [static_last(lw, node, i) for i in range(3)]
    q, k, v = (xp.astype(lw.sym(node, i), "float32") for i in range(3))
    fq, fk = feature_map(xp, q, node.attr("feature")), feature_map(xp, k, node.attr("feature"))
    L = lw.dim(q.name, 2)
    pad = (L + (CHUNK - 1)) // CHUNK * CHUNK - L  # zero rows after the last token
    pads = b.op("Concat", b.i64(0, 0, 0, 0, 0, 0), b.op("Unsqueeze", pad.name, b.i64(0)),
                b.i64(0), axis=0)

    def chunked(t: str, width: int) -> str:  # (B, H, L, d) -> (B, H, n, C, d)
        return b.op("Reshape", b.op("Pad", t, pads), b.i64(0, 0, -1, CHUNK, width))

    cq, ck, cv = (chunked(t.name, w) for t, w in zip((fq, fk, v), widths, strict=True))
    ck_t = b.op("Transpose", ck, perm=[0, 1, 2, 4, 3])  # (B, H, n, d, C)
    tril = b.const(np.tril(np.ones((CHUNK, CHUNK), np.float32)), "float32")
    within = b.op("Mul", b.op("MatMul", cq, ck_t), tril)  # (B, H, n, C, C): k <= q in-chunk
    num = b.op("MatMul", within, cv)  # (B, H, n, C, dv)
    den = b.op("ReduceSum", within, b.i64(-1), keepdims=1)  # (B, H, n, C, 1)
    before = b.op("CumSum", b.op("MatMul", ck_t, cv), b.i64(2), exclusive=1)  # (.., d, dv)
    z = b.op("CumSum", b.op("ReduceSum", ck, b.i64(-2), keepdims=0), b.i64(2), exclusive=1)
    num = b.op("Add", num, b.op("MatMul", cq, before))
    den = b.op("Add", den, b.op("MatMul", cq, b.op("Unsqueeze", z, b.i64(-1))))
    y = b.op("Div", num, b.op("Max", den, b.const(1e-6, "float32")))  # (B, H, n, C, dv)
    y = b.op("Reshape", y, b.i64(0, 0, -1, widths[2]))
    y = b.op("Slice", y, b.i64(0), b.op("Unsqueeze", L.name, b.i64(0)), b.i64(2))
    return b.to_model(y)


STRATEGY = Strategy("linear", 10, match, lambda params: 1, lower_linear_attention, fuses=False)
