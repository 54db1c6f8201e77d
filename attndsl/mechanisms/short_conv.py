"""The gated short convolution (`kernel = short_conv(width = 3)`, LFM2's convolution layers):
in_proj makes three gates B, C and x of C channels per token, and the layer's output is
C * conv(B * x), a causal depthwise convolution over the last `width` tokens. docs/LANGUAGE.md
(Kernels) has the formula. A kernel module (`base_kernel.Kernel`) with its own layer: its value,
checks, nodes from x to the gated channels, weights, decoding state (the last width - 1
inputs of the convolution) and arithmetic, over the array namespace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from .. import masks as m
from ..ir.graph import Op
from ..shapes import T
from .base import Site
from .base_kernel import Kernel, KernelWhere

__all__ = ["KERNEL", "ShortConv"]

# the form a planned target's provider runs it as (`planned`), ONNX Runtime's contrib op
CONTRIB = "CausalConvWithState"


@dataclass(frozen=True)
class ShortConv:
    """A gated short convolution (LFM2's `Lfm2ShortConv`): y = C * conv(B * x) over the
    last `width` tokens, channel by channel, with B, C and x from one input projection."""

    name: ClassVar[str] = "short_conv"
    width: int


class _ShortConv(Kernel):
    name = "short_conv"
    params = (("width", False),)
    described = "a short convolution"
    own_projections = "it has its own projections, while the variants share q, k and v"
    scores = False
    attributes = ("width", "weights", "padding", "decoding", "form")
    own_layer = True
    states = ("conv",)
    carries = "a short-convolution layer carries its convolution's last inputs"

    def read(self, c: Any, args: dict) -> ShortConv:
        width = c.positive(args["width"], "width") if "width" in args else 3
        if width < 2:
            raise c.error(f"a short convolution's width counts the token and at least one "
                          f"before it: it must be at least 2, found {width}",
                          args["width"].span, hint="LFM2: width = 3 (conv_L_cache)")
        return ShortConv(width)

    def conflicts(self, c: Any, kernel: ShortConv, where: KernelWhere) -> bool:
        """Causal self attention without positions, kv heads, dropout, or any key of a
        softmax, a position scheme or a projection form; `bias` all or nothing (in_proj,
        the convolution and o_proj share it, as LFM2's conv_bias)."""
        e, at = where.entries, where.at
        problems = self.ordered_problems(
            where, "a short convolution", "tokens", "padding slots read as 0",
            "its window is the last tokens'",
            ("a short convolution has no keys: its channels are heads x value_dim",
             "remove `kv_heads`"))
        if "scale" in e and not (isinstance(e["scale"].value, ast.Name)
                                 and e["scale"].value.id == "auto"):
            problems.append(("a short convolution forms no scores to scale", at("scale"),
                             "remove `scale`"))
        if "bias" in e and isinstance(e["bias"].value, ast.List):
            problems.append(("a short convolution's in_proj, convolution and o_proj have "
                             "biases together: `bias` is `true` or `false`", at("bias"),
                             "LFM2: bias = conv_bias"))
        for key in _not_with():
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto", "false")):
                problems.append((f"`{key}` does not apply to a short convolution: it has no "
                                 "queries, keys or attention weights", e[key].key_span,
                                 f"remove `{key}`"))
        for message, span, hint in problems:
            c.error(message, span, hint=hint)
        return bool(problems)

    def own_weights(self, s: Any, p: str) -> list:
        """in_proj [3 C, d_model] (B, C and x rows, in this order) and the convolution
        [C, 1, width], each with its bias where `bias` is set (LFM2's in_proj and conv)."""
        from ..weight_table import Weight

        channels, biased = s.heads * s.value_dim, "q" in s.bias
        out = [Weight(f"{p}in_proj.weight", (3 * channels, s.d_model), "linear", s.d_model)]
        if biased:
            out.append(Weight(f"{p}in_proj.bias", (3 * channels,), "linear_bias", s.d_model))
        out.append(Weight(f"{p}conv.weight", (channels, 1, s.kernel.width), "linear",
                          s.kernel.width))
        if biased:
            out.append(Weight(f"{p}conv.bias", (channels,), "linear_bias", s.kernel.width))
        return out

    def state_type(self, a: Any, state: str) -> Any:
        """`conv`: the convolution's last width - 1 inputs B * x (B, width - 1, C)."""
        return T("B", a.kernel.width - 1, a.heads * a.value_dim, dtype="float")

    def layer(self, site: Site, kernel: ShortConv, x: str, cache: int | None) -> str:
        """The gated channels (B, L, C) o_proj reads: in_proj's B, C and x as one head of C
        channels each, the kernel node, merged back. Decoding (`cache`, the layer's index):
        the convolution continues from past_key_values.{i}.conv, and its last width - 1
        inputs are written to present.{i}.conv; a slot whose attention_mask is 0 has input
        0, as in one pass a slot the mask's `padding` hides."""
        b, s, p, prefix = site.b, site.spec, site.p, site.prefix
        channels, width = s.heads * s.value_dim, kernel.width
        biased = "q" in s.bias
        bcx = b.emit(Op.LINEAR, f"{p}in_proj", (x,), T("B", "L", 3 * channels),
                     weight=f"{prefix}in_proj.weight",
                     bias=f"{prefix}in_proj.bias" if biased else None)

        def gate(name: str, i: int) -> str:
            cols = b.emit(Op.HEAD_SLICE, f"{p}{name}_cols", (bcx,), T("B", "L", channels),
                          heads=1, start=i * channels, stop=(i + 1) * channels)
            return b.emit(Op.SPLIT_HEADS, f"{p}{name}", (cols,), T("B", 1, "L", channels),
                          heads=1, dim=channels)

        gates = (gate("b_gate", 0), gate("c_gate", 1), gate("x_gate", 2))
        padding = next((x for x in m.primitives(s.mask) if isinstance(x, m.Padding)), None)
        skip = () if cache is not None or padding is None else ("key_lengths",)
        weights = (f"{prefix}conv.weight", *((f"{prefix}conv.bias",) if biased else ()))
        attrs = {"kernel": self.name, "width": width, "weights": weights,
                 "padding": padding, "decoding": cache is not None, "form": "ops"}
        if cache is None:
            o = b.emit(Op.KERNEL, f"{p}attn", (*gates, *skip), T("B", 1, "L", channels),
                       **attrs)
        else:  # the outputs and the next call's past in one tensor, then apart
            packed = b.emit(Op.KERNEL, f"{p}attn_state", (*gates, f"past_key_values.{cache}"
                            ".conv", "attention_mask"), T("B", 1, f"L + {width - 1}",
                                                          channels), **attrs)
            o = b.emit(Op.ROWS, f"{p}attn", (packed,), T("B", 1, "L", channels), start=0,
                       stop=1 - width)
            state = b.emit(Op.ROWS, f"{p}conv_state", (packed,),
                           T("B", 1, width - 1, channels), start=1 - width, stop=None)
            b.emit(Op.MERGE_HEADS, f"present.{cache}.conv", (state,),
                   T("B", width - 1, channels))
        return b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), T("B", "L", channels))

    def form(self, node: Any) -> tuple[str, tuple[str, ...], tuple]:
        width, contrib = node.attr("width"), node.attr("form") == CONTRIB
        how = (f"ONNX Runtime's {CONTRIB} (com.microsoft), channels last" if contrib else
               f"{width} shifted products in standard ops")
        return "short_conv", (
            f"a gated causal depthwise convolution over the last {width} tokens: {how}; "
            "O(L x width x channels) (when decoding: from the cached last inputs)",), (
            ("width", width),)

    def planned(self, node: Any, provider: str | None, dtype: str) -> dict:
        """ONNX Runtime's CausalConvWithState where the provider has its kernel for the
        dtype (`targets.has_kernel`); else the standard ops of `run`."""
        from ..targets import has_kernel

        fused = provider is not None and has_kernel(CONTRIB, dtype, provider)
        return {"form": CONTRIB if fused else "ops"}

    def run(self, xp: Any, args: list, tensors: list, real: Any, branch: Any, *,
            width: int, weights: tuple[str, ...], padding: Any, decoding: bool,
            form: str) -> Any:
        """The B, C and x gates (B, 1, L, C) (decoding: the past inputs (B, width - 1, C)
        after them); the convolution's weight (C, 1, width) and bias; one pass C * conv(B *
        x) (B, 1, L, C), decoding that then the last width - 1 inputs along the length."""
        gate_b, gate_c, x = args[:3]
        dtype = xp.dtype(x)
        u = xp.astype(gate_b * x, "float32")  # the convolution's input, (B, 1, L, C)
        tokens = real()
        if tokens is not None:  # a padding slot's input is 0
            u = u * xp.reshape(tokens, [xp.shape(u, 0), 1, -1, 1])
        channels = xp.shape(u, 3)
        if decoding:
            past = xp.reshape(xp.astype(args[3], "float32"), [xp.shape(u, 0), 1, -1, channels])
        else:
            past = xp.pad(xp.slice(u, 2, 0, 0), 2, width - 1)
        full = xp.concat([past, u], axis=2)  # input t at row t + width - 1
        taps = xp.swap_last(xp.reshape(xp.astype(tensors[0], "float32"), [-1, width]))
        L = xp.shape(u, 2)
        y = None
        for j in range(width):  # y_t = sum_j w[:, 0, j] u_{t - width + 1 + j}
            term = xp.slice(full, 2, j, L + j) * xp.slice(taps, 0, j, j + 1)
            y = term if y is None else y + term
        if len(tensors) > 1:
            y = y + xp.astype(tensors[1], "float32")
        out = xp.astype(gate_c, "float32") * y
        if decoding:
            out = xp.concat([out, xp.slice(full, 2, L, None)], axis=2)
        return xp.astype(out, dtype)


def _not_with() -> tuple[str, ...]:
    """The keys whose meaning is a softmax's or a projection form's (those a mechanism
    refuses by its own rule with every kernel without a softmax left to it)."""
    from . import MECHANISMS, PROJECTIONS, SCORED, SELECTORS

    return (*SCORED, "sparsity",
            *(key for key, form in PROJECTIONS.items() if form.with_recurrent), *SELECTORS,
            *(key for key, mech in MECHANISMS.items() if mech.with_recurrent))


KERNEL = _ShortConv()
