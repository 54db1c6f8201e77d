"""Mamba2's state-space layer (`kernel = mamba2(groups = 1, conv = 4, chunk = 64, eps = 1e-5,
dt_min = 0, dt_max = none, conv_bias = true)`, the SSD form of Mamba2, Bamba, Granite 4's and
Nemotron-H's mixers), said as the linear attention it is: a causal depthwise convolution (with
its bias) and silu on x, B and C, a step dt = softplus(dt + dt_bias) per head and token, and
per head the state S_t = exp(dt_t A) S_{t-1} + B_t (dt_t x_t)^T read by C_t, plus D x_t; then
the output gated by silu(z) and RMS-normed per group. docs/LANGUAGE.md (Kernels) has the
formulas. C, B and x are the recurrence's queries, keys and values (heads of head_dim = the
state size N and value_dim = Mamba's head_dim P), so the lightning machinery serves it: the
chunked form with a decay per token (`base_recurrent.decayed`), its one-token step, its state
when decoding, and on ort-cpu and ort-cuda ONNX Runtime's LinearAttention (`gated`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Site
from .base_kernel import KernelWhere
from .base_recurrent import (
    Recurrent,
    convolved_heads,
    decayed,
    input_bias_refused,
    projection,
    recurrent,
    repeat_heads,
    scale_refused,
    scanned,
)

__all__ = ["KERNEL", "Mamba2", "ssd_inputs"]

Array = Any
_NORMS = ("after_gate", "before_gate", "none")


@dataclass(frozen=True)
class Mamba2:
    """Mamba2's mixer: `groups` groups of B and C (each serving heads / groups heads), a causal
    depthwise convolution of `conv` taps (with a bias where `conv_bias`), dt clamped to
    [dt_min, dt_max] (None: no upper bound), the gate and an RMSNorm (eps `eps`) per group in
    the order `norm` says (after_gate: Mamba2's; before_gate, none: Falcon-H1's); computed in
    chunks of `chunk` tokens."""

    name: ClassVar[str] = "mamba2"
    groups: int
    conv: int
    chunk: int
    eps: float
    dt_min: float
    dt_max: float | None
    conv_bias: bool
    norm: str = "after_gate"  # after_gate | before_gate | none


class _Mamba2(Recurrent):
    name = "mamba2"
    params = (("groups", False), ("conv", False), ("chunk", False), ("eps", False),
              ("dt_min", False), ("dt_max", False), ("conv_bias", False), ("norm", False))
    described = "Mamba2"
    attributes = ("chunk", "heads", "groups", "dt_min", "dt_max", "weights", "padding", "decoding",
                  "form")
    states = ("conv", "state")
    carries = "a Mamba2 layer carries a state and a convolution window"
    order = "its state orders them"
    kv_heads = ("Mamba2's B and C come in `groups` groups, its x in `heads` heads",
                "remove `kv_heads`; write mamba2(groups = n)")
    op_rule = "gated, a decay per head and token"
    op_rest = "the projections, convolution, step, skip and gated norm"

    def read(self, c: Any, args: dict) -> Mamba2:
        from .. import ast

        eps = c.eps(args, 1e-5, "the gated norm's")
        dt_min = c.number(args["dt_min"]) if "dt_min" in args else 0.0
        if not 0.0 <= dt_min < math.inf:
            raise c.error(f"dt_min must be a number >= 0, found {dt_min:g}", args["dt_min"].span)
        dt_max = None
        if "dt_max" in args and not (isinstance(args["dt_max"], ast.Name)
                                     and args["dt_max"].id == "none"):
            dt_max = c.number(args["dt_max"])
            if not dt_min < dt_max < math.inf:
                raise c.error(f"dt_max must be a number above dt_min ({dt_min:g}), found "
                              f"{dt_max:g}", args["dt_max"].span,
                              hint="write dt_max = none for no upper bound")
        return Mamba2(c.positive(args["groups"], "groups") if "groups" in args else 1,
                      c.positive(args["conv"], "conv") if "conv" in args else 4,
                      c.positive(args["chunk"], "chunk") if "chunk" in args else 64, eps,
                      dt_min, dt_max,
                      c.boolean(args["conv_bias"], "conv_bias") if "conv_bias" in args
                      else True,
                      c.word(args["norm"], _NORMS, "Mamba2's norm") if "norm" in args
                      else "after_gate")

    def value_problems(self, c: Any, kernel: Mamba2, where: KernelWhere) -> list[tuple]:
        """Its groups divide its heads."""
        from ..check.kernels import arg_span

        if not where.heads % kernel.groups:
            return []
        return [(f"each of the {kernel.groups} groups of B and C serves heads / groups heads: "
                 f"heads ({where.heads}) must be a multiple of it",
                 arg_span(where.entries["kernel"].value, "groups") or where.at("kernel"),
                 "Nemotron-H: heads = 128, groups = 8")]

    def key_problems(self, where: KernelWhere) -> list[tuple]:
        """A scale (it scales nothing), and biases written on its input projections (a padding
        slot's would leak into the convolution; without a `bias` entry, o_proj's default
        bias alone)."""
        return [*scale_refused(where, "Mamba2 scales nothing"), *input_bias_refused(
            where, "Mamba2's input projections have no bias here (a padding slot's would "
                   "reach the convolution)")]

    def own_weights(self, s: Any, p: str) -> list:
        """Its projections (Mamba2's in_proj split as z, x, B, C, dt), convolution over C, B
        and x, dt_bias, A_log, D and the gated norm's weight."""
        from ..weight_table import Weight

        k = s.kernel
        inner, keys = s.heads * s.value_dim, k.groups * s.head_dim
        out = [Weight(f"{p}{proj}_proj.weight", (rows, s.d_model), "linear", s.d_model)
               for proj, rows in (("z", inner), ("x", inner), ("B", keys), ("C", keys),
                                  ("dt", s.heads))]
        width = 2 * keys + inner
        out.append(Weight(f"{p}conv1d.weight", (width, 1, k.conv), "linear", k.conv))
        if k.conv_bias:
            out.append(Weight(f"{p}conv1d.bias", (width,), "linear_bias", k.conv))
        return [*out, Weight(f"{p}dt_bias", (s.heads,), "norm_weight"),
                Weight(f"{p}A_log", (s.heads,), "decay"),
                Weight(f"{p}D", (s.heads,), "norm_weight"),
                *([Weight(f"{p}norm.weight", (inner,), "norm_weight")]
                  if k.norm != "none" else [])]

    def state_type(self, a: Any, state: str) -> Any:
        """`conv`: the convolution's last conv - 1 inputs (B, conv - 1, C, B and x widths);
        `state`: the recurrence's (B, heads, head_dim = N, value_dim = P)."""
        if state == "conv":
            width = 2 * a.kernel.groups * a.head_dim + a.heads * a.value_dim
            return T("B", a.kernel.conv - 1, width, dtype="float")
        return T("B", a.heads, a.head_dim, a.value_dim, dtype="float")

    def layer(self, site: Site, kernel: Mamba2, x: str, cache: int | None) -> str:
        """The gated, group-normed output (B, L, heads * value_dim) before o_proj (Mamba2's
        out_proj). Decoding (`cache`, the layer's index): the convolution continues from
        past_key_values.{i}.conv and the recurrence from past_key_values.{i}.state; slots
        whose attention_mask is 0 change neither."""
        b, s, p, prefix = site.b, site.spec, site.p, site.prefix
        inner, keys = s.heads * s.value_dim, kernel.groups * s.head_dim
        linear = projection(site, x)
        z = linear("z", "z_proj", inner, False)
        xs = linear("x_in", "x_proj", inner, False)
        bs = linear("B_in", "B_proj", keys, False)
        cs = linear("C_in", "C_proj", keys, False)
        dt = linear("dt_logits", "dt_proj", s.heads, False)
        (ch, bh, xh), skip, padding = convolved_heads(
            site, kernel.conv, (cs, bs, xs), kernel.groups, cache,
            bias=f"{prefix}conv1d.bias" if kernel.conv_bias else None)
        rule = {"kernel": self.name, "chunk": kernel.chunk, "heads": s.heads,
                "groups": kernel.groups,
                "dt_min": kernel.dt_min, "dt_max": kernel.dt_max,
                "weights": (f"{prefix}A_log", f"{prefix}dt_bias", f"{prefix}D"),
                "padding": padding, "decoding": cache is not None, "form": "ops"}
        o = recurrent(site, (ch, bh, xh, dt), skip, rule, cache)
        o = b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), T("B", "L", inner))
        gate = b.emit(Op.ACTIVATION, f"{p}gate", (z,), T("B", "L", inner), kind="silu")
        if kernel.norm == "before_gate":  # (Falcon-H1's: normed, then gated)
            return b.emit(Op.MUL, f"{p}gated", (_group_norm(site, kernel, o, inner), gate),
                          T("B", "L", inner))
        o = b.emit(Op.MUL, f"{p}gated", (o, gate), T("B", "L", inner))
        return o if kernel.norm == "none" else _group_norm(site, kernel, o, inner)

    def chunked(self, chunk: int) -> tuple[str, ...]:
        return (f"Mamba2's scan in chunks of {chunk}: each chunk's products at once (O(L x "
                f"{chunk} x d)), one Scan step per chunk carrying the N x P state per head (when "
                "decoding: from the cached state and convolution window)",)

    def run(self, xp: Any, args: list, tensors: list, real: Any, branch: Any, *,
            chunk: int, heads: int, groups: int, dt_min: float, dt_max: float | None,
            weights: tuple[str, ...], padding: Any, decoding: bool, form: str) -> Any:
        """C, B, x heads and the dt logits (decoding: the past state after them), with A_log,
        dt_bias and D; one pass the outputs (B, H, L, P), decoding the outputs and the final
        state packed (`decoded`). (A `form` other than `ops` is its strategy's lowering,
        strategies/mamba2.py.)"""
        q, k, v, g, skip = ssd_inputs(xp, *args[:4], *tensors, heads // groups, dt_min,
                                      dt_max, real())
        return scanned(xp, decayed, (q, k, v, g), skip, xp.dtype(args[2]), chunk,
                       args[4] if decoding else None, branch)


