"""How each mixture of experts runs on a planned target, read from the graph: ONNX Runtime's
com.microsoft.MoE kernel where the provider has one for the dtype (`targets.moe_kernel`) and
the mixture is a form it computes (a softmax router, the gate on the expert's output, SwiGLU
experts with or without gpt-oss's clamp, or ReLU ones), else the gather/scatter graph
(`backends/lower/moe.py`). The kernel picks a token's experts by the same softmax and top-k;
among experts of exactly equal probability it takes the higher index, the graph the lower."""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node, Op
from ..targets import get, moe_kernel
from .cores import Choice

__all__ = ["plan_experts"]


def _obstacle(route: Node, experts: Node, provider: str | None, dtype: str) -> str | None:
    """Why com.microsoft.MoE cannot run this mixture, or None."""
    if not moe_kernel(provider, dtype):
        return f"no com.microsoft.MoE kernel attndsl uses on {provider} for {dtype}"
    if route.attr("router") != "softmax":
        return "its router is a sigmoid; the kernel's is a softmax"
    if route.attr("selection") or route.attr("groups") > 1:
        return "it chooses by a selection bias or among groups; the kernel by the softmax alone"
    if experts.attr("gate") != "output":
        return "its gate scales the expert's input; the kernel's scales the output"
    act, gated = experts.attr("act"), experts.attr("gated")
    if gated and act not in ("silu", "clamped_swiglu"):
        return f"its experts are gated by {act}; the kernel's gated unit is SwiGLU"
    if not gated and act != "relu":
        return f"its experts' activation is {act}; the kernel computes ReLU, not attndsl's {act}"
    return None


def plan_experts(graph: Graph, target: str, dtype: str) -> tuple[Graph, list[Choice]]:
    """The graph with each `experts` node's `kernel` attribute set (`moe`: com.microsoft.MoE,
    `graph`: the gather/scatter lowering), and a Choice per mixture, for a planned target."""
    by_name = {n.out: n for n in graph.nodes}
    nodes, choices = [], []
    for node in graph.nodes:
        if node.op is not Op.EXPERTS:
            nodes.append(node)
            continue
        why = _obstacle(by_name[node.args[1]], node, get(target).provider, dtype)
        kernel = "moe" if why is None else "graph"
        nodes.append(replace(node, attrs=(*node.attrs, ("kernel", kernel))))
        layer = node.attr("prefix").removesuffix("experts.")
        if why is None:
            reasons = ("com.microsoft.MoE: the router's softmax and top-k and each token's "
                       "experts in one kernel",)
        else:
            reasons = ("each token's experts alone: rows gathered to their experts' weights "
                       "(decoding) or grouped by expert (prompts), standard ops",
                       f"not com.microsoft.MoE: {why}")
        choices.append(Choice(layer, "", f"experts_{kernel}", reasons))
    return replace(graph, nodes=tuple(nodes)), choices
