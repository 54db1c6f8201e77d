"""`TorchArrays`: the array namespace of `backends.formulas` over eager torch tensors (the
torch module's, and through it the `portable` export's)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..dtypes import dtype_name, torch_dtype

__all__ = ["TorchArrays"]


class TorchArrays:
    """The array namespace of `backends.formulas` over eager torch tensors on `device` (and,
    as torch, of `positions.t5_bucket_float32`)."""

    __name__ = "torch"
    int64, float32 = torch.int64, torch.float32

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def asarray(self, values, dtype: str) -> Tensor:
        return torch.tensor(values, dtype=torch_dtype(dtype), device=self.device)

    @staticmethod
    def astype(x: Tensor, dtype: str) -> Tensor:
        return x.to(torch_dtype(dtype))

    @staticmethod
    def dtype(x: Tensor) -> str:
        return dtype_name(x.dtype)

    abs, log, cos, sin, tanh = (staticmethod(f) for f in (torch.abs, torch.log, torch.cos,
                                                          torch.sin, torch.tanh))
    sqrt, sigmoid, relu = (staticmethod(f) for f in (torch.sqrt, torch.sigmoid, torch.relu))
    where, matmul = (staticmethod(f) for f in (torch.where, torch.matmul))

    @staticmethod
    def softplus(x: Tensor) -> Tensor:
        return F.softplus(x)

    @staticmethod
    def scan(step, state: Tensor, xs: list[Tensor], axis: int) -> tuple[Tensor, Tensor]:
        """(the last state, the outputs stacked along axis) of state, y_i = step(state,
        [x[i] for x in xs]) over the indices of `axis`, in order."""
        ys = []
        for i in range(xs[0].shape[axis]):
            state, y = step(state, [x.select(axis, i) for x in xs])
            ys.append(y)
        return state, torch.stack(ys, dim=axis)

    @staticmethod
    def minimum(x: Tensor, y: Tensor | float) -> Tensor:
        return torch.minimum(x, torch.as_tensor(y, dtype=x.dtype, device=x.device))

    @staticmethod
    def maximum(x: Tensor, y: Tensor | float) -> Tensor:
        return torch.maximum(x, torch.as_tensor(y, dtype=x.dtype, device=x.device))

    @staticmethod
    def elu(x: Tensor, alpha: float) -> Tensor:
        return F.elu(x, alpha)

    @staticmethod
    def gelu(x: Tensor, approximate: str) -> Tensor:
        return F.gelu(x, approximate=approximate)

    @staticmethod
    def softmax(x: Tensor, axis: int) -> Tensor:
        return torch.softmax(x, dim=axis)

    @staticmethod
    def swap_last(x: Tensor) -> Tensor:
        return x.transpose(-1, -2)

    @staticmethod
    def concat(xs: list[Tensor], axis: int) -> Tensor:
        return torch.cat(xs, dim=axis)

    @staticmethod
    def interleave(x: Tensor, y: Tensor) -> Tensor:
        return torch.stack([x, y], dim=-1).flatten(-2)

    @staticmethod
    def mean(x: Tensor, axis: int, keepdims: bool = False) -> Tensor:
        return x.mean(dim=axis, keepdim=keepdims)

    @staticmethod
    def sum(x: Tensor, axis: int, keepdims: bool = False) -> Tensor:
        return x.sum(dim=axis, keepdim=keepdims)

    @staticmethod
    def amax(x: Tensor, axis: int, keepdims: bool = False) -> Tensor:
        return x.amax(dim=axis, keepdim=keepdims)

    @staticmethod
    def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    exp, argmax = staticmethod(torch.exp), staticmethod(torch.argmax)

    @staticmethod
    def shape(x: Tensor, axis: int) -> int:
        return x.shape[axis]

    @staticmethod
    def reshape(x: Tensor, dims: list) -> Tensor:
        return x.reshape(dims)

    def arange(self, n: int) -> Tensor:
        return torch.arange(n, device=self.device)

    @staticmethod
    def pad(x: Tensor, axis: int, n: int) -> Tensor:
        """n zeros after the end of `axis`."""
        after = x.dim() - axis % x.dim() - 1
        return F.pad(x, (0, 0) * after + (0, n))

    zeros_after = pad

    @staticmethod
    def head(x: Tensor, axis: int, n: int) -> Tensor:
        """The first n entries of `axis`."""
        return x.narrow(axis, 0, n)

    @staticmethod
    def reshape_axes(x: Tensor, start: int, stop: int, dims: list) -> Tensor:
        """x with axes start .. stop - 1 reshaped to dims; the axes before and after kept."""
        return x.reshape(*x.shape[:start], *dims, *x.shape[stop:])

    @staticmethod
    def expand(x: Tensor, dims: list[int]) -> Tensor:
        """x broadcast against the shape dims (each 1 or the size it grows to)."""
        return x.expand(torch.broadcast_shapes(x.shape, tuple(dims)))

    @staticmethod
    def expand_rows(x: Tensor, like: Tensor) -> Tensor:
        """x (1, m) repeated to the rows of `like` (n, ...): (n, m)."""
        return x.expand(like.shape[0], -1)

    @staticmethod
    def slice(x: Tensor, axis: int, start: int, stop: int | None) -> Tensor:
        return x[(slice(None),) * (axis % x.dim()) + (slice(start, stop),)]

    @staticmethod
    def swap_first(x: Tensor) -> Tensor:
        return x.transpose(0, 1)

    @staticmethod
    def patch_conv(x: Tensor, w: Tensor, b: Tensor | None, size: int) -> Tensor:
        return F.conv2d(x, w, b, stride=size)

    @staticmethod
    def resize_bicubic(x: Tensor, like: Tensor, antialias: bool = False) -> Tensor:
        """Antialiased, one axis at a time: torch's kernel (2.13, CPU) gives every output row
        the first one's values where both axes change and one column comes out."""
        h, w = like.shape[-2:]
        if antialias:
            x = F.interpolate(x, size=(h, x.shape[-1]), mode="bicubic", align_corners=False,
                              antialias=True)
        return F.interpolate(x, size=(h, w), mode="bicubic", align_corners=False,
                             antialias=antialias)

    @staticmethod
    def embedding(table: Tensor, ids: Tensor) -> Tensor:
        """table[ids]: the rows of a table at each id, (*ids, *row)."""
        return F.embedding(ids, table)

    @staticmethod
    def move_last_first(x: Tensor) -> Tensor:
        return x.movedim(-1, 0)

    @staticmethod
    def take(x: Tensor, indices: Tensor, axis: int) -> Tensor:
        """NumPy's take: index_select for a vector of indices (torch.export keeps a dynamic
        length through it), indexing for any other."""
        if indices.dim() == 1:
            return x.index_select(axis, indices)
        return x[(slice(None),) * (axis % x.dim()) + (indices,)]

    @staticmethod
    def int_max(a: int, b: int) -> int:
        return torch.sym_max(a, b)  # a length: no guard on which is larger

    @staticmethod
    def int_min(a: int, b: int) -> int:
        return torch.sym_min(a, b)  # a length: no guard on which is smaller

    @staticmethod
    def take_slots(x: Tensor, index: Tensor) -> Tensor:
        """x (B, H, K, d) at slots index (B, n) of each row: (B, H, n, d)."""
        return torch.gather(x, 2, index[:, None, :, None].expand(-1, x.shape[1], -1,
                                                                 x.shape[3]))

    @staticmethod
    def cumsum(x: Tensor, axis: int) -> Tensor:
        return torch.cumsum(x, dim=axis)

    @staticmethod
    def take_rows(x: Tensor, indices: Tensor) -> Tensor:
        """x (..., n, e) at indices (n, m) of each of its rows: (..., n, m)."""
        return torch.gather(x, -1, indices.expand(*x.shape[:-2], *indices.shape[-2:]))

    @staticmethod
    def take_along(x: Tensor, indices: Tensor, axis: int) -> Tensor:
        return torch.gather(x, axis, indices)

    @staticmethod
    def topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """The k largest along the last axis, largest first (ties: the lower index first)."""
        values, indices = torch.topk(x, k, dim=-1, sorted=True)
        return values, indices

    @staticmethod
    def scatter_last(like: Tensor, indices: Tensor, values: Tensor) -> Tensor:
        """Zeros shaped as `like`, with `values` at `indices` along the last axis."""
        return torch.zeros_like(like).scatter(-1, indices, values)

    @staticmethod
    def sort(x: Tensor) -> tuple[Tensor, Tensor]:
        values, indices = torch.sort(x, dim=-1)
        return values, indices
