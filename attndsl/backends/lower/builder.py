"""The ONNX builder of the lowering: `Builder` collects nodes, constants and weights; `Sym` is
a symbolic tensor with NumPy-like operators (so `masks.evaluate` and the T5 buckets build
graph nodes unchanged); `Lowering` holds one model's state; `lower(Op.X)` registers a lowering."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...dtypes import numpy_dtype
from ...ir import Node, Op
from ...shapes import TensorType

__all__ = ["LOWER", "ONNX_TYPE", "Builder", "Lowering", "OnnxArrays", "Sym", "arg",
           "bsh", "lower", "repeat", "static_last", "width"]

ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
              "bfloat16": TensorProto.BFLOAT16, "int64": TensorProto.INT64,
              "bool": TensorProto.BOOL, "int32": TensorProto.INT32}
FLOATS = ("float32", "float16", "bfloat16")


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
        element = ONNX_TYPE[self.dtype]
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
                                                              to=ONNX_TYPE[self.dtype])


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
        if self.dtype in FLOATS:  # a scalar takes the type of the tensor it meets
            dtype = self.dtype
        else:
            dtype = "float32" if isinstance(other, float) else "int64"
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
    def __pow__(self, o: Any) -> Sym: return self._binary("Pow", o)
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

    def __ne__(self, o: Any) -> Sym:  # type: ignore[override]
        return ~(self == o)

    def __abs__(self) -> Sym:
        return Sym(self.b, self.b.op("Abs", self.name), self.dtype, self.ndim)

    __hash__ = None  # type: ignore[assignment]

    def __invert__(self) -> Sym:
        return Sym(self.b, self.b.op("Not", self.name), "bool", self.ndim)

    def __neg__(self) -> Sym:
        return Sym(self.b, self.b.op("Neg", self.name), self.dtype, self.ndim)

    def __getitem__(self, index: Any) -> Sym:
        index = index if isinstance(index, tuple) else (index,)
        if len(index) == 2 and index[0] is Ellipsis and isinstance(index[1], slice):
            s = index[1]  # x[..., a:b:c]: a slice of the last axis
            b = self.b
            name = b.op("Slice", self.name, b.i64(s.start or 0),
                        b.i64(2**62 if s.stop is None else s.stop), b.i64(-1), b.i64(s.step or 1))
            return Sym(b, name, self.dtype, self.ndim)
        if index == (Ellipsis, None):
            name = self.b.op("Unsqueeze", self.name, self.b.i64(-1))
            return Sym(self.b, name, self.dtype, self.ndim + 1)
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
        return Sym(self.b, self.b.op("Cast", self.name, to=ONNX_TYPE[dtype]), dtype, self.ndim)


class OnnxArrays:
    """The array namespace of `backends.formulas` (and of `positions.t5_bucket_float32`) over
    `Sym`s: each function emits the ONNX nodes of its NumPy namesake."""

    __name__ = "onnx"
    int64 = "int64"
    float32 = "float32"

    def __init__(self, b: Builder) -> None:
        self.b = b

    def _unary(self, op: str, x: Sym, **attrs: Any) -> Sym:
        return Sym(self.b, self.b.op(op, x.name, **attrs), x.dtype, x.ndim)

    def asarray(self, values: Any, dtype: str) -> Sym:
        return Sym(self.b, self.b.const(values, dtype), dtype, np.ndim(values))

    @staticmethod
    def astype(x: Sym, dtype: str) -> Sym:
        return x if x.dtype == dtype else x.astype(dtype)

    @staticmethod
    def dtype(x: Sym) -> str:
        return x.dtype

    def abs(self, x: Sym) -> Sym: return self._unary("Abs", x)
    def log(self, x: Sym) -> Sym: return self._unary("Log", x)
    def cos(self, x: Sym) -> Sym: return self._unary("Cos", x)
    def sin(self, x: Sym) -> Sym: return self._unary("Sin", x)
    def tanh(self, x: Sym) -> Sym: return self._unary("Tanh", x)
    def sqrt(self, x: Sym) -> Sym: return self._unary("Sqrt", x)
    def sigmoid(self, x: Sym) -> Sym: return self._unary("Sigmoid", x)
    def relu(self, x: Sym) -> Sym: return self._unary("Relu", x)
    def elu(self, x: Sym, alpha: float) -> Sym: return self._unary("Elu", x, alpha=alpha)

    def gelu(self, x: Sym, approximate: str) -> Sym:
        return self._unary("Gelu", x, approximate=approximate)

    def softmax(self, x: Sym, axis: int) -> Sym:
        return self._unary("Softmax", x, axis=axis)

    @staticmethod
    def minimum(x: Sym, y: Any) -> Sym:
        return x._binary("Min", y)

    @staticmethod
    def maximum(x: Sym, y: Any) -> Sym:
        return x._binary("Max", y)

    @staticmethod
    def where(c: Sym, x: Sym, y: Sym) -> Sym:
        return Sym(c.b, c.b.op("Where", c.name, x.name, y.name), x.dtype,
                   max(c.ndim, x.ndim, y.ndim))

    def matmul(self, x: Sym, y: Sym) -> Sym:
        return Sym(self.b, self.b.op("MatMul", x.name, y.name), x.dtype, max(x.ndim, y.ndim))

    def swap_last(self, x: Sym) -> Sym:
        perm = list(range(x.ndim))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        return self._unary("Transpose", x, perm=perm)

    def concat(self, xs: list[Sym], axis: int) -> Sym:
        return Sym(self.b, self.b.op("Concat", *(x.name for x in xs), axis=axis), xs[0].dtype,
                   xs[0].ndim)

    def interleave(self, x: Sym, y: Sym) -> Sym:
        pair = self.concat([x[..., None], y[..., None]], axis=-1)  # (..., n, 2)
        shape = self.b.i64(*([0] * (x.ndim - 1)), -1)
        return Sym(self.b, self.b.op("Reshape", pair.name, shape), x.dtype, x.ndim)

    def _reduce(self, op: str, x: Sym, axis: int, keepdims: bool) -> Sym:
        name = self.b.op(op, x.name, self.b.i64(axis), keepdims=int(keepdims))
        return Sym(self.b, name, x.dtype, x.ndim if keepdims else x.ndim - 1)

    def mean(self, x: Sym, axis: int, keepdims: bool = False) -> Sym:
        return self._reduce("ReduceMean", x, axis, keepdims)

    def sum(self, x: Sym, axis: int, keepdims: bool = False) -> Sym:
        return self._reduce("ReduceSum", x, axis, keepdims)

    def amax(self, x: Sym, axis: int, keepdims: bool = False) -> Sym:
        return self._reduce("ReduceMax", x, axis, keepdims)

    def layer_norm(self, x: Sym, weight: Sym, bias: Sym | None, eps: float) -> Sym:
        inputs = [x.name, weight.name] + ([bias.name] if bias is not None else [])
        return Sym(self.b, self.b.op("LayerNormalization", *inputs, axis=-1, epsilon=eps),
                   x.dtype, x.ndim)

    def exp(self, x: Sym) -> Sym: return self._unary("Exp", x)

    def argmax(self, x: Sym, axis: int) -> Sym:
        name = self.b.op("ArgMax", x.name, axis=axis, keepdims=0)
        return Sym(self.b, name, "int64", x.ndim - 1)

    def shape(self, x: Sym, axis: int) -> Sym:
        b = self.b
        name = b.op("Squeeze", b.op("Shape", x.name, start=axis, end=axis + 1 or None),
                    b.i64(0))
        return Sym(b, name, "int64", 0)

    def vector(self, items: list) -> str:
        """An int64 vector of ints and int64 scalars."""
        b = self.b
        if all(isinstance(i, int) for i in items):
            return b.i64(*items)
        parts = [b.i64(i) if isinstance(i, int) else b.op("Unsqueeze", i.name, b.i64(0))
                 for i in items]
        return b.op("Concat", *parts, axis=0)

    def reshape(self, x: Sym, dims: list) -> Sym:
        return Sym(self.b, self.b.op("Reshape", x.name, self.vector(dims)), x.dtype,
                   len(dims))

    def arange(self, n: Sym | int) -> Sym:
        b = self.b
        end = n.name if isinstance(n, Sym) else b.const(n, "int64")
        return Sym(b, b.op("Range", b.const(0, "int64"), end, b.const(1, "int64")), "int64", 1)

    def pad(self, x: Sym, axis: int, n: Sym | int) -> Sym:
        axis %= x.ndim
        pads = [0] * (x.ndim + axis) + [n] + [0] * (x.ndim - axis - 1)
        return Sym(self.b, self.b.op("Pad", x.name, self.vector(pads)), x.dtype, x.ndim)

    def slice(self, x: Sym, axis: int, start: int, stop: int | Sym | None) -> Sym:
        b = self.b
        end = [2**62 if stop is None else stop]
        return Sym(b, b.op("Slice", x.name, b.i64(start), self.vector(end), b.i64(axis)),
                   x.dtype, x.ndim)

    def take(self, x: Sym, indices: Sym, axis: int) -> Sym:
        return Sym(self.b, self.b.op("Gather", x.name, indices.name, axis=axis), x.dtype,
                   x.ndim - 1 + indices.ndim)

    @staticmethod
    def int_max(a: Sym, b: int) -> Sym:
        return a._binary("Max", b)

    def cumsum(self, x: Sym, axis: int) -> Sym:
        return Sym(self.b, self.b.op("CumSum", x.name, self.b.i64(axis)), x.dtype, x.ndim)

    def take_along(self, x: Sym, indices: Sym, axis: int) -> Sym:
        name = self.b.op("GatherElements", x.name, indices.name, axis=axis)
        return Sym(self.b, name, x.dtype, indices.ndim)

    def sort(self, x: Sym) -> tuple[Sym, Sym]:
        b = self.b
        count = b.op("Shape", x.name, start=-1)
        values, indices = b.op("TopK", x.name, count, outputs=2, axis=-1, largest=0, sorted=1)
        return Sym(b, values, x.dtype, x.ndim), Sym(b, indices, "int64", x.ndim)


class Lowering:
    def __init__(self, b: Builder, weights: Mapping[str, np.ndarray]):
        self.b = b
        self.xp = OnnxArrays(b)
        self.weights = weights
        self.env: dict[str, str] = {}
        self.used: set[str] = set()
        self.graph_shapes: dict[str, str] = {}
        self.siblings: dict[str, list[Node]] = {}
        self.fused: dict[str, str] = {}
        # values computed once per model and shared by every layer (RoPE tables, decoding
        # masks), by what they depend on
        self.memo: dict[tuple, Any] = {}
        self.graph_inputs: set[str] = set()
        self.packed: dict[tuple[str, ...], str] = {}  # projections of one GEMM -> its output
        self.nodes: dict[str, Node] = {}  # the graph's IR nodes by output
        self.contrib_norms = False  # norms as ORT's contrib kernels (float32, planned targets)
        self.skip_norms: dict[str, Node] = {}  # residual add -> the norm of its sum

    def w(self, name: str) -> str:
        if name not in self.used:
            self.used.add(name)
            self.b.initializer(name, self.weights[name])
        return name

    def sym(self, node: Node, i: int = 0) -> Sym:
        """Argument i of a node as a model-dtype `Sym` (its rank from the IR shape)."""
        name = node.args[i]
        return Sym(self.b, self.env[name], self.b.dtype, self.graph_shapes[name].rank)

    def weight(self, name: str, ndim: int = 1) -> Sym:
        return Sym(self.b, self.w(name), self.b.dtype, ndim)

    def positions(self, n: Sym) -> Sym:
        """0 .. n-1 as a float32 column (n, 1)."""
        return self.arange(n, "float32")[:, None]

    def token_positions(self, node: Node, n: Sym) -> Sym:
        """The float32 positions of a node's tokens: (n, 1) from 0, or from its position_ids
        argument when decoding, (B, n, 1)."""
        if len(node.args) < 2:
            return self.positions(n)
        ids = Sym(self.b, self.env[node.args[1]], "int64", 2)
        return ids.astype("float32")[..., None]

    @property
    def decoding(self) -> bool:
        return "attention_mask" in self.env

    def indices(self, keys: Sym | None = None) -> tuple[Sym, Sym]:
        """Query and key indices, int64 (L, 1) and (1, S). When decoding, the L new queries
        come after the P = S - L cached keys, and `keys` (a count) are the last ones (a
        bounded cache holds those)."""
        b = self.b
        L, S = self.L, self.S
        q = self.arange(L)
        if self.decoding:
            q = q + (S - L)
        k = self.arange(S) if keys is None else self.arange(keys) + (S - keys)
        return (Sym(b, b.op("Unsqueeze", q.name, b.i64(1)), "int64", 2),
                Sym(b, b.op("Unsqueeze", k.name, b.i64(0)), "int64", 2))

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
        """The number of keys: memory's length, the cache's and the new tokens' when decoding
        (attention_mask's length), else L."""
        if self.decoding:
            return self.dim(self.env["attention_mask"], 1)
        return self.dim(self.env["memory"], 1) if "memory" in self.env else self.L


LOWER: dict[Op, Callable[[Lowering, Node], str]] = {}


def lower(op: Op) -> Callable:
    def register(fn: Callable) -> Callable:
        LOWER[op] = fn
        return fn
    return register


def arg(lw: Lowering, node: Node, i: int = 0) -> str:
    return lw.env[node.args[i]]


def bsh(lw: Lowering, x: str) -> str:
    """(B, h, n, d) -> (B, n, h * d)."""
    b = lw.b
    return b.op("Reshape", b.op("Transpose", x, perm=[0, 2, 1, 3]), b.i64(0, 0, -1))


def static_last(lw: Lowering, node: Node, i: int) -> int:
    """Head width of argument i ([B, h, n, d])."""
    return width(lw.graph_shapes[node.args[i]])


def width(shape: TensorType) -> int:
    """The last (always static) axis of an IR type such as `[B, L, 512]`."""
    return shape.last


def repeat(lw: Lowering, x: str, groups: int) -> str:
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
