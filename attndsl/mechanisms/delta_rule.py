"""The gated delta rule (`kernel = delta_rule(key_heads, conv = 4, chunk = 64, eps = 1e-6)`,
Gated DeltaNet as in Qwen3-Next's linear-attention layers): q, k and v projections through one
causal depthwise convolution, L2-normed q and k of `key_heads` heads (each serving heads /
key_heads value heads), per-head beta and decay gates, the delta-rule recurrence over the
tokens in chunks of `chunk`, a gated RMSNorm. docs/LANGUAGE.md (Kernels) has the formulas. A
kernel module (`base_kernel.Kernel`) with its own projections: its value, checks, nodes from x to
the gated heads, weights, decoding states and arithmetic (`delta_rule_chunks`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from .. import ast
from .. import masks as m
from ..ir.graph import Op
from ..shapes import T
from .base import Site
from .base_kernel import Kernel, KernelWhere
from .delta_rule_chunks import decoded, delta_gates, delta_step, recurrence

__all__ = ["CONTRIB", "KERNEL", "DeltaRule"]

CONTRIB = "LinearAttention"  # ONNX Runtime's com.microsoft op (strategies/delta_rule.py)


@dataclass(frozen=True)
class DeltaRule:
    """Gated delta-rule linear attention (Gated DeltaNet, Qwen3-Next's linear layers): a
    causal depthwise convolution of width `conv` on q, k and v, L2-normed q and k of
    `key_heads` heads (each serving heads / key_heads value heads), per-head beta and decay
    gates, the delta-rule state update, computed in chunks of `chunk` tokens; a gated RMSNorm
    (eps `eps`) on its output."""

    name: ClassVar[str] = "delta_rule"
    key_heads: int
    conv: int
    chunk: int
    eps: float


class _DeltaRule(Kernel):
    name = "delta_rule"
    params = (("key_heads", False), ("conv", False), ("chunk", False), ("eps", False))
    described = "the delta rule"
    own_projections = "it has its own projections, while the variants share q, k and v"
    scores = False
    attributes = ("chunk", "scale", "groups", "weights", "padding", "decoding", "form")
    own_layer = True
    states = ("conv", "state")
    carries = "a delta-rule layer carries a state and a convolution window"
    lowered = True  # one Scan step per chunk, an If on a decoding call's length
    # (the message, the hint) where an attention sets kv_heads
    kv_heads = ("the delta rule's value heads are its heads; its query and key heads are the "
                "kernel's `key_heads`", "remove `kv_heads`; write delta_rule(key_heads = n)")

    def read(self, c: Any, args: dict) -> DeltaRule:
        """key_heads 0: as many as heads (`resolve`, with the layer)."""
        from ..check.values import FLOAT32_TINY

        eps = c.number(args["eps"]) if "eps" in args else 1e-6
        if not FLOAT32_TINY <= eps <= 1.0:
            raise c.error(f"the gated norm's eps must be in [{FLOAT32_TINY:.3g}, 1], "
                          f"found {eps:g}", args["eps"].span)
        return DeltaRule(
            c.positive(args["key_heads"], "key_heads") if "key_heads" in args else 0,
            c.positive(args["conv"], "conv") if "conv" in args else 4,
            c.positive(args["chunk"], "chunk") if "chunk" in args else 64, eps)

    def resolve(self, kernel: DeltaRule, where: KernelWhere) -> DeltaRule:
        return replace(kernel, key_heads=kernel.key_heads or where.heads)

    def conflicts(self, c: Any, kernel: DeltaRule, where: KernelWhere) -> bool:
        """Its key heads divide its heads; it is causal self attention without positions,
        kv heads, dropout, or the keys of a softmax, a position scheme or another projection
        form (`_not_with`)."""
        from ..check.kernels import arg_span

        e, at, heads = where.entries, where.at, where.heads
        failed = False
        key_heads = kernel.key_heads or heads
        if heads % key_heads:
            c.error(f"each of the {key_heads} key heads serves heads / key_heads value "
                    f"heads: heads ({heads}) must be a multiple of it",
                    arg_span(e["kernel"].value, "key_heads") or at("kernel"),
                    hint="Qwen3-Next: heads = 32, key_heads = 16")
            failed = True
        problems = self.ordered_problems(where, self.described, "keys",
                                         "padding slots skipped",
                                         "its order is the recurrence's", self.kv_heads)
        problems += refused_keys(e, self.described)
        for message, span, hint in problems:
            c.error(message, span, hint=hint)
        return failed or bool(problems)

    def own_weights(self, s: Any, p: str) -> list:
        """Its projections, convolution, gates and gated norm (Qwen3-Next's
        Qwen3NextGatedDeltaNet, its fused in_proj_qkvz / in_proj_ba split per tensor)."""
        from ..weight_table import Weight

        keys, values = s.kernel.key_heads * s.head_dim, s.heads * s.value_dim
        out = []
        for proj, rows, bias in (("q", keys, "q" in s.bias), ("k", keys, "k" in s.bias),
                                 ("v", values, "v" in s.bias), ("z", values, False),
                                 ("b", s.heads, False), ("a", s.heads, False)):
            out.append(Weight(f"{p}{proj}_proj.weight", (rows, s.d_model), "linear",
                              s.d_model))
            if bias:
                out.append(Weight(f"{p}{proj}_proj.bias", (rows,), "linear_bias", s.d_model))
        return [*out,
                Weight(f"{p}conv1d.weight", (2 * keys + values, 1, s.kernel.conv), "linear",
                       s.kernel.conv),
                Weight(f"{p}dt_bias", (s.heads,), "norm_weight"),
                Weight(f"{p}A_log", (s.heads,), "decay"),
                Weight(f"{p}norm.weight", (s.value_dim,), "norm_weight")]

    def state_type(self, a: Any, state: str) -> Any:
        """`conv`: the convolution's last conv - 1 inputs (B, conv - 1, q, k and v widths);
        `state`: the recurrence's (B, heads, head_dim, value_dim)."""
        if state == "conv":
            width = 2 * a.kernel.key_heads * a.head_dim + a.heads * a.value_dim
            return T("B", a.kernel.conv - 1, width, dtype="float")
        return T("B", a.heads, a.head_dim, a.value_dim, dtype="float")

    def layer(self, site: Site, kernel: DeltaRule, x: str, cache: int | None) -> str:
        """The merged heads (B, L, heads * value_dim) before o_proj: each value head's
        recurrence output, RMS-normed per head and gated by silu(z). Decoding (`cache`, the
        layer's index): the convolution continues from past_key_values.{i}.conv (the last
        conv - 1 inputs) and the recurrence from past_key_values.{i}.state (B, heads,
        head_dim, value_dim); both presents are written, and slots whose attention_mask is 0
        change neither, as in one pass those a `padding` in the mask hides (key_lengths)."""
        s, prefix = site.spec, site.prefix
        key_heads, heads = kernel.key_heads, s.heads
        keys, values = key_heads * s.head_dim, heads * s.value_dim
        linear = projection(site, x)
        q = linear("q", "q_proj", keys, "q" in s.bias)
        k = linear("k", "k_proj", keys, "k" in s.bias)
        v = linear("v", "v_proj", values, "v" in s.bias)
        z = linear("z", "z_proj", values, False)
        beta = linear("beta_logits", "b_proj", heads, False)
        decay = linear("decay_logits", "a_proj", heads, False)
        (qh, kh, vh), skip, padding = convolved_heads(site, kernel.conv, (q, k, v),
                                                      key_heads, cache)
        rule = {"kernel": self.name, "chunk": kernel.chunk, "scale": s.scale,
                "groups": heads // key_heads,
                "weights": (f"{prefix}A_log", f"{prefix}dt_bias"), "padding": padding,
                "decoding": cache is not None, "form": "ops"}
        o = recurrent(site, (qh, kh, vh, beta, decay), skip, rule, cache)
        return gated_norm(site, o, z, kernel.eps, "silu")

    def planned(self, node: Any, provider: str | None, dtype: str) -> dict:
        """ONNX Runtime's LinearAttention where the provider has its kernel for the dtype
        (`targets.has_kernel`); else the standard ops of `run`."""
        from ..targets import has_kernel

        fused = provider is not None and has_kernel(CONTRIB, dtype, provider)
        return {"form": CONTRIB if fused else "ops"}

    def form(self, node: Any) -> tuple[str, tuple[str, ...], tuple]:
        chunk = node.attr("chunk")
        if node.attr("form") == CONTRIB:
            return self.name, (
                f"{self.described} as ONNX Runtime's LinearAttention (gated_delta): the "
                "recurrence carrying the d_k x d_v state per head, from the cached state when "
                "decoding; the convolution, gates and norms in standard ops",), (
                ("op", CONTRIB),)
        return self.name, self.chunked(chunk), (("chunk", chunk),)

    def chunked(self, chunk: int) -> tuple[str, ...]:
        """The plan's line for its chunked form in standard ops."""
        return (f"the gated delta rule in chunks of {chunk}: each chunk's products at once (O(L "
                f"x {chunk} x d)), one Scan step per chunk carrying the d_k x d_v state per head "
                "(when decoding: from the cached state and convolution window)",)

    def run(self, xp: Any, args: list, tensors: list, real: Any, branch: Any, *,
            chunk: int, scale: float, groups: int, weights: tuple[str, ...], padding: Any,
            decoding: bool, form: str) -> Any:
        """q, k, v heads, beta and decay logits (decoding: the past state after them); the
        gates of A_log and dt_bias; one pass the outputs (B, H, L, dv), decoding the outputs
        and the final state packed (`decoded`): a step (one token) the recurrence itself,
        else the chunks. (A `form` other than `ops` is its strategy's lowering,
        strategies/delta_rule.py.)"""
        q, k, v, b, a = args[:5]
        beta, g = delta_gates(xp, b, a, *tensors)
        tokens = real()
        if not decoding:
            return recurrence(xp, q, k, v, beta, g, chunk, scale, groups, None, tokens)[0]
        state = args[5]
        return branch(lambda: xp.shape(q, 2) == 1, (
            ("step", lambda: decoded(xp, *delta_step(xp, q, k, v, beta, g, scale, groups,
                                                     state, tokens))),
            ("chunks", lambda: decoded(xp, *recurrence(xp, q, k, v, beta, g, chunk, scale,
                                                       groups, state, tokens)))))


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


def convolved_heads(site: Site, width: int, qkv: tuple[str, str, str], key_heads: int,
                    cache: int | None) -> tuple[tuple[str, str, str], tuple, Any]:
    """((q, k, v) heads, the runtime inputs a one-pass kernel node also reads, the mask's
    padding): q, k and v through one causal depthwise convolution of `width` taps (`conv1d`,
    silu), cut into key_heads query and key heads and the layer's value heads. Decoding: the
    convolution continues from past_key_values.{cache}.conv and writes its present."""
    b, s, p, prefix = site.b, site.spec, site.p, site.prefix
    dk, heads, dv = s.head_dim, s.heads, s.value_dim
    keys, conv_width = key_heads * dk, 2 * key_heads * dk + heads * dv
    skip, padding = skipped(s, cache)
    conv = (*qkv, *skip) if cache is None else (*qkv, f"past_key_values.{cache}.conv",
                                                 "attention_mask")
    common = {"weight": f"{prefix}conv1d.weight", "width": width, "padding": padding,
              "decoding": cache is not None, "activation": "silu"}
    mixed = b.emit(Op.CAUSAL_CONV, f"{p}conv", conv, T("B", "L", conv_width), part="output",
                   **common)
    if cache is not None:
        b.emit(Op.CAUSAL_CONV, f"present.{cache}.conv", conv, T("B", width - 1, conv_width),
               part="state", **common)

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


def refused_keys(e: dict, described: str) -> list[tuple]:
    """(message, span, hint) of each attention key in `e` that a recurrent layer with its own
    projections (`described`) refuses (`_not_with`), unless set to none."""
    return [(f"`{key}` does not apply to {described}: {why}", e[key].key_span,
             f"remove `{key}`") for key, why in _not_with().items()
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto", "false"))]


def _not_with() -> dict[str, str]:
    """The keys whose meaning is a softmax's, a position scheme's, or another projection
    form's, with why."""
    from . import MECHANISMS, SCORED

    return {**{key: mech.with_delta for key, mech in SCORED.items()},
            "sparsity": "it forms no scores",
            "latent": "it has its own projections", "by_length": "it has one form",
            **{key: mech.with_delta for key, mech in MECHANISMS.items() if mech.with_delta}}


KERNEL = _DeltaRule()
