"""The xIELU MLP (`ffn = xielu(n, bias = false, beta = 0.5, eps = -1e-6)`, docs/LANGUAGE.md,
Transformer keys; Apertus): down(xielu(up(x))), an MLP that is not gated whose activation has
two parameters learned per layer, `mlp.act_fn.alpha_p` and `mlp.act_fn.alpha_n` (each [1]):

    a_p = softplus(alpha_p), a_n = beta + softplus(alpha_n)
    xielu(u) = a_p u^2 + beta u                          for u > 0
    xielu(u) = a_n (expm1(min(u, eps)) - u) + beta u     for u <= 0

A feed-forward module (`base_ffn.FeedForward`): its value and checks, its weights, its nodes
(the two projections as `linear` nodes, the activation as its `ffn` node) and the activation's
arithmetic over the array namespace, one text for the torch module and ONNX (a form with no
ONNX forms of its own lowers by its `run`). expm1(m) is written exp(m) - 1 there: m <= eps < 0,
so its error is within the dtype's epsilon of 1, far inside any tolerance the tests hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from ..spec import Ffn
from ..weight_table import Weight, linear_weights
from .base_ffn import FeedForward

__all__ = ["FFN", "Xielu"]


@dataclass(frozen=True)
class Xielu:
    """The xIELU MLP's constants (transformers' XIELUActivation buffers): beta and eps."""

    name: ClassVar[str] = "xielu"
    beta: float = 0.5
    eps: float = -1e-6
    dense: Any = None  # (no block runs another MLP)
    dense_layers: tuple[int, ...] = ()


class _XieluFfn(FeedForward):
    name = "xielu"
    params = (("hidden", True), ("bias", False), ("beta", False), ("eps", False))
    attributes = ("weights", "beta", "eps", "kernel")
    lowered = False

    def read(self, c: Any, e: Any) -> tuple[Ffn, Xielu]:
        """`xielu(n, bias = false, beta = 0.5, eps = -1e-6)`: n > 0; beta >= 0 and eps < 0,
        each a float32 number."""
        from ..check.values import FLOAT32_MAX, Param

        args = c.bind(e, self.name, tuple(Param(k, req) for k, req in self.params))
        hidden = c.positive(args["hidden"], "ffn width")
        bias = c.boolean(args["bias"], "bias") if "bias" in args else False
        beta, eps = 0.5, -1e-6
        if "beta" in args:
            beta = c.number(args["beta"])
            if not 0.0 <= beta <= FLOAT32_MAX:
                raise c.error(f"xielu's beta must be a number >= 0 that float32 can hold, "
                              f"found {beta:g}", args["beta"].span,
                              hint="Apertus: beta = 0.5")
        if "eps" in args:
            eps = c.number(args["eps"])
            if not -1.0 <= eps < 0.0:
                raise c.error(f"xielu's eps must be in [-1, 0), found {eps:g}",
                              args["eps"].span,
                              hint="Apertus: eps = -1e-6 (expm1 reads min(u, eps) < 0)")
        return Ffn("xielu", hidden, bias), Xielu(beta, eps)

    def summary(self, value: Xielu, mlp: str) -> str:
        return f"{mlp} (down(xielu(up(x))), beta {value.beta:g}, eps {value.eps:g})"

    def weights(self, value: Xielu, ffn: Ffn, d: int, p: str) -> list[Weight]:
        """up_proj, the activation's alpha_p and alpha_n, down_proj."""
        w = f"{p}mlp."
        return [*linear_weights(f"{w}up_proj", ffn.hidden, d, ffn.bias),
                Weight(f"{w}act_fn.alpha_p", (1,), "normal"),
                Weight(f"{w}act_fn.alpha_n", (1,), "normal"),
                *linear_weights(f"{w}down_proj", d, ffn.hidden, ffn.bias)]

    def expand(self, b: Any, value: Xielu, ffn: Ffn, p: str, x: str, d: Any) -> str:
        """up (a `linear` node), the activation (the `ffn` node), down (a `linear` node)."""
        w, hidden = f"{p}mlp.", T("B", "L", ffn.hidden)

        def linear(out: str, arg: str, proj: str, shape: Any) -> str:
            return b.emit(Op.LINEAR, f"{p}{out}", (arg,), shape, weight=f"{w}{proj}.weight",
                          bias=f"{w}{proj}.bias" if ffn.bias else None)

        u = linear("up", x, "up_proj", hidden)
        u = b.emit(Op.FFN, f"{p}act", (u,), hidden, ffn=self.name,
                   weights=(f"{w}act_fn.alpha_p", f"{w}act_fn.alpha_n"), beta=value.beta,
                   eps=value.eps, kernel="")
        return linear("mlp_out", u, "down_proj", d)

    def plan(self, node: Any, provider: str | None,
             dtype: str) -> tuple[str, str, str, tuple[str, ...]]:
        """Standard ops on every target: no provider has a kernel for it."""
        layer = node.out.removesuffix("act")
        return "", "xielu_ops", layer, ("xIELU in standard ops: no provider has a kernel "
                                        "for it",)

    def run(self, xp: Any, x: Any, weight: Any, **attrs: Any) -> Any:
        """xielu(u) of u (B, L, n) in its dtype, alpha_p and alpha_n from `weight`."""
        from ..targets import lacks_bfloat16_cuda_kernel

        alpha_p, alpha_n = (weight(name) for name in attrs["weights"])
        beta, eps, dtype = attrs["beta"], attrs["eps"], xp.dtype(x)
        # a bfloat16 model computes it in float32 and narrows the result where ONNX Runtime's
        # CUDA provider lacks a bfloat16 kernel for one of its ops (one text: the torch module
        # too)
        wide = any(lacks_bfloat16_cuda_kernel(op, dtype)
                   for op in ("Softplus", "Exp", "Min", "Greater", "Where", "Mul", "Sub"))
        if wide:
            x, alpha_p, alpha_n = (xp.astype(t, "float32") for t in (x, alpha_p, alpha_n))
        a_p = xp.softplus(alpha_p)
        a_n = xp.softplus(alpha_n) + beta
        negative = (xp.exp(xp.minimum(x, eps)) - 1.0 - x) * a_n + x * beta
        y = xp.where(x > 0.0, a_p * x * x + x * beta, negative)
        return xp.astype(y, dtype) if wide else y


FFN = _XieluFfn()
