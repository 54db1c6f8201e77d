"""Strategy `gqa_cache`: decoding in place, com.microsoft.GroupQueryAttention reading and
writing one [B, kv_heads, max_length, head_dim] cache buffer per layer (bound as both past and
present). The decoding planner takes it for every attention or for none (one model, one cache
layout, as onnxruntime-genai runs it)."""

from __future__ import annotations

from collections.abc import Mapping

from onnx import TensorProto

from .. import masks as m
from ..backends import formulas
from ..backends.lower.builder import Lowering, Sym, arg, bsh
from ..ir import Node, Op
from ..mechanisms import KERNELS
from ..planner.cores import BIAS_NAMES, Core, causal_window
from ..planner.cover import INF
from ..rope_scaling import DynamicScaling, LongRopeScaling
from ..targets import GQA_HEAD_DIM_MULTIPLE, get, has_kernel, kernel_dtypes
from .base import Context, Match, Reject, Strategy
from .gqa import TAKES, optional_inputs

__all__ = ["STRATEGY", "folded_rows", "in_place_obstacle", "kernel_inputs"]


def in_place_obstacle(a: Core, target: str, dtype: str = "float32") -> str | None:
    """Why attention `a` cannot decode with GroupQueryAttention writing one cache buffer in
    place, or None when it can."""
    provider = get(target).provider
    if not get(target).planned:
        return "the portable target uses standard ops only"
    if a.kind == "cross":
        return "cross attention caches the memory's keys, not the tokens'"
    if a.kernel in KERNELS:  # a kernel module's own node
        return f"{KERNELS[a.kernel].described} has no fused cache kernel"
    if a.paired_values:
        return "differential attention pairs each kv head's cached values with another's"
    if causal_window(a.mask) is None:
        return f"its mask `{m.render(a.mask)}` is not `causal` or `causal & window(left = " \
               "w - 1, right = 0)`"
    if a.bias_kind is not None:
        return f"{BIAS_NAMES[a.bias_kind]} score biases have no place in the kernel"
    untaken = a.untaken(TAKES)
    if untaken:
        return f"GroupQueryAttention cannot apply {untaken[0].described}"
    if a.value_dim != a.head_dim:
        return f"value_dim ({a.value_dim}) differs from head_dim ({a.head_dim})"
    if a.head_dim % GQA_HEAD_DIM_MULTIPLE:
        return f"head_dim {a.head_dim} is not a multiple of {GQA_HEAD_DIM_MULTIPLE}"
    if not has_kernel("GroupQueryAttention", dtype, provider):
        return f"GroupQueryAttention's {provider.upper()} kernel takes " \
               f"{' or '.join(kernel_dtypes('GroupQueryAttention', provider))} only"
    if a.sparsity.mode == "dense":
        return "sparsity = dense asks for the dense masked form"
    return None


def match(a: Core, ctx: Context) -> Match | Reject:
    why = in_place_obstacle(a, ctx.target, ctx.dtype)
    if why is not None:
        return Reject(why)
    window = causal_window(a.mask)
    return Match({"local_window_size": window if window != INF else -1},
                 ("decoding in place: GroupQueryAttention appends the new keys and values to "
                  "one max_length buffer (past = present) and attends causally"
                  + (f" within {window} keys" if window != INF else ""),))


def growth(params) -> float:
    return 1 if params.get("local_window_size", -1) > 0 else 2


def lower(lw: Lowering, node: Node) -> str:
    """Decoding in place: GroupQueryAttention appends the new keys and values to the past
    buffers [B, kv_heads, max_length, head_dim] (bound as the presents too) at each row's
    length and attends to the first seqlens_k + 1 slots. Row b's tokens fill slots
    0 .. sum(attention_mask[b]) - 1: its real tokens come first (right padding)."""
    b = lw.b
    past_k, past_v = arg(lw, node, 3), arg(lw, node, 4)
    planned = lw.rotary.get(node.out)  # the plan's packed_qkv and rotary rewrites
    rotary = {}
    if planned is not None:  # q, k, v as one GEMM's output (packed by the plan), RoPE in it
        q, k, v = lw.packed[planned.packed], "", ""
        if planned.rope is not None:
            cos, sin = _rotary_tables(lw, planned.rope, planned.rows)
            rotary = {"do_rotary": 1,
                      "rotary_interleaved": int(planned.rope.attr("interleaved"))}
    else:
        q, k, v = (bsh(lw, arg(lw, node, i)) for i in range(3))
    if "cache_lengths" not in lw.memo:
        mask = lw.env["attention_mask"]
        real = b.op("ReduceSum", mask, b.i64(1), keepdims=0)
        seqlens = b.op("Cast", b.op("Sub", real, b.i64(1)), to=TensorProto.INT32)
        total = b.op("Cast", b.op("Squeeze", b.op("Shape", mask, start=1, end=2), b.i64(0)),
                     to=TensorProto.INT32)
        lw.memo["cache_lengths"] = (seqlens, total)
    seqlens, total = lw.memo["cache_lengths"]
    tables = (cos, sin) if rotary else ()
    out = b.op("GroupQueryAttention", q, k, v, past_k, past_v, seqlens, total,
               *optional_inputs(lw, node, tables),
               outputs=3, domain="com.microsoft", num_heads=node.attr("heads"),
               kv_num_heads=node.attr("kv_heads"), scale=float(node.attr("scale")),
               softcap=float(node.attr("softcap") or 0.0),
               local_window_size=int(node.attr("local_window_size")), **rotary)
    present_k, present_v = node.attr("presents")
    lw.env[present_k], lw.env[present_v] = out[1], out[2]
    return out[0]


