"""The ONNX builder of the lowering: `Builder` collects nodes, constants and weights;
`Lowering` holds one model's state; `lower(Op.X)` registers a lowering. (`Sym` and
`OnnxArrays`, the symbolic tensors the formulas and masks build nodes with, are in `sym.py`.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...dtypes import ONNX_TYPE, numpy_dtype
from ...ir import Node, Op
from ...shapes import TensorType
from .sym import OnnxArrays, Sym

__all__ = ["LOWER", "Builder", "Lowering", "OnnxArrays", "Sym", "arg",
           "bsh", "lower", "parts", "repeat", "shape_of", "static_last", "width"]


ONNX_TYPE_OF = {np.uint8: TensorProto.UINT8}  # the typed initializers' element types


@dataclass(frozen=True)
class _Deferred:
    """A weight read only when the model is written: its shape now, its values from `read`."""

    shape: tuple[int, ...]
    read: Callable[[], np.ndarray]
    typed: bool = False  # stored in its own element type (uint8 codes), not the model's


def shape_of(weights: Mapping[str, np.ndarray], name: str) -> tuple[int, ...]:
    """A weight's shape, without reading it where the mapping can say (`weights.Weights`)."""
    shape = getattr(weights, "shape", None)
    return tuple(shape(name)) if callable(shape) else tuple(np.shape(weights[name]))


def parts(compute: Callable[[], tuple], count: int) -> list[Callable[[], Any]]:
    """Readers of the `count` parts of one computation (a weight's blocks, scales and zero
    points): made when the first is read, dropped once each has been read."""
    held: dict[str, Any] = {}

    def reader(i: int) -> Callable[[], Any]:
        def read() -> Any:
            if not held:
                held["value"], held["left"] = compute(), set(range(count))
            value = held["value"][i]
            held["left"].discard(i)
            if not held["left"]:
                held.clear()
            return value
        return read
    return [reader(i) for i in range(count)]


class Builder:
    """Collects nodes and initializers; constants are deduplicated."""

    def __init__(self, dtype: str = "float32") -> None:
        self.dtype = dtype  # the model's float type
        self.nodes: list[onnx.NodeProto] = []
        # stored into the model at the end
        self.weights: list[tuple[str, np.ndarray | _Deferred, bool]] = []
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

    def initializer(self, name: str, array: np.ndarray, typed: bool = False) -> str:
        """A weight stored in the model dtype, or (`typed`) in its own (a quantized weight's
        uint8 codes)."""
        self.weights.append((name, array, typed))
        return name

    def deferred(self, name: str, shape: tuple[int, ...], read: Callable[[], np.ndarray],
                 typed: bool = False) -> str:
        """A weight stored in the model dtype (or, `typed`, its own) whose values `read` gives
        only when the model is written: a checkpoint's tensors are never all in memory."""
        self.weights.append((name, _Deferred(tuple(shape), read, typed), typed))
        return name

    def store_weights(self, graph: onnx.GraphProto,
                      deferred: dict[str, Callable[[], np.ndarray]] | None = None) -> None:
        """Write the weights into the graph's initializers one by one, in the model dtype.
        Given `deferred`, a deferred weight's initializer gets its name, type and shape but no
        data, and `deferred[name]` reads its data in the model dtype (`exported.Exported`
        streams it into the file); without it, its data is read now."""
        np_type = numpy_dtype(self.dtype)
        element = ONNX_TYPE[self.dtype]

        def stored(read: Callable[[], np.ndarray], typed: bool) -> np.ndarray:
            data = read()
            return np.ascontiguousarray(data if typed else data.astype(np_type, copy=False))

        for name, array, typed in self.weights:
            tensor = graph.initializer.add()
            tensor.name = name
            if isinstance(array, _Deferred):
                tensor.data_type = ONNX_TYPE_OF[np.uint8] if typed else element
                tensor.dims.extend(array.shape)
                if deferred is not None:
                    deferred[name] = lambda d=array: stored(d.read, d.typed)
                else:
                    tensor.raw_data = stored(array.read, typed).tobytes()
                continue
            tensor.data_type = ONNX_TYPE_OF[array.dtype.type] if typed else element
            tensor.dims.extend(array.shape)
            data = array if typed else array.astype(np_type, copy=False)
            tensor.raw_data = np.ascontiguousarray(data).tobytes()
        self.weights.clear()

    def to_float32(self, name: str) -> str:
        """A model-dtype value widened to float32 (no node in a float32 model)."""
        return name if self.dtype == "float32" else self.op("Cast", name, to=TensorProto.FLOAT)

    def to_model(self, name: str) -> str:
        """A float32 value narrowed to the model dtype (no node in a float32 model)."""
        return name if self.dtype == "float32" else self.op("Cast", name,
                                                              to=ONNX_TYPE[self.dtype])


