"""Strategy `block_sparse`: per block of queries, only the key blocks the mask's cover can
reach, in standard ops; rows of global queries recomputed densely."""

from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from .. import masks
from ..backends.lower.attend import (
    masked_attend,
    qk_float32,
    runtime_masks,
    scores,
    sink_logits,
    with_head_axes,
)
from ..backends.lower.builder import Lowering, OnnxArrays, Sym, arg, bsh, static_last
from ..dtypes import ONNX_TYPE, numpy_dtype
from ..ir import Node
from ..planner.cores import Core
from ..planner.cover import cover
from ..targets import lacks_bfloat16_cuda_kernel
from .base import Context, Match, Reject, Strategy

__all__ = ["MAX_BLOCK", "MAX_KEY_BLOCKS", "STRATEGY"]

BLOCK_SIZES = (64, 128, 256)
# Block-sparse execution deduplicates the visited key blocks with (K x K) tables per query block
# and gathers K * n keys per query: beyond this many blocks dense attention is no slower.
MAX_KEY_BLOCKS = 64
MAX_BLOCK = 1024  # the largest query/key block it executes (a random mask's own block size)


def match(a: Core, ctx: Context) -> Match | Reject:
    """A mask whose cover is a bounded band (plus global and random parts, no stride):
    block size n (the random draws', the spec's `sparsity = block(n)`, else the one of
    BLOCK_SIZES that visits the fewest keys) and K key blocks per query block. The same on
    every target and dtype (`blocks`)."""
    return blocks(a, "standard ops")


def blocks(a: Core, ops: str) -> Match | Reject:
    """`match`, its reasons saying the blocks run in `ops` ("standard ops" for ONNX, "torch
    ops" for the torch module's plan, which takes the same cover and blocks)."""
    c = cover(a.mask, self_attention=a.kind == "self")
    if c.strides:  # strided's, which said why not
        return Reject()
    random_blocks = {r.block for r in c.randoms}
    if c.banded and len(random_blocks) > 1:
        return Reject("random masks with different block sizes cannot share one execution "
                      "block")
    if not c.banded:
        return Reject(f"dense masked form: `{masks.render(a.mask)}` can reach every key (no "
                      "bounded band), so no sparse lowering applies")
    if random_blocks:  # random draws are per block: execute at the draw's block size
        n = random_blocks.pop()
    elif a.sparsity.mode == "block":
        n = a.sparsity.block
    else:
        n = min(BLOCK_SIZES, key=lambda b: (c.key_blocks(b) * b, -b))
    k = c.key_blocks(n)
    if n > MAX_BLOCK:
        return Reject(f"dense masked form: blocks of {n} (the "
                      f"{'random draw' if c.randoms else 'sparsity'}'s block size) exceed "
                      f"the largest block block-sparse execution serves ({MAX_BLOCK})")
    if k > MAX_KEY_BLOCKS:
        return Reject(f"dense masked form: the cover ({c.describe()}) needs {k} key blocks "
                      f"of {n} per query block, more than block-sparse execution serves "
                      f"({MAX_KEY_BLOCKS})")
    reasons = [f"block-sparse in {ops}: {c.describe()}; each block of {n} "
               f"queries visits {k} key blocks ({k * n} keys), so memory grows with "
               f"L x {k * n}, not L x S"]
    if c.q_first or c.q_tokens:
        reasons.append("global query rows are computed densely against all keys (few rows)")
    return Match({"block": n, "key_blocks": k}, tuple(reasons), {"cover": c})


