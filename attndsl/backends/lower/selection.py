"""The lowering of a mask standing alone and of a key selection (`select_keys`), the nodes an
attention's `keys` hook mechanism emits (its `select` over the ONNX array namespace)."""

from __future__ import annotations

from ... import masks
from ...ir import Node, Op
from ...mechanisms import MECHANISMS
from ..cache_slots import decoding_visible
from .attend import runtime_masks
from .builder import Lowering, Sym, lower
from .sym import OnnxArrays

__all__: list[str] = []


@lower(Op.MASK)
def _mask(lw: Lowering, node: Node) -> str:
    """Visibility (B | -, L, n): in one pass the mask at query and key indices 0 .. L - 1
    with the model's runtime mask inputs; decoding, over the call's cached and new keys (its
    second operand's count, after attention_mask)."""
    b, expr = lw.b, node.attr("expr")
    if lw.decoding:
        keys = lw.dim(lw.env[node.args[1]], 2)
        mask = Sym(b, lw.env["attention_mask"], "int64", 2)
        x = Sym(b, lw.env["x"], "float32", 3)  # (its shape alone is read)
        return decoding_visible(OnnxArrays(b), expr, mask, x, keys).name
    q_pos, k_pos = lw.indices()
    return masks.evaluate(expr, q_pos, k_pos, runtime_masks(lw, lw.L, lw.S)).name


@lower(Op.SELECT_KEYS)
def _select_keys(lw: Lowering, node: Node) -> str:
    """The keys each query keeps: its `keys` hook mechanism's `select` over the ONNX array
    namespace (float operands, the mask's visibility last)."""
    *floats, seen = node.args
    operands = [*(lw.sym(node, i) for i in range(len(floats))),
                Sym(lw.b, lw.env[seen], "bool", lw.graph_shapes[seen].rank)]
    return MECHANISMS[node.attr("mechanism")].select(lw.xp, *operands,
                                                    **dict(node.attrs[1:])).name
