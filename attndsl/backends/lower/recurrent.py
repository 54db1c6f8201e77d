"""ONNX Runtime's com.microsoft.LinearAttention in place of a recurrent kernel's chunked form
(the recurrent kernels' strategies lower their `kernel` node with these). The contrib op runs
the recurrence of docs/LANGUAGE.md from the past state (zeros without one), o_t = scale q_t^T
S_t: attndsl passes q and k L2-normed for `gated_delta`, q times the layer's scale (the op's
scale 1), and the module's gates, zero at a padding slot so that the state passes it
unchanged, as in the module's own form."""

from __future__ import annotations

from ...ir import Node
from ...mechanisms.base_recurrent import prepared
from ..conv import new_tokens
from .attend import kept_keys
from .builder import Lowering, Sym, bsh

__all__ = ["contrib", "lower_linear_attention", "real_tokens"]


def lower_linear_attention(lw: Lowering, node: Node, gates) -> str:
    """LinearAttention (`gated_delta`) on the node's q, k, v heads (B, Hq, L, dk), (B, Hq, L,
    dk), (B, H, L, dv) and the gates `gates(xp, args, weights)` makes of its other arguments:
    beta (B, H, L) and the log decay (B, H, L) per head or (B, H, L, dk) per key channel;
    query head h // (H / Hq) serves head h. One pass the outputs (B, H, L, dv); decoding the
    outputs then the present state (B, H, dk, dv) along the length (the module's packed
    layout), the past state read from the node's sixth argument."""
    xp = lw.xp
    args = [lw.sym(node, i) for i in range(len(node.args))]
    q, k, v = args[:3]
    heads, key_heads = (lw.graph_shapes[node.args[i]].dims[1] for i in (2, 0))
    beta, g = gates(xp, args, [lw.weight(w) for w in node.attr("weights")])
    channels = g.ndim == 4
    q, k, v, beta, g = prepared(xp, q, k, v, beta, g, node.attr("scale"), heads // key_heads,
                                real_tokens(lw, node, xp.shape(q, 2)), channels=channels)
    decay = bsh(lw, g.name) if channels else xp.swap_last(g).name
    return contrib(lw, node, "gated_delta", (q, k, v), decay, xp.swap_last(beta).name, heads)


def real_tokens(lw: Lowering, node: Node, length: Sym) -> Sym | None:
    """The node's real tokens (B, L) float32, or None for every token: a decoding call's new
    tokens whose attention_mask is not 0, one pass's those its `padding` shows."""
    b, xp = lw.b, lw.xp
    if node.attr("decoding"):
        return new_tokens(xp, Sym(b, lw.env["attention_mask"], "int64", 2), length)
    if node.attr("padding") is None:
        return None
    kept = kept_keys(lw, node.attr("padding"), length)  # (B, 1, L)
    return xp.astype(xp.reshape(kept, [xp.shape(kept, 0), -1]), "float32")


def contrib(lw: Lowering, node: Node, rule: str, qkv: tuple, decay: str, beta: str | None,
            heads: int, skip: Sym | None = None) -> str:
    """LinearAttention (`rule`, scale 1) on the float32 q, k, v heads (B, H, L, d) and the
    packed decay (and beta, for `gated_delta`): one pass the outputs (B, H, L, dv) (plus
    `skip`, float32, where given) in the model's dtype; decoding, the outputs then the present
    state along the length, the past state the node's next to last argument (before
    attention_mask)."""
    b, xp = lw.b, lw.xp
    decoding = node.attr("decoding")
    past = xp.astype(lw.sym(node, len(node.args) - 2), "float32").name if decoding else ""
    y, state = b.op("LinearAttention", *(bsh(lw, t.name) for t in qkv), past, decay,
                    *((beta,) if beta is not None else ()), outputs=2, domain="com.microsoft",
                    q_num_heads=heads, kv_num_heads=heads, update_rule=rule, scale=1.0)
    out = Sym(b, y, "float32", 3)  # (B, L, H dv) -> (B, H, L, dv)
    out = xp.reshape(out, [0, 0, heads, -1])
    out = Sym(b, b.op("Transpose", out.name, perm=[0, 2, 1, 3]), "float32", 4)
    if skip is not None:
        out = out + skip
    if decoding:
        out = xp.concat([out, Sym(b, state, "float32", 4)], axis=2)
    return xp.astype(out, b.dtype).name
