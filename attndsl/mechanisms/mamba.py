"""Mamba's selective state-space layer (`kernel = mamba(rank, conv = 4, chunk = 16,
conv_bias = true, norm = none, eps = 1e-6)`; Mamba, Falcon-Mamba and Jamba's mixers), said as
the linear attention it is: each of the layer's d_inner channels a head of key dim N (the state
size) and value dim 1 (`value_dim`; wider values share their head's step and decay). x (the
first half of in_proj's rows) through a causal depthwise convolution and silu; x_proj gives
each token's dt features (rank R), B and C (N each), normed where `norm` says (Falcon-Mamba's
weightless RMSNorms, Jamba's weighted ones); dt = softplus(dt_proj(dt features) + dt_bias) per
head; then per head h the state S_t = exp(dt_t[h] A[h]) * S_{t-1} + B_t (dt_t[h] x_t[h])^T
(row n decaying by exp(dt_t[h] A[h, n])), read by C_t, plus D[h] x_t[h], gated by silu(z)
(in_proj's second half). docs/LANGUAGE.md (Kernels) has the formulas. C, B and dt x are the
recurrence's queries, keys and values with a log decay per head and key channel
(`channel_decayed`: the gated rule with Kimi delta attention's decay, without its delta), so
the recurrent machinery serves it: the chunked form, its one-token step, its states when
decoding, and on ort-cpu ONNX Runtime's LinearAttention (`gated`, a decay per key channel)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Site
from .base_kernel import KernelWhere
from .base_recurrent import (
    Recurrent,
    convolved,
    input_bias_refused,
    projection,
    recurrent,
    scale_refused,
    scanned,
)

__all__ = ["KERNEL", "Mamba", "channel_decayed", "selective_inputs"]

Array = Any
_NORMS = ("none", "weightless", "weighted")


@dataclass(frozen=True)
class Mamba:
    """Mamba's mixer: dt features of `rank`, a causal depthwise convolution of `conv` taps
    (with a bias where `conv_bias`), RMSNorms of dt, B and C as `norm` says (eps `eps`),
    computed in chunks of `chunk` tokens."""

    name: ClassVar[str] = "mamba"
    rank: int
    conv: int = 4
    chunk: int = 16
    conv_bias: bool = True
    norm: str = "none"  # none | weightless (Falcon-Mamba) | weighted (Jamba)
    eps: float = 1e-6


class _Mamba(Recurrent):
    name = "mamba"
    params = (("rank", True), ("conv", False), ("chunk", False), ("conv_bias", False),
              ("norm", False), ("eps", False))
    described = "Mamba"
    attributes = ("chunk", "heads", "weights", "padding", "decoding", "form")
    states = ("conv", "state")
    carries = "a Mamba layer carries a state and a convolution window"
    order = "its state orders them"
    kv_heads = ("Mamba's B and C are shared by every channel, its x has `heads` channels",
                "remove `kv_heads`")
    op_rule = "gated, a decay per head and key channel"
    op_rest = "the projections, convolution, step, skip and gate"

    def read(self, c: Any, args: dict) -> Mamba:
        return Mamba(c.positive(args["rank"], "rank"),
                     c.positive(args["conv"], "conv") if "conv" in args else 4,
                     c.positive(args["chunk"], "chunk") if "chunk" in args else 16,
                     c.boolean(args["conv_bias"], "conv_bias") if "conv_bias" in args
                     else True,
                     c.word(args["norm"], _NORMS, "Mamba's norm") if "norm" in args
                     else "none",
                     c.eps(args, 1e-6, "the dt, B and C norms'"))

    def key_problems(self, where: KernelWhere) -> list[tuple]:
        """A scale (it scales nothing), and biases written on its input projection (a padding
        slot's would reach the convolution)."""
        return [*scale_refused(where, "Mamba scales nothing"), *input_bias_refused(
            where, "Mamba's input projection has no bias here (a padding slot's would reach "
                   "the convolution)")]

    def own_weights(self, s: Any, p: str) -> list:
        """in_proj (x, then z), the convolution over x, x_proj (dt features, B, C), dt_proj
        with its bias, A_log, D and the weighted norms."""
        from ..weight_table import Weight

        k, inner, n = s.kernel, s.heads * s.value_dim, s.head_dim
        out = [Weight(f"{p}in_proj.weight", (2 * inner, s.d_model), "linear", s.d_model),
               Weight(f"{p}conv1d.weight", (inner, 1, k.conv), "linear", k.conv)]
        if k.conv_bias:
            out.append(Weight(f"{p}conv1d.bias", (inner,), "linear_bias", k.conv))
        out += [Weight(f"{p}x_proj.weight", (k.rank + 2 * n, inner), "linear", inner),
                Weight(f"{p}dt_proj.weight", (s.heads, k.rank), "linear", k.rank),
                Weight(f"{p}dt_proj.bias", (s.heads,), "norm_weight"),
                Weight(f"{p}A_log", (s.heads, n), "decay"),
                Weight(f"{p}D", (s.heads,), "norm_weight")]
        if k.norm == "weighted":
            out += [Weight(f"{p}{part}_layernorm.weight", (width,), "norm_weight")
                    for part, width in (("dt", k.rank), ("b", n), ("c", n))]
        return out

    def state_type(self, a: Any, state: str) -> Any:
        """`conv`: the convolution's last conv - 1 inputs (B, conv - 1, heads * value_dim);
        `state`: the recurrence's (B, heads, N, value_dim)."""
        if state == "conv":
            return T("B", a.kernel.conv - 1, a.heads * a.value_dim, dtype="float")
        return T("B", a.heads, a.head_dim, a.value_dim, dtype="float")

    def layer(self, site: Site, kernel: Mamba, x: str, cache: int | None) -> str:
        """The gated output (B, L, d_inner) before o_proj (Mamba's out_proj). Decoding
        (`cache`, the layer's index): the convolution continues from past_key_values.{i}.conv
        and the recurrence from past_key_values.{i}.state; slots whose attention_mask is 0
        change neither."""
        b, s, p, prefix = site.b, site.spec, site.p, site.prefix
        inner, n, rank = s.heads * s.value_dim, s.head_dim, kernel.rank
        linear = projection(site, x)
        both = linear("in", "in_proj", 2 * inner, False)

        def cols(out: str, of: str, start: int, width: int) -> str:
            return b.emit(Op.HEAD_SLICE, f"{p}{out}", (of,), T("B", "L", width), heads=1,
                          start=start, stop=start + width)

        z = cols("z", both, inner, inner)
        mixed, skip, padding = convolved(
            site, kernel.conv, (cols("x_in", both, 0, inner),), inner, cache,
            bias=f"{prefix}conv1d.bias" if kernel.conv_bias else None)
        parts = linear("x_db", "x_proj", rank + 2 * n, False, of=mixed)
        dt, bs, cs = (cols(name, parts, start, width) for name, start, width in (
            ("dt_in", 0, rank), ("B_in", rank, n), ("C_in", rank + n, n)))
        if kernel.norm != "none":  # Falcon-Mamba's weightless, Jamba's weighted
            dt, bs, cs = (b.emit(Op.NORM, f"{p}{name}_normed", (t,), T("B", "L", width),
                                 kind="rmsnorm", eps=kernel.eps, unit_offset=False,
                                 module=f"{prefix}{name}_layernorm", bias=False,
                                 **({} if kernel.norm == "weighted" else {"affine": False}))
                          for name, t, width in (("dt", dt, rank), ("b", bs, n), ("c", cs, n)))
        dt = linear("dt_logits", "dt_proj", s.heads, False, of=dt)

        def heads(name: str, t: str, h: int, dim: int) -> str:
            return b.emit(Op.SPLIT_HEADS, f"{p}{name}", (t,), T("B", h, "L", dim), heads=h,
                          dim=dim)

        rule = {"kernel": self.name, "chunk": kernel.chunk, "heads": s.heads,
                "weights": (f"{prefix}A_log", f"{prefix}dt_proj.bias", f"{prefix}D"),
                "padding": padding, "decoding": cache is not None, "form": "ops"}
        o = recurrent(site, (heads("q_heads", cs, 1, n), heads("k_heads", bs, 1, n),
                             heads("v_heads", mixed, s.heads, s.value_dim), dt), skip, rule,
                       cache)
        o = b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), T("B", "L", inner))
        gate = b.emit(Op.ACTIVATION, f"{p}gate", (z,), T("B", "L", inner), kind="silu")
        return b.emit(Op.MUL, f"{p}gated", (o, gate), T("B", "L", inner))

    def chunked(self, chunk: int) -> tuple[str, ...]:
        return (f"Mamba's scan in chunks of {chunk}: one Scan step per chunk carrying the N "
                f"state per channel, its pair decays ({chunk} x {chunk} x N per channel) formed "
                "in the step (when decoding: from the cached state and convolution window)",)

    def run(self, xp: Any, args: list, tensors: list, real: Any, branch: Any, *,
            chunk: int, heads: int, weights: tuple[str, ...], padding: Any, decoding: bool,
            form: str) -> Any:
        """C and B (B, 1, L, N), x (B, H, L, P), the dt logits (B, L, H) (decoding: the past
        state after them), with A_log, dt_bias and D; one pass the outputs (B, H, L, P),
        decoding the outputs and the final state packed (`decoded`). (A `form` other than
        `ops` is its strategy's lowering, strategies/mamba.py.)"""
        q, k, v, g, skip = selective_inputs(xp, *args[:4], *tensors, real())
        return scanned(xp, channel_decayed, (q, k, v, g), skip, xp.dtype(args[2]), chunk,
                       args[4] if decoding else None, branch)


