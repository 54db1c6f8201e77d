"""Strategy `mha`: com.microsoft.MultiHeadAttention (no mask, key padding, or causal through
`unidirectional`)."""

from __future__ import annotations

from onnx import TensorProto

from ...ir import Node
from .builder import Lowering, OnnxArrays, Sym, arg, bsh, repeat

__all__ = ["mha"]


def mha(lw: Lowering, node: Node) -> str:
    b = lw.b
    groups = node.attr("heads") // node.attr("kv_heads")
    q = bsh(lw, arg(lw, node, 0))
    k = bsh(lw, repeat(lw, arg(lw, node, 1), groups))
    v = bsh(lw, repeat(lw, arg(lw, node, 2), groups))
    attrs = {"domain": "com.microsoft", "num_heads": node.attr("heads"),
             "scale": float(node.attr("scale")),
             "unidirectional": 1 if dict(node.attrs).get("causal") else None}
    if not node.attr("key_padding"):
        return b.op("MultiHeadAttention", q, k, v, **attrs)
    lengths = lw.env["key_lengths"]
    # the kernel takes int32 lengths: clamp to [0, S] first, so 2^32 is S and not 0
    clamped = OnnxArrays.minimum(OnnxArrays.maximum(Sym(b, lengths, "int64", 1), 0), lw.S)
    out = b.op("MultiHeadAttention", q, k, v, "",
               b.op("Cast", clamped.name, to=TensorProto.INT32), **attrs)
    # a row with no visible key is zeros, whatever the kernel does with it
    any_key = b.op("Unsqueeze", b.op("Greater", lengths, b.const(0, "int64")), b.i64(1, 2))
    return b.op("Where", any_key, out, b.const(0.0, b.dtype))
