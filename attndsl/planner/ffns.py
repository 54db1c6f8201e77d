"""How each feed-forward form's node runs on a planned target, read from the graph: its module
says (`mechanisms.FFNS`, `plan`: a fused kernel of the provider where it has one for the dtype
and the form, else the form in standard ops), with its reasons for `explain`."""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Op
from ..mechanisms import FFNS
from ..targets import get
from .cores import Choice

__all__ = ["plan_ffns"]


def plan_ffns(graph: Graph, target: str, dtype: str) -> tuple[Graph, list[Choice]]:
    """The graph with each feed-forward form's `ffn` node's `kernel` attribute set as its
    module plans it, and a Choice per node, for a planned target."""
    nodes, choices = [], []
    for node in graph.nodes:
        if node.op is not Op.FFN:
            nodes.append(node)
            continue
        kernel, name, layer, reasons = FFNS[node.attr("ffn")].plan(
            node, get(target).provider, dtype)
        nodes.append(replace(node, attrs=tuple((k, kernel if k == "kernel" else v)
                                               for k, v in node.attrs)))
        choices.append(Choice(layer, "", name, reasons))
    return replace(graph, nodes=tuple(nodes)), choices
