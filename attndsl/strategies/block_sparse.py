"""Strategy `block_sparse`: per block of queries, only the key blocks the mask's cover can
reach, in standard ops; rows of global queries recomputed densely. Its arithmetic is
`backends.softmax_core.block_sparse`, which the torch module runs too; here, when it applies
(`match`, `blocks`) and its ONNX glue (`lower`)."""

from __future__ import annotations

from .. import masks
from ..backends.lower.attend import (
    extra_logits,
    masked_attend,
    qk_float32,
    runtime_masks,
    scores,
    with_head_axes,
)
from ..backends.lower.builder import Lowering, Sym, bsh, static_last
from ..backends.softmax_core import CoreOps, block_sparse
from ..ir import Node
from ..ir.ops import BIAS_OPERANDS
from ..planner.cores import Core
from ..planner.cover import cover
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
    if a.bias_kind in BIAS_OPERANDS:
        return Reject("dense masked form: its score bias reads rows of each query's own "
                      "(relative logits), which block-sparse execution does not gather")
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
    """Per block of n queries, the K key blocks the mask's cover can reach, then the rows of
    global queries: `softmax_core.block_sparse`, the torch module's arithmetic too, over
    `OnnxArrays`, with this lowering's scores, masked softmax and runtime mask inputs."""
    b = lw.b
    expr = node.attr("expr")
    q, k = (Sym(b, x, "float32", 4) for x in qk_float32(lw, node))
    v = lw.sym(node, 2)
    d, dv = static_last(lw, node, 0), static_last(lw, node, 2)
    L, S = lw.L, lw.S

    def attend(s: Sym, visible: Sym, v: Sym) -> Sym:
        o = masked_attend(lw, s.name, with_head_axes(visible, expr), v.name,
                          extra_logits(lw, node, s.ndim))
        return Sym(b, o, b.dtype, s.ndim)

    ops = CoreOps(
        scores=lambda q, k, q_pos, k_pos: Sym(
            b, scores(lw, node, q.name, k.name, q_pos, k_pos, q.ndim), "float32", q.ndim),
        attend=attend,
        context=lambda: runtime_masks(lw, L, S))
    return bsh(lw, block_sparse(lw.xp, node, q, k, v, L, S, d, dv, ops).name)


STRATEGY = Strategy("block_sparse", 80, match, lambda params: 1, lower)
