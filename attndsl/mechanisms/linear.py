"""Linear attention (`kernel = linear(feature = elu | relu | softmax)`, Katharopoulos et al.
2020): a feature map phi on queries and keys in place of the softmax, y_q = phi(q) . sum_k
phi(k) v_k^T / max(phi(q) . sum_k phi(k), 1e-6), causal or over every key. docs/LANGUAGE.md
(Kernels). A kernel module (`base_kernel.Kernel`): its value, checks, node and arithmetic; its
O(L) chunked causal ONNX form is its strategy's (strategies/linear.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from .. import masks as m
from ..ir.graph import Op
from ..shapes import T
from ..spec import ScoreBias
from .base import Site
from .base_kernel import Kernel, KernelWhere

__all__ = ["FEATURES", "KERNEL", "LinearKernel", "attend", "feature_map"]

FEATURES = ("elu", "relu", "softmax")


@dataclass(frozen=True)
class LinearKernel:
    """The spec's value: the feature map phi (elu: elu(x) + 1, relu, or softmax over the
    features)."""

    name: ClassVar[str] = "linear"
    feature: str  # elu | relu | softmax


class _Linear(Kernel):
    name = "linear"
    params = (("feature", False),)
    described = "a linear kernel"
    scores = False  # sums over the keys, never a score per pair
    eager_pairs = True  # the torch module's causal form weights every (query, key) pair
    cross_undecodable = "which has no decoding form"
    indexed = True
    attributes = ("feature", "causal")

    def read(self, c: Any, args: dict) -> LinearKernel:
        return LinearKernel(c.word(args["feature"], FEATURES, "feature")
                            if "feature" in args else "elu")

    def conflicts(self, c: Any, kernel: LinearKernel, where: KernelWhere) -> bool:
        """Masks `full` and `causal` only; no score biases, score modifiers, scale or
        dropout: there are no scores."""
        if where.mask is None:  # its own error was reported
            return False
        from . import SCORED

        failed, e, at = False, where.entries, where.at
        if where.mask not in (m.Full(), m.Causal("top_left")):
            c.error("a linear kernel supports only the masks `full` and `causal`", at("mask"),
                    hint="use `kernel = softmax` for other masks")
            failed = True
        if isinstance(where.position, ScoreBias):
            c.error("score biases (alibi, relative_bias, relative_logits, relative_2d) need a "
                    "softmax kernel: a linear kernel never forms scores", at("position"))
            failed = True
        for key in (*SCORED, "scale"):
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto")):
                c.error(f"`{key}` has no effect with a linear kernel", e[key].key_span,
                        hint=f"remove `{key}` or use `kernel = softmax`")
                failed = True
        if where.dropout:
            c.error("attention dropout needs a softmax kernel (there are no attention "
                    "weights to drop)", e["dropout"].key_span)
            failed = True
        return failed

    def pairs(self, kernel: LinearKernel, batch: int, length: int, keys: int) -> int:
        """Every query with every key (its sums reach them all)."""
        return batch * length * keys

    def mask(self, node: Any) -> m.Mask:
        return m.Causal() if node.attr("causal") else m.Full()

    def expand(self, site: Site, kernel: LinearKernel, q: str, k: str | None, v: str) -> str:
        s = site.spec
        return site.b.emit(Op.KERNEL, f"{site.p}attn", (q, k, v),
                           T("B", s.heads, "L", s.value_dim), kernel=self.name,
                           feature=kernel.feature, causal=s.mask == m.Causal())

    def apply(self, xp: Any, q: Any, k: Any, v: Any, kept: Any, *, feature: str,
              causal: bool, index: Any = None) -> Any:
        return attend(xp, q, k, v, feature, index if causal else None, kept)


def feature_map(xp, x: Any, feature: str) -> Any:
    """phi: elu(x) + 1, relu(x) or softmax over the features. elu(x) + 1 is computed as
    relu(x) + exp(min(x, 0)), the same function: ONNX Runtime's CUDA provider has no kernel
    for Elu at opset 22 and later."""
    if feature == "elu":
        return xp.relu(x) + xp.exp(xp.minimum(x, 0.0))
    if feature == "relu":
        return xp.relu(x)
    return xp.softmax(x, axis=-1)


def attend(xp, q: Any, k: Any, v: Any, feature: str, causal: tuple[Any, Any] | None,
           real: Any | None = None) -> Any:
    """y_q = phi(q).sum_k phi(k) v_k^T / max(phi(q).sum_k phi(k), 1e-6), in float32 (the sums
    over keys overflow float16 at long lengths); causal (`causal`: the int64 query and key
    positions, (L, 1) and (1, S)) sums only k <= q, and only over keys where `real` (B, S), a
    decoding model's attention_mask, is non-zero. Returns the model dtype."""
    dtype = xp.dtype(v)
    q, k, v = (xp.astype(t, "float32") for t in (q, k, v))
    fq, fk = feature_map(xp, q, feature), feature_map(xp, k, feature)
    if causal is not None:
        q_pos, k_pos = causal
        keep = xp.astype(k_pos <= q_pos, "float32")  # (L, S)
        if real is not None:  # (B, S) -> (B, 1, 1, S)
            keep = keep * xp.astype(real, "float32")[:, None, None, :]
        weights = xp.matmul(fq, xp.swap_last(fk)) * keep  # (B, H, L, S)
        num = xp.matmul(weights, v)
        den = xp.sum(weights, axis=-1, keepdims=True)
    else:
        num = xp.matmul(fq, xp.matmul(xp.swap_last(fk), v))  # phi(q) (phi(k)^T v)
        den = xp.sum(fq * xp.sum(fk, axis=-2, keepdims=True), axis=-1, keepdims=True)
    return xp.astype(num / xp.maximum(den, xp.asarray(1e-6, "float32")), dtype)


KERNEL = _Linear()