def ssd_inputs(xp, c: Array, b: Array, x: Array, dt_logits: Array, a_log: Array,
               dt_bias: Array, d: Array, repeat: int, dt_min: float, dt_max: float | None,
               real: Array | None) -> tuple[Array, ...]:
    """float32 (q, k, v, g, skip): C and B (B, G, L, N) each repeated `repeat` = H / G times
    to the heads (head h reads group h // repeat), x (B, H, L, P) times dt, the log decay
    g = dt A (B, H, L) with dt = clamp(softplus(dt_logits + dt_bias), dt_min, dt_max) and
    A = -exp(A_log), and the skip D x; at a slot where `real` (B, L) is 0 (padding) the key
    and g are 0, so the state passes it unchanged."""
    f = "float32"
    dt = xp.softplus(xp.astype(dt_logits, f) + xp.astype(dt_bias, f))  # (B, L, H)
    if dt_min > 0:
        dt = xp.maximum(dt, dt_min)
    if dt_max is not None:
        dt = xp.minimum(dt, dt_max)
    dt = xp.swap_last(dt)  # (B, H, L)
    g = dt * xp.reshape(-xp.exp(xp.astype(a_log, f)), [1, -1, 1])
    xf = xp.astype(x, f)
    v = xf * xp.reshape(dt, [xp.shape(dt, 0), xp.shape(dt, 1), -1, 1])
    skip = xf * xp.reshape(xp.astype(d, f), [1, -1, 1, 1])
    q = repeat_heads(xp, xp.astype(c, f), repeat)
    k = repeat_heads(xp, xp.astype(b, f), repeat)
    if real is not None:
        g = g * xp.reshape(real, [xp.shape(real, 0), 1, -1])
        k = k * xp.reshape(real, [xp.shape(real, 0), 1, -1, 1])
    return q, k, v, g, skip


def _group_norm(site: Site, kernel: Mamba2, o: str, inner: int) -> str:
    """o RMS-normed over each group's inner / groups channels, times `norm.weight`."""
    b, p, size = site.b, site.p, inner // kernel.groups
    o = b.emit(Op.SPLIT_HEADS, f"{p}groups", (o,), T("B", kernel.groups, "L", size),
               heads=kernel.groups, dim=size)
    o = b.emit(Op.NORM, f"{p}group_normed", (o,), T("B", kernel.groups, "L", size),
               kind="rmsnorm", eps=kernel.eps, unit_offset=False, module=f"{site.prefix}norm",
               bias=False, affine=False)
    o = b.emit(Op.MERGE_HEADS, f"{p}normed", (o,), T("B", "L", inner))
    return b.emit(Op.SCALE, f"{p}weighted", (o,), T("B", "L", inner), factor=1.0,
                  weight=f"{site.prefix}norm.weight")


KERNEL = _Mamba2()
