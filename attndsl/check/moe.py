"""A stack's feed-forward: one MLP (`swiglu(n)`, ...) or a mixture of experts (`moe(...)`)."""

from __future__ import annotations

from .. import ast
from ..spec import GATED, Ffn, Moe
from .layers import Layers
from .values import FLOAT32_MAX, FLOAT32_TINY, Param

__all__ = ["Experts"]

FFNS = ("relu", "gelu", "gelu_tanh", *GATED)
_MOE = (Param("experts", True), Param("top_k", True), Param("expert", True),
        Param("normalize"), Param("router_bias"), Param("shared"), Param("routed_scale"),
        Param("router"), Param("gate"), Param("shared_gate"), Param("dense"),
        Param("dense_layers"), Param("selection_bias"), Param("groups"), Param("top_groups"),
        Param("group_score"))
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
        false, shared = none | swiglu(m), routed_scale = 1.0, router = softmax | sigmoid,
        gate = output | input, shared_gate = false, dense = none | swiglu(m), dense_layers =
        [i, ...], selection_bias = false, groups = 1, top_groups = 1, group_score = top2 |
        max)`."""
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
        shared, dense = self._one_mlp(args, "shared"), self._one_mlp(args, "dense")
        layers = self._dense_layers(args, dense)
        if "shared_gate" in args and shared is None:
            raise self.error("`shared_gate` gates the shared expert, and there is none",
                             args["shared_gate"].span, hint="add `shared = swiglu(n)`")
        scale = 1.0
        if "routed_scale" in args:
            scale = self.number(args["routed_scale"])
            if not FLOAT32_TINY <= scale <= FLOAT32_MAX:
                raise self.error(f"routed_scale must be a number > 0 that float32 can hold, "
                                 f"found {scale:g}", args["routed_scale"].span,
                                 hint="DeepSeek-V3's routed_scaling_factor is 2.5")
        flags = {k: self.boolean(args[k], k) for k in ("normalize", "router_bias", "shared_gate",
                                                        "selection_bias") if k in args}
        words = {k: self.word(args[k], choices, k) for k, choices in (
            ("router", ("softmax", "sigmoid")), ("gate", ("output", "input")),
            ("group_score", ("top2", "max"))) if k in args}
        groups, top_groups = self._groups(args, experts, top_k, words.get("group_score", "top2"))
        return expert, Moe(experts, top_k, flags.get("normalize", True),
                           flags.get("router_bias", False), shared, scale,
                           router=words.get("router", "softmax"),
                           gate=words.get("gate", "output"),
                           shared_gate=flags.get("shared_gate", False), dense=dense,
                           dense_layers=layers,
                           selection_bias=flags.get("selection_bias", False), groups=groups,
                           top_groups=top_groups, group_score=words.get("group_score", "top2"))

    def _groups(self, args: dict[str, ast.Expr], experts: int, top_k: int,
                score: str) -> tuple[int, int]:
        """`groups` dividing the experts, `top_groups` of them holding at least top_k experts
        (and two per group for a top2 group score)."""
        if "groups" not in args:
            for key in ("top_groups", "group_score"):
                if key in args:
                    raise self.error(f"`{key}` needs `groups`", args[key].span,
                                     hint="DeepSeek-V3: groups = 8, top_groups = 4")
            return 1, 1
        groups = self.positive(args["groups"], "groups")
        if experts % groups:
            raise self.error(f"{experts} experts do not split into {groups} groups",
                             args["groups"].span, hint="groups must divide experts")
        size = experts // groups
        if score == "top2" and size < 2:
            raise self.error(f"a group's score is the sum of its two best experts, and "
                             f"{groups} groups of {experts} experts hold one each",
                             args["groups"].span, hint="fewer groups, or `group_score = max`")
        top = self.positive(args["top_groups"], "top_groups") if "top_groups" in args else 1
        if top > groups:
            raise self.error(f"top_groups ({top}) must be at most groups ({groups})",
                             args["top_groups"].span)
        if top * size < top_k:
            at = args.get("top_groups", args["groups"])
            raise self.error(f"{top} of {groups} groups hold {top * size} experts, fewer than "
                             f"top_k = {top_k}", at.span,
                             hint="top_groups * experts / groups must be at least top_k")
        return groups, top

    def _one_mlp(self, args: dict[str, ast.Expr], key: str) -> Ffn | None:
        """`shared` or `dense`: one MLP, or `none`."""
        if key not in args or (isinstance(args[key], ast.Name) and args[key].id == "none"):
            return None
        if isinstance(args[key], ast.Call) and args[key].func == "moe":
            raise self.error(f"the {key} MLP is one MLP, not a mixture", args[key].span,
                             hint=f"`{key} = swiglu(n)`")
        return self.ffn_value(args[key])

    def _dense_layers(self, args: dict[str, ast.Expr], dense: Ffn | None) -> tuple[int, ...]:
        """The blocks that run `dense` instead of the mixture: a list of distinct indices,
        given together with `dense`."""
        if "dense_layers" not in args:
            if dense is not None:
                raise self.error("`dense` is the MLP of the `dense_layers`, and none are named",
                                 args["dense"].span,
                                 hint="add `dense_layers = [0, ...]`, or remove `dense`")
            return ()
        e = args["dense_layers"]
        if dense is None:
            raise self.error("`dense_layers` run the `dense` MLP, and there is none", e.span,
                             hint="add `dense = swiglu(n)` (the dense layers' MLP)")
        if not isinstance(e, ast.List) or not e.items:
            raise self.error("dense_layers must be a non-empty list of layer indices, like "
                             "[0, 1, 2]", e.span)
        layers = [self.non_negative(i, "a layer index") for i in e.items]
        for item, i in zip(e.items, layers, strict=True):
            if layers.count(i) > 1:
                raise self.error(f"layer {i} is listed twice", item.span)
        return tuple(sorted(layers))

    def check_dense_layers(self, moe: Moe | None, layers: int, ffn: ast.Expr) -> None:
        """Every dense layer is one of the stack's blocks, and not all of them are dense."""
        if moe is None or not moe.dense_layers:
            return
        e = self.bind(ffn, "moe", _MOE)["dense_layers"]
        for item in e.items:
            i = self.non_negative(item, "a layer index")
            if i >= layers:
                raise self.error(f"layer {i} is not in the stack: its layers are 0 .. "
                                 f"{layers - 1}", item.span,
                                 hint=f"dense_layers name blocks of `layers = {layers}`")
        if len(moe.dense_layers) == layers:
            raise self.error("every layer is dense: the mixture of experts would never run",
                             e.span, hint="use `ffn = <the dense MLP>` for a dense stack")
