"""The IR verifier: every node of a graph against its op's definition (`ops.OPS`), run after
each pass (`ir.build`, the planner). A graph that breaks a rule is a defect of attndsl, never
of the user's spec: `IRError` names the pass, the node, the operand and the rule."""

from __future__ import annotations

from collections.abc import Iterable

from ..shapes import TensorType
from .graph import Graph, Node, Op
from .ops import OPS

__all__ = ["IRError", "verify"]

class IRError(AssertionError):
    """A graph that breaks its ops' definitions (an internal defect)."""


def verify(graph: Graph, after: str) -> Graph:
    """`graph` if every node keeps its op's definition, else IRError; `after`: the pass that
    made it."""
    weights = {w.name for w in graph.weights}
    types: dict[str, TensorType] = {}
    _nodes(graph.nodes, types, weights, after)
    for name in (graph.output, *graph.presents):
        if name not in types:
            raise IRError(f"IR after {after}: output %{name} is not defined")
    return graph


def _nodes(nodes: Iterable[Node], types: dict[str, TensorType], weights: set[str],
           after: str) -> None:
    for node in nodes:
        broken = _broken(node, types, weights)
        if broken:
            raise IRError(f"IR after {after}: %{node.out} = {node.op.value}: {broken}")
        if node.op is Op.SWITCH:
            for branch, out in zip(node.attr("branches"), node.attr("outputs"), strict=True):
                inner = dict(types)
                _nodes(branch, inner, weights, after)
                if out not in inner:
                    raise IRError(f"IR after {after}: %{node.out} = switch: branch output "
                                  f"%{out} is not defined in its branch")
        types[node.out] = node.shape
        for key in OPS[node.op].defines:
            for name in dict(node.attrs).get(key) or ():
                types[name] = node.shape


def _broken(node: Node, types: dict[str, TensorType], weights: set[str]) -> str | None:
    """The rule `node` breaks, or None."""
    d = OPS[node.op]
    if node.out in types:
        return "defined twice"
    fewest, most = d.operands
    if not fewest <= len(node.args) <= most:
        return f"takes {fewest} to {most} operands, has {len(node.args)}"
    for i, arg in enumerate(node.args):
        if arg not in types:
            return f"operand {i} %{arg} is not defined before its use"
    keys = [k for k, _ in node.attrs]
    if len(set(keys)) != len(keys):
        return "an attribute is given twice"
    missing = [k for k in d.required_names if k not in keys]
    if missing:
        return f"attribute {missing[0]} is missing"
    try:
        d.attributes(node)  # each value of its declared kind; an open op's others plain
    except ValueError as not_its:
        return f"attribute {not_its} is not one of {node.op.value}'s"
    except TypeError as wrong:
        return str(wrong)
    tensors = d.tensor_attrs()
    for key, value in node.attrs:
        if key in tensors and weights:
            named = value if isinstance(value, tuple) else (value,)
            unknown = [w for w in named if w is not None and w not in weights]
            if unknown:
                return f"attribute {key} names {unknown[0]}, not in the weight table"
    return d.rule(node, [types[a] for a in node.args]) if d.rule else None
