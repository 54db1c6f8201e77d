"""A mixture of experts (`ffn = moe(experts, top_k, expert, ...)`, docs/LANGUAGE.md,
Transformer keys): a router's top-k gates per token and the experts each token was routed to
(which runs a token through its own experts only), with a shared expert beside them: one
`ffn` node (`Op.FFN`) and the shared expert's MLP nodes. A feed-forward module
(`base_ffn.FeedForward`): its value, checks, weights, nodes, arithmetic over the array
namespace (the router's gates and one expert's MLP; which tokens run which expert is each
backend's own part: the torch module's in `moe_torch.py`, the ONNX forms in
`strategies/moe.py`), the target's com.microsoft.MoE kernel facts and the planner's reasons
for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from ..ir.graph import Op
from ..shapes import T
from ..spec import Ffn, Norm
from ..weight_table import Weight, linear_weights, mlp_weights
from . import moe_checks
from .base_ffn import FeedForward
from .moe_route import expert_mlp, route, sparsemixer

__all__ = ["FFN", "MAX_EXPERTS", "Moe", "expert_mlp", "route", "sparsemixer"]

# a layer's experts: past this the graph (a few nodes an expert) is a typo, not a model (the
# largest published routers pick among 384)
MAX_EXPERTS = 1024
# com.microsoft.MoE: the providers whose kernel attndsl lowers a mixture of experts to, and
# its dtypes (CPU, verified against the oracle; CUDA's kernel is not verified here, so ort-cuda
# keeps the gather/scatter graph)
KERNEL_DTYPES = {"cpu": ("float32", "float16")}
Array = Any


@dataclass(frozen=True)
class Moe:
    """A mixture-of-experts feed-forward (docs/LANGUAGE.md, Transformer keys): a router picks
    `top_k` of `experts` MLPs per token (`router`: softmax or sigmoid of the router's logits,
    chosen by those (or, `select_by = logits`, by the logits) plus a learned `selection_bias`
    and among the `top_groups` best of `groups` groups, the top k weights renormalised when
    `normalize`, times `routed_scale`); each token runs only those, its gate multiplying the
    expert's output (or, `gate = input`, its input), plus `output_bias`, plus the `shared` MLP
    (times sigmoid(x W) with `shared_gate`), the sum normed by `output_norm`. Every expert is
    the stack's `ffn` form; the layers in `dense_layers` run the `dense` MLP instead."""

    name: ClassVar[str] = "moe"
    experts: int
    top_k: int
    normalize: bool
    router_bias: bool
    shared: Ffn | None
    routed_scale: float
    router: str = "softmax"  # softmax | sigmoid
    gate: str = "output"  # output | input
    shared_gate: bool = False
    dense: Ffn | None = None
    dense_layers: tuple[int, ...] = ()
    selection_bias: bool = False  # DeepSeek-V3's e_score_correction_bias: added to choose
    groups: int = 1  # group-limited routing (DeepSeek): experts in `groups` groups, of which
    top_groups: int = 1  # the `top_groups` best (by `group_score`: top2 | max) are eligible
    group_score: str = "top2"
    threshold: float = 0.0  # router = sparsemixer: the relative gap that drops an expert
    select_by: str = "probs"  # probs | logits (Kolibri's): what the selection bias is added to
    output_norm: Norm | None = None  # A.X-K1's post_mlp_layernorm: on routed + shared
    output_bias: bool = False  # JetMoE's: one bias added to the routed sum
    zero_experts: int = 0  # LongCat-Flash's identity experts, routed after the `experts`
    # Inkling's shared experts: MLPs after the `experts` that every token runs, each scored
    # by its own router row beside the routed ones (one normalisation weighs both)
    sink_experts: int = 0


