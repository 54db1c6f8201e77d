"""A stack's feed-forward: one MLP (`swiglu(n)`, ...) or a feed-forward form's call (its
module reads it: mechanisms.FFNS)."""

from __future__ import annotations

from typing import Any

from .. import ast
from ..mechanisms import FFNS, ffn_of
from ..spec import GATED, Ffn
from .layers import Layers
from .values import FLOAT32_MAX, FLOAT32_TINY, Param

__all__ = ["FeedForwards"]

MLPS = ("relu", "relu2", "gelu", "gelu_tanh", *GATED)


class FeedForwards(Layers):
    def ffn_form(self, e: ast.Expr) -> tuple[Ffn, Any]:
        """An MLP (and None), or a feed-forward form's MLP (the form its blocks are made of)
        and value."""
        name, _ = self.callee(e, dict.fromkeys((*MLPS, *FFNS)), "ffn")
        return FFNS[name].read(self, e) if name in FFNS else (self.ffn_value(e), None)

    def check_ffn_layers(self, form: Any, layers: int, e: ast.Expr) -> None:
        """What the feed-forward form `e` says of a stack of `layers` blocks."""
        if form is not None:
            ffn_of(form).check_layers(self, form, layers, e)

    def ffn_value(self, e: ast.Expr) -> Ffn:
        """`relu(n)`, `relu2(n)`, `gelu(n)`, `gelu_tanh(n)` (biases by default), `swiglu(n)`,
        `geglu(n)` (none by default); `bias = true | false` overrides."""
        name, _ = self.callee(e, dict.fromkeys(MLPS), "ffn")
        clamped = name == "clamped_swiglu"
        args = self.bind(e, name, (Param("hidden", True), Param("bias"))
                         + ((Param("alpha"), Param("limit")) if clamped else ()))
        hidden = self.positive(args["hidden"], "ffn width")
        bias = self.boolean(args["bias"], "bias") if "bias" in args else name not in GATED
        if not clamped:
            return Ffn(name, hidden, bias)
        values = {}
        for key, default in (("alpha", 1.702), ("limit", 7.0)):
            values[key] = self.number(args[key]) if key in args else default
            if not FLOAT32_TINY <= values[key] <= FLOAT32_MAX:
                raise self.error(f"{key} must be a number > 0 that float32 can hold, found "
                                 f"{values[key]:g}", args[key].span,
                                 hint="gpt-oss: alpha = 1.702, limit = 7.0")
        return Ffn(name, hidden, bias, values["alpha"], values["limit"])
