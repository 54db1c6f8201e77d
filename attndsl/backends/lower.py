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

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import masks
from ..dtypes import numpy_dtype
from ..ir import Graph, Node, Op
from ..planner import cover
from ..positions import alibi_slopes, rope_inv_freq, t5_bucket_float32
from ..spec import Attention, Transformer
from ..targets import lacks_bfloat16_cuda_kernel

__all__ = ["build_model"]

_ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
              "bfloat16": TensorProto.BFLOAT16, "int64": TensorProto.INT64,
              "bool": TensorProto.BOOL, "int32": TensorProto.INT32}
_LOWEST = float(np.finfo(np.float32).min)


class Builder:
    """Collects nodes and initializers; constants are deduplicated."""

    def __init__(self, dtype: str = "float32") -> None:
        self.dtype = dtype  # the model's float type
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[tuple[str, np.ndarray]] = []  # stored into the model at the end
        self.count = 0
        self.consts: dict[tuple, str] = {}
        self.domains: set[str] = set()

    def op(self, op_type: str, *inputs: str, outputs: int = 1, domain: str = "",
           **attrs: Any) -> Any:
        self.count += 1
        names = [f"{op_type.lower()}_{self.count}" + (f"_{i}" if outputs > 1 else "")
                 for i in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names,
                                           name=f"n{self.count}_{op_type}", domain=domain,
                                           **attrs))
        if domain:
            self.domains.add(domain)
        return names[0] if outputs == 1 else names

    def const(self, value: Any, dtype: str) -> str:
        np_type = {"int64": np.int64, "bool": np.bool_, "int32": np.int32}.get(dtype)
        array = np.asarray(value, dtype=np_type or numpy_dtype(dtype))
        key = (dtype, array.shape, array.tobytes())
        if key not in self.consts:
            self.count += 1
            name = f"const_{self.count}"
            self.nodes.append(helper.make_node(
                "Constant", [], [name], name=f"n{self.count}_Constant",
                value=numpy_helper.from_array(array, name)))
            self.consts[key] = name
        return self.consts[key]

    def i64(self, *values: int) -> str:
        return self.const(list(values), "int64")

    def initializer(self, name: str, array: np.ndarray) -> str:
        self.weights.append((name, array))
        return name

    def store_weights(self, graph: onnx.GraphProto) -> None:
        """Write the weights into the graph's initializers one by one, in the model dtype: no
        list of copies and no copy of the graph, so compiling holds each weight about twice
        (torch's and the model's) rather than once per protobuf step."""
        np_type = numpy_dtype(self.dtype)
        element = _ONNX_TYPE[self.dtype]
        for name, array in self.weights:
            tensor = graph.initializer.add()
            tensor.name = name
            tensor.data_type = element
            tensor.dims.extend(array.shape)
            tensor.raw_data = np.ascontiguousarray(array.astype(np_type, copy=False)).tobytes()
        self.weights.clear()

    def to_float32(self, name: str) -> str:
        """A model-dtype value widened to float32 (no node in a float32 model)."""
        return name if self.dtype == "float32" else self.op("Cast", name, to=TensorProto.FLOAT)

    def to_model(self, name: str) -> str:
        """A float32 value narrowed to the model dtype (no node in a float32 model)."""
        return name if self.dtype == "float32" else self.op("Cast", name,
                                                              to=_ONNX_TYPE[self.dtype])


