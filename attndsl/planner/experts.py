"""How each feed-forward form's node runs on a planned target, read from the graph: its module
says (`mechanisms.FFNS`, `plan`: a mixture of experts as ONNX Runtime's kernel where the
provider has one for the dtype and the mixture is a form it computes, else the gather/scatter
graph, `backends/lower/experts.py`), with its reasons for `explain`."""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph
from ..mechanisms import FFNS
from ..targets import get
from .cores import Choice

__all__ = ["plan_experts"]


def plan_experts(graph: Graph, target: str, dtype: str) -> tuple[Graph, list[Choice]]:
    """The graph with each planned feed-forward node's `kernel` attribute set (a mixture's
    `experts` node: ONNX Runtime's kernel, or `graph`, the gather/scatter lowering), and a
    Choice per node, for a planned target."""
    by_name = {n.out: n for n in graph.nodes}
    planned = {form.planned: form for form in FFNS.values() if form.planned is not None}
    nodes, choices = [], []
    for node in graph.nodes:
        if node.op not in planned:
            nodes.append(node)
            continue
        kernel, layer, reasons = planned[node.op].plan(node, by_name, get(target).provider,
                                                       dtype)
        nodes.append(replace(node, attrs=(*node.attrs, ("kernel", kernel))))
        choices.append(Choice(layer, "", f"{node.op.value}_{kernel}", reasons))
    return replace(graph, nodes=tuple(nodes)), choices
