"""What the recurrent kernels share: kernels with their own projections whose state replaces a
key and a value cache. `Recurrent` (a `base_kernel.Kernel`) holds their checks, their plan on
ONNX Runtime's LinearAttention (`planned`, `form`); the node builders (`projection`, `skipped`,
`convolved_heads`, `recurrent`, `gated_norm`) build their layers from x to the merged heads;
`prepared`, `decayed` (the chunked recurrence with a scalar decay per head and token) and
`decoded` are their arithmetic's common steps over an array namespace."""

from __future__ import annotations

from typing import Any

from .. import ast
from .. import masks as m
from ..ir.graph import Op
from ..shapes import T
from .base import Site
from .base_kernel import Kernel

__all__ = ["CONTRIB", "L2_EPS", "Recurrent", "convolved", "convolved_heads", "decayed",
           "decoded", "gated_norm", "input_bias_refused", "prepared", "projection", "recurrent",
           "refused_keys", "repeat_heads", "scale_refused", "scanned", "skipped"]

Array = Any
CONTRIB = "LinearAttention"  # ONNX Runtime's com.microsoft op (each kernel's strategy lowers it)
L2_EPS = 1e-6  # q and k: x / sqrt(sum(x^2) + 1e-6), as transformers' (and FLA's) l2norm


class Recurrent(Kernel):
    """A recurrent kernel with its own layer: causal self attention without positions, kv
    heads, dropout or the keys of a softmax, a position scheme or another projection form;
    its recurrence ONNX Runtime's LinearAttention where the provider has the kernel, else
    its module's chunked form in standard ops."""

    own_projections = "it has its own projections, while the variants share q, k and v"
    scores = False
    own_layer = True
    lowered = True  # one Scan step per chunk, an If on a decoding call's length
    order = "its order is the recurrence's"  # what orders its tokens instead of positions
    # (the message, the hint) where an attention sets kv_heads
    kv_heads: tuple[str, str] = ("", "")
    # LinearAttention's update rule as the plan says it, and what stays in standard ops
    op_rule = "gated_delta"
    op_rest = "the convolution, gates and norms"

    def value_problems(self, c: Any, value: Any, where: Any) -> list[tuple]:
        """(message, span, hint) of what its own value conflicts with, first."""
        return []

    def key_problems(self, where: Any) -> list[tuple]:
        """(message, span, hint) of the attention keys it refuses beyond the shared ones."""
        return []

    def conflicts(self, c: Any, value: Any, where: Any) -> bool:
        problems = [*self.value_problems(c, value, where),
                    *self.ordered_problems(where, self.described, "keys",
                                           "padding slots skipped", self.order, self.kv_heads),
                    *self.key_problems(where), *refused_keys(where.entries, self.described)]
        for message, span, hint in problems:
            c.error(message, span, hint=hint)
        return bool(problems)

    def planned(self, node: Any, provider: str | None, dtype: str) -> dict:
        """ONNX Runtime's LinearAttention where the provider has its float32 kernel (the node
        runs in float32 whatever the model's dtype: backends/lower/recurrent.py's
        `contrib`); else the standard ops of `run`."""
        from ..targets import has_kernel

        fused = provider is not None and has_kernel(CONTRIB, "float32", provider)
        return {"form": CONTRIB if fused else "ops"}

    def form(self, node: Any) -> tuple[str, tuple[str, ...], tuple]:
        chunk = node.attr("chunk")
        if node.attr("form") == CONTRIB:
            return self.name, (
                f"{self.described} as ONNX Runtime's LinearAttention ({self.op_rule}): the "
                "recurrence carrying the d_k x d_v state per head, from the cached state when "
                f"decoding; {self.op_rest} in standard ops",), (("op", CONTRIB),)
        return self.name, self.chunked(chunk), (("chunk", chunk),)

    def chunked(self, chunk: int) -> tuple[str, ...]:
        """The plan's line for its chunked form in standard ops."""
        raise NotImplementedError