class Sym:
    """A symbolic ONNX tensor with NumPy-like operators (enough for masks and T5 buckets).
    Floor division and modulo assume what masks guarantee: non-negative dividends for `//`."""

    __array_priority__ = 1000  # NumPy scalars defer to our reflected operators

    def __init__(self, b: Builder, name: str, dtype: str, ndim: int):
        self.b, self.name, self.dtype, self.ndim = b, name, dtype, ndim

    def _lift(self, other: Any) -> Sym:
        if isinstance(other, Sym):
            return other
        if isinstance(other, bool | np.bool_):
            return Sym(self.b, self.b.const(other, "bool"), "bool", 0)
        dtype = "float32" if self.dtype == "float32" or isinstance(other, float) else "int64"
        return Sym(self.b, self.b.const(other, dtype), dtype, 0)

    def _binary(self, op: str, other: Any, *, reverse: bool = False, out: str | None = None,
                **attrs: Any) -> Sym:
        o = self._lift(other)
        a, c = (o, self) if reverse else (self, o)
        name = self.b.op(op, a.name, c.name, **attrs)
        return Sym(self.b, name, out or a.dtype, max(a.ndim, c.ndim))

    def __add__(self, o: Any) -> Sym: return self._binary("Add", o)
    def __radd__(self, o: Any) -> Sym: return self._binary("Add", o, reverse=True)
    def __sub__(self, o: Any) -> Sym: return self._binary("Sub", o)
    def __rsub__(self, o: Any) -> Sym: return self._binary("Sub", o, reverse=True)
    def __mul__(self, o: Any) -> Sym: return self._binary("Mul", o)
    def __rmul__(self, o: Any) -> Sym: return self._binary("Mul", o, reverse=True)
    def __truediv__(self, o: Any) -> Sym: return self._binary("Div", o)
    def __floordiv__(self, o: Any) -> Sym: return self._binary("Div", o)
    def __mod__(self, o: Any) -> Sym: return self._binary("Mod", o, fmod=0)
    def __le__(self, o: Any) -> Sym: return self._binary("LessOrEqual", o, out="bool")
    def __lt__(self, o: Any) -> Sym: return self._binary("Less", o, out="bool")
    def __ge__(self, o: Any) -> Sym: return self._binary("GreaterOrEqual", o, out="bool")
    def __gt__(self, o: Any) -> Sym: return self._binary("Greater", o, out="bool")
    def __eq__(self, o: Any) -> Sym: return self._binary("Equal", o, out="bool")  # type: ignore[override]
    def __and__(self, o: Any) -> Sym: return self._binary("And", o)
    def __or__(self, o: Any) -> Sym: return self._binary("Or", o)

    __hash__ = None  # type: ignore[assignment]

    def __invert__(self) -> Sym:
        return Sym(self.b, self.b.op("Not", self.name), "bool", self.ndim)

    def __neg__(self) -> Sym:
        return Sym(self.b, self.b.op("Neg", self.name), self.dtype, self.ndim)

    def __getitem__(self, index: Any) -> Sym:
        index = index if isinstance(index, tuple) else (index,)
        if len(index) == 2 and index[0] == slice(None) and isinstance(index[1], Sym):
            name = self.b.op("Gather", self.name, index[1].name, axis=1)
            return Sym(self.b, name, self.dtype, self.ndim - 1 + index[1].ndim)
        axes = [i for i, item in enumerate(index) if item is None]
        if any(item not in (None, slice(None)) for item in index):
            raise NotImplementedError(f"index {index!r}")
        name = self.b.op("Unsqueeze", self.name, self.b.i64(*axes))
        return Sym(self.b, name, self.dtype, self.ndim + len(axes))

    def max(self) -> Sym:
        return Sym(self.b, self.b.op("ReduceMax", self.name, keepdims=0), self.dtype, 0)

    def astype(self, dtype: str) -> Sym:
        return Sym(self.b, self.b.op("Cast", self.name, to=_ONNX_TYPE[dtype]), dtype, self.ndim)


class _OnnxNumpy:
    """The slice of NumPy's namespace that `positions.t5_bucket_float32` uses."""

    __name__ = "onnx"
    int64 = "int64"
    float32 = "float32"

    @staticmethod
    def abs(x: Sym) -> Sym:
        return Sym(x.b, x.b.op("Abs", x.name), x.dtype, x.ndim)

    @staticmethod
    def log(x: Sym) -> Sym:
        return Sym(x.b, x.b.op("Log", x.name), x.dtype, x.ndim)

    @staticmethod
    def minimum(x: Sym, y: Any) -> Sym:
        return x._binary("Min", y)

    @staticmethod
    def maximum(x: Sym, y: Any) -> Sym:
        return x._binary("Max", y)

    @staticmethod
    def where(c: Sym, x: Sym, y: Sym) -> Sym:
        return Sym(c.b, c.b.op("Where", c.name, x.name, y.name), x.dtype, max(x.ndim, y.ndim))


class _Lowering:
    def __init__(self, b: Builder, weights: Mapping[str, np.ndarray]):
        self.b = b
        self.weights = weights
        self.env: dict[str, str] = {}
        self.used: set[str] = set()
        self.graph_shapes: dict[str, str] = {}
        self.siblings: dict[str, list[Node]] = {}
        self.fused: dict[str, str] = {}

    def w(self, name: str) -> str:
        if name not in self.used:
            self.used.add(name)
            self.b.initializer(name, self.weights[name])
        return name

    def dim(self, tensor: str, axis: int) -> Sym:
        """A dimension of a tensor as an int64 scalar."""
        shape = self.b.op("Shape", tensor, start=axis, end=axis + 1)
        return Sym(self.b, self.b.op("Squeeze", shape, self.b.i64(0)), "int64", 0)

    def arange(self, n: Sym, dtype: str = "int64") -> Sym:
        zero, one = (self.b.const(0, dtype), self.b.const(1, dtype))
        end = n if dtype == "int64" else n.astype(dtype)
        return Sym(self.b, self.b.op("Range", zero, end.name, one), dtype, 1)

    @property
    def L(self) -> Sym:
        return self.dim(self.env["x"], 1)

    @property
    def S(self) -> Sym:
        return self.dim(self.env["memory"], 1) if "memory" in self.env else self.L


_LOWER: dict[Op, Callable[[_Lowering, Node], str]] = {}


def lower(op: Op) -> Callable:
    def register(fn: Callable) -> Callable:
        _LOWER[op] = fn
        return fn
    return register