def selective_inputs(xp, c: Array, b: Array, x: Array, dt_logits: Array, a_log: Array,
                     dt_bias: Array, d: Array, real: Array | None) -> tuple[Array, ...]:
    """float32 (q, k, v, g, skip): C and B (B, 1, L, N) as they are, x (B, H, L, P) times dt,
    the log decay g = dt A (B, H, L, N) with dt = softplus(dt_logits + dt_bias) (B, H, L) and
    A = -exp(A_log) (H, N), and the skip D x; at a slot where `real` (B, L) is 0 (padding) the
    key and g are 0, so the state passes it unchanged."""
    f = "float32"
    dt = xp.swap_last(xp.softplus(xp.astype(dt_logits, f) + xp.astype(dt_bias, f)))  # (B, I, L)
    dt4 = xp.reshape(dt, [xp.shape(dt, 0), xp.shape(dt, 1), -1, 1])
    a = -xp.exp(xp.astype(a_log, f))  # (I, N)
    g = dt4 * xp.reshape(a, [1, xp.shape(a, 0), 1, xp.shape(a, 1)])
    xf = xp.astype(x, f)
    skip = xf * xp.reshape(xp.astype(d, f), [1, -1, 1, 1])
    k = xp.astype(b, f)
    if real is not None:
        keep = xp.reshape(real, [xp.shape(real, 0), 1, -1, 1])
        g, k = g * keep, k * keep
    return xp.astype(c, f), k, xf * dt4, g, skip