def projection(site: Site, x: str):
    """linear(out, proj, width, bias): the node `proj` (a weight of the layer's) makes of x,
    (B, L, width)."""
    b, p, prefix = site.b, site.p, site.prefix

    def linear(out: str, proj: str, width: int, bias: bool, of: str = x) -> str:
        return b.emit(Op.LINEAR, f"{p}{out}", (of,), T("B", "L", width),
                      weight=f"{prefix}{proj}.weight",
                      bias=f"{prefix}{proj}.bias" if bias else None)

    return linear


def skipped(spec: Any, cache: int | None) -> tuple[tuple, Any]:
    """(the runtime inputs a one-pass kernel node reads to skip padding slots, the mask's
    padding or None): one pass, the mask's padding (key_lengths); decoding, none (its node
    reads attention_mask)."""
    padding = next((x for x in m.primitives(spec.mask) if isinstance(x, m.Padding)), None)
    return () if cache is not None or padding is None else ("key_lengths",), padding


def convolved(site: Site, width: int, parts: tuple[str, ...], channels: int,
              cache: int | None, bias: str | None = None) -> tuple[str, tuple, Any]:
    """(the convolved channels (B, L, channels), the runtime inputs a one-pass kernel node also
    reads, the mask's padding): `parts` side by side through one causal depthwise convolution
    of `width` taps (`conv1d`, plus the weight `bias` if any, silu). Decoding: the convolution
    continues from past_key_values.{cache}.conv and writes its present."""
    b, s, p, prefix = site.b, site.spec, site.p, site.prefix
    skip, padding = skipped(s, cache)
    conv = (*parts, *skip) if cache is None else (*parts, f"past_key_values.{cache}.conv",
                                                   "attention_mask")
    common = {"weight": f"{prefix}conv1d.weight", "width": width, "padding": padding,
              "decoding": cache is not None, "activation": "silu",
              **({"bias": bias} if bias is not None else {})}
    mixed = b.emit(Op.CAUSAL_CONV, f"{p}conv", conv, T("B", "L", channels), part="output",
                   **common)
    if cache is not None:
        b.emit(Op.CAUSAL_CONV, f"present.{cache}.conv", conv, T("B", width - 1, channels),
               part="state", **common)
    return mixed, skip, padding


def convolved_heads(site: Site, width: int, qkv: tuple[str, str, str], key_heads: int,
                    cache: int | None, bias: str | None = None
                    ) -> tuple[tuple[str, str, str], tuple, Any]:
    """((q, k, v) heads, the runtime inputs a one-pass kernel node also reads, the mask's
    padding): q, k and v through one causal depthwise convolution (`convolved`), cut into
    key_heads query and key heads and the layer's value heads."""
    b, s, p = site.b, site.spec, site.p
    dk, heads, dv = s.head_dim, s.heads, s.value_dim
    keys = key_heads * dk
    mixed, skip, padding = convolved(site, width, qkv, 2 * keys + heads * dv, cache, bias)

    def heads_of(out: str, start: int, n: int, dim: int) -> str:
        cols = b.emit(Op.HEAD_SLICE, f"{p}{out}_cols", (mixed,), T("B", "L", n * dim),
                      heads=1, start=start, stop=start + n * dim)
        return b.emit(Op.SPLIT_HEADS, f"{p}{out}", (cols,), T("B", n, "L", dim), heads=n,
                      dim=dim)

    return (heads_of("q_heads", 0, key_heads, dk), heads_of("k_heads", keys, key_heads, dk),
            heads_of("v_heads", 2 * keys, heads, dv)), skip, padding


def recurrent(site: Site, args: tuple, skip: tuple, rule: dict, cache: int | None) -> str:
    """The kernel node (attributes `rule`) on `args` (q, k, v heads and the gates' inputs):
    its outputs (B, heads, L, value_dim); decoding, it also reads
    past_key_values.{cache}.state and writes its present (B, heads, head_dim, value_dim)."""
    b, s, p = site.b, site.spec, site.p
    heads, dk, dv = s.heads, s.head_dim, s.value_dim
    if cache is None:
        return b.emit(Op.KERNEL, f"{p}attn", (*args, *skip), T("B", heads, "L", dv), **rule)
    # the outputs and the final state in one tensor, then apart
    packed = b.emit(Op.KERNEL, f"{p}attn_state", (*args, f"past_key_values.{cache}.state",
                    "attention_mask"), T("B", heads, f"L + {dk}", dv), **rule)
    o = b.emit(Op.ROWS, f"{p}attn", (packed,), T("B", heads, "L", dv), start=0, stop=-dk)
    b.emit(Op.ROWS, f"present.{cache}.state", (packed,), T("B", heads, dk, dv), start=-dk,
           stop=None)
    return o


