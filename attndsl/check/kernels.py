"""The checks of the attention kernels (`kernel = ...`): their parameters, and what each
kernel honours (masks, positions, projections) as a mixin of the layer checker."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast
from .. import masks as m
from ..mechanisms import SCORED
from ..source import Span
from ..spec import (
    Alibi,
    DeltaRule,
    Kernel,
    Learned,
    LinearKernel,
    LinformerKernel,
    LshKernel,
    Position,
    RelativeBias,
    Sinusoidal,
    Softmax,
)
from .positions import Positions
from .values import FLOAT32_TINY, Param

__all__ = ["MAX_LSH_ROTATIONS", "Kernels", "arg_span"]

MAX_LSH_ROTATIONS = 2**26  # numbers drawn into the graph (256 MB of float32)


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
        if name == "lsh":
            return LshKernel(
                self.positive(args["buckets"], "LSH buckets"),
                self.positive(args["rounds"], "LSH rounds") if "rounds" in args else 1,
                self.positive(args["chunk"], "LSH chunk") if "chunk" in args else 64,
                self.non_negative(args["seed"], "LSH seed") if "seed" in args else 0)
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
                any(isinstance(p, m.Not | m.Or) for p in _nodes(mask)):
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

    def check_lsh(self, e: dict[str, ast.Entry], kernel: LshKernel, kind: str, grouped: bool,
                  bias: tuple[str, ...], mask: m.Mask, position: Position,
                  dropout: float | None, at: Callable[[str], Span], features: int) -> bool:
        """Reformer's LSH attention: keys are the (normalised) queries of the same sequence,
        so no k projection, no cross attention, no kv groups; masks `causal` and `padding`.
        Its rotations (heads x head_dim x rounds x buckets / 2 numbers, `features` = heads x
        head_dim) are drawn into the graph: at most MAX_LSH_ROTATIONS."""
        failed = False
        span = at("kernel")
        if kernel.buckets % 2 or kernel.buckets < 2:
            self.error(f"LSH buckets must be even and at least 2, found {kernel.buckets}: a "
                       "rotation of buckets / 2 directions gives each a + and a - bucket",
                       arg_span(e["kernel"].value, "buckets") or span)
            failed = True
        elif features * kernel.rounds * (kernel.buckets // 2) > MAX_LSH_ROTATIONS:
            self.error(f"an LSH kernel's rotations would hold heads x head_dim x rounds x "
                       f"buckets / 2 = {features * kernel.rounds * (kernel.buckets // 2):,} "
                       f"numbers; attndsl caps them at {MAX_LSH_ROTATIONS:,}", span,
                       hint="Reformer used 2 to 8 rounds of up to a few hundred buckets")
            failed = True
        if kind == "cross":
            self.error("an LSH kernel needs self attention: its keys are its queries (shared "
                       "query/key projection)", at("kind"), hint="use kind = self")
            failed = True
        if grouped:
            self.error("an LSH kernel's keys are its queries: kv_heads must equal heads",
                       at("kv_heads"), hint="remove kv_heads")
            failed = True
        if bias is not None and "k" in bias and "bias" in e:
            self.error("an LSH kernel has no k projection (keys are the queries), so no k bias",
                       at("bias"), hint="list only q, v and o")
            failed = True
        allowed = (m.Full, m.Causal, m.Padding)
        if any(not isinstance(p, allowed) for p in m.primitives(mask)) or \
                any(isinstance(p, m.Not | m.Or) for p in _nodes(mask)):
            self.error(f"an LSH kernel honours `full`, `causal`, `padding` and `&` of them, "
                       f"found `{m.render(mask)}`: a query sees only the keys hashed near it",
                       at("mask"), hint="use `mask = causal & padding`, or `kernel = softmax`")
            failed = True
        if position is not None and not isinstance(position, Sinusoidal | Learned):
            self.error("an LSH kernel takes absolute positions only (sinusoidal, learned): "
                       "keys are the hashed queries themselves", at("position"),
                       hint="add positions to x with `sinusoidal` or `learned(max_len)`")
            failed = True
        for key in (*SCORED, "sparsity"):
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto")):
                self.error(f"`{key}` does not apply to an LSH kernel (its keys are normalised "
                           "queries and its chunks are its sparsity)", e[key].key_span,
                           hint=f"remove `{key}`")
                failed = True
        if dropout:
            self.error("attention dropout is not implemented for an LSH kernel",
                       e["dropout"].key_span, hint="remove `dropout`")
            failed = True
        return failed


_KERNELS = {"softmax": (), "linear": (Param("feature"),),
            "linformer": (Param("k", True), Param("max_len", True), Param("share")),
            "lsh": (Param("buckets", True), Param("rounds"), Param("chunk"), Param("seed")),
            "delta_rule": (Param("key_heads"), Param("conv"), Param("chunk"), Param("eps"))}
_LINFORMER_SHARING = ("none", "headwise", "kv", "layerwise")


def arg_span(e: ast.Expr, name: str) -> Span | None:
    if isinstance(e, ast.Call):
        for arg in e.args:
            if arg.name == name:
                return arg.value.span
    return None


def _nodes(mask: m.Mask):
    """Every node of a mask expression, operators included."""
    yield mask
    match mask:
        case m.And(a, b) | m.Or(a, b):
            yield from _nodes(a)
            yield from _nodes(b)
        case m.Not(a):
            yield from _nodes(a)
