"""What every softmax strategy shares: float32 scores with their biases and modifiers, the masked
softmax with empty rows set to zero, and the runtime mask inputs as symbolic tensors."""

from __future__ import annotations

from ... import masks, mechanisms
from ...ir import Node
from ...ir.ops import SCORE_BIASES, core_operands
from .. import formulas
from ..softmax_core import score_bias
from .builder import Lowering, Sym, arg, static_last

__all__ = ["extra_logits", "masked_attend", "qk_float32", "runtime_masks", "scores",
           "with_head_axes"]


def scores(lw: Lowering, node: Node, q: str, k: str, q_pos: Sym, k_pos: Sym,
            rank: int) -> str:
    """scale * q.k (+ bias) (score modifiers), float32. q: (B, Hkv, g, ..., n, d), k: (B, Hkv,
    1, ..., m, d), both float32 (see `qk_float32`) of `rank` axes. Biases come from the positions
    q_pos (..., n, 1), k_pos (..., 1, m)."""
    b = lw.b
    # scale q (n x d) rather than the scores (n x m): one pass over the smaller tensor
    q = b.op("Mul", q, b.const(node.attr("scale"), "float32"))
    if rank == 5:
        # (B, Hkv, g, n, d) @ (B, Hkv, d, m): merge g into the rows so ORT sees a 4-D matmul
        # with a transposed operand, which it fuses (no strided copy of all the keys)
        g = node.attr("heads") // node.attr("kv_heads")
        rows = b.op("Reshape", q, b.i64(0, 0, -1, static_last(lw, node, 0)))
        k4 = b.op("Squeeze", k, b.i64(2))
        s4 = b.op("MatMul", rows, b.op("Transpose", k4, perm=[0, 1, 3, 2]))  # (B, Hkv, g*n, m)
        s = b.op("Reshape", s4, b.op("Concat", b.i64(0, 0, g, -1),
                                     b.op("Shape", s4, start=3), axis=0))
    else:
        perm = list(range(rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        s = b.op("MatMul", q, b.op("Transpose", k, perm=perm))
    xp = lw.xp
    s = Sym(b, s, "float32", rank)
    if node.attr("bias"):
        heads, kv = node.attr("heads"), node.attr("kv_heads")
        # a bias with a table (T5's, the relative logits' bank): its `weight` parameter
        tabled = "weight" in SCORE_BIASES[node.attr("bias")]
        table = lw.weight(node.attr("weight"), 2) if tabled else None
        operands = core_operands(node)[0]  # relative logits' states (B, heads, n, d_rel)
        rows = lw.sym(node, 3) if operands else None
        s = s + score_bias(xp, dict(node.attrs), heads, (kv, heads // kv), table, q_pos,
                           k_pos, rows)  # broadcasts over B
    return mechanisms.score(xp, node, s).name


def masked_attend(lw: Lowering, s: str, visible: Sym, v: str,
                  extra_logit: Sym | None = None) -> str:
    """softmax over the last axis where visible (with its extra logit, `extra_logits`, in the
    denominator), then @ v; rows with no visible key -> 0 (the factor is applied to the n x dv
    output, not to the n x m probabilities). The additive 0 / lowest mask is built at the
    mask's own (head-free) size: adding it broadcasts faster than a Where over the scores."""
    b = lw.b
    probs, any_key = formulas.masked_softmax(lw.xp, Sym(b, s, "float32", visible.ndim), visible,
                                             extra_logit)
    return b.op("Mul", b.op("MatMul", b.to_model(probs.name), v), b.to_model(any_key.name))


def extra_logits(lw: Lowering, node: Node, rank: int) -> Sym | None:
    """An attention node's extra softmax logit per head (heads,), a `softmax` hook
    mechanism's weight (`mechanisms.softmax_logits`), as float32 (Hkv, g, 1, ...), to broadcast
    over its scores of `rank` (B, Hkv, g, ..., keys); None where it has none."""
    name = mechanisms.softmax_logits(node)
    if name is None:
        return None
    b = lw.b
    kv = node.attr("kv_heads")
    shaped = b.op("Reshape", lw.w(name), b.i64(kv, node.attr("heads") // kv, *[1] * (rank - 3)))
    return Sym(b, b.to_float32(shaped), "float32", rank - 1)


def with_head_axes(visible: Sym, expr: masks.Mask) -> Sym:
    """A batched visibility (B, ...) -> (B, 1, 1, ...), to broadcast against (B, Hkv, g, ...)
    scores; an unbatched one already broadcasts from the right."""
    if not masks.runtime_inputs(expr):
        return visible
    b = visible.b
    return Sym(b, b.op("Unsqueeze", visible.name, b.i64(1, 2)), "bool", visible.ndim + 2)


def runtime_masks(lw: Lowering, L: Sym | int, S: Sym | int) -> masks.MaskContext:
    """The mask context at sizes L, S with the model's runtime mask inputs (the sizes are
    arguments, so that any node they emit comes before these inputs' own)."""
    out = {}
    if "key_lengths" in lw.env:
        out["key_lengths"] = Sym(lw.b, lw.env["key_lengths"], "int64", 1)
    if "segment_ids" in lw.env:
        out["segment_ids"] = Sym(lw.b, lw.env["segment_ids"], "int64", 2)
        if "document_positions" not in lw.memo:  # once per model (unused: pruned)
            lw.memo["document_positions"] = formulas.document_positions(lw.xp,
                                                                        out["segment_ids"])
        out["document_positions"] = lw.memo["document_positions"]
    if "memory_segment_ids" in lw.env:
        out["memory_segment_ids"] = Sym(lw.b, lw.env["memory_segment_ids"], "int64", 2)
    return masks.MaskContext(L, S, **out)


def qk_float32(lw: Lowering, node: Node) -> tuple[str, str]:
    """q and k of an attention node, widened to float32 once, before any blocking or gather:
    scores are float32 (products of half-precision values are exact in it)."""
    return lw.b.to_float32(arg(lw, node, 0)), lw.b.to_float32(arg(lw, node, 1))


def kept_keys(lw: Lowering, expr: masks.Mask, n: Sym) -> Sym:
    """(B|1, 1, n): the keys a mask of keys alone (`padding`, `full`) shows."""
    b = lw.b
    k_pos = Sym(b, b.op("Unsqueeze", lw.arange(n).name, b.i64(0)), "int64", 2)  # (1, n)
    zero = Sym(b, b.i64(0), "int64", 1)[None]  # (1, 1): the mask reads keys alone
    return masks.evaluate(expr, zero, k_pos, runtime_masks(lw, n, n))
