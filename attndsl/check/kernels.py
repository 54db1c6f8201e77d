"""The checks of the attention kernels (`kernel = ...`): their parameters, and what each
kernel honours (masks, positions, projections) as a mixin of the layer checker."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast
from .. import masks as m
from ..mechanisms import KERNELS, SCORED, KernelWhere, kernel_of
from ..source import Span
from ..spec import (
    Alibi,
    Kernel,
    LinearKernel,
    LinformerKernel,
    Position,
    RelativeBias,
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
        if name in KERNELS:
            return KERNELS[name].read(self, args)
        if name == "linformer":
            return LinformerKernel(
                self.positive(args["k"], "Linformer's k"),
                self.positive(args["max_len"], "Linformer's max_len"),
                self.word(args["share"], _LINFORMER_SHARING, "Linformer sharing")
                if "share" in args else "none")
        feature = (self.word(args["feature"], ("elu", "relu", "softmax"), "feature")
                   if "feature" in args else "elu")
        return LinearKernel(feature)

    def check_linear(self, e: dict[str, ast.Entry], mask: m.Mask, position: Position,
                     dropout: float | None, at: Callable[[str], Span]) -> bool:
        failed = False
        if mask not in (m.Full(), m.Causal("top_left")):
            self.error("a linear kernel supports only the masks `full` and `causal`", at("mask"),
                       hint="use `kernel = softmax` for other masks")
            failed = True
        if isinstance(position, (Alibi, RelativeBias)):
            self.error("score biases (alibi, relative_bias) need a softmax kernel: a linear "
                       "kernel never forms scores", at("position"))
            failed = True
        for key in (*SCORED, "scale"):
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto")):
                self.error(f"`{key}` has no effect with a linear kernel", e[key].key_span,
                           hint=f"remove `{key}` or use `kernel = softmax`")
                failed = True
        if dropout:
            self.error("attention dropout needs a softmax kernel (there are no attention "
                       "weights to drop)", e["dropout"].key_span)
            failed = True
        return failed

    def check_linformer(self, mask: m.Mask, position: Position,
                        at: Callable[[str], Span]) -> bool:
        """Linformer mixes every key into each of its k rows: a mask can only drop keys
        before the projection (`padding`), never relate a query to a key."""
        failed = False
        if any(not isinstance(p, m.Full | m.Padding) for p in m.primitives(mask)) or \
                any(isinstance(p, m.Not | m.Or) for p in mask_nodes(mask)):
            self.error(f"a Linformer kernel honours only `full` and `padding` masks, found "
                       f"`{m.render(mask)}`: its scores are over k projected rows, each a mix "
                       "of every key", at("mask"),
                       hint="use `mask = full` or `mask = padding`, or `kernel = softmax`")
            failed = True
        if isinstance(position, (Alibi, RelativeBias)):
            self.error("score biases (alibi, relative_bias) need a key per score; a Linformer "
                       "kernel's scores are over projected rows", at("position"),
                       hint="use rope, sinusoidal or learned positions")
            failed = True
        return failed

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


_KERNELS = {"softmax": (), "linear": (Param("feature"),),
            "linformer": (Param("k", True), Param("max_len", True), Param("share")),
            **{name: tuple(Param(p, required) for p, required in k.params)
               for name, k in KERNELS.items()}}
_LINFORMER_SHARING = ("none", "headwise", "kv", "layerwise")


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