class _Moe(FeedForward):
    name = "moe"
    params = (("experts", True), ("top_k", True), ("expert", True), ("normalize", False),
              ("router_bias", False), ("shared", False), ("routed_scale", False),
              ("router", False), ("gate", False), ("shared_gate", False), ("dense", False),
              ("dense_layers", False), ("selection_bias", False), ("groups", False),
              ("top_groups", False), ("group_score", False), ("threshold", False),
              ("select_by", False), ("output_norm", False), ("output_bias", False),
              ("zero_experts", False), ("sink_experts", False))
    # its `ffn` node's attributes: the router's tensors (weight, then its bias and selection
    # bias where `router_bias` and `selection_bias` say), its routing, the experts' MLP form
    # and the prefix of their weights
    attributes = ("weights", "experts", "top_k", "router", "threshold", "router_bias",
                  "selection_bias", "select_by", "normalize", "scale", "groups", "top_groups",
                  "group_score", "act", "gated", "bias", "alpha", "limit", "gate", "prefix",
                  "output_bias", "zero_experts", "sink_experts", "kernel")

    def _bind(self, c: Any, e: Any) -> dict:
        from ..check.values import Param

        return c.bind(e, self.name, tuple(Param(p, r) for p, r in self.params))

    def read(self, c: Any, e: Any) -> tuple[Ffn, Moe]:
        """`moe(experts = E, top_k = k, expert = swiglu(n), normalize = true, router_bias =
        false, shared = none | swiglu(m), routed_scale = 1.0, router = softmax | sigmoid,
        gate = output | input, shared_gate = false, dense = none | swiglu(m), dense_layers =
        [i, ...], selection_bias = false, groups = 1, top_groups = 1, group_score = top2 |
        max, select_by = probs | logits, output_norm = none | rmsnorm(...) | layernorm(...),
        output_bias = false, zero_experts = 0, sink_experts = 0)`."""
        from ..check.values import FLOAT32_MAX, FLOAT32_TINY

        args = self._bind(c, e)
        experts = c.positive(args["experts"], "experts")
        if experts > MAX_EXPERTS:
            raise c.error(f"experts must be at most {MAX_EXPERTS}, found {experts:,}",
                          args["experts"].span,
                          hint="the largest published routers pick among 384 experts")
        zero = c.non_negative(args["zero_experts"], "zero_experts") \
            if "zero_experts" in args else 0
        if zero > MAX_EXPERTS:
            raise c.error(f"zero_experts must be at most {MAX_EXPERTS}, found {zero:,}",
                          args["zero_experts"].span)
        top_k = c.positive(args["top_k"], "top_k")
        if top_k > experts + zero:
            among = (f"{experts} + {zero} identit{'y' if zero == 1 else 'ies'}" if zero
                     else f"{experts}")
            raise c.error(f"top_k ({top_k}) must be at most the number of experts "
                          f"({among})", args["top_k"].span,
                          hint="each token runs top_k of the experts")
        if isinstance(args["expert"], ast.Call) and args["expert"].func == self.name:
            raise c.error("an expert is one MLP, not a mixture", args["expert"].span,
                          hint="`expert = swiglu(n)`")
        expert = c.ffn_value(args["expert"])
        shared, dense = self._one_mlp(c, args, "shared"), self._one_mlp(c, args, "dense")
        layers = self._dense_layers(c, args, dense)
        if "shared_gate" in args and shared is None:
            raise c.error("`shared_gate` gates the shared expert, and there is none",
                          args["shared_gate"].span, hint="add `shared = swiglu(n)`")
        scale = 1.0
        if "routed_scale" in args:
            scale = c.number(args["routed_scale"])
            if not FLOAT32_TINY <= scale <= FLOAT32_MAX:
                raise c.error(f"routed_scale must be a number > 0 that float32 can hold, "
                              f"found {scale:g}", args["routed_scale"].span,
                              hint="DeepSeek-V3's routed_scaling_factor is 2.5")
        flags = {k: c.boolean(args[k], k) for k in ("normalize", "router_bias", "shared_gate",
                                                     "selection_bias", "output_bias")
                 if k in args}
        words = {k: c.word(args[k], choices, k) for k, choices in (
            ("router", ("softmax", "sigmoid", "sparsemixer")), ("gate", ("output", "input")),
            ("group_score", ("top2", "max")), ("select_by", ("probs", "logits"))) if k in args}
        groups, top_groups = moe_checks.groups(c, args, experts + zero, top_k,
                                               words.get("group_score", "top2"))
        threshold = moe_checks.threshold(c, args, words.get("router", "softmax"), top_k)
        router = words.get("router", "softmax")  # (the sparse mixer's gates are its own)
        always = moe_checks.always_run(c, args, zero, groups, router, MAX_EXPERTS)
        return expert, Moe(experts, top_k, flags.get("normalize", router != "sparsemixer"),
                           flags.get("router_bias", False), shared, scale,
                           router=words.get("router", "softmax"),
                           gate=words.get("gate", "output"),
                           shared_gate=flags.get("shared_gate", False), dense=dense,
                           dense_layers=layers,
                           selection_bias=flags.get("selection_bias", False), groups=groups,
                           top_groups=top_groups, group_score=words.get("group_score", "top2"),
                           threshold=threshold, select_by=words.get("select_by", "probs"),
                           output_norm=self._output_norm(c, args),
                           output_bias=flags.get("output_bias", False), zero_experts=zero,
                           sink_experts=always)

    def _output_norm(self, c: Any, args: dict) -> Norm | None:
        """`none`, or a stack norm without its placement (A.X-K1's post_mlp_layernorm)."""
        e = args.get("output_norm")
        if e is None or (isinstance(e, ast.Name) and e.id == "none"):
            return None
        return c.norm_value(e, placement=False)[0]

    def _one_mlp(self, c: Any, args: dict, key: str) -> Ffn | None:
        """`shared` or `dense`: one MLP, or `none`."""
        if key not in args or (isinstance(args[key], ast.Name) and args[key].id == "none"):
            return None
        if isinstance(args[key], ast.Call) and args[key].func == self.name:
            raise c.error(f"the {key} MLP is one MLP, not a mixture", args[key].span,
                          hint=f"`{key} = swiglu(n)`")
        return c.ffn_value(args[key])

    def _dense_layers(self, c: Any, args: dict, dense: Ffn | None) -> tuple[int, ...]:
        """The blocks that run `dense` instead of the mixture: a list of distinct indices,
        given together with `dense`."""
        if "dense_layers" not in args:
            if dense is not None:
                raise c.error("`dense` is the MLP of the `dense_layers`, and none are named",
                              args["dense"].span,
                              hint="add `dense_layers = [0, ...]`, or remove `dense`")
            return ()
        e = args["dense_layers"]
        if dense is None:
            raise c.error("`dense_layers` run the `dense` MLP, and there is none", e.span,
                          hint="add `dense = swiglu(n)` (the dense layers' MLP)")
        if not isinstance(e, ast.List) or not e.items:
            raise c.error("dense_layers must be a non-empty list of layer indices, like "
                          "[0, 1, 2]", e.span)
        layers = [c.non_negative(i, "a layer index") for i in e.items]
        for item, i in zip(e.items, layers, strict=True):
            if layers.count(i) > 1:
                raise c.error(f"layer {i} is listed twice", item.span)
        return tuple(sorted(layers))

    def check_layers(self, c: Any, moe: Moe, layers: int, ffn: Any) -> None:
        """Every dense layer is one of the stack's blocks, and not all of them are dense."""
        if not moe.dense_layers:
            return
        e = self._bind(c, ffn)["dense_layers"]
        for item in e.items:
            i = c.non_negative(item, "a layer index")
            if i >= layers:
                raise c.error(f"layer {i} is not in the stack: its layers are 0 .. "
                              f"{layers - 1}", item.span,
                              hint=f"dense_layers name blocks of `layers = {layers}`")
        if len(moe.dense_layers) == layers:
            raise c.error("every layer is dense: the mixture of experts would never run",
                          e.span, hint="use `ffn = <the dense MLP>` for a dense stack")

    def summary(self, m: Moe, mlp: str) -> str:
        text = f"top-{m.top_k} of {m.experts} experts {mlp}" + (
            f" beside {m.sink_experts} sink experts" if m.sink_experts else "") + (
            f" and a shared {m.shared.kind}({m.shared.hidden})" if m.shared else "")
        if m.dense is not None:
            text += f", {m.dense.kind}({m.dense.hidden}) in layers {list(m.dense_layers)}"
        return text

    def mlps(self, m: Moe) -> tuple[Ffn | None, ...]:
        return m.dense, m.shared

    def weights(self, m: Moe, ffn: Ffn, d: int, p: str) -> list[Weight]:
        """The router (and its selection bias), each expert's MLP, the routed sum's bias, the
        shared expert and its gate, the output norm's weight (and bias)."""
        routed = m.experts + m.zero_experts  # (an identity expert has no tensors)
        out = linear_weights(f"{p}mlp.router", routed + m.sink_experts, d, m.router_bias)
        if m.selection_bias:
            out.append(Weight(f"{p}mlp.router.selection_bias", (routed,), "selection"))
        for e in range(m.experts + m.sink_experts):  # (sink experts after the routed)
            out += mlp_weights(f"{p}mlp.experts.{e}.", ffn, d)
        if m.output_bias:
            out.append(Weight(f"{p}mlp.bias", (d,), "linear_bias", ffn.hidden))
        if m.shared is not None:
            out += mlp_weights(f"{p}mlp.shared.", m.shared, d)
        if m.shared_gate:
            out += linear_weights(f"{p}mlp.shared_gate", 1, d, False)
        n = m.output_norm
        if n is not None and n.weighted:
            init = "norm_offset" if n.unit_offset else "norm_weight"
            out.append(Weight(f"{p}mlp.output_norm.weight", (d,), init))
            if n.bias:
                out.append(Weight(f"{p}mlp.output_norm.bias", (d,), "norm_bias"))
        return out

    def expand(self, b: Any, m: Moe, ffn: Ffn, p: str, x: str, d: Any) -> str:
        """The `ffn` node (the router's gates and each token's experts), the shared expert
        added, and the sum normed by the output norm."""
        from ..ir.attention import norm

        router = f"{p}mlp.router."
        weights = (f"{router}weight", *((f"{router}bias",) if m.router_bias else ()),
                   *((f"{router}selection_bias",) if m.selection_bias else ()))
        y = b.emit(Op.FFN, f"{p}routed", (x,), d, ffn=self.name, weights=weights,
                   experts=m.experts + m.sink_experts, top_k=m.top_k, router=m.router,
                   threshold=m.threshold,
                   router_bias=m.router_bias, selection_bias=m.selection_bias,
                   select_by=m.select_by, normalize=m.normalize, scale=m.routed_scale,
                   groups=m.groups, top_groups=m.top_groups, group_score=m.group_score,
                   act=ffn.activation, gated=ffn.gated, bias=ffn.bias, alpha=ffn.alpha,
                   limit=ffn.limit, gate=m.gate, prefix=f"{p}mlp.experts.",
                   output_bias=f"{p}mlp.bias" if m.output_bias else None,
                   zero_experts=m.zero_experts, sink_experts=m.sink_experts, kernel="")
        if m.shared is not None:
            y = self._shared(b, m, p, x, d, y)
        if m.output_norm is None:
            return y
        return norm(b, f"{p}moe_normed", y, d, m.output_norm, f"{p}mlp.output_norm")

    def _shared(self, b: Any, m: Moe, p: str, x: str, d: Any, y: str) -> str:
        """The routed output y plus the shared expert (times its gate with `shared_gate`)."""
        from ..ir.ffn import mlp

        shared = mlp(b, m.shared, f"{p}shared_", f"{p}mlp.shared.", x, d)
        if m.shared_gate:  # Qwen2-MoE: shared(x) * sigmoid(x W_g^T), one gate per token
            one = T("B", "L", 1)
            g = b.emit(Op.LINEAR, f"{p}shared_scale", (x,), one,
                       weight=f"{p}mlp.shared_gate.weight", bias=None)
            g = b.emit(Op.ACTIVATION, f"{p}shared_scale_act", (g,), one, kind="sigmoid")
            shared = b.emit(Op.MUL, f"{p}shared_scaled", (shared, g), d)
        return b.emit(Op.ADD, f"{p}moe_out", (y, shared), d)

    def run(self, xp: Any, x: Any, weight: Any, **attrs: Any) -> Any:
        """The torch module's form (`moe_torch.py`)."""
        from .moe_torch import run

        return run(xp, x, weight, route, expert_mlp, **attrs)

    def plan(self, node: Any, provider: str | None,
             dtype: str) -> tuple[str, str, str, tuple[str, ...]]:
        """ONNX Runtime's com.microsoft.MoE where the provider has one for the dtype and the
        mixture is a form it computes (a softmax router, the gate on the expert's output,
        SwiGLU experts with or without gpt-oss's clamp, or ReLU ones), else the gather/scatter
        graph. The kernel picks a token's experts by the same softmax and top-k; among
        experts of exactly equal probability it takes the higher index, the graph the
        lower."""
        why = _obstacle(node, provider, dtype)
        layer = node.attr("prefix").removesuffix("experts.")
        if why is None:
            return "moe", "experts_moe", layer, (
                "com.microsoft.MoE: the router's softmax and top-k and each token's experts in "
                "one kernel",)
        return "graph", "experts_graph", layer, (
            "each token's experts alone: rows gathered to their experts' weights (decoding) or "
            "grouped by expert (prompts), standard ops", f"not com.microsoft.MoE: {why}")

    quantized_forms: ClassVar = {
        "QMoE": "as com.microsoft.QMoE blocks: the mixture runs as ONNX Runtime's MoE kernel",
        "moe_float": "stored as the float values of their blocks, for com.microsoft.MoE: ONNX "
                     "Runtime 1.31's 8-bit QMoE quantizes activations always (accuracy_level "
                     "4) and reads asymmetric zero points otherwise than MatMulNBits",
        "graph_float": "stored as the float values of their blocks: the mixture runs as the "
                       "gather/scatter graph, whose standard ops read no blocks",
    }
    kernel_form = "QMoE"

    def quantized(self, node: Any, shapes: dict, q: Any) -> tuple[dict[str, str],
                                                                  dict[str, str]]:
        """The experts' weights when both widths of each are multiples of the block (QMoE's
        blocks run along both): as com.microsoft.QMoE where the mixture runs as ONNX
        Runtime's MoE kernel and it takes them (int4, or int8 symmetric at accuracy_level
        4), else stored as the float values their blocks give."""
        if node.op is not Op.FFN or node.attr("ffn") != self.name:
            return {}, {}
        router = node.attr("weights")[0]  # the router's logits: no block kernel reads it
        read = ({router: ""}, {router: "the router reads it, and blocks are read by linear "
                                       "and embed nodes and the experts alone"})
        names = [w for w in shapes if w.startswith(node.attr("prefix")) and w.endswith(".weight")]
        if any(side % q.block for w in names for side in shapes[w]):
            why = f"an expert's widths are not multiples of the block ({q.block})"
            return dict.fromkeys(names, "") | read[0], dict.fromkeys(names, why) | read[1]
        form = "graph_float"
        if node.attr("kernel") == "moe":
            form = "QMoE" if q.bits == 4 or (q.symmetric and q.accuracy == 4) else "moe_float"
        return dict.fromkeys(names, form) | read[0], read[1]