def build_model(graph: Graph, spec: Attention | Transformer, weights: Mapping[str, np.ndarray],
                dtype: str = "float32") -> onnx.ModelProto:
    """The ONNX model of a (planned) graph; `weights` (any float type) are stored as `dtype`,
    the type of the float inputs and of the output too."""
    b = Builder(dtype)
    lw = _Lowering(b, weights)
    attn = spec.attention if isinstance(spec, Transformer) else spec
    inputs = []
    dims = {"x": ["batch", "length", attn.d_model],
            "memory": ["batch", "memory_length", attn.memory_dim],
            "key_lengths": ["batch"], "segment_ids": ["batch", "length"]}
    lw.graph_shapes = {n.out: n.shape for n in graph.nodes}
    lw.siblings = _projection_groups(graph)
    for node in graph.nodes:
        if node.op is Op.INPUT:
            elem = _ONNX_TYPE[dtype] if node.out in ("x", "memory") else TensorProto.INT64
            inputs.append(helper.make_tensor_value_info(node.out, elem, dims[node.out]))
            lw.env[node.out] = node.out
            continue
        lw.env[node.out] = _LOWER[node.op](lw, node)
    b.nodes.append(helper.make_node("Identity", [lw.env[graph.output]], ["y"], name="output"))
    output = helper.make_tensor_value_info("y", _ONNX_TYPE[dtype],
                                          ["batch", "length", attn.d_model])
    g = helper.make_graph(b.nodes, spec.name, inputs, [output])
    opsets = [helper.make_opsetid("", 23)] + [helper.make_opsetid(d, 1)
                                              for d in sorted(b.domains)]
    model = helper.make_model(g, opset_imports=opsets)
    model.ir_version = 10
    b.store_weights(model.graph)
    return model


def _a(lw: _Lowering, node: Node, i: int = 0) -> str:
    return lw.env[node.args[i]]


