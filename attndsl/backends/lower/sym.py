"""`Sym`, a symbolic ONNX tensor with NumPy-like operators, and `OnnxArrays`, the array
namespace over them: masks, the T5 buckets and `backends.formulas` build graph nodes on them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...dtypes import DTYPES, ONNX_TYPE, numpy_dtype
from ...targets import lacks_bfloat16_cuda_kernel

if TYPE_CHECKING:
    from .builder import Builder

__all__ = ["OnnxArrays", "Sym"]


class Sym:
    """A symbolic ONNX tensor with NumPy-like operators (`//`, `%`: non-negative dividends)."""

    __array_priority__ = 1000  # NumPy scalars defer to our reflected operators

    def __init__(self, b: Builder, name: str, dtype: str, ndim: int):
        self.b, self.name, self.dtype, self.ndim = b, name, dtype, ndim

    def _lift(self, other: Any) -> Sym:
        if isinstance(other, Sym):
            return other
        if isinstance(other, bool | np.bool_):
            return Sym(self.b, self.b.const(other, "bool"), "bool", 0)
        if self.dtype in DTYPES:  # a scalar takes the type of the tensor it meets
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
    int64, float32 = "int64", "float32"

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

    def swap_first(self, x: Sym) -> Sym:  # (the first two axes)
        return self._unary("Transpose", x, perm=[1, 0, *range(2, x.ndim)])

    def swap_last(self, x: Sym) -> Sym:
        return self._unary("Transpose", x, perm=[*range(x.ndim - 2), x.ndim - 1, x.ndim - 2])

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
    def softplus(self, x: Sym) -> Sym: return self._unary("Softplus", x)

    def scan(self, step, state: Sym, xs: list[Sym], axis: int) -> tuple[Sym, Sym]:
        """ONNX Scan: (the last state, the outputs stacked along axis) of state, y_i =
        step(state, [x[i] for x in xs]) over the indices of `axis`; the body is its own
        graph (it reads the enclosing graph's values by name)."""
        b = self.b
        saved = b.nodes, b.consts
        b.nodes, b.consts = [], dict(b.consts)
        b.count += 1
        tag = f"scan{b.count}"
        names = [f"{tag}_state", *(f"{tag}_x{i}" for i in range(len(xs)))]
        inner = [Sym(b, names[0], state.dtype, state.ndim),
                 *(Sym(b, n, x.dtype, x.ndim - 1) for n, x in zip(names[1:], xs, strict=True))]

        def info(s: Sym) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(s.name, ONNX_TYPE[s.dtype], [None] * s.ndim)

        try:
            new, y = step(inner[0], inner[1:])
            new = Sym(b, b.op("Identity", new.name), new.dtype, new.ndim)
            y = Sym(b, b.op("Identity", y.name), y.dtype, y.ndim)
            body = helper.make_graph(b.nodes, tag, [info(s) for s in inner], [info(new), info(y)])
        finally:
            b.nodes, b.consts = saved
        last, ys = b.op("Scan", state.name, *(x.name for x in xs), outputs=2, body=body,
                        num_scan_inputs=len(xs), scan_input_axes=[axis] * len(xs),
                        scan_output_axes=[axis])
        return Sym(b, last, state.dtype, state.ndim), Sym(b, ys, y.dtype, y.ndim + 1)

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

    def zeros_after(self, x: Sym, axis: int, n: Sym) -> Sym:
        """n zeros after the end of `axis`, in any dtype: where ONNX Runtime's CUDA provider
        has no bfloat16 Pad kernel, the zeros are concatenated instead."""
        b = self.b
        axis %= x.ndim
        extra = b.op("Unsqueeze", n.name, b.i64(0))
        if lacks_bfloat16_cuda_kernel("Pad", x.dtype):
            shape = b.op("Concat", b.op("Shape", x.name, start=0, end=axis), extra,
                         b.op("Shape", x.name, start=axis + 1), axis=0)
            zero = numpy_helper.from_array(np.zeros(1, numpy_dtype(x.dtype)), "zero")
            return Sym(b, b.op("Concat", x.name, b.op("ConstantOfShape", shape, value=zero),
                               axis=axis), x.dtype, x.ndim)
        after = [b.i64(*[0] * (x.ndim - axis - 1))] if axis < x.ndim - 1 else []
        pads = b.op("Concat", b.i64(*[0] * (x.ndim + axis)), extra, *after, axis=0)
        return Sym(b, b.op("Pad", x.name, pads), x.dtype, x.ndim)

    def head(self, x: Sym, axis: int, n: Sym) -> Sym:
        """The first n entries of `axis` (n a length)."""
        b = self.b
        return Sym(b, b.op("Slice", x.name, b.i64(0), b.op("Unsqueeze", n.name, b.i64(0)),
                           b.i64(axis)), x.dtype, x.ndim)

    def _dims(self, items: list) -> list[str]:
        """Parts of a shape vector: each run of ints one constant, each int64 scalar its own
        one-element vector."""
        b = self.b
        parts, run = [], []
        for item in [*items, None]:
            if isinstance(item, int):
                run.append(item)
                continue
            if run:
                parts.append(b.i64(*run))
                run = []
            if item is not None:
                parts.append(b.op("Unsqueeze", item.name, b.i64(0)))
        return parts

    def reshape_axes(self, x: Sym, start: int, stop: int, dims: list) -> Sym:
        """x with axes start .. stop - 1 reshaped to dims (ints, one of them -1, or int64
        scalars); the axes before and after kept."""
        b = self.b
        parts = self._dims([0] * start + list(dims))  # 0: Reshape keeps that axis
        if stop < x.ndim:
            parts.append(b.op("Shape", x.name, start=stop))
        shape = parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=0)
        return Sym(b, b.op("Reshape", x.name, shape), x.dtype,
                   start + len(dims) + x.ndim - stop)

    def expand(self, x: Sym, dims: list[int]) -> Sym:
        """x broadcast against the shape dims (each 1 or the size it grows to)."""
        return Sym(self.b, self.b.op("Expand", x.name, self.b.i64(*dims)), x.dtype,
                   max(x.ndim, len(dims)))

    def expand_rows(self, x: Sym, like: Sym) -> Sym:
        """x (1, m) repeated to the rows of `like` (n, ...): (n, m)."""
        b = self.b
        rows = b.op("Concat", b.op("Shape", like.name, start=0, end=1), b.i64(1), axis=0)
        return Sym(b, b.op("Expand", x.name, rows), x.dtype, 2)

    def slice(self, x: Sym, axis: int, start: int | Sym, stop: int | Sym | None) -> Sym:
        b = self.b
        first = b.i64(start) if isinstance(start, int) else \
            b.op("Unsqueeze", start.name, b.i64(0))
        end = [2**62 if stop is None else stop]
        return Sym(b, b.op("Slice", x.name, first, self.vector(end), b.i64(axis)),
                   x.dtype, x.ndim)

    def patch_conv(self, x: Sym, w: Sym, b: Sym | None, size: int) -> Sym:
        bias = [b.name] if b is not None else []  # (a stride of the kernel's size)
        return Sym(self.b, self.b.op("Conv", x.name, w.name, *bias, kernel_shape=[size] * 2,
                                     strides=[size] * 2), x.dtype, 4)

    def resize_bicubic(self, x: Sym, like: Sym, antialias: bool = False) -> Sym:
        """torch's bicubic, or antialiased (PIL's: a = -0.5, taps past the borders dropped)"""
        b, aa = self.b, {"antialias": 1, "cubic_coeff_a": -0.5, "exclude_outside": 1} \
            if antialias else {"cubic_coeff_a": -0.75}
        sizes = b.op("Concat", b.op("Shape", x.name, start=0, end=2),
                     b.op("Shape", like.name, start=2, end=4), axis=0)
        return Sym(b, b.op("Resize", x.name, "", "", sizes, mode="cubic", **aa,
                           coordinate_transformation_mode="half_pixel"), x.dtype, 4)

    def embedding(self, table: Sym, ids: Sym) -> Sym:
        """table[ids]: the rows of a table at each id, (*ids, *row)."""
        return self.take(table, ids, 0)

    def move_last_first(self, x: Sym) -> Sym:
        return self._unary("Transpose", x, perm=[x.ndim - 1, *range(x.ndim - 1)])

    def take(self, x: Sym, indices: Sym, axis: int) -> Sym:
        return Sym(self.b, self.b.op("Gather", x.name, indices.name, axis=axis), x.dtype,
                   x.ndim - 1 + indices.ndim)

    @staticmethod
    def int_max(a: Sym, b: int) -> Sym:
        return a._binary("Max", b)

    @staticmethod
    def int_min(a: Sym, b: int) -> Sym:
        return a._binary("Min", b)

    def take_slots(self, x: Sym, index: Sym) -> Sym:
        """x (B, H, K, d) at slots index (B, n) of each row: (B, H, n, d)."""
        b = self.b
        shape = b.op("Concat", b.op("Shape", x.name, end=2), b.op("Shape", index.name, start=1),
                     b.op("Shape", x.name, start=3), axis=0)
        expanded = b.op("Expand", b.op("Unsqueeze", index.name, b.i64(1, 3)), shape)
        return Sym(b, b.op("GatherElements", x.name, expanded, axis=2), x.dtype, 4)

    def cumsum(self, x: Sym, axis: int) -> Sym:
        return Sym(self.b, self.b.op("CumSum", x.name, self.b.i64(axis)), x.dtype, x.ndim)

    def take_rows(self, x: Sym, indices: Sym) -> Sym:
        """x (..., n, e) at indices (n, m) of each of its rows: (..., n, m)."""
        b = self.b
        shape = b.op("Concat", b.op("Shape", x.name, end=x.ndim - 2),
                     b.op("Shape", indices.name, start=indices.ndim - 2), axis=0)
        name = b.op("GatherElements", x.name, b.op("Expand", indices.name, shape), axis=-1)
        return Sym(b, name, x.dtype, x.ndim)

    def take_along(self, x: Sym, indices: Sym, axis: int) -> Sym:
        name = self.b.op("GatherElements", x.name, indices.name, axis=axis)
        return Sym(self.b, name, x.dtype, indices.ndim)

    def topk(self, x: Sym, k: int) -> tuple[Sym, Sym]:
        """The k largest along the last axis, largest first (TopK: ties, the lower index)."""
        values, indices = self.b.op("TopK", x.name, self.b.i64(k), outputs=2, axis=-1,
                                    largest=1, sorted=1)
        return Sym(self.b, values, x.dtype, x.ndim), Sym(self.b, indices, "int64", x.ndim)

    def scatter_last(self, like: Sym, indices: Sym, values: Sym) -> Sym:
        """Zeros shaped as `like`, with `values` at `indices` along the last axis."""
        b = self.b
        zeros = b.op("Mul", like.name, b.const(0.0, like.dtype))
        return Sym(b, b.op("ScatterElements", zeros, indices.name, values.name, axis=-1),
                   like.dtype, like.ndim)

    def sort(self, x: Sym) -> tuple[Sym, Sym]:
        b = self.b
        count = b.op("Shape", x.name, start=-1)
        values, indices = b.op("TopK", x.name, count, outputs=2, axis=-1, largest=0, sorted=1)
        return Sym(b, values, x.dtype, x.ndim), Sym(b, indices, "int64", x.ndim)
