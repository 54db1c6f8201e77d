"""Linformer (`kernel = linformer(k, max_len, share = none)`, Wang et al. 2020): keys and values
projected along the sequence to `k` rows by learned E and F of [k, max_len], sliced to the
keys' count, then the softmax core over those rows. docs/LANGUAGE.md (Kernels) has every
step. A kernel module (`base_kernel.Kernel`) whose core stays the softmax (`softmax_core`,
planned by the `linformer` strategy): its value, checks, weights (E and F, and their sharing), its
length limit, and its `seq_project` nodes before the core (`rows`). `seq_project` is an op of
this module alone; its lowerings stay the backends' (torch keeps the dynamic length for
torch.export with index_select, ONNX slices E), which one array-namespace text would not
keep byte-identical."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import masks as m
from ..ir.graph import Op
from ..shapes import T
from ..spec import ScoreBias
from ..weight_table import Weight
from .base import Site
from .base_kernel import Kernel, KernelWhere

__all__ = ["KERNEL", "SHARING", "LinformerKernel", "weight_names"]

SHARING = ("none", "headwise", "kv", "layerwise")


@dataclass(frozen=True)
class LinformerKernel:
    """Keys and values projected along the sequence to `k` rows (Wang et al. 2020): E and F
    of [k, max_len], sliced to the keys' count. share: none (E, F per kv head), headwise (one
    E, one F for the layer's heads), kv (E = F), layerwise (one E for every layer of a stack,
    keys and values)."""

    name: ClassVar[str] = "linformer"
    k: int
    max_len: int
    share: str


class _Linformer(Kernel):
    name = "linformer"
    params = (("k", True), ("max_len", True), ("share", False))
    described = "a Linformer kernel"
    scores = False  # its scores are L x k, over the projected rows
    softmax_core = True
    key_ops = frozenset({Op.SEQ_PROJECT})
    per_layer = "its E and F are the layer's"
    stack_shares = ("layerwise Linformer projection",
                    "give every attention of the pattern the same `kernel = linformer(..., "
                    "share = layerwise)`, or share less")

    def read(self, c: Any, args: dict) -> LinformerKernel:
        return LinformerKernel(
            c.positive(args["k"], "Linformer's k"),
            c.positive(args["max_len"], "Linformer's max_len"),
            c.word(args["share"], SHARING, "Linformer sharing") if "share" in args else "none")

    def conflicts(self, c: Any, kernel: LinformerKernel, where: KernelWhere) -> bool:
        """Linformer mixes every key into each of its k rows: a mask can only drop keys
        before the projection (`padding`), never relate a query to a key."""
        if where.mask is None:  # its own error was reported
            return False
        from ..check.kernels import mask_nodes

        failed, mask, at = False, where.mask, where.at
        if any(not isinstance(p, m.Full | m.Padding) for p in m.primitives(mask)) or \
                any(isinstance(p, m.Not | m.Or) for p in mask_nodes(mask)):
            c.error(f"a Linformer kernel honours only `full` and `padding` masks, found "
                    f"`{m.render(mask)}`: its scores are over k projected rows, each a mix "
                    "of every key", at("mask"),
                    hint="use `mask = full` or `mask = padding`, or `kernel = softmax`")
            failed = True
        if isinstance(where.position, ScoreBias):
            c.error("score biases (alibi, relative_bias, relative_logits, relative_2d) need a "
                    "key per score; a Linformer kernel's scores are over projected rows",
                    at("position"),
                    hint="use rope, sinusoidal or learned positions")
            failed = True
        return failed

    def key_limit(self, kernel: LinformerKernel) -> tuple[int, str]:
        return kernel.max_len, (f"linformer kernel projects at most max_len = {kernel.max_len} "
                                "keys (E and F have max_len columns)")

    def stack_shared(self, kernel: LinformerKernel) -> LinformerKernel | None:
        return kernel if kernel.share == "layerwise" else None

    def weights(self, s: Any, prefix: str, stacked: bool) -> list[Weight]:
        """E and F (once where they are one tensor); a stack's layerwise E is the stack's."""
        if stacked and s.kernel.share == "layerwise":
            return []
        return [Weight(name, _shape(s), "sequence", s.kernel.k)
                for name in dict.fromkeys(weight_names(s, prefix))]

    def stack_weights(self, s: Any) -> list[Weight]:
        if s.kernel.share != "layerwise":
            return []
        return [Weight(weight_names(s, "")[0], _shape(s), "sequence", s.kernel.k)]

    def rows(self, site: Site, kernel: LinformerKernel, k: str, v: str) -> tuple[str, str, int]:
        """k rows, each a mix of the (kept) keys; values likewise: the mask's hidden keys are
        zeroed before the projection (`expr`), so the core after it has no mask."""
        s = site.spec
        e, f = weight_names(s, site.prefix)

        def project(name: str, t: str, width: int, weight: str) -> str:
            return site.b.emit(Op.SEQ_PROJECT, f"{site.p}{name}_rows", (t, *s.runtime_inputs),
                               T("B", s.kv_heads, kernel.k, width), weight=weight,
                               max_len=kernel.max_len, expr=s.mask)

        return project("k", k, s.head_dim, e), project("v", v, s.value_dim, f), kernel.k


def weight_names(s: Any, prefix: str) -> tuple[str, str]:
    """The E and F tensors of a Linformer attention (the same name twice when shared)."""
    share = s.kernel.share
    if share == "layerwise":
        return ("linformer_e.weight",) * 2
    e = f"{prefix}linformer_e.weight"
    return (e, e) if share == "kv" else (e, f"{prefix}linformer_f.weight")


def _shape(s: Any) -> tuple[int, ...]:
    """[kv_heads, k, max_len] per kv head (share = none), else [k, max_len]."""
    kernel = s.kernel
    rows = (kernel.k, kernel.max_len)
    return (s.kv_heads, *rows) if kernel.share == "none" else rows


KERNEL = _Linformer()
