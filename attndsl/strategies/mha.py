"""Strategy `mha`: com.microsoft.MultiHeadAttention (no mask, key padding, or causal through
`unidirectional`)."""

from __future__ import annotations

from onnx import TensorProto

from ..backends.lower.builder import Lowering, OnnxArrays, Sym, arg, bsh, repeat
from ..ir import Node
from ..planner.cores import Core, causal_window, padding_only
from ..planner.cover import INF
from ..targets import has_kernel, kernel_dtypes
from .base import Context, Match, Reject, Strategy

__all__ = ["STRATEGY", "TAKES"]

# MultiHeadAttention applies no score modifier and no `softmax` hook mechanism
TAKES: frozenset[str] = frozenset()


def match(a: Core, ctx: Context) -> Match | Reject:
    """Unmasked or key-padded attention; plain causal where GroupQueryAttention has no
    kernel for the dtype (float32 on CUDA), through `unidirectional`."""
    mask_kind = padding_only(a.mask)
    causal = (not has_kernel("GroupQueryAttention", ctx.dtype, ctx.provider)
              and a.kind == "self" and causal_window(a.mask) == INF and mask_kind is None)
    why_not = []
    if mask_kind is None and not causal:
        why_not.append("the mask is more than full or key padding")
    why_not += [f"MultiHeadAttention cannot apply {m.described}" for m in a.untaken(TAKES)]
    if a.bias_kind is not None:
        why_not.append("score biases would need an L x S attention_bias input")
    if a.value_dim != a.head_dim:
        why_not.append("value_dim differs from head_dim")
    if not has_kernel("MultiHeadAttention", ctx.dtype, ctx.provider):
        why_not.append(f"its {ctx.provider.upper()} kernel has no {ctx.dtype} ("
                       f"{' and '.join(kernel_dtypes('MultiHeadAttention', ctx.provider))} only)")
    if why_not:
        shown = mask_kind is not None or causal  # else the mask alone rules it out: no note
        return Reject("not MultiHeadAttention: " + "; ".join(why_not) if shown else None)
    if a.sparsity.mode == "block":
        return Reject()
    if causal:
        reasons = ["MultiHeadAttention with unidirectional = 1: ORT's fused causal kernel for "
                   "float32 on CUDA"]
    else:
        reasons = ["MultiHeadAttention: ORT's flash kernel for attention without a mask"
                   + (" (key lengths as key_padding_mask)" if mask_kind else "")]
    if a.groups > 1:
        reasons.append("kv heads are expanded to all query heads first (MHA has no GQA)")
    return Match({"key_padding": bool(mask_kind)} | ({"causal": True} if causal else {}),
                 tuple(reasons))


def lower(lw: Lowering, node: Node) -> str:
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


STRATEGY = Strategy("mha", 60, match, lambda params: 2, lower, takes=TAKES)
