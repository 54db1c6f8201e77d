"""Lightning attention (`kernel = lightning(layers = none, eps = 1e-6, chunk = 64)`,
MiniMax-Text-01's linear layers): silu'd q, k and v projections, linear attention whose state
decays by a fixed rate per head (ALiBi's slopes, scaled down with the layer's depth), an
RMSNorm over the merged heads and a sigmoid gate of its own projection on its output.
docs/LANGUAGE.md (Kernels) has the formulas. A kernel module (`base_kernel.Kernel`) with its
own layer: value, checks, nodes from x to the gated heads, weights, decoding state and
arithmetic over the array namespace (its chunked form, and the recurrence for one token); on
ort-cpu its strategy runs the recurrence as ONNX Runtime's LinearAttention (`gated`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from ..ir.graph import Op
from ..shapes import T
from .base import Site
from .base_kernel import KernelWhere
from .base_recurrent import (
    Recurrent,
    decayed,
    decoded,
    projection,
    recurrent,
    scale_refused,
    skipped,
)

__all__ = ["KERNEL", "Lightning", "gated_recurrence", "gates", "slopes"]

Array = Any


@dataclass(frozen=True)
class Lightning:
    """Lightning attention: each head's state decays by exp(-rate) per token, the rates
    2^(-8 (h + 1) / heads), times 1 - l / (layers - 1 + 1e-5) + 1e-5 at block l of a stack of
    `layers` where set; an RMSNorm (eps `eps`) over the merged heads and a sigmoid gate;
    computed in chunks of `chunk` tokens."""

    name: ClassVar[str] = "lightning"
    layers: int | None
    eps: float
    chunk: int


def slopes(heads: int, layer: int, layers: int | None) -> tuple[float, ...]:
    """Each head's decay rate (MiniMax's get_slope_rate): ALiBi's slopes, scaled down with the
    depth where the stack's layer count is given."""
    base = 1 / 2 ** (8 / heads)
    factor = 1.0 if layers is None else 1 - layer / (layers - 1 + 1e-5) + 1e-5
    return tuple(base ** (h + 1) * factor for h in range(heads))


