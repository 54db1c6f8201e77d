"""A by_length attention's `switch`: ONNX `If` nodes on the query length, one branch per
variant (nested: L <= n1 ? first : (L <= n2 ? second : ...)). The branches read q, k and v
from the enclosing graph, so the projections run once whatever the length."""

from __future__ import annotations

from onnx import GraphProto, helper

from ...ir import Node, Op
from .builder import LOWER, ONNX_TYPE, Lowering, lower

__all__ = ["subgraph_inputs"]


@lower(Op.SWITCH)
def _switch(lw: Lowering, node: Node) -> str:
    b = lw.b
    bounds, branches = node.attr("up_to"), node.attr("branches")
    length = lw.L
    conditions = [(length <= n).name for n in bounds]  # computed here, read by the If nodes

    def variant(i: int) -> GraphProto:
        """Branch i lowered into a graph of its own: its nodes, constants and memo entries
        stay inside it (a value made in one branch is unknown to the others)."""
        saved = b.nodes, b.consts, lw.memo
        b.nodes, b.consts, lw.memo = [], dict(b.consts), dict(lw.memo)
        try:
            for n in branches[i]:
                lw.env[n.out] = LOWER[n.op](lw, n)
            out = lw.env[node.attr("outputs")[i]]
            if out not in {o for n in b.nodes for o in n.output}:  # a value from outside
                out = b.op("Identity", out)
            return helper.make_graph(b.nodes, f"{node.out}_variant{i}", [],
                                     [helper.make_tensor_value_info(out, ONNX_TYPE[b.dtype],
                                                                    None)])
        finally:
            b.nodes, b.consts, lw.memo = saved

    def choose(i: int) -> str:
        """The value of variants i.. : an If on condition i, or the last variant's nodes."""
        if i == len(bounds):
            graph = variant(i)
            b.nodes.extend(graph.node)
            return graph.output[0].name
        then = variant(i)
        saved = b.nodes
        b.nodes = []
        try:
            rest = choose(i + 1)
            otherwise = helper.make_graph(
                b.nodes, f"{node.out}_after{i}", [],
                [helper.make_tensor_value_info(rest, ONNX_TYPE[b.dtype], None)])
        finally:
            b.nodes = saved
        return b.op("If", conditions[i], then_branch=then, else_branch=otherwise)

    return choose(0)


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
