"""Strategy `gqa`: com.microsoft.GroupQueryAttention, ONNX Runtime's fused causal kernel."""

from __future__ import annotations

from onnx import TensorProto

from ...ir import Node
from .builder import Lowering, arg, bsh

__all__ = ["gqa"]


def gqa(lw: Lowering, node: Node) -> str:
    b = lw.b
    q, k, v = (bsh(lw, arg(lw, node, i)) for i in range(3))
    L = lw.L
    batch = b.op("Shape", q, start=0, end=1)
    last = b.op("Sub", b.op("Unsqueeze", L.name, b.i64(0)), b.i64(1))
    seqlens = b.op("Cast", b.op("Expand", last, batch), to=TensorProto.INT32)
    total = b.op("Cast", L.name, to=TensorProto.INT32)
    out = b.op("GroupQueryAttention", q, k, v, "", "", seqlens, total, outputs=3,
               domain="com.microsoft", num_heads=node.attr("heads"),
               kv_num_heads=node.attr("kv_heads"), scale=float(node.attr("scale")),
               softcap=float(node.attr("softcap") or 0.0),
               local_window_size=int(node.attr("local_window_size")))
    return out[0]