def lower(lw: Lowering, node: Node) -> str:
    """Per block of n queries, gather the K key blocks the mask's cover can reach (band, global
    and random blocks), and attend over those K * n keys only. Memory: L x K * n. Rows of
    global queries (which see every key) are then recomputed densely: G x S."""
    b = lw.b
    expr = node.attr("expr")
    heads, kv, n = node.attr("heads"), node.attr("kv_heads"), node.attr("block")
    g = heads // kv
    c = node.attr("cover")  # the planner's, which it sized the key blocks by
    q, k = qk_float32(lw, node)
    v = arg(lw, node, 2)
    d = static_last(lw, node, 0)
    dv = static_last(lw, node, 2)
    L, S = lw.L, lw.S
    nq, nk = (L + (n - 1)) // n, (S + (n - 1)) // n

    def pad_to_blocks(x: str, length: Sym, blocks: Sym) -> str:
        extra = b.op("Unsqueeze", (blocks * n - length).name, b.i64(0))
        if lacks_bfloat16_cuda_kernel("Pad", b.dtype) and x == v:  # append zeros instead
            shape = b.op("Concat", b.op("Shape", x, start=0, end=2), extra,
                         b.op("Shape", x, start=3), axis=0)
            zero = numpy_helper.from_array(np.zeros(1, numpy_dtype("bfloat16")), "zero")
            return b.op("Concat", x, b.op("ConstantOfShape", shape, value=zero), axis=2)
        pads = b.op("Concat", b.i64(0, 0, 0, 0, 0, 0), extra, b.i64(0), axis=0)
        return b.op("Pad", x, pads)

    def unsqueeze0(x: Sym) -> str:
        return b.op("Unsqueeze", x.name, b.i64(0))

    qb = b.op("Reshape", pad_to_blocks(q, L, nq), b.op(
        "Concat", b.i64(0, kv, g), unsqueeze0(nq), b.i64(n, d), axis=0))  # (B, Hkv, g, nq, n, d)
    kb = b.op("Reshape", pad_to_blocks(k, S, nk), b.op(
        "Concat", b.i64(0, kv), unsqueeze0(nk), b.i64(n, d), axis=0))  # (B, Hkv, nk, n, d)
    vb = b.op("Reshape", pad_to_blocks(v, S, nk), b.op(
        "Concat", b.i64(0, kv), unsqueeze0(nk), b.i64(n, dv), axis=0))

    # the key blocks each query block visits: (nq, K)
    i = Sym(b, b.op("Unsqueeze", lw.arange(nq).name, b.i64(1)), "int64", 2)  # (nq, 1)
    lo, hi = -math.ceil(c.left / n), math.ceil(c.right / n)
    parts = [(i + Sym(b, b.const([list(range(lo, hi + 1))], "int64"), "int64", 2)).name]
    globals_ = c.global_key_blocks(n)
    if globals_:
        parts.append(b.op("Expand", b.const([list(globals_)], "int64"),
                          b.op("Concat", b.op("Shape", i.name, start=0, end=1), b.i64(1),
                               axis=0)))
    for r in c.randoms:
        parts += [masks.random_key_block(r.seed, i, j, nk).name for j in range(r.blocks)]
    raw = Sym(b, b.op("Concat", *parts, axis=1), "int64", 2)  # (nq, K)
    K = node.attr("key_blocks")
    in_range = (raw >= 0) & (raw < nk)
    earlier = Sym(b, b.const(np.tril(np.ones((K, K), bool), -1), "bool"), "bool", 2)
    same = Sym(b, b.op("Unsqueeze", raw.name, b.i64(2)), "int64", 3) == Sym(
        b, b.op("Unsqueeze", raw.name, b.i64(1)), "int64", 3)  # (nq, K, K)
    prior = same & earlier & Sym(b, b.op("Unsqueeze", in_range.name, b.i64(1)), "bool", 3)
    dup = Sym(b, b.op("ReduceMax", prior.astype("int64").name, b.i64(2), keepdims=0),
              "int64", 2) > 0
    slot_ok = in_range & ~dup  # (nq, K): each visited block once
    idx = OnnxArrays.minimum(OnnxArrays.maximum(raw, 0), nk - 1)

    kg = b.op("Reshape", b.op("Gather", kb, idx.name, axis=2),
              b.i64(0, 0, 1, -1, K * n, d))  # (B, Hkv, 1, nq, K*n, d)
    vg = b.op("Reshape", b.op("Gather", vb, idx.name, axis=2), b.i64(0, 0, 1, -1, K * n, dv))

    offsets = Sym(b, b.const(list(range(n)), "int64"), "int64", 1)
    q_pos = Sym(b, b.op("Unsqueeze", (i * n + offsets).name, b.i64(2)), "int64", 3)  # (nq, n, 1)
    k_raw = Sym(b, b.op("Unsqueeze", idx.name, b.i64(2)), "int64", 3) * n + offsets  # (nq, K, n)
    k_pos = Sym(b, b.op("Reshape", k_raw.name, b.i64(0, 1, K * n)), "int64", 3)  # (nq, 1, K*n)
    ok = Sym(b, b.op("Reshape", b.op("Expand", b.op("Unsqueeze", slot_ok.name, b.i64(2)),
                                          b.i64(1, 1, n)), b.i64(0, 1, K * n)), "bool", 3)
    # clamped positions keep gathers of runtime inputs in range; out-of-range pairs are masked
    q_c = OnnxArrays.minimum(q_pos, L - 1)
    k_c = OnnxArrays.minimum(k_pos, S - 1)
    s = scores(lw, node, qb, kg, q_c, k_c, 6)  # (B, Hkv, g, nq, n, K*n)
    visible = masks.evaluate(expr, q_c, k_c, runtime_masks(lw, L, S))
    visible = visible & ok & (k_pos < S) & (q_pos < L)
    o = masked_attend(lw, s, with_head_axes(visible, expr), vg,
                      sink_logits(lw, node, 6))  # (B, Hkv, g, nq, n, dv)
    o = b.op("Reshape", o, b.i64(0, heads, -1, dv))  # (B, H, nq*n, dv)
    o = b.op("Slice", o, b.i64(0), unsqueeze0(L), b.i64(2))  # (B, H, L, dv)
    rows = list(range(c.q_first)) + [t for t in c.q_tokens if t >= c.q_first]
    if rows:
        o = _global_rows(lw, node, o, rows, q, k, v, L, S)
    return bsh(lw, o)