ROTARY_DIM_MULTIPLE = 16  # GroupQueryAttention's do_rotary: cos_cache width a multiple of 8


def kernel_inputs(node: Node, nodes: Mapping[str, Node], siblings: Mapping[str, list[Node]]
                  ) -> tuple[tuple[str, ...], Node | None] | None:
    """(the q, k, v projections' outputs, the q RoPE node or None) when the kernel of
    attention `node` can take them as they come: q, k, v projected by one GEMM (`siblings`,
    the planned packed projections), split into heads and (both or neither) rotated, nothing
    else between; else None. In the kernel, rotary positions are cache slots, which are the
    tokens' positions in an in-place cache (each row's real tokens come first). `nodes`: the
    graph's nodes by output (the planner's `packed_qkv` and `rotary` rewrites)."""
    chains = []
    for i in range(3):
        n = nodes.get(node.args[i])
        rope = None
        if n is not None and n.op is Op.ROPE:
            rope, n = n, nodes.get(n.args[0])
        if n is None or n.op is not Op.SPLIT_HEADS:
            return None
        chains.append((nodes.get(n.args[0]), rope))
    (q, q_rope), (k, k_rope), (v, v_rope) = chains
    if None in (q, k, v):
        return None
    projections = tuple(x.out for x in (q, k, v))
    group = tuple(n.out for n in siblings.get(q.out, ()))
    if group != projections or v_rope is not None or (q_rope is None) != (k_rope is None):
        return None
    if q_rope is not None and (q_rope.attrs != k_rope.attrs or q_rope.args[1:] != k_rope.args[1:]
                               or q_rope.attr("dim") % ROTARY_DIM_MULTIPLE
                               or dict(q_rope.attrs).get("mrope") is not None
                               or dict(q_rope.attrs).get("axial")):
        return None  # the kernel's cos/sin caches hold dim / 2 columns, a multiple of 8, of
        # one position stream
    return projections, q_rope


def folded_rows(rope: Node, max_length: int | None) -> tuple[int | None, str]:
    """The positions of the kernel's cos/sin caches when they are folded to constants (a
    known longest call, `max_length`, and frequencies that do not depend on the length:
    every scaling but dynamic and longrope), else None (each call's positions 0 .. S-1);
    with the reason."""
    scaling = rope.attr("scaling")
    if isinstance(scaling, DynamicScaling | LongRopeScaling):
        return None, ("cos/sin caches computed in each call for its positions: its "
                      f"{type(scaling).__name__} frequencies depend on the call's length")
    if not max_length:
        return None, ("cos/sin caches computed in each call for its positions: no longest "
                      "call is known (compile --context-length, a genai folder's context)")
    return max_length, (f"cos/sin caches of {max_length} positions made of constants, which "
                        "ONNX Runtime folds once at session start: a step computes no "
                        "trigonometry (the longest call is known)")


def _rotary_tables(lw: Lowering, rope: Node, folded: int | None) -> tuple[str, str]:
    """cos and sin [S, dim / 2] at positions 0 .. S-1 (S = attention_mask's length), the
    kernel's cos_cache and sin_cache, once per model for each RoPE; or, `folded` (planned,
    `folded_rows`), that many rows made of constants, which ONNX Runtime folds once at
    session start: a step then computes no trigonometry (the kernel reads the rows it
    needs)."""
    theta, dim, scaling = rope.attr("theta"), rope.attr("dim"), rope.attr("scaling")
    key = ("rotary_cache", theta, dim, scaling, folded)
    if key not in lw.memo:
        rows = lw.S  # every call's own positions; with a known longest call, constants
        if folded:
            rows = Sym(lw.b, lw.b.const(folded, "int64"), "int64", 0)  # folded
        cos, sin = formulas.rope_tables(lw.xp, lw.positions(rows), rows, theta, dim, scaling,
                                        lw.b.dtype)
        lw.memo[key] = (cos.name, sin.name)
    return lw.memo[key]


STRATEGY = Strategy("gqa_cache", None, match, growth, lower, takes=TAKES)
