"""A core selector's `switch` (mechanisms/base_selector.py): ONNX `If` nodes on the query
length, one branch per core (nested: L <= n1 ? first : (L <= n2 ? second : ...)). The branches
read q, k and v from the enclosing graph, so the projections run once whatever the length.
Generic: an If over branches is not one selector's alone."""

from __future__ import annotations

from collections.abc import Callable

from onnx import GraphProto, helper

from ...dtypes import ONNX_TYPE
from ...ir import Node, Op
from .builder import LOWER, Lowering, lower

__all__ = ["subgraph", "subgraph_inputs"]


@lower(Op.SWITCH)
def _switch(lw: Lowering, node: Node) -> str:
    b = lw.b
    bounds, branches = node.attr("up_to"), node.attr("branches")
    length = lw.L
    conditions = [(length <= n).name for n in bounds]  # computed here, read by the If nodes

    def variant(i: int) -> str:
        for n in branches[i]:
            lw.env[n.out] = LOWER[n.op](lw, n)
        return lw.env[node.attr("outputs")[i]]

    def choose(i: int) -> str:
        """The value of variants i.. : an If on condition i, or the last variant itself."""
        if i == len(bounds):
            return variant(i)
        then = subgraph(lw, f"{node.out}_variant{i}", lambda: variant(i))
        otherwise = subgraph(lw, f"{node.out}_after{i}", lambda: choose(i + 1))
        return b.op("If", conditions[i], then_branch=then, else_branch=otherwise)

    return choose(0)


def subgraph(lw: Lowering, name: str, build: Callable[[], str]) -> GraphProto:
    """What `build` lowers, as a graph of its own (an If's branch) with one output of the
    model dtype: its nodes, constants and memo entries stay inside it (a value made in one
    branch is unknown to the others)."""
    b = lw.b
    saved = b.nodes, b.consts, lw.memo
    b.nodes, b.consts, lw.memo = [], dict(b.consts), dict(lw.memo)
    try:
        out = build()
        if out not in {o for n in b.nodes for o in n.output}:  # a value from outside
            out = b.op("Identity", out)
        return helper.make_graph(b.nodes, name, [], [
            helper.make_tensor_value_info(out, ONNX_TYPE[b.dtype], None)])
    finally:
        b.nodes, b.consts, lw.memo = saved


def subgraph_inputs(n) -> set[str]:
    """The enclosing values a node reads: its inputs, and what its subgraphs read from
    outside themselves."""
    used = set(n.input)
    for a in n.attribute:
        if a.type == a.GRAPH:
            made = {o for m in a.g.node for o in m.output}
            for m in a.g.node:
                used |= subgraph_inputs(m) - made
            used |= {o.name for o in a.g.output} - made
    return used