def channel_decayed(xp, q: Array, k: Array, v: Array, g: Array, chunk: int,
                    state: Array | None) -> tuple[Array, Array]:
    """(o (B, H, L, dv), the final state (B, H, dk, dv)), float32, of float32 q, k (B, 1 | H,
    L, dk) (one head serves all), v (B, H, L, dv) and log decays per key channel g (B, H, L,
    dk), from `state` or zeros: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t.
    A step per chunk of C tokens: within it o_i = (q_i * e^{G_i}) S + sum_{j <= i}
    (sum_d q_i[d] k_j[d] e^{G_i[d] - G_j[d]}) v_j, G the cumulative log decay from the
    chunk's start (each pair decay at most 1 for g <= 0), the pair decays (C, C, dk) per head
    formed in the step. Chunks of 1 are the recurrence itself."""
    B, H, L = xp.shape(v, 0), xp.shape(v, 1), xp.shape(v, 2)
    pad = (chunk - L % chunk) % chunk  # padded tokens: k = v = g = 0, no update
    q, k, v, g = (xp.pad(t, 2, pad) for t in (q, k, v, g))
    if state is None:  # zeros (B, H, dk, dv): the decays' first token against v's, times 0
        state = xp.matmul(xp.swap_last(xp.slice(g, 2, 0, 1)), xp.slice(v, 2, 0, 1) * 0.0)
    qc, kc, vc, gc = (xp.reshape(t, [xp.shape(t, 0), xp.shape(t, 1), -1, chunk, xp.shape(t, 3)])
                      for t in (q, k, v, g))
    cum = xp.cumsum(gc, axis=3)  # (B, H, n, C, dk)
    idx = xp.arange(chunk)
    lower = xp.reshape(xp.reshape(idx, [chunk, 1]) >= xp.reshape(idx, [1, chunk]),
                       [chunk, chunk, 1])
    zero = xp.asarray(0.0, "float32")

    def step(s: Array, xs: list[Array]) -> tuple[Array, Array]:
        q_i, k_i, v_i, c_i = xs  # q_i, k_i (B, 1 | H, C, dk); v_i (B, H, C, dv); c_i (B, H, C, dk)
        b_, h_, d = xp.shape(c_i, 0), xp.shape(c_i, 1), xp.shape(c_i, 3)
        rows = xp.reshape(c_i, [b_, h_, chunk, 1, d])
        pair = xp.where(lower, xp.exp(xp.where(lower, rows - xp.reshape(c_i, [b_, h_, 1, chunk, d]),
                                               zero)), zero)  # (B, H, C, C, dk)
        qk = xp.reshape(q_i, [b_, xp.shape(q_i, 1), chunk, 1, d]) * \
            xp.reshape(k_i, [b_, xp.shape(k_i, 1), 1, chunk, d])
        attn = xp.sum(qk * pair, axis=-1)  # (B, H, C, C)
        out = xp.matmul(q_i * xp.exp(c_i), s) + xp.matmul(attn, v_i)
        last = xp.slice(c_i, 2, chunk - 1, chunk)  # (B, H, 1, dk)
        s = s * xp.swap_last(xp.exp(last)) + xp.matmul(xp.swap_last(k_i * xp.exp(last - c_i)),
                                                       v_i)
        return s, out

    state, o = xp.scan(step, xp.astype(state, "float32"), [qc, kc, vc, cum], axis=2)
    return xp.slice(xp.reshape(o, [B, H, -1, xp.shape(o, 4)]), 2, 0, L), state


KERNEL = _Mamba()