def gated_norm(site: Site, o: str, gate: str, eps: float, activation: str) -> str:
    """Each head's output RMS-normed (`norm`, eps), merged, times activation(gate)."""
    b, s, p = site.b, site.spec, site.p
    heads, dv = s.heads, s.value_dim
    o = b.emit(Op.NORM, f"{p}normed", (o,), T("B", heads, "L", dv), kind="rmsnorm",
               eps=eps, unit_offset=False, module=f"{site.prefix}norm", bias=False)
    o = b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), T("B", "L", heads * dv))
    g = b.emit(Op.ACTIVATION, f"{p}gate", (gate,), T("B", "L", heads * dv), kind=activation)
    return b.emit(Op.MUL, f"{p}gated", (o, g), T("B", "L", heads * dv))


def scale_refused(where: Any, message: str) -> list[tuple]:
    """(message, span, hint) where the attention sets a `scale` other than auto (a kernel that
    scales nothing), else nothing."""
    e = where.entries
    if "scale" in e and not (isinstance(e["scale"].value, ast.Name)
                             and e["scale"].value.id == "auto"):
        return [(message, where.at("scale"), "remove `scale`")]
    return []


def input_bias_refused(where: Any, message: str) -> list[tuple]:
    """`message` at a `bias` entry naming an input projection (a padding slot's bias would
    reach the convolution; without a `bias` entry, o_proj's default bias alone), or []."""
    if "bias" in where.entries and where.bias and set(where.bias) - {"o"}:
        return [(message, where.at("bias"), "write bias = [o] or bias = false")]
    return []


