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

from ..shapes import T
from .base import Site
from .base_kernel import KernelWhere
from .base_recurrent import Recurrent, convolved_heads, decoded, gated_norm, projection, recurrent
from .delta_rule_chunks import delta_gates, delta_step, recurrence

__all__ = ["KERNEL", "DeltaRule", "DeltaRuleKernel"]


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
    # OLMo Hybrid's: beta = 2 sigmoid(b), so that I - beta k k^T may have a negative eigenvalue
    negative: bool = False


class DeltaRuleKernel(Recurrent):
    name = "delta_rule"
    params = (("key_heads", False), ("conv", False), ("chunk", False), ("eps", False),
              ("negative_eigenvalues", False))
    described = "the delta rule"
    attributes = ("chunk", "scale", "groups", "weights", "padding", "decoding", "form",
                  "negative")
    states = ("conv", "state")
    carries = "a delta-rule layer carries a state and a convolution window"
    kv_heads = ("the delta rule's value heads are its heads; its query and key heads are the "
                "kernel's `key_heads`", "remove `kv_heads`; write delta_rule(key_heads = n)")

    def read(self, c: Any, args: dict) -> DeltaRule:
        """key_heads 0: as many as heads (`resolve`, with the layer)."""

        eps = c.eps(args, 1e-6, "the gated norm's")
        negative = "negative_eigenvalues" in args and c.boolean(args["negative_eigenvalues"],
                                                                "negative_eigenvalues")
        return DeltaRule(
            c.positive(args["key_heads"], "key_heads") if "key_heads" in args else 0,
            c.positive(args["conv"], "conv") if "conv" in args else 4,
            c.positive(args["chunk"], "chunk") if "chunk" in args else 64, eps, negative)

    def resolve(self, kernel: DeltaRule, where: KernelWhere) -> DeltaRule:
        return replace(kernel, key_heads=kernel.key_heads or where.heads)

    def value_problems(self, c: Any, kernel: DeltaRule, where: KernelWhere) -> list[tuple]:
        """Its key heads divide its heads."""
        from ..check.kernels import arg_span

        heads, key_heads = where.heads, kernel.key_heads or where.heads
        if not heads % key_heads:
            return []
        return [(f"each of the {key_heads} key heads serves heads / key_heads value heads: "
                 f"heads ({heads}) must be a multiple of it",
                 arg_span(where.entries["kernel"].value, "key_heads") or where.at("kernel"),
                 "Qwen3-Next: heads = 32, key_heads = 16")]

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
                "decoding": cache is not None, "form": "ops", "negative": kernel.negative}
        o = recurrent(site, (qh, kh, vh, beta, decay), skip, rule, cache)
        return gated_norm(site, o, z, kernel.eps, "silu")

    def chunked(self, chunk: int) -> tuple[str, ...]:
        """The plan's line for its chunked form in standard ops."""
        return (f"the gated delta rule in chunks of {chunk}: each chunk's products at once (O(L "
                f"x {chunk} x d)), one Scan step per chunk carrying the d_k x d_v state per head "
                "(when decoding: from the cached state and convolution window)",)

    def run(self, xp: Any, args: list, tensors: list, real: Any, branch: Any, *,
            chunk: int, scale: float, groups: int, weights: tuple[str, ...], padding: Any,
            decoding: bool, form: str, negative: bool) -> Any:
        """q, k, v heads, beta and decay logits (decoding: the past state after them); the
        gates of A_log and dt_bias; one pass the outputs (B, H, L, dv), decoding the outputs
        and the final state packed (`decoded`): a step (one token) the recurrence itself,
        else the chunks. (A `form` other than `ops` is its strategy's lowering,
        strategies/delta_rule.py.)"""
        q, k, v, b, a = args[:5]
        beta, g = delta_gates(xp, b, a, *tensors, negative=negative)
        tokens = real()
        if not decoding:
            return recurrence(xp, q, k, v, beta, g, chunk, scale, groups, None, tokens)[0]
        state = args[5]
        return branch(lambda: xp.shape(q, 2) == 1, (
            ("step", lambda: decoded(xp, *delta_step(xp, q, k, v, beta, g, scale, groups,
                                                     state, tokens))),
            ("chunks", lambda: decoded(xp, *recurrence(xp, q, k, v, beta, g, chunk, scale,
                                                       groups, state, tokens)))))


KERNEL = DeltaRuleKernel()