def _obstacle(node: Any, provider: str | None, dtype: str) -> str | None:
    """Why com.microsoft.MoE cannot run this mixture (its `ffn` node), or None."""
    if dtype not in KERNEL_DTYPES.get(provider or "", ()):
        return f"no com.microsoft.MoE kernel attndsl uses on {provider} for {dtype}"
    if node.attr("zero_experts"):
        return "it has identity experts; the kernel's experts are MLPs"
    if node.attr("sink_experts"):
        return "its sink experts run for every token, weighed by the router; the kernel's " \
               "experts are routed"
    if node.attr("router") != "softmax":
        kind = "a sigmoid" if node.attr("router") == "sigmoid" else "PhiMoE's sparse mixer"
        return f"its router is {kind}; the kernel's is a softmax"
    if node.attr("selection_bias") or node.attr("groups") > 1 or \
            node.attr("select_by") != "probs":
        return ("it chooses by a selection bias, among groups or by the logits; the kernel by "
                "the softmax alone")
    if node.attr("gate") != "output":
        return "its gate scales the expert's input; the kernel's scales the output"
    act, gated = node.attr("act"), node.attr("gated")
    if gated and act not in ("silu", "clamped_swiglu"):
        return f"its experts are gated by {act}; the kernel's gated unit is SwiGLU"
    if not gated and act != "relu":
        return f"its experts' activation is {act}; the kernel computes ReLU, not attndsl's {act}"
    return None


FFN = _Moe()
