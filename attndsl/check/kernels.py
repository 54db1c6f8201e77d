"""The checks of `kernel = ...` as a mixin of the layer checker: the call read by its kernel
module's parameters, and what the module says the attention cannot set (`Kernel.conflicts`,
with the kernel as the attention holds it: `Kernel.resolve`)."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast
from .. import masks as m
from ..mechanisms import KERNELS, KernelWhere, kernel_of
from ..source import Span
from ..spec import (
    Kernel,
    Position,
    Softmax,
)
from .positions import Positions
from .values import Param

__all__ = ["Kernels", "arg_span", "mask_nodes"]


class Kernels(Positions):
    def kernel_value(self, e: ast.Expr) -> Kernel:
        name, _ = self.callee(e, _KERNELS, "kernel")
        args = self.bind(e, name, _KERNELS[name])
        if name == "softmax":
            return Softmax()
        return KERNELS[name].read(self, args)

    def check_kernel(self, e: dict[str, ast.Entry], kernel: Kernel, kind: str, heads: int,
                     kv_heads: int, head_dim: int, bias: tuple[str, ...] | None,
                     mask: m.Mask | None, position: Position, dropout: float | None,
                     at: Callable[[str], Span]) -> tuple[bool, Kernel]:
        """What a kernel module (`mechanisms.KERNELS`) says the attention cannot set (True if
        any), and the kernel as the attention holds it (`Kernel.resolve`). `mask` is None
        where its own error was reported."""
        module = kernel_of(kernel)
        if module is None:
            return False, kernel
        where = KernelWhere(e, kind, heads, kv_heads, head_dim, bias, mask, position, dropout,
                            at)
        return module.conflicts(self, kernel, where), module.resolve(kernel, where)


_KERNELS = {"softmax": (),
            **{name: tuple(Param(p, required) for p, required in k.params)
               for name, k in KERNELS.items()}}


def arg_span(e: ast.Expr, name: str) -> Span | None:
    if isinstance(e, ast.Call):
        for arg in e.args:
            if arg.name == name:
                return arg.value.span
    return None


def mask_nodes(mask: m.Mask):
    """Every node of a mask expression, operators included."""
    yield mask
    match mask:
        case m.And(a, b) | m.Or(a, b):
            yield from mask_nodes(a)
            yield from mask_nodes(b)
        case m.Not(a):
            yield from mask_nodes(a)
