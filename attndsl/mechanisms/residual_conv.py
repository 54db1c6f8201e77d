"""Residual short convolutions (Inkling's k_sconv, v_sconv and attn_sconv): a causal depthwise
convolution over the last `width` tokens added to its own input, u + conv(u), in float32, on
the key projection's output (`k`), the value projection's (`v`) and the attention's output after
o_proj (`out`): `residual_conv = conv(width = 4, on = [k, v, out])`. A padding slot's input is
0, as in one pass the mask's `padding` hides it; when decoding, each convolution continues from
its last width - 1 inputs, a state of its own per layer (past_key_values.{i}.<part>_conv). A
stack's feed-forward output takes the same (`ffn_conv = conv(width = 4)`, `conv_nodes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from .. import masks as m
from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site, Where

__all__ = ["MECHANISM", "ResidualConv", "conv_nodes", "read_width"]

PARTS = ("k", "v", "out")


@dataclass(frozen=True)
class ResidualConv:
    """u + conv(u) over the last `width` tokens on each of `parts` (`k`, `v`, `out`)."""

    width: int
    parts: tuple[str, ...]


class _ResidualConv(Mechanism):
    key = "residual_conv"
    hook = "projected"
    also = ("output",)
    forms: ClassVar = {"conv": (("width", False), ("on", False))}
    with_recurrent = "the kernel has its own convolution"

    def read(self, c: Any, e: Any) -> ResidualConv | None:
        name, args = c.call(e, self.forms, "residual convolution")
        if name is None:
            return None
        width = read_width(c, args)
        parts = PARTS
        if "on" in args:
            on = args["on"]
            if not isinstance(on, ast.List) or not on.items:
                raise c.error("`on` is a list of the parts convolved: `[k, v, out]` or some of "
                              "them", on.span, hint="Inkling: on = [k, v, out]")
            parts = c.word_list(on, PARTS, "a convolved part")
        return ResidualConv(width, parts)

    def conflicts(self, c: Any, value: ResidualConv, where: Where) -> bool:
        """Self attention with its own key and value projections (no projection form, no
        kernel of its own layer)."""
        e, at = where.entries, where.at
        problems = []
        if "kind" in e and getattr(e["kind"].value, "id", "") == "cross":
            problems.append(("residual convolutions run over a sequence's own tokens in order: "
                             "cross attention's keys and values are memory rows", at("kind")))
        for key in ("head_experts", "values"):
            if key in e and {"k", "v"} & set(value.parts) and \
                    getattr(e[key].value, "id", "") != "none":
                problems.append((f"residual convolutions of k and v read the layer's own key "
                                 f"and value projections, which `{key}` replaces", at(key)))
        if mechanisms_kernel(where.kernel) is not None:
            problems.append(("residual convolutions run on a softmax attention's key and value "
                             "projections and output", at("kernel")))
        for message, span in problems:
            c.error(message, span, hint="remove `residual_conv`, or (with `values = keys`) "
                                        "set `on = [out]`")
        return bool(problems)

    def weights(self, value: ResidualConv, spec: Any, prefix: str) -> list[Any]:
        from ..weight_table import Weight

        return [Weight(f"{prefix}{part}_sconv.conv1d.weight", (_channels(spec, part), 1,
                                                               value.width), "linear",
                       value.width) for part in value.parts]

    def states(self, value: ResidualConv, spec: Any,
               reused: bool = False) -> tuple[tuple[str, Any], ...]:
        """Each convolution's last width - 1 inputs (B, width - 1, channels), `<part>_conv`
        (a layer reusing an earlier layer's keys and values: `out`'s alone)."""
        return tuple((f"{part}_conv", T("B", value.width - 1, _channels(spec, part),
                                        dtype="float"))
                     for part in value.parts if not (reused and part != "out"))

    def expand(self, site: Site, value: ResidualConv, x: str, part: str) -> str:
        if part not in value.parts:
            return x
        s = site.spec
        return conv_nodes(site.b, f"{site.p}{part}_sconv", x, _channels(s, part), value.width,
                          f"{site.prefix}{part}_sconv.conv1d.weight", s,
                          None if site.cache is None else f"{site.cache}.{part}_conv")


def mechanisms_kernel(value: Any) -> Any:
    """The kernel module of a spec's `kernel` value, or None for the softmax."""
    from . import kernel_of

    return kernel_of(value)


def _channels(spec: Any, part: str) -> int:
    return {"k": spec.kv_heads * spec.head_dim, "v": spec.kv_heads * spec.value_dim,
            "out": spec.d_model}[part]


def read_width(c: Any, args: dict) -> int:
    """A convolution's `width` (default 4): the token and at least one before it."""
    width = c.positive(args["width"], "width") if "width" in args else 4
    if width < 2:
        raise c.error(f"a convolution's width counts the token and at least one before it: "
                      f"it must be at least 2, found {width}", args["width"].span,
                      hint="Inkling: width = 4 (sconv_kernel_size)")
    if width > 1024:
        raise c.error(f"a short convolution's width is at most 1024, found {width}",
                      args["width"].span)
    return width


def conv_nodes(b: Any, out: str, x: str, channels: int, width: int, weight: str,
               attention: Any, state: str | None) -> str:
    """x + conv(x) (B, L, channels): one `causal_conv` node over x with `activation =
    residual` (the sum in float32; a slot the `padding` of the attention's mask, or of a core's,
    hides reads 0: key_lengths). Decoding (`state`, `{i}.<name>`): it continues
    from past_key_values.{state} (a slot whose attention_mask is 0 reads 0), and its last
    width - 1 inputs are present.{state}."""
    padding = next((p for c in attention.cores for p in m.primitives(c.mask)
                    if isinstance(p, m.Padding)), None)
    if state is None:
        args = (x, *(("key_lengths",) if padding is not None else ()))
    else:
        args = (x, f"past_key_values.{state}", "attention_mask")
    common = {"weight": weight, "width": width, "padding": padding,
              "decoding": state is not None, "activation": "residual"}
    if state is not None:
        b.emit(Op.CAUSAL_CONV, f"present.{state}", args, T("B", width - 1, channels),
               part="state", **common)
    return b.emit(Op.CAUSAL_CONV, out, args, T("B", "L", channels), part="output", **common)


MECHANISM = _ResidualConv()