def _global_rows(lw: Lowering, node: Node, o: str, rows: list[int], q: str, k: str, v: str,
                 L: Sym, S: Sym) -> str:
    """Recompute the rows of global queries against every key and put them into o."""
    b = lw.b
    heads, kv = node.attr("heads"), node.attr("kv_heads")
    g = heads // kv
    expr = node.attr("expr")
    at = OnnxArrays.minimum(Sym(b, b.const(rows, "int64"), "int64", 1), L - 1)  # (G,)
    qg = b.op("Gather", q, at.name, axis=2)  # (B, H, G, d)
    qg = b.op("Reshape", qg, b.op("Concat", b.i64(0, kv, g), b.op("Shape", qg, start=2),
                                  axis=0))  # (B, Hkv, g, G, d)
    kf = b.op("Unsqueeze", k, b.i64(2))
    vf = b.op("Unsqueeze", v, b.i64(2))
    q_pos = Sym(b, b.op("Unsqueeze", at.name, b.i64(1)), "int64", 2)  # (G, 1)
    k_pos = Sym(b, b.op("Unsqueeze", lw.arange(S).name, b.i64(0)), "int64", 2)  # (1, S)
    s = scores(lw, node, qg, kf, q_pos, k_pos, 5)
    visible = masks.evaluate(expr, q_pos, k_pos, runtime_masks(lw, L, S))
    og = masked_attend(lw, s, with_head_axes(visible, expr), vf,
                       sink_logits(lw, node, 5))  # (B, Hkv, g, G, dv)
    og = b.op("Reshape", og, b.op("Concat", b.i64(0, heads), b.op("Shape", og, start=3),
                                  axis=0))  # (B, H, G, dv)
    # rows[j] is the position of global row j; rows start with the prefix 0..first-1
    first = 0
    while first < len(rows) and rows[first] == first:
        first += 1
    pos = lw.arange(L)
    row = OnnxArrays.minimum(pos, max(first - 1, 0))  # row j of og for position j < first
    is_global = pos < first
    for j, t in enumerate(rows[first:], start=first):
        hit = pos == t
        row = OnnxArrays.where(hit, Sym(b, b.const(j, "int64"), "int64", 0), row)
        is_global = is_global | hit
    picked = b.op("Gather", og, row.name, axis=2)  # (B, H, L, dv)
    chosen = b.op("Unsqueeze", is_global.name, b.i64(1))  # (L, 1)
    if lacks_bfloat16_cuda_kernel("Where", b.dtype):  # an exact 0 / 1 blend instead
        g = b.op("Cast", chosen, to=ONNX_TYPE[b.dtype])
        return b.op("Add", b.op("Mul", picked, g),
                    b.op("Mul", o, b.op("Sub", b.const(1.0, b.dtype), g)))
    return b.op("Where", chosen, picked, o)


STRATEGY = Strategy("block_sparse", 80, match, lambda params: 1, lower)