@lower(Op.ADD_POSITION)
def _add_position(lw: _Lowering, node: Node) -> str:
    b, x = lw.b, _a(lw, node)
    if node.attr("kind") == "learned":
        table = b.op("Gather", lw.w(node.attr("weight")), lw.arange(lw.L).name, axis=0)
        return b.op("Add", x, table)
    d = _width(node.shape)
    pos = b.op("Unsqueeze", lw.arange(lw.L, "float32").name, b.i64(1))  # (L, 1)
    inv = b.const([10000.0 ** (-(2 * i) / d) for i in range(d // 2)], "float32")
    angle = b.op("Unsqueeze", b.op("Mul", pos, inv), b.i64(2))  # (L, d/2, 1)
    table = b.op("Concat", b.op("Sin", angle), b.op("Cos", angle), axis=2)
    table = b.to_model(b.op("Reshape", table, b.i64(0, d)))  # (L, d): sin, cos interleaved
    return b.op("Add", x, table)


@lower(Op.LINEAR)
def _linear(lw: _Lowering, node: Node) -> str:
    b = lw.b
    if node.out in lw.fused:
        return lw.fused[node.out]
    group = lw.siblings.get(node.out, [node])
    weights = [b.op("Transpose", lw.w(n.attr("weight")), perm=[1, 0]) for n in group]
    # projections of one input become one GEMM; the weight concat is folded at session start
    w = weights[0] if len(group) == 1 else b.op("Concat", *weights, axis=1)
    y = b.op("MatMul", _a(lw, node), w)
    if node.attr("bias"):
        biases = [lw.w(n.attr("bias")) for n in group]
        y = b.op("Add", y, biases[0] if len(group) == 1 else b.op("Concat", *biases, axis=0))
    if len(group) == 1:
        return y
    widths = [_width(n.shape) for n in group]
    parts = b.op("Split", y, b.i64(*widths), axis=-1, outputs=len(group))
    for n, part in zip(group, parts, strict=True):
        lw.fused[n.out] = part
    return lw.fused[node.out]


def _projection_groups(graph: Graph) -> dict[str, list[Node]]:
    """LINEAR nodes reading the same value with the same bias setting, by output name."""
    by_input: dict[tuple[str, bool], list[Node]] = {}
    for n in graph.nodes:
        if n.op is Op.LINEAR:
            by_input.setdefault((n.args[0], n.attr("bias") is not None), []).append(n)
    return {n.out: group for group in by_input.values() if len(group) > 1 for n in group}


@lower(Op.SPLIT_HEADS)
def _split_heads(lw: _Lowering, node: Node) -> str:
    b = lw.b
    x = b.op("Reshape", _a(lw, node), b.i64(0, 0, node.attr("heads"), node.attr("dim")))
    return b.op("Transpose", x, perm=[0, 2, 1, 3])


@lower(Op.MERGE_HEADS)
def _merge_heads(lw: _Lowering, node: Node) -> str:
    b = lw.b
    return b.op("Reshape", b.op("Transpose", _a(lw, node), perm=[0, 2, 1, 3]), b.i64(0, 0, -1))


@lower(Op.NORM)
def _norm(lw: _Lowering, node: Node) -> str:
    b, x = lw.b, _a(lw, node)
    module = node.attr("module")
    weight = lw.w(f"{module}.weight")
    if node.attr("kind") == "layernorm":
        inputs = [x, weight] + ([lw.w(f"{module}.bias")] if node.attr("bias") else [])
        return b.op("LayerNormalization", *inputs, axis=-1, epsilon=node.attr("eps"))
    h = b.to_float32(x)  # statistics in float32: x^2 overflows float16 from |x| = 256
    ms = b.op("ReduceMean", b.op("Mul", h, h), b.i64(-1), keepdims=1)
    rms = b.op("Sqrt", b.op("Add", ms, b.const(node.attr("eps"), "float32")))
    return b.op("Mul", b.to_model(b.op("Div", h, rms)), weight)


@lower(Op.ROPE)
def _rope(lw: _Lowering, node: Node) -> str:
    b, x = lw.b, _a(lw, node)
    dim = node.attr("dim")
    half = dim // 2
    n = lw.dim(x, 2)
    pos = b.op("Unsqueeze", lw.arange(n, "float32").name, b.i64(1))  # (n, 1)
    angle = b.op("Mul", pos, b.const(rope_inv_freq(node.attr("theta"), dim), "float32"))
    cos, sin = b.to_model(b.op("Cos", angle)), b.to_model(b.op("Sin", angle))  # (n, dim/2)
    rest = b.op("Slice", x, b.i64(dim), b.i64(2**62), b.i64(-1))
    if node.attr("interleaved"):
        pairs = b.op("Reshape", b.op("Slice", x, b.i64(0), b.i64(dim), b.i64(-1)),
                     b.i64(0, 0, 0, half, 2))  # (B, h, n, dim/2, 2)
        even = b.op("Squeeze", b.op("Slice", pairs, b.i64(0), b.i64(1), b.i64(-1)), b.i64(-1))
        odd = b.op("Squeeze", b.op("Slice", pairs, b.i64(1), b.i64(2), b.i64(-1)), b.i64(-1))
        new_even = b.op("Sub", b.op("Mul", even, cos), b.op("Mul", odd, sin))
        new_odd = b.op("Add", b.op("Mul", even, sin), b.op("Mul", odd, cos))
        stacked = b.op("Concat", b.op("Unsqueeze", new_even, b.i64(-1)),
                       b.op("Unsqueeze", new_odd, b.i64(-1)), axis=-1)
        rot = b.op("Reshape", stacked, b.i64(0, 0, 0, dim))
    else:
        x1 = b.op("Slice", x, b.i64(0), b.i64(half), b.i64(-1))
        x2 = b.op("Slice", x, b.i64(half), b.i64(dim), b.i64(-1))
        rot = b.op("Concat", b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin)),
                   b.op("Add", b.op("Mul", x2, cos), b.op("Mul", x1, sin)), axis=-1)
    return b.op("Concat", rot, rest, axis=-1)


@lower(Op.REPEAT_KV)
def _repeat_kv(lw: _Lowering, node: Node) -> str:
    return _repeat(lw, _a(lw, node), node.attr("groups"))


def _repeat(lw: _Lowering, x: str, groups: int) -> str:
    """(B, Hkv, S, d) -> (B, Hkv * groups, S, d): head h reads kv head h // groups."""
    b = lw.b
    if groups == 1:
        return x
    x5 = b.op("Unsqueeze", x, b.i64(2))  # (B, Hkv, 1, S, d)
    shape = b.op("Shape", x5)
    target = b.op("Mul", shape, b.i64(1, 1, groups, 1, 1))
    d = b.op("Shape", x, start=3, end=4)
    flat = b.op("Concat", b.i64(0, -1), b.op("Shape", x, start=2, end=3), d, axis=0)
    return b.op("Reshape", b.op("Expand", x5, target), flat)


@lower(Op.ACTIVATION)
def _activation(lw: _Lowering, node: Node) -> str:
    b, x = lw.b, _a(lw, node)
    kind = node.attr("kind")
    if kind == "relu":
        return b.op("Relu", x)
    if kind == "silu":
        return b.op("Mul", x, b.op("Sigmoid", x))
    approximate = "tanh" if kind == "gelu_tanh" else "none"
    if lacks_bfloat16_cuda_kernel("Gelu", b.dtype):
        return b.to_model(b.op("Gelu", b.to_float32(x), approximate=approximate))
    return b.op("Gelu", x, approximate=approximate)


@lower(Op.MUL)
def _mul(lw: _Lowering, node: Node) -> str:
    return lw.b.op("Mul", _a(lw, node, 0), _a(lw, node, 1))


@lower(Op.ADD)
def _add(lw: _Lowering, node: Node) -> str:
    return lw.b.op("Add", _a(lw, node, 0), _a(lw, node, 1))


@lower(Op.LINEAR_ATTENTION)
def _linear_attention(lw: _Lowering, node: Node) -> str:
    b = lw.b
    q, k, v = (b.to_float32(_a(lw, node, i)) for i in range(3))  # sums over keys: float32
    feature = node.attr("feature")

    def phi(t: str) -> str:
        if feature == "elu":
            return b.op("Add", b.op("Elu", t, alpha=1.0), b.const(1.0, "float32"))
        if feature == "relu":
            return b.op("Relu", t)
        return b.op("Softmax", t, axis=-1)

    fq, fk = phi(q), phi(k)
    if node.attr("causal"):
        weights = b.op("MatMul", fq, b.op("Transpose", fk, perm=[0, 1, 3, 2]))  # (B, H, L, S)
        qi = Sym(b, b.op("Unsqueeze", lw.arange(lw.L).name, b.i64(1)), "int64", 2)
        ki = Sym(b, b.op("Unsqueeze", lw.arange(lw.S).name, b.i64(0)), "int64", 2)
        keep = (ki <= qi).astype("float32")
        weights = b.op("Mul", weights, keep.name)
        num = b.op("MatMul", weights, v)
        den = b.op("ReduceSum", weights, b.i64(-1), keepdims=1)
    else:
        kv = b.op("MatMul", b.op("Transpose", fk, perm=[0, 1, 3, 2]), v)  # (B, H, d, dv)
        num = b.op("MatMul", fq, kv)
        z = b.op("ReduceSum", fk, b.i64(2), keepdims=1)  # (B, H, 1, d)
        den = b.op("ReduceSum", b.op("Mul", fq, z), b.i64(-1), keepdims=1)
    return b.to_model(b.op("Div", num, b.op("Max", den, b.const(1e-6, "float32"))))


# -- the attention core, by strategy ------------------------------------------------------------

@lower(Op.ATTENTION)
def _attention(lw: _Lowering, node: Node) -> str:
    return _STRATEGIES[node.attr("strategy")](lw, node)


def _bsh(lw: _Lowering, x: str) -> str:
    """(B, h, n, d) -> (B, n, h * d)."""
    b = lw.b
    return b.op("Reshape", b.op("Transpose", x, perm=[0, 2, 1, 3]), b.i64(0, 0, -1))


def _gqa(lw: _Lowering, node: Node) -> str:
    b = lw.b
    q, k, v = (_bsh(lw, _a(lw, node, i)) for i in range(3))
    L = lw.L
    batch = b.op("Shape", q, start=0, end=1)
    last = b.op("Sub", b.op("Unsqueeze", L.name, b.i64(0)), b.i64(1))
    seqlens = b.op("Cast", b.op("Expand", last, batch), to=TensorProto.INT32)
    total = b.op("Cast", L.name, to=TensorProto.INT32)
    out = b.op("GroupQueryAttention", q, k, v, "", "", seqlens, total, outputs=3,
               domain="com.microsoft", num_heads=node.attr("heads"),
               kv_num_heads=node.attr("kv_heads"), scale=float(node.attr("scale")),
               softcap=float(node.attr("softcap") or 0.0),
               local_window_size=int(node.attr("local_window_size")))
    return out[0]


def _mha(lw: _Lowering, node: Node) -> str:
    b = lw.b
    groups = node.attr("heads") // node.attr("kv_heads")
    q = _bsh(lw, _a(lw, node, 0))
    k = _bsh(lw, _repeat(lw, _a(lw, node, 1), groups))
    v = _bsh(lw, _repeat(lw, _a(lw, node, 2), groups))
    attrs = {"domain": "com.microsoft", "num_heads": node.attr("heads"),
             "scale": float(node.attr("scale")),
             "unidirectional": 1 if dict(node.attrs).get("causal") else None}
    if not node.attr("key_padding"):
        return b.op("MultiHeadAttention", q, k, v, **attrs)
    lengths = lw.env["key_lengths"]
    # the kernel takes int32 lengths: clamp to [0, S] first, so 2^32 is S and not 0
    clamped = _OnnxNumpy.minimum(_OnnxNumpy.maximum(Sym(b, lengths, "int64", 1), 0), lw.S)
    out = b.op("MultiHeadAttention", q, k, v, "",
               b.op("Cast", clamped.name, to=TensorProto.INT32), **attrs)
    # a row with no visible key is zeros, whatever the kernel does with it
    any_key = b.op("Unsqueeze", b.op("Greater", lengths, b.const(0, "int64")), b.i64(1, 2))
    return b.op("Where", any_key, out, b.const(0.0, b.dtype))


def _scores(lw: _Lowering, node: Node, q: str, k: str, q_pos: Sym, k_pos: Sym,
            rank: int) -> str:
    """scale * q.k (+ bias) (softcap), float32. q: (B, Hkv, g, ..., n, d), k: (B, Hkv, 1, ...,
    m, d), both float32 (see `_qk_float32`) of `rank` axes. Biases come from the positions
    q_pos (..., n, 1), k_pos (..., 1, m)."""
    b = lw.b
    # scale q (n x d) rather than the scores (n x m): one pass over the smaller tensor
    q = b.op("Mul", q, b.const(node.attr("scale"), "float32"))
    if rank == 5:
        # (B, Hkv, g, n, d) @ (B, Hkv, d, m): merge g into the rows so ORT sees a 4-D matmul
        # with a transposed operand, which it fuses (no strided copy of all the keys)
        g = node.attr("heads") // node.attr("kv_heads")
        rows = b.op("Reshape", q, b.i64(0, 0, -1, _static_last(lw, node, 0)))
        k4 = b.op("Squeeze", k, b.i64(2))
        s4 = b.op("MatMul", rows, b.op("Transpose", k4, perm=[0, 1, 3, 2]))  # (B, Hkv, g*n, m)
        s = b.op("Reshape", s4, b.op("Concat", b.i64(0, 0, g, -1),
                                     b.op("Shape", s4, start=3), axis=0))
    else:
        perm = list(range(rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        s = b.op("MatMul", q, b.op("Transpose", k, perm=perm))
    bias_kind = node.attr("bias")
    if bias_kind:
        heads, kv = node.attr("heads"), node.attr("kv_heads")
        if bias_kind == "alibi":
            dist = _OnnxNumpy.abs(q_pos - k_pos).astype("float32")  # (..., n, m)
            slopes = np.array(alibi_slopes(heads), dtype=np.float32).reshape(
                (kv, heads // kv) + (1,) * dist.ndim)
            bias = b.op("Mul", b.const(-slopes, "float32"), dist.name)
        else:
            bucket = t5_bucket_float32(_OnnxNumpy, k_pos - q_pos, node.attr("buckets"),
                                       node.attr("max_distance"), node.attr("bidirectional"))
            table = b.to_float32(b.op("Gather", lw.w(node.attr("weight")), bucket.name,
                                      axis=0))  # (..., H)
            nd = bucket.ndim
            moved = b.op("Transpose", table, perm=[nd, *range(nd)])  # (H, ...)
            bias = b.op("Reshape", moved, b.op("Concat", b.i64(kv, heads // kv),
                                               b.op("Shape", moved, start=1), axis=0))
        s = b.op("Add", s, bias)  # broadcasts over B
    cap = node.attr("softcap")
    if cap:
        c = b.const(cap, "float32")
        s = b.op("Mul", b.op("Tanh", b.op("Div", s, c)), c)
    return s


def _masked_attend(lw: _Lowering, s: str, visible: Sym, v: str) -> str:
    """softmax over the last axis where visible, then @ v; rows with no visible key -> 0 (the
    factor is applied to the n x dv output, not to the n x m probabilities)."""
    b = lw.b
    # an additive 0 / lowest mask is built once at the mask's own (head-free) size; adding it
    # broadcasts faster than a Where over the scores
    additive = b.op("Where", visible.name, b.const(0.0, "float32"), b.const(_LOWEST, "float32"))
    p = b.to_model(b.op("Softmax", b.op("Add", s, additive), axis=-1))
    any_key = b.op("ReduceMax", visible.astype("float32").name, b.i64(-1), keepdims=1)
    return b.op("Mul", b.op("MatMul", p, v), b.to_model(any_key))


def _with_head_axes(visible: Sym, expr: masks.Mask) -> Sym:
    """A batched visibility (B, ...) -> (B, 1, 1, ...), to broadcast against (B, Hkv, g, ...)
    scores; an unbatched one already broadcasts from the right."""
    if not masks.runtime_inputs(expr):
        return visible
    b = visible.b
    return Sym(b, b.op("Unsqueeze", visible.name, b.i64(1, 2)), "bool", visible.ndim + 2)


def _runtime(lw: _Lowering) -> dict[str, Sym]:
    out = {}
    if "key_lengths" in lw.env:
        out["key_lengths"] = Sym(lw.b, lw.env["key_lengths"], "int64", 1)
    if "segment_ids" in lw.env:
        out["segment_ids"] = Sym(lw.b, lw.env["segment_ids"], "int64", 2)
    return out


def _dense(lw: _Lowering, node: Node) -> str:
    """The masked L x S form, with kv heads broadcast (never copied) over their query groups."""
    b = lw.b
    heads, kv = node.attr("heads"), node.attr("kv_heads")
    g = heads // kv
    q, k = _qk_float32(lw, node)
    q = b.op("Reshape", q, b.op("Concat", b.i64(0, kv, g), b.op("Shape", q, start=2),
                                axis=0))  # (B, Hkv, g, L, d)
    k = b.op("Unsqueeze", k, b.i64(2))  # (B, Hkv, 1, S, d)
    v = b.op("Unsqueeze", _a(lw, node, 2), b.i64(2))
    L, S = lw.L, lw.S
    q_pos = Sym(b, b.op("Unsqueeze", lw.arange(L).name, b.i64(1)), "int64", 2)  # (L, 1)
    k_pos = Sym(b, b.op("Unsqueeze", lw.arange(S).name, b.i64(0)), "int64", 2)  # (1, S)
    s = _scores(lw, node, q, k, q_pos, k_pos, 5)
    visible = masks.evaluate(node.attr("expr"), q_pos, k_pos, L=L, S=S, **_runtime(lw))
    visible = _with_head_axes(visible, node.attr("expr"))
    o = _masked_attend(lw, s, visible, v)  # (B, Hkv, g, L, dv)
    o = b.op("Reshape", o, b.op("Concat", b.i64(0, heads), b.op("Shape", o, start=3), axis=0))
    return _bsh(lw, o)


def _block_sparse(lw: _Lowering, node: Node) -> str:
    """Per block of n queries, gather the K key blocks the mask's cover can reach (band, global
    and random blocks), and attend over those K * n keys only. Memory: L x K * n. Rows of
    global queries (which see every key) are then recomputed densely: G x S."""
    b = lw.b
    expr = node.attr("expr")
    heads, kv, n = node.attr("heads"), node.attr("kv_heads"), node.attr("block")
    g = heads // kv
    c = cover(expr, self_attention=node.attr("kind") == "self")
    q, k = _qk_float32(lw, node)
    v = _a(lw, node, 2)
    d = _static_last(lw, node, 0)
    dv = _static_last(lw, node, 2)
    L, S = lw.L, lw.S
    nq, nk = (L + (n - 1)) // n, (S + (n - 1)) // n

    def pad_to_blocks(x: str, length: Sym, blocks: Sym) -> str:
        extra = b.op("Unsqueeze", (blocks * n - length).name, b.i64(0))
        if lacks_bfloat16_cuda_kernel("Pad", b.dtype) and x == v:  # append zeros instead
            shape = b.op("Concat", b.op("Shape", x, start=0, end=2), extra,
                         b.op("Shape", x, start=3), axis=0)
            zero = numpy_helper.from_array(np.zeros(1, numpy_dtype("bfloat16")), "zero")
            return b.op("Concat", x, b.op("ConstantOfShape", shape, value=zero), axis=2)
        pads = b.op("Concat", b.i64(0, 0, 0, 0, 0, 0), extra, b.i64(0), axis=0)
        return b.op("Pad", x, pads)

    def unsqueeze0(x: Sym) -> str:
        return b.op("Unsqueeze", x.name, b.i64(0))

    qb = b.op("Reshape", pad_to_blocks(q, L, nq), b.op(
        "Concat", b.i64(0, kv, g), unsqueeze0(nq), b.i64(n, d), axis=0))  # (B, Hkv, g, nq, n, d)
    kb = b.op("Reshape", pad_to_blocks(k, S, nk), b.op(
        "Concat", b.i64(0, kv), unsqueeze0(nk), b.i64(n, d), axis=0))  # (B, Hkv, nk, n, d)
    vb = b.op("Reshape", pad_to_blocks(v, S, nk), b.op(
        "Concat", b.i64(0, kv), unsqueeze0(nk), b.i64(n, dv), axis=0))

    # the key blocks each query block visits: (nq, K)
    i = Sym(b, b.op("Unsqueeze", lw.arange(nq).name, b.i64(1)), "int64", 2)  # (nq, 1)
    lo, hi = -math.ceil(c.left / n), math.ceil(c.right / n)
    parts = [(i + Sym(b, b.const([list(range(lo, hi + 1))], "int64"), "int64", 2)).name]
    globals_ = c.global_key_blocks(n)
    if globals_:
        parts.append(b.op("Expand", b.const([list(globals_)], "int64"),
                          b.op("Concat", b.op("Shape", i.name, start=0, end=1), b.i64(1),
                               axis=0)))
    for r in c.randoms:
        parts += [masks.random_key_block(r.seed, i, j, nk).name for j in range(r.blocks)]
    raw = Sym(b, b.op("Concat", *parts, axis=1), "int64", 2)  # (nq, K)
    K = node.attr("key_blocks")
    in_range = (raw >= 0) & (raw < nk)
    earlier = Sym(b, b.const(np.tril(np.ones((K, K), bool), -1), "bool"), "bool", 2)
    same = Sym(b, b.op("Unsqueeze", raw.name, b.i64(2)), "int64", 3) == Sym(
        b, b.op("Unsqueeze", raw.name, b.i64(1)), "int64", 3)  # (nq, K, K)
    prior = same & earlier & Sym(b, b.op("Unsqueeze", in_range.name, b.i64(1)), "bool", 3)
    dup = Sym(b, b.op("ReduceMax", prior.astype("int64").name, b.i64(2), keepdims=0),
              "int64", 2) > 0
    slot_ok = in_range & ~dup  # (nq, K): each visited block once
    idx = _OnnxNumpy.minimum(_OnnxNumpy.maximum(raw, 0), nk - 1)

    kg = b.op("Reshape", b.op("Gather", kb, idx.name, axis=2),
              b.i64(0, 0, 1, -1, K * n, d))  # (B, Hkv, 1, nq, K*n, d)
    vg = b.op("Reshape", b.op("Gather", vb, idx.name, axis=2), b.i64(0, 0, 1, -1, K * n, dv))

    offsets = Sym(b, b.const(list(range(n)), "int64"), "int64", 1)
    q_pos = Sym(b, b.op("Unsqueeze", (i * n + offsets).name, b.i64(2)), "int64", 3)  # (nq, n, 1)
    k_raw = Sym(b, b.op("Unsqueeze", idx.name, b.i64(2)), "int64", 3) * n + offsets  # (nq, K, n)
    k_pos = Sym(b, b.op("Reshape", k_raw.name, b.i64(0, 1, K * n)), "int64", 3)  # (nq, 1, K*n)
    ok = Sym(b, b.op("Reshape", b.op("Expand", b.op("Unsqueeze", slot_ok.name, b.i64(2)),
                                          b.i64(1, 1, n)), b.i64(0, 1, K * n)), "bool", 3)
    # clamped positions keep gathers of runtime inputs in range; out-of-range pairs are masked
    q_c = _OnnxNumpy.minimum(q_pos, L - 1)
    k_c = _OnnxNumpy.minimum(k_pos, S - 1)
    s = _scores(lw, node, qb, kg, q_c, k_c, 6)  # (B, Hkv, g, nq, n, K*n)
    visible = masks.evaluate(expr, q_c, k_c, L=L, S=S, **_runtime(lw))
    visible = visible & ok & (k_pos < S) & (q_pos < L)
    o = _masked_attend(lw, s, _with_head_axes(visible, expr), vg)  # (B, Hkv, g, nq, n, dv)
    o = b.op("Reshape", o, b.i64(0, heads, -1, dv))  # (B, H, nq*n, dv)
    o = b.op("Slice", o, b.i64(0), unsqueeze0(L), b.i64(2))  # (B, H, L, dv)
    rows = list(range(c.q_first)) + [t for t in c.q_tokens if t >= c.q_first]
    if rows:
        o = _global_rows(lw, node, o, rows, q, k, v, L, S)
    return _bsh(lw, o)


def _global_rows(lw: _Lowering, node: Node, o: str, rows: list[int], q: str, k: str, v: str,
                 L: Sym, S: Sym) -> str:
    """Recompute the rows of global queries against every key and put them into o."""
    b = lw.b
    heads, kv = node.attr("heads"), node.attr("kv_heads")
    g = heads // kv
    expr = node.attr("expr")
    at = _OnnxNumpy.minimum(Sym(b, b.const(rows, "int64"), "int64", 1), L - 1)  # (G,)
    qg = b.op("Gather", q, at.name, axis=2)  # (B, H, G, d)
    qg = b.op("Reshape", qg, b.op("Concat", b.i64(0, kv, g), b.op("Shape", qg, start=2),
                                  axis=0))  # (B, Hkv, g, G, d)
    kf = b.op("Unsqueeze", k, b.i64(2))
    vf = b.op("Unsqueeze", v, b.i64(2))
    q_pos = Sym(b, b.op("Unsqueeze", at.name, b.i64(1)), "int64", 2)  # (G, 1)
    k_pos = Sym(b, b.op("Unsqueeze", lw.arange(S).name, b.i64(0)), "int64", 2)  # (1, S)
    s = _scores(lw, node, qg, kf, q_pos, k_pos, 5)
    visible = masks.evaluate(expr, q_pos, k_pos, L=L, S=S, **_runtime(lw))
    og = _masked_attend(lw, s, _with_head_axes(visible, expr), vf)  # (B, Hkv, g, G, dv)
    og = b.op("Reshape", og, b.op("Concat", b.i64(0, heads), b.op("Shape", og, start=3),
                                  axis=0))  # (B, H, G, dv)
    # rows[j] is the position of global row j; rows start with the prefix 0..first-1
    first = 0
    while first < len(rows) and rows[first] == first:
        first += 1
    pos = lw.arange(L)
    row = _OnnxNumpy.minimum(pos, max(first - 1, 0))  # row j of og for position j < first
    is_global = pos < first
    for j, t in enumerate(rows[first:], start=first):
        hit = pos == t
        row = _OnnxNumpy.where(hit, Sym(b, b.const(j, "int64"), "int64", 0), row)
        is_global = is_global | hit
    picked = b.op("Gather", og, row.name, axis=2)  # (B, H, L, dv)
    chosen = b.op("Unsqueeze", is_global.name, b.i64(1))  # (L, 1)
    if lacks_bfloat16_cuda_kernel("Where", b.dtype):  # an exact 0 / 1 blend instead
        g = b.op("Cast", chosen, to=_ONNX_TYPE[b.dtype])
        return b.op("Add", b.op("Mul", picked, g),
                    b.op("Mul", o, b.op("Sub", b.const(1.0, b.dtype), g)))
    return b.op("Where", chosen, picked, o)


def _qk_float32(lw: _Lowering, node: Node) -> tuple[str, str]:
    """q and k of an attention node, widened to float32 once, before any blocking or gather:
    scores are float32 (products of half-precision values are exact in it)."""
    return lw.b.to_float32(_a(lw, node, 0)), lw.b.to_float32(_a(lw, node, 1))


def _static_last(lw: _Lowering, node: Node, i: int) -> int:
    """Head width of argument i ([B, h, n, d])."""
    return _width(lw.graph_shapes[node.args[i]])


def _width(shape: str) -> int:
    """The last (always static) axis of an IR shape text such as `[B, L, 512]`."""
    return int(shape.rsplit(",", 1)[1].strip(" ]"))


_STRATEGIES: dict[str, Callable[[_Lowering, Node], str]] = {
    "gqa": _gqa, "mha": _mha, "dense": _dense, "block_sparse": _block_sparse,
}
