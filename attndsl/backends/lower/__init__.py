"""Planned graph IR -> ONNX, built node by node (the `ort-cpu` and `ort-cuda` targets).

Every IR op left after planning has one lowering function (`@lower(Op.X)`); the
attention-core ops the planner fuses into `attention` have none. Masks and T5 buckets are not
written a second time: `Sym` is a symbolic tensor whose operators emit ONNX nodes, so
`masks.evaluate` and `positions.t5_bucket_float32` run unchanged and build the graph. Node
names come from a counter in emission order, so the same IR gives the same bytes.

Models are built for one dtype (float32, float16 or bfloat16): weights, inputs, outputs and
activations use it; scores, biases, masks and softmax are float32 islands (q and k are widened
before their product, which is then exact), as are RMS statistics, position tables and linear
attention's sums. A float32 model has no Cast nodes for any of this.

ONNX Runtime's CUDA provider has no bfloat16 kernel for Pad, Where and Gelu (its CPU provider
has almost none), so a bfloat16 model avoids them on bfloat16 values: a node without a CUDA
kernel would be placed on the CPU and fail there."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ... import masks
from ...dtypes import ONNX_TYPE
from ...ir import Graph, Node, Op, all_nodes
from ...ir.graph import over_memory
from ...progress import report
from ...shapes import TensorType
from . import ops, rotary, selection, vision  # noqa: F401 (their @lower functions)
from .builder import LOWER, Builder, Lowering
from .switch import subgraph_inputs

__all__ = ["build_model"]


def build_model(graph: Graph, weights: Mapping[str, np.ndarray], dtype: str = "float32",
                deferred: dict[str, Callable[[], np.ndarray]] | None = None, *,
                strategies: Mapping[str, Callable[[Lowering, Node], str]],
                rewrites: Any) -> onnx.ModelProto:
    """The ONNX model of a (planned) graph; `weights` (any float type) are stored as `dtype`,
    the type of the float inputs and of the output too. `rewrites` (`planner.rewrites`),
    planned with their reasons and carried out here: the projections it packs, the residual
    adds it joins with their norms, whether norms run as ONNX Runtime's contrib kernels, the
    weights it stores in blocks (com.microsoft.MatMulNBits, GatherBlockQuantized, a feed-forward
    form's quantized kernel) and
    how, and which in-place attentions' GroupQueryAttention takes q, k, v packed and rotates
    them itself (from cos/sin tables of how many positions). `deferred`: the
    weights are left out of the model, and this dict gets a reader of each by name
    (`exported.Exported` writes them one at a time); else they are in the model.
    `strategies`: the lowering of each fused strategy by the name its `attention` nodes carry
    (`attndsl.strategies.LOWERINGS`): the strategies sit above the lowering and use its
    builder, so the caller that composes the two passes them in; it holds too the lowering of
    a kernel module's node by the kernel's name where a strategy lowers it (else its module
    does)."""
    b = Builder(dtype)
    lw = Lowering(b, weights)
    lw.strategies = strategies
    lw.quantization = rewrites.quantization
    lw.quantized, lw.quantized_kernels = rewrites.blocks, rewrites.quantized_kernels
    lw.rotary = dict(rewrites.rotary)
    lw.mrotary = frozenset(rewrites.mrotary)
    lw.skip_norms = dict(rewrites.skip_norms)
    lw.contrib_norms = rewrites.contrib_norms
    inputs = []
    every = list(all_nodes(graph.nodes))  # a switch's branches too
    shapes = {n.out: n.shape for n in every}
    lw.graph_shapes = shapes
    lw.siblings = dict(rewrites.siblings)
    lw.nodes = {n.out: n for n in every}
    stack = graph.kind == "transformer"
    in_place = any(n.op is Op.ATTENTION and n.attr("strategy") == "gqa_cache"
                   for n in graph.nodes)
    past_length, present_length = ("max_length",) * 2 if in_place else ("past_length",
                                                                        "total_length")
    for i, node in enumerate(graph.nodes):
        report(f"lowering {graph.name}", i, len(graph.nodes))
        if node.op is Op.INPUT:
            name = node.out
            elem = ONNX_TYPE[dtype] if node.shape.is_float else TensorProto.INT64
            shape = _cache_dims(node.shape, past_length, "past") \
                if name.startswith("past_key_values.") else _dims(node.shape)
            inputs.append(helper.make_tensor_value_info(name, elem, shape))
            lw.env[name] = name
            lw.graph_inputs.add(name)
            continue
        if stack:  # a decoder stack: the node's keys are the memory rows, or the tokens
            lw.memory_keys = over_memory(node, shapes)
        lw.env[node.out] = _lowered(lw, node)
    outputs = [(graph.output_name, graph.output, _dims(shapes[graph.output]))]
    outputs += [(p, p, _cache_dims(shapes[p.replace("present.", "past_key_values.")],
                                   present_length, "total")) for p in graph.presents]
    value_infos = []
    renamed: dict[str, str] = {}
    for name, value, shape in outputs:
        produced = lw.env[value]
        if produced in renamed or produced in lw.graph_inputs:  # needs a copy of its own
            b.nodes.append(helper.make_node("Identity", [produced], [name],
                                            name=f"output_{name}"))
        else:  # the node that computes it writes the output itself (no copy of the cache)
            renamed[produced] = name
        value_infos.append(helper.make_tensor_value_info(name, ONNX_TYPE[dtype], shape))
    _rename(b.nodes, renamed)
    b.nodes[:] = _live(b.nodes, {name for name, _, _ in outputs})
    g = helper.make_graph(b.nodes, graph.name, inputs, value_infos)
    opsets = [helper.make_opsetid("", 23)] + [helper.make_opsetid(d, 1)
                                              for d in sorted(b.domains)]
    model = helper.make_model(g, opset_imports=opsets)
    model.ir_version = 10
    b.store_weights(model.graph, deferred)
    return model


# the ONNX names of the IR's symbolic axes
_AXES = {"B": "batch", "L": "length", "S": "memory_length", "P + L": "total_length",
         "H": "height", "W": "width"}


def _dims(shape: TensorType) -> list:
    """An input's or output's ONNX dims from its IR type: `[B, L, 512]` -> batch, length, 512."""
    return [_AXES[d] if isinstance(d, str) else d for d in shape.dims]


def _cache_dims(shape: TensorType, length: str, which: str) -> list:
    """[batch, kv_heads, <length>, head_dim] from an IR cache type `[B, 4, P, 64]`; a cross
    attention's (`[B, 4, M, 64]`) counts memory rows: past_ or total_memory_length."""
    parts = shape.dims
    if all(isinstance(d, int) for d in parts[1:]):  # a kernel's fixed-size state
        return ["batch", *parts[1:]]
    if parts[2] == "M":
        length = f"{which}_memory_length"
    return ["batch", int(parts[1]), length, int(parts[3])]


def _rename(nodes, renamed: dict[str, str]) -> None:
    """Rename values in place, in subgraphs too (a switch's branches read outer values)."""
    for n in nodes:
        n.input[:] = [renamed.get(i, i) for i in n.input]
        n.output[:] = [renamed.get(o, o) for o in n.output]
        for a in n.attribute:
            if a.type == a.GRAPH:
                _rename(a.g.node, renamed)
                for o in a.g.output:
                    o.name = renamed.get(o.name, o.name)


def _live(nodes: list, outputs: set[str]) -> list:
    """The nodes the outputs depend on, in order: a kernel that reads packed projections
    leaves their split and rotation unused."""
    needed = set(outputs)
    keep = []
    for n in reversed(nodes):
        if any(o in needed for o in n.output):
            keep.append(n)
            needed.update(subgraph_inputs(n))
    return keep[::-1]


def _lowered(lw: Lowering, node: Node) -> str:
    """The node's lowering, its runtime mask inputs read under the names its mask reads
    (`masks.read_as`: a decoder stack's cross attention's memory_lengths as key_lengths)."""
    seen = masks.read_as(node.args, lw.env)
    if seen is lw.env:
        return LOWER[node.op](lw, node)
    kept, lw.env = lw.env, seen
    try:
        return LOWER[node.op](lw, node)
    finally:
        lw.env = kept | {k: v for k, v in seen.items()  # (what it added, not the roles)
                         if k not in kept and k not in masks.ROLES.values()}
