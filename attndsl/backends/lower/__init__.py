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

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from ...ir import Graph, Op
from ...spec import Attention, Transformer
from . import ops
from .builder import LOWER, ONNX_TYPE, Builder, Lowering

__all__ = ["build_model"]


def build_model(graph: Graph, spec: Attention | Transformer, weights: Mapping[str, np.ndarray],
                dtype: str = "float32") -> onnx.ModelProto:
    """The ONNX model of a (planned) graph; `weights` (any float type) are stored as `dtype`,
    the type of the float inputs and of the output too."""
    b = Builder(dtype)
    lw = Lowering(b, weights)
    attn = spec.attention if isinstance(spec, Transformer) else spec
    inputs = []
    dims = {"x": ["batch", "length", attn.d_model],
            "memory": ["batch", "memory_length", attn.memory_dim],
            "key_lengths": ["batch"], "segment_ids": ["batch", "length"]}
    lw.graph_shapes = {n.out: n.shape for n in graph.nodes}
    lw.siblings = ops.projection_groups(graph)
    for node in graph.nodes:
        if node.op is Op.INPUT:
            elem = ONNX_TYPE[dtype] if node.out in ("x", "memory") else TensorProto.INT64
            inputs.append(helper.make_tensor_value_info(node.out, elem, dims[node.out]))
            lw.env[node.out] = node.out
            continue
        lw.env[node.out] = LOWER[node.op](lw, node)
    b.nodes.append(helper.make_node("Identity", [lw.env[graph.output]], ["y"], name="output"))
    output = helper.make_tensor_value_info("y", ONNX_TYPE[dtype],
                                          ["batch", "length", attn.d_model])
    g = helper.make_graph(b.nodes, spec.name, inputs, [output])
    opsets = [helper.make_opsetid("", 23)] + [helper.make_opsetid(d, 1)
                                              for d in sorted(b.domains)]
    model = helper.make_model(g, opset_imports=opsets)
    model.ir_version = 10
    b.store_weights(model.graph)
    return model
