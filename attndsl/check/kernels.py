"""The checks of the attention kernels (`kernel = ...`): their parameters, and what each
kernel honours (masks, positions, projections) as a mixin of the layer checker."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast
from .. import masks as m
from ..mechanisms import KERNELS, KernelWhere, kernel_of
from ..source import Span
from ..spec import (
    DeltaRule,
    Kernel,
    Position,
    Softmax,
)
from .positions import Positions
from .values import FLOAT32_TINY, Param

__all__ = ["Kernels", "arg_span", "mask_nodes"]


class Kernels(Positions):
    def kernel_value(self, e: ast.Expr) -> Kernel:
        name, _ = self.callee(e, _KERNELS, "kernel")
        args = self.bind(e, name, _KERNELS[name])
        if name == "softmax":
            return Softmax()
        if name == "delta_rule":  # key_heads 0: as many as heads (resolved with the layer)
            eps = self.number(args["eps"]) if "eps" in args else 1e-6
            if not FLOAT32_TINY <= eps <= 1.0:
                raise self.error(f"the gated norm's eps must be in [{FLOAT32_TINY:.3g}, 1], "
                                 f"found {eps:g}", args["eps"].span)
            return DeltaRule(
                self.positive(args["key_heads"], "key_heads") if "key_heads" in args else 0,
                self.positive(args["conv"], "conv") if "conv" in args else 4,
                self.positive(args["chunk"], "chunk") if "chunk" in args else 64, eps)
        return KERNELS[name].read(self, args)

    def check_kernel(self, e: dict[str, ast.Entry], kernel: Kernel, kind: str, heads: int,
                     kv_heads: int, head_dim: int, bias: tuple[str, ...] | None, mask: m.Mask,
                     position: Position, dropout: float | None,
                     at: Callable[[str], Span]) -> bool:
        """What a kernel module (`mechanisms.KERNELS`) says the attention cannot set."""
        module = kernel_of(kernel)
        if module is None:
            return False
        return module.conflicts(self, kernel, KernelWhere(
            e, kind, heads, kv_heads, head_dim, bias, mask, position, dropout, at))


_KERNELS = {"softmax": (),
            **{name: tuple(Param(p, required) for p, required in k.params)
               for name, k in KERNELS.items()},
            "delta_rule": (Param("key_heads"), Param("conv"), Param("chunk"), Param("eps"))}


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
