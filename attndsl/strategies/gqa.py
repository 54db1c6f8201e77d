"""Strategy `gqa`: com.microsoft.GroupQueryAttention, ONNX Runtime's fused causal kernel
(causal, or a causal sliding window; GQA/MQA; softcap)."""

from __future__ import annotations

from onnx import TensorProto

from .. import mechanisms
from ..backends.lower.builder import Lowering, arg, bsh
from ..ir import Node
from ..planner.cores import BIAS_NAMES, Core, causal_window
from ..planner.cover import INF
from ..targets import GQA_HEAD_DIM_MULTIPLE, has_kernel, kernel_dtypes, kernel_skips_outside_window
from .base import Context, Match, Reject, Strategy

__all__ = ["STRATEGY", "TAKES", "optional_inputs"]

# what GroupQueryAttention applies itself: the score modifier `softcap` (its attribute) and
# the `softmax` hook's learned sinks (its head_sink input, `optional_inputs`)
TAKES = frozenset({"softcap", "sinks"})


def match(a: Core, ctx: Context) -> Match | Reject:
    window = causal_window(a.mask) if a.kind == "self" else None
    why_not = []
    if window is None:
        why_not.append("the mask is not `causal` or `causal & window(left = w - 1, right = 0)`"
                       + ("" if a.kind == "self" else " on self attention"))
    if a.value_dim != a.head_dim:
        why_not.append(f"value_dim ({a.value_dim}) differs from head_dim ({a.head_dim})")
    if a.head_dim % GQA_HEAD_DIM_MULTIPLE:
        why_not.append(f"its kernels need head_dim a multiple of {GQA_HEAD_DIM_MULTIPLE} "
                       f"(found {a.head_dim})")
    if a.bias_kind is not None:
        why_not.append(f"{BIAS_NAMES[a.bias_kind]} score biases would need an L x S "
                       "attention_bias input")
    why_not += [f"its kernel cannot apply {m.described}" for m in a.untaken(TAKES)]
    windowed = window is not None and window != INF
    if not why_not and not has_kernel("GroupQueryAttention", ctx.dtype, ctx.provider):
        why_not.append(f"its {ctx.provider.upper()} kernel takes "
                       f"{' or '.join(kernel_dtypes('GroupQueryAttention', ctx.provider))} only "
                       "(compile with --dtype float16 for it)")
    elif not why_not and windowed and not kernel_skips_outside_window(ctx.provider):
        why_not.append("on the CPU its kernel still visits every earlier key outside "
                       "local_window_size (about 4x slower than block-sparse at L = 8192, "
                       "BENCHMARKS.md); ort-cuda uses it")
    if why_not:
        return Reject("not GroupQueryAttention: " + "; ".join(why_not))
    if a.sparsity.mode == "block":
        return Reject()
    size = window if window != INF else -1
    reasons = ["GroupQueryAttention: ORT's fused causal kernel"
               + (f" with local_window_size = {size}" if size > 0 else "")
               + (f", {a.groups} query heads per kv head" if a.groups > 1 else "")
               + (f", softcap {a.modifier('softcap')}" if a.modifier("softcap") else "")
               + (", learned sinks as its head_sink input" if dict(a.softmax).get("sinks")
                  else "")]
    if a.prepared:
        reasons.append("qk_norm / RoPE are applied in standard ops before the kernel "
                       "(do_rotary is not used: it needs cos/sin caches of a maximum length)")
    return Match({"local_window_size": size}, tuple(reasons))


def growth(params) -> float:
    """The L x S kernel; a window bounds the keys each query visits."""
    return 1 if params.get("local_window_size", -1) > 0 else 2


def lower(lw: Lowering, node: Node) -> str:
    b = lw.b
    q, k, v = (bsh(lw, arg(lw, node, i)) for i in range(3))
    L = lw.L
    batch = b.op("Shape", q, start=0, end=1)
    last = b.op("Sub", b.op("Unsqueeze", L.name, b.i64(0)), b.i64(1))
    seqlens = b.op("Cast", b.op("Expand", last, batch), to=TensorProto.INT32)
    total = b.op("Cast", L.name, to=TensorProto.INT32)
    out = b.op("GroupQueryAttention", q, k, v, "", "", seqlens, total,
               *optional_inputs(lw, node), outputs=3, domain="com.microsoft",
               num_heads=node.attr("heads"), kv_num_heads=node.attr("kv_heads"),
               scale=float(node.attr("scale")),
               softcap=float(node.attr("softcap") or 0.0),
               local_window_size=int(node.attr("local_window_size")))
    return out[0]


def optional_inputs(lw: Lowering, node: Node, tables: tuple[str, ...] = ()) -> tuple[str, ...]:
    """GroupQueryAttention's inputs after total_sequence_length: cos_cache and sin_cache
    (`tables`, when the kernel rotates), position_ids and attention_bias (unused), then
    head_sink: the learned sink logits (heads,) in the model dtype, which the kernel adds to
    each row's denominator as `formulas.masked_softmax` does."""
    sinks = mechanisms.softmax_logits(node)
    if sinks is None:
        return tables
    return (*(tables or ("", "")), "", "", lw.w(sinks))


STRATEGY = Strategy("gqa", 50, match, growth, lower, takes=TAKES)
