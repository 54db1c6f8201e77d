"""Each node's kernel key as ONNX Runtime matches it: the node's domain and op, the opset
version its schema dates from, and the element type bound to each of the schema's type
constraints by the node's actual inputs and outputs.

Element types come from the model's declared inputs, outputs and initializers, from
onnx.shape_inference, and, where that stops (its contrib ops), from the schemas themselves
(an output's constraint bound by the inputs; Cast's `to`; a subgraph's declared outputs).
The schemas are ONNX Runtime's own (`get_all_operator_schema()`: the standard and the
com.microsoft domains), else onnx's and, for com.microsoft, the snapshot shipped beside this
file (tools/kernel_tables.py schemas)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import onnx
import onnx.inliner

from ..backends.exported import without_weights

__all__ = ["Node", "Schema", "nodes"]

_SUBGRAPH_OPS = ("If", "Loop", "Scan")


@dataclass(frozen=True)
class Param:
    name: str
    type_str: str  # a constraint's name, or a fixed type as "tensor(int64)"
    variadic: bool


@dataclass(frozen=True)
class Schema:
    since: int
    inputs: tuple[Param, ...]
    outputs: tuple[Param, ...]
    constraints: dict[str, tuple[str, ...]]


@dataclass
class Node:
    proto: onnx.NodeProto
    path: str  # where it is: "graph" or "graph/<If node>.then_branch", ...
    since: int | None  # None: no schema found for the model's opset
    bindings: dict[str, str] = field(default_factory=dict)  # constraint -> element type
    shapes: dict[str, tuple] = field(default_factory=dict)  # input/output name -> dims

    @property
    def label(self) -> str:
        name = self.proto.name or "(unnamed)"
        domain = f"{self.proto.domain}." if self.proto.domain not in ("", "ai.onnx") else ""
        return f"{name} ({domain}{self.proto.op_type})"


def _elem_name(elem_type: int) -> str | None:
    try:
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else None
    except ValueError:  # an element type onnx does not know: unknown here too
        return None


@cache
def _schemas() -> dict[tuple[str, str], tuple[Schema, ...]]:
    out: dict[tuple[str, str], list[Schema]] = {}
    try:
        from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

        for s in get_all_operator_schema():
            out.setdefault((_dom(s.domain), s.name), []).append(Schema(
                s.since_version,
                tuple(Param(p.name, p.typeStr, _variadic(p.option)) for p in s.inputs),
                tuple(Param(p.name, p.typeStr, _variadic(p.option)) for p in s.outputs),
                {c.type_param_str: tuple(c.allowed_type_strs) for c in s.type_constraints}))
    except ImportError:  # onnx's standard schemas, and the com.microsoft ones shipped
        for op, since, ins, outs, constraints in json.loads(
                (Path(__file__).parent / "contrib-schemas.json").read_text())["schemas"]:
            out.setdefault(("com.microsoft", op), []).append(Schema(
                since, tuple(Param(*p) for p in ins), tuple(Param(*p) for p in outs),
                {c: tuple(ts) for c, ts in constraints.items()}))
        for s in onnx.defs.get_all_schemas_with_history():
            out.setdefault((_dom(s.domain), s.name), []).append(Schema(
                s.since_version,
                tuple(Param(p.name, p.type_str, p.option.name == "Variadic") for p in s.inputs),
                tuple(Param(p.name, p.type_str, p.option.name == "Variadic") for p in s.outputs),
                {c.type_param_str: tuple(c.allowed_type_strs) for c in s.type_constraints}))
    return {k: tuple(sorted(v, key=lambda s: s.since)) for k, v in out.items()}


def _variadic(option) -> bool:
    return "Variadic" in str(option)


def _dom(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


def schema(domain: str, op: str, opset: int | None) -> Schema | None:
    """The schema a node of `op` uses in a model importing `domain` at `opset` (None: the
    model imports no opset of the domain, and ONNX Runtime refuses the node)."""
    if opset is None:
        return None
    found = [s for s in _schemas().get((_dom(domain), op), ()) if s.since <= opset]
    return found[-1] if found else None


_INLINE_BYTES = 1024  # larger initializers are read as typed inputs: their data is not needed


def nodes(model: onnx.ModelProto) -> list[Node]:
    """Every node of the model, subgraphs' and local functions' (inlined, as ONNX Runtime
    does) included, with its kernel key. Shape inference runs on a copy whose large
    initializers are typed inputs, so the weights are never copied; small ones (shapes, the
    targets of Reshapes) keep their data."""
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    light = without_weights(model, _INLINE_BYTES)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False)
    except Exception:  # inference is a help, not a requirement
        inferred = light
    opsets = {_dom(o.domain): o.version for o in model.opset_import}
    out: list[Node] = []
    _walk(inferred.graph, "graph", opsets, {}, {}, out)
    return out


def _note(types: dict, shapes: dict, value: onnx.ValueInfoProto) -> None:
    tt = value.type.tensor_type
    if value.type.HasField("tensor_type") and tt.elem_type:
        types[value.name] = _elem_name(tt.elem_type) or ""
        if tt.HasField("shape"):
            shapes[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                       for d in tt.shape.dim)


def _walk(graph, path, opsets, outer_types, outer_shapes, out) -> None:
    """The graph's nodes, in a scope of its own: the outer graphs' values, then its own (a
    sibling branch's names are not seen)."""
    types, shapes = dict(outer_types), dict(outer_shapes)
    for v in (*graph.input, *graph.output, *graph.value_info):
        _note(types, shapes, v)
    for t in graph.initializer:
        types[t.name] = _elem_name(t.data_type) or ""
        shapes[t.name] = tuple(t.dims)
    for proto in graph.node:
        for attr in proto.attribute:  # a subgraph's nodes before the node that runs it
            for i, g in enumerate([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                                  attr.graphs):
                where = f"{attr.name}[{i}]" if attr.type == onnx.AttributeProto.GRAPHS \
                    else attr.name
                _walk(g, f"{path}/{proto.name or proto.op_type}.{where}", opsets, types,
                      shapes, out)
        s = schema(proto.domain, proto.op_type, opsets.get(_dom(proto.domain)))
        node = Node(proto, path, s.since if s else None)
        if s is not None:
            _bind(node, s, types)
        node.shapes = {n: shapes[n] for n in (*proto.input, *proto.output) if n in shapes}
        out.append(node)


def _args(params: tuple[Param, ...], names) -> Iterator[tuple[int, Param, str]]:
    """(position, formal parameter, actual name) of each given argument; a variadic last
    parameter takes the rest."""
    for i, name in enumerate(names):
        if not params:
            return
        p = params[min(i, len(params) - 1)]
        if i >= len(params) and not p.variadic:
            return
        if name:
            yield i, p, name


def _bind(node: Node, s: Schema, types: dict[str, str]) -> None:
    proto = node.proto
    for _, p, name in _args(s.inputs, proto.input):
        if p.type_str in s.constraints and types.get(name):
            node.bindings.setdefault(p.type_str, types[name])
    for i, p, name in _args(s.outputs, proto.output):
        known = types.get(name) or _output_type(proto, i, p, s, node.bindings)
        if known:
            types[name] = known
            if p.type_str in s.constraints:
                node.bindings.setdefault(p.type_str, known)


def _output_type(proto: onnx.NodeProto, i: int, p: Param, s: Schema,
                 bound: dict) -> str | None:
    """An output's element type where shape inference gave none."""
    if p.type_str in bound:
        return bound[p.type_str]
    if p.type_str.startswith("tensor("):
        return p.type_str[7:-1]
    allowed = s.constraints.get(p.type_str, ())
    if len(allowed) == 1 and allowed[0].startswith("tensor("):
        return allowed[0][7:-1]
    attrs = {a.name: a for a in proto.attribute}
    if proto.op_type == "Cast" and "to" in attrs:
        return _elem_name(attrs["to"].i)
    if proto.op_type in _SUBGRAPH_OPS:
        for a in proto.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                outs = list(a.g.output)[1:] if proto.op_type == "Loop" else list(a.g.output)
                if i < len(outs) and outs[i].type.tensor_type.elem_type:
                    return _elem_name(outs[i].type.tensor_type.elem_type)
                break  # a Loop's or Scan's one body, an If's branches alike
    return None
