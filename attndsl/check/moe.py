"""A stack's feed-forward: one MLP (`swiglu(n)`, ...) or a mixture of experts (`moe(...)`)."""

from __future__ import annotations

from .. import ast
from ..spec import GATED, Ffn, Moe
from .layers import Layers
from .values import FLOAT32_MAX, FLOAT32_TINY, Param

__all__ = ["Experts"]

FFNS = ("relu", "gelu", "gelu_tanh", *GATED)
_MOE = (Param("experts", True), Param("top_k", True), Param("expert", True),
        Param("normalize"), Param("router_bias"), Param("shared"), Param("routed_scale"))
# a layer's experts: past this the graph (a few nodes an expert) is a typo, not a model (the
# largest published routers pick among 384)
MAX_EXPERTS = 1024


class Experts(Layers):
    def ffn_or_moe(self, e: ast.Expr) -> tuple[Ffn, Moe | None]:
        """An MLP, or `moe(...)` whose experts are each of the `expert` form."""
        name, _ = self.callee(e, dict.fromkeys((*FFNS, "moe")), "ffn")
        return self.moe_value(e) if name == "moe" else (self.ffn_value(e), None)

    def ffn_value(self, e: ast.Expr) -> Ffn:
        """`relu(n)`, `gelu(n)`, `gelu_tanh(n)` (biases by default), `swiglu(n)`, `geglu(n)`
        (none by default); `bias = true | false` overrides."""
        name, _ = self.callee(e, dict.fromkeys(FFNS), "ffn")
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

    def moe_value(self, e: ast.Expr) -> tuple[Ffn, Moe]:
        """`moe(experts = E, top_k = k, expert = swiglu(n), normalize = true, router_bias =
        false, shared = none | swiglu(m), routed_scale = 1.0)`."""
        args = self.bind(e, "moe", _MOE)
        experts = self.positive(args["experts"], "experts")
        if experts > MAX_EXPERTS:
            raise self.error(f"experts must be at most {MAX_EXPERTS}, found {experts:,}",
                             args["experts"].span,
                             hint="the largest published routers pick among 384 experts")
        top_k = self.positive(args["top_k"], "top_k")
        if top_k > experts:
            raise self.error(f"top_k ({top_k}) must be at most the number of experts "
                             f"({experts})", args["top_k"].span,
                             hint="each token runs top_k of the experts")
        if isinstance(args["expert"], ast.Call) and args["expert"].func == "moe":
            raise self.error("an expert is one MLP, not a mixture", args["expert"].span,
                             hint="`expert = swiglu(n)`")
        expert = self.ffn_value(args["expert"])
        shared = None
        if "shared" in args and not (isinstance(args["shared"], ast.Name)
                                     and args["shared"].id == "none"):
            if isinstance(args["shared"], ast.Call) and args["shared"].func == "moe":
                raise self.error("the shared expert is one MLP, not a mixture",
                                 args["shared"].span, hint="`shared = swiglu(n)`")
            shared = self.ffn_value(args["shared"])
        scale = 1.0
        if "routed_scale" in args:
            scale = self.number(args["routed_scale"])
            if not FLOAT32_TINY <= scale <= FLOAT32_MAX:
                raise self.error(f"routed_scale must be a number > 0 that float32 can hold, "
                                 f"found {scale:g}", args["routed_scale"].span,
                                 hint="DeepSeek-V3's routed_scaling_factor is 2.5")
        flags = {k: self.boolean(args[k], k) for k in ("normalize", "router_bias") if k in args}
        return expert, Moe(experts, top_k, flags.get("normalize", True),
                           flags.get("router_bias", False), shared, scale)