class Lowering:
    def __init__(self, b: Builder, weights: Mapping[str, np.ndarray]):
        self.b = b
        self.xp = OnnxArrays(b)
        self.weights = weights
        self.env: dict[str, str] = {}
        self.used: set[str] = set()
        self.graph_shapes: dict[str, TensorType] = {}
        self.siblings: dict[str, list[Node]] = {}
        self.fused: dict[str, str] = {}
        # values computed once per model and shared by every layer (RoPE tables, decoding
        # masks), by what they depend on
        self.memo: dict[tuple, Any] = {}
        self.graph_inputs: set[str] = set()
        self.packed: dict[tuple[str, ...], str] = {}  # projections of one GEMM -> its output
        self.nodes: dict[str, Node] = {}  # the graph's IR nodes by output
        # whether the node being lowered sees the memory rows as its keys (a decoder stack's
        # nodes over them alone; a lone cross attention's all)
        self.memory_keys = True
        self.contrib_norms = False  # norms as ORT's contrib kernels (float32, planned targets)
        self.skip_norms: dict[str, Node] = {}  # residual add -> the norm of its sum
        # the planned rewrites (build_model's `rewrites`): quantize.Quantization, the
        # weights stored in blocks, the feed-forward nodes (by prefix) run as their quantized
        # kernel; and each in-place
        # attention's packed q, k, v and in-kernel RoPE (planner.rewrites.Rotary)
        self.quantization = None
        self.quantized: frozenset[str] = frozenset()
        self.quantized_kernels: frozenset[str] = frozenset()
        self.rotary: dict[str, Any] = {}
        self.mrotary: frozenset[str] = frozenset()  # RoPE nodes run as MRotaryEmbedding
        # each fused strategy's lowering by name, and a kernel node's by its kernel's name
        # where a strategy lowers it (build_model's `strategies`)
        self.strategies: Mapping[str, Callable[[Lowering, Node], str]] = {}

    def w(self, name: str) -> str:
        if name not in self.used:
            self.used.add(name)
            weights = self.weights  # the reader holds the weights, not the whole lowering
            self.b.deferred(name, shape_of(weights, name), lambda: weights[name])
        return name

    def sym(self, node: Node, i: int = 0) -> Sym:
        """Argument i of a node as a `Sym` of the model dtype (int64 where the IR says so: a
        vision stack's rows and columns), its rank from the IR shape."""
        name = node.args[i]
        shape = self.graph_shapes[name]
        dtype = "int64" if shape.dtype == "int64" else self.b.dtype
        return Sym(self.b, self.env[name], dtype, shape.rank)

    def weight(self, name: str, ndim: int = 1) -> Sym:
        return Sym(self.b, self.w(name), self.b.dtype, ndim)

    def positions(self, n: Sym) -> Sym:
        """0 .. n-1 as a float32 column (n, 1)."""
        return self.arange(n, "float32")[:, None]

    def token_positions(self, node: Node, n: Sym) -> Sym:
        """The float32 positions of a node's tokens: (n, 1) from 0, or from its position_ids
        argument when decoding, (B, n, 1) (multimodal RoPE's three streams: (3, B, n, 1))."""
        if len(node.args) < 2:
            return self.positions(n)
        ids = Sym(self.b, self.env[node.args[1]], "int64", self.graph_shapes[node.args[1]].rank)
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
        """The number of keys: memory's length (of a decoder stack, for the nodes over the
        memory rows, `memory_keys`), the cache's and the new tokens' when decoding
        (attention_mask's length), else L."""
        if self.decoding:
            return self.dim(self.env["attention_mask"], 1)
        return self.dim(self.env["memory"], 1) if "memory" in self.env and self.memory_keys \
            else self.L


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