def refused_keys(e: dict, described: str) -> list[tuple]:
    """(message, span, hint) of each attention key in `e` that a recurrent layer with its own
    projections (`described`) refuses (`_not_with`), unless set to none."""
    return [(f"`{key}` does not apply to {described}: {why}", e[key].key_span,
             f"remove `{key}`") for key, why in _not_with().items()
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto", "false"))]


def _not_with() -> dict[str, str]:
    """The keys whose meaning is a softmax's, a position scheme's, or another projection
    form's, with why (each module's `with_recurrent`)."""
    from . import MECHANISMS, PROJECTIONS, SCORED, SELECTORS

    return {**{key: mech.with_recurrent for key, mech in SCORED.items()},
            "sparsity": "it forms no scores",
            **{key: form.with_recurrent for key, form in PROJECTIONS.items()
               if form.with_recurrent},
            **{key: selector.with_recurrent for key, selector in SELECTORS.items()},
            **{key: mech.with_recurrent for key, mech in MECHANISMS.items()
               if mech.with_recurrent}}


def _l2norm(xp, x: Array) -> Array:
    return x / xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def repeat_heads(xp, x: Array, groups: int) -> Array:
    """(B, h, L, d) -> (B, h * groups, L, d): head i reads head i // groups."""
    if groups == 1:
        return x
    B, h, L, d = (xp.shape(x, i) for i in range(4))
    x5 = xp.reshape(x, [B, h, 1, L, d])
    return xp.reshape(xp.concat([x5] * groups, axis=2), [B, -1, L, d])


def prepared(xp, q: Array, k: Array, v: Array, beta: Array, g: Array, scale: float,
             groups: int, real: Array | None, channels: bool = False) -> tuple[Array, ...]:
    """q, k L2-normed (q times `scale`) and repeated to the value heads, v, and the gates
    (zero at a padding slot where `real` is 0, so it leaves the state as it is), float32;
    `channels`: g is (B, H, L, d_k), a log decay per key channel."""
    if real is not None:
        keep = xp.reshape(real, [xp.shape(real, 0), 1, -1])
        beta = beta * keep
        g = g * (xp.reshape(real, [xp.shape(real, 0), 1, -1, 1]) if channels else keep)
    q = repeat_heads(xp, _l2norm(xp, xp.astype(q, "float32")) * scale, groups)
    k = repeat_heads(xp, _l2norm(xp, xp.astype(k, "float32")), groups)
    return q, k, xp.astype(v, "float32"), beta, g


def decayed(xp, q: Array, k: Array, v: Array, g: Array, chunk: int,
            state: Array | None) -> tuple[Array, Array]:
    """(o (B, H, L, dv), the final state (B, H, dk, dv)), float32, of float32 q, k (B, H, L,
    dk), v (B, H, L, dv) and log decays g (B, H, L), from `state` or zeros:
    S_t = exp(g_t) S_{t-1} + k_t v_t^T and o_t = S_t^T q_t, a step per chunk of C tokens
    (within it, (q k^T * exp(G_i - G_j)) v, G the cumulative log decay from the chunk's start:
    each pair decay at most 1 for g <= 0). Chunks of 1 are the recurrence itself."""
    B, H, L = xp.shape(v, 0), xp.shape(v, 1), xp.shape(v, 2)
    pad = (chunk - L % chunk) % chunk
    q, k, v, g = (xp.pad(t, 2, pad) for t in (q, k, v, g))
    if state is None:
        state = xp.matmul(xp.swap_last(xp.slice(k, 2, 0, 1)), xp.slice(v, 2, 0, 1) * 0.0)
    qc, kc, vc = (xp.reshape(t, [B, H, -1, chunk, xp.shape(t, 3)]) for t in (q, k, v))
    cum = xp.cumsum(xp.reshape(g, [B, H, -1, chunk]), axis=3)
    idx = xp.arange(chunk)
    lower = xp.reshape(idx, [chunk, 1]) >= xp.reshape(idx, [1, chunk])
    ci = xp.reshape(cum, [B, H, -1, chunk, 1])
    zero = xp.asarray(0.0, "float32")
    pair = xp.where(lower, xp.exp(xp.where(lower, ci - xp.reshape(cum, [B, H, -1, 1, chunk]),
                                           zero)), zero)
    attn = xp.matmul(qc, xp.swap_last(kc)) * pair
    last = xp.slice(ci, 3, chunk - 1, chunk)  # (B, H, n, 1, 1)
    qd, kd, cd = qc * xp.exp(ci), kc * xp.exp(last - ci), xp.exp(last)

    def step(s: Array, xs: list[Array]) -> tuple[Array, Array]:
        q_i, a_i, v_i, k_i, c_i = xs
        out = xp.matmul(q_i, s) + xp.matmul(a_i, v_i)
        return s * c_i + xp.matmul(xp.swap_last(k_i), v_i), out

    state, o = xp.scan(step, xp.astype(state, "float32"), [qd, attn, vc, kd, cd], axis=2)
    return xp.slice(xp.reshape(o, [B, H, -1, xp.shape(o, 4)]), 2, 0, L), state


def scanned(xp, scan: Any, inputs: tuple, skip: Array, dtype: str, chunk: int,
            past: Array | None, branch: Any) -> Array:
    """A skip-connected recurrence's kernel output: `scan(xp, q, k, v, g, chunk, state)`
    ((o, final state), `decayed` or a module's own) on `inputs` (q, k, v, g), plus `skip`, in
    `dtype`. One pass (`past` None) its outputs; decoding from `past`, the outputs and the
    final state packed (`decoded`): a call of one token the recurrence itself (chunks of 1),
    else chunks of `chunk`."""
    if past is None:
        return xp.astype(scan(xp, *inputs, chunk, None)[0] + skip, dtype)

    def out(length: int) -> Array:
        o, state = scan(xp, *inputs, length, past)
        return decoded(xp, xp.astype(o + skip, dtype), state)
    return branch(lambda: xp.shape(inputs[0], 2) == 1, (("step", lambda: out(1)),
                                                         ("chunks", lambda: out(chunk))))


def decoded(xp, o: Array, state: Array) -> Array:
    """A decoding call's outputs (B, H, L, dv) and final state (B, H, dk, dv) packed along
    axis 2 in o's dtype: the IR's `rows` take them apart."""
    return xp.concat([o, xp.astype(state, xp.dtype(o))], axis=2)
