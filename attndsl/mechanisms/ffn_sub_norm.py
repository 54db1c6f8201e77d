"""An MLP with a sub-norm (`ffn = sub_norm(relu2_glu(n), rmsnorm(eps = 1e-5))`; BitNet's
`ffn_sub_norm`): the MLP's hidden units normed before its last projection,
down(norm(act(gate(x)) * up(x))), or fc2(norm(act(fc1(x)))) for an MLP without a gate. The
norms are the stack norms' (a layernorm without bias); weight `mlp.sub_norm.weight` [n]
beside the MLP's own. A feed-forward module (`base_ffn.FeedForward`) that emits existing ops
alone (the MLP's, and a `norm` node), so the oracle's reading is its reading of those ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from ..blocks import Ffn, Norm
from ..ir.graph import Op
from ..weight_table import Weight, mlp_weights
from .base_ffn import FeedForward

__all__ = ["FFN", "SubNormed"]

_NORMS = {"rmsnorm": (("eps", False), ("unit_offset", False)), "layernorm": (("eps", False),)}


@dataclass(frozen=True)
class SubNormed:
    """The norm on an MLP's hidden units (the MLP itself is the stack's `ffn`)."""

    name: ClassVar[str] = "sub_norm"
    norm: Norm
    dense: Any = None  # (no block runs another MLP)
    dense_layers: tuple[int, ...] = ()


class _SubNormFfn(FeedForward):
    name = "sub_norm"
    params = (("mlp", True), ("norm", False))

    def read(self, c: Any, e: Any) -> tuple[Ffn, SubNormed]:
        """`sub_norm(mlp, norm = rmsnorm)`: one MLP (`swiglu(n)`, `relu2_glu(n)`, ...) and
        `rmsnorm(eps = 1e-6, unit_offset = false)` or `layernorm(eps = 1e-5)`."""
        from ..check.values import Param

        args = c.bind(e, self.name, tuple(Param(k, req) for k, req in self.params))
        if isinstance(args["mlp"], ast.Call) and args["mlp"].func == self.name:
            raise c.error("a sub-norm's MLP is one MLP, not another sub-normed one",
                          args["mlp"].span, hint="`sub_norm(relu2_glu(n), rmsnorm)`")
        mlp = c.ffn_value(args["mlp"])
        norm = Norm("rmsnorm", Norm.default_eps("rmsnorm"))
        if "norm" in args:
            table = {name: tuple(Param(p, required) for p, required in params)
                     for name, params in _NORMS.items()}
            norm = c.norm_value(args["norm"], placement=False, table=table)[0]
        return mlp, SubNormed(norm)

    def summary(self, value: SubNormed, mlp: str) -> str:
        return f"{mlp} with its hidden units {value.norm.kind}-normed before the last projection"

    def weights(self, value: SubNormed, ffn: Ffn, d: int, p: str) -> list[Weight]:
        """The MLP's tensors, then its sub-norm's weight."""
        init = "norm_offset" if value.norm.unit_offset else "norm_weight"
        return [*mlp_weights(f"{p}mlp.", ffn, d),
                Weight(f"{p}mlp.sub_norm.weight", (ffn.hidden,), init)]

    def expand(self, b: Any, value: SubNormed, ffn: Ffn, p: str, x: str, d: Any) -> str:
        """The MLP's nodes with a `norm` node on its hidden units."""
        from ..ir.ffn import mlp

        n = value.norm

        def units(h: str, hidden: Any) -> str:
            return b.emit(Op.NORM, f"{p}mlp_sub_normed", (h,), hidden, kind=n.kind, eps=n.eps,
                          unit_offset=n.unit_offset, module=f"{p}mlp.sub_norm", bias=False)

        return mlp(b, ffn, p, f"{p}mlp.", x, d, units)


FFN = _SubNormFfn()
