"""RoPE's lowering: rotations over standard ops with cos and sin tables shared per model,
or, planned (`planner.rewrites`, `mrotary`), multimodal RoPE as ONNX Runtime's
MRotaryEmbedding."""

from __future__ import annotations

from ...ir import Node, Op
from ...positions import mrope_streams
from .. import formulas
from .builder import Lowering, Sym, lower, width


@lower(Op.ROPE)
def _rope(lw: Lowering, node: Node) -> str:
    """RoPE with cos and sin computed once per model for each (positions, frequencies): q and
    k of every layer at the same positions share them."""
    x = lw.sym(node)
    side = node.shape.dims[2]  # L (queries, self-attention keys) or S (memory)
    theta, dim, scaling = node.attr("theta"), node.attr("dim"), node.attr("scaling")
    attrs = dict(node.attrs)
    mrope, layout = attrs.get("mrope"), attrs.get("mrope_interleaved", False)
    axial = attrs.get("axial", False)
    if node.out in lw.mrotary:  # planned: ONNX Runtime's MRotaryEmbedding
        return mrotary(lw, node, x)
    key = ("rope", side, node.args[1:], theta, dim, scaling, mrope, layout, axial)
    if key not in lw.memo:
        pos = lw.token_positions(node, lw.dim(x.name, 2))
        if mrope is not None:  # (3, B, n, 1) -> (B, 1, n, dim/2): each frequency's stream
            pos = formulas.mrope_positions(lw.xp, pos, mrope, layout, dim // 2)
        elif axial:  # (2, B, n, 1) -> (B, 1, n, dim/2): rows, then columns
            pos = formulas.axial_positions(lw.xp, pos, dim // 2)
        elif pos.ndim == 3:  # (B, n, 1) -> (B, 1, n, 1): one row of positions per sequence
            pos = pos[:, None]
        lw.memo[key] = formulas.rope_tables(lw.xp, pos, lw.S, theta, dim, scaling, lw.b.dtype,
                                            axial)
    cos, sin = lw.memo[key]
    return formulas.rotate(lw.xp, x, cos, sin, dim, node.attr("interleaved"),
                           width(node.shape)).name


def mrotary(lw: Lowering, node: Node, x: Sym) -> str:
    """Multimodal RoPE as com.microsoft.MRotaryEmbedding (planned, `Rewrites.mrotary`): cos
    and sin tables of positions 0 .. max(max(position_ids), n - 1) for a call of n tokens
    (computed once per call and model; ONNX Runtime refuses tables of fewer than n rows),
    its sections the count of frequencies each stream takes (the layout's own rule gives
    the same streams)."""
    theta, dim, scaling = node.attr("theta"), node.attr("dim"), node.attr("scaling")
    mrope, layout = node.attr("mrope"), node.attr("mrope_interleaved")
    ids = lw.env[node.args[1]]
    key = ("mrope_tables", ids, theta, dim, scaling)
    if key not in lw.memo:
        b = lw.b
        top = Sym(b, b.op("ReduceMax", ids, keepdims=0), "int64", 0)
        n = lw.dim(x.name, 2)  # (the kernel wants as many rows as the call has tokens too)
        rows = Sym(b, b.op("Max", (top + 1).name, n.name), "int64", 0)
        lw.memo[key] = tuple(t.name for t in formulas.rope_tables(
            lw.xp, lw.positions(rows), lw.S, theta, dim, scaling, lw.b.dtype))
    cos, sin = lw.memo[key]
    streams = mrope_streams(mrope, layout, dim // 2)
    sections = [streams.count(j) for j in range(3)]
    return lw.b.op("MRotaryEmbedding", x.name, ids, cos, sin, domain="com.microsoft",
                   mrope_section=sections, mrope_layout=int(layout),
                   interleaved=int(node.attr("interleaved")),
                   rotary_embedding_dim=dim if dim != width(node.shape) else 0,
                   num_heads=node.shape.dims[1] if dim != width(node.shape) else 0)