class _Lightning(Recurrent):
    name = "lightning"
    params = (("layers", False), ("eps", False), ("chunk", False))
    described = "lightning attention"
    attributes = ("chunk", "heads", "layer", "layers", "weights", "padding", "decoding",
                  "form")
    states = ("state",)
    carries = "a lightning attention layer carries a state"
    order = "its decay orders them"
    kv_heads = ("lightning attention has as many key and value heads as query heads",
                "remove `kv_heads`")
    op_rule = "gated, a decay per head"
    op_rest = "the projections, norm and gate"

    def read(self, c: Any, args: dict) -> Lightning:

        eps = c.eps(args, 1e-6, "the norm's")
        layers = None
        if "layers" in args and not (isinstance(args["layers"], ast.Name)
                                     and args["layers"].id == "none"):
            layers = c.positive(args["layers"], "layers")
        return Lightning(layers, eps, c.positive(args["chunk"], "chunk") if "chunk" in args
                         else 64)

    def key_problems(self, where: KernelWhere) -> list[tuple]:
        """A scale: its queries are not scaled."""
        return scale_refused(where, "lightning attention does not scale its queries")

    def stack_problem(self, kernel: Lightning, layers: int) -> tuple[str, str] | None:
        """Its `layers` counts the stack's blocks: fewer would make the last blocks' rates
        negative (a state that grows)."""
        if kernel.layers is not None and kernel.layers < layers:
            return (f"lightning attention's rates fall with the depth over `layers = "
                    f"{kernel.layers}` blocks, and this stack has {layers}: the last ones' "
                    "would be negative", f"write lightning(layers = {layers})")
        return None

    def own_weights(self, s: Any, p: str) -> list:
        """Its q, k, v and gate projections and its norm (MiniMax's qkv_proj split per head,
        its gate, norm)."""
        from ..weight_table import Weight

        keys, values = s.heads * s.head_dim, s.heads * s.value_dim
        out = []
        for proj, rows, bias in (("q", keys, "q" in s.bias), ("k", keys, "k" in s.bias),
                                 ("v", values, "v" in s.bias), ("g", values, False)):
            out.append(Weight(f"{p}{proj}_proj.weight", (rows, s.d_model), "linear",
                              s.d_model))
            if bias:
                out.append(Weight(f"{p}{proj}_proj.bias", (rows,), "linear_bias", s.d_model))
        return [*out, Weight(f"{p}norm.weight", (values,), "norm_weight")]

    def state_type(self, a: Any, state: str) -> Any:
        """The recurrence's state (B, heads, head_dim, value_dim)."""
        return T("B", a.heads, a.head_dim, a.value_dim, dtype="float")

    def layer(self, site: Site, kernel: Lightning, x: str, cache: int | None) -> str:
        """The gated, normed heads (B, L, heads * value_dim) before o_proj. Decoding (`cache`,
        the layer's index): the recurrence continues from past_key_values.{i}.state and
        writes its present; slots whose attention_mask is 0 change nothing, as in one pass
        those a `padding` in the mask hides."""
        b, s, p = site.b, site.spec, site.p
        heads, dk, dv = s.heads, s.head_dim, s.value_dim
        linear = projection(site, x)
        parts = []
        for part, dim in (("q", dk), ("k", dk), ("v", dv)):
            y = linear(part, f"{part}_proj", heads * dim, part in s.bias)
            y = b.emit(Op.ACTIVATION, f"{p}{part}_act", (y,), T("B", "L", heads * dim),
                       kind="silu")
            parts.append(b.emit(Op.SPLIT_HEADS, f"{p}{part}_heads", (y,),
                                T("B", heads, "L", dim), heads=heads, dim=dim))
        skip, padding = skipped(s, cache)
        rule = {"kernel": self.name, "chunk": kernel.chunk, "heads": heads,
                "layer": site.layer, "layers": kernel.layers, "weights": (),
                "padding": padding, "decoding": cache is not None, "form": "ops"}
        o = recurrent(site, tuple(parts), skip, rule, cache)
        o = b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), T("B", "L", heads * dv))
        o = b.emit(Op.NORM, f"{p}normed", (o,), T("B", "L", heads * dv), kind="rmsnorm",
                   eps=kernel.eps, unit_offset=False, module=f"{site.prefix}norm", bias=False)
        gate = linear("g_logits", "g_proj", heads * dv, False)
        gate = b.emit(Op.ACTIVATION, f"{p}gate", (gate,), T("B", "L", heads * dv),
                      kind="sigmoid")
        return b.emit(Op.MUL, f"{p}gated", (o, gate), T("B", "L", heads * dv))

    def chunked(self, chunk: int) -> tuple[str, ...]:
        return (f"lightning attention in chunks of {chunk}: each chunk's products at once (O(L "
                f"x {chunk} x d)), one Scan step per chunk carrying the d_k x d_v state per head "
                "(when decoding: from the cached state)",)

    def run(self, xp: Any, args: list, tensors: list, real: Any, branch: Any, *,
            chunk: int, heads: int, layer: int, layers: int | None, weights: tuple,
            padding: Any, decoding: bool, form: str) -> Any:
        """q, k, v heads (decoding: the past state after them); one pass the outputs (B, H,
        L, dv), decoding the outputs and the final state packed (`decoded`). (A `form` other
        than `ops` is its strategy's lowering, strategies/lightning.py.)"""
        q, k, v = args[:3]
        rates, tokens = slopes(heads, layer, layers), real()
        if not decoding:
            return gated_recurrence(xp, q, k, v, rates, chunk, None, tokens)[0]
        state = args[3]
        return branch(lambda: xp.shape(q, 2) == 1, (
            ("step", lambda: decoded(xp, *gated_recurrence(xp, q, k, v, rates, 1, state,
                                                           tokens))),
            ("chunks", lambda: decoded(xp, *gated_recurrence(xp, q, k, v, rates, chunk, state,
                                                             tokens)))))


def gates(xp, q: Array, rates: tuple[float, ...], real: Array | None) -> tuple[Array, Any]:
    """(the log decay g (B, H, L) float32: -rate of the head at each token, 0 at a padding
    slot, where `real` (B, L) is 0; the (B, 1, L, 1) factor that zeroes a padding slot's key,
    or None): such a slot leaves the state as it is."""
    ones = xp.reshape(xp.slice(q, 3, 0, 1), [xp.shape(q, 0), xp.shape(q, 1), -1]) * 0.0 + 1.0
    g = ones * xp.reshape(xp.asarray([-r for r in rates], "float32"), [1, -1, 1])
    if real is None:
        return g, None
    return g * xp.reshape(real, [xp.shape(real, 0), 1, -1]), xp.reshape(
        real, [xp.shape(real, 0), 1, -1, 1])


def gated_recurrence(xp, q: Array, k: Array, v: Array, rates: tuple[float, ...], chunk: int,
                     state: Array | None = None,
                     real: Array | None = None) -> tuple[Array, Array]:
    """(o (B, H, L, dv) in v's dtype, the final state (B, H, dk, dv) float32) of q, k (B, H,
    L, dk) and v (B, H, L, dv), from `state` or zeros: S_t = exp(g_t) S_{t-1} + k_t v_t^T and
    o_t = S_t^T q_t with g_t = -rate (`gates`), a step per chunk of C tokens (`decayed`).
    Chunks of 1 are the recurrence itself (a decoding step)."""
    dtype = xp.dtype(v)
    q, k, v = (xp.astype(t, "float32") for t in (q, k, v))
    g, keep = gates(xp, q, rates, real)
    if keep is not None:
        k = k * keep
    o, state = decayed(xp, q, k, v, g, chunk, state)
    return xp.astype(o, dtype), state


KERNEL = _Lightning()
