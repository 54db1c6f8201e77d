"""Kimi delta attention (`kernel = kda(conv = 4, chunk = 64, eps = 1e-6, forget_rank = none,
gate_rank = none, lower_bound = none)`, Kimi Linear's and Ling 3's linear layers): the gated
delta rule (`delta_rule.py`) with a log decay per key channel instead of per head, its forget
logits and the gate on its output each a projection of their own (or a low-rank pair), a
sigmoid-gated RMSNorm, and, with `lower_bound`, the bounded ("safe") forget gate.
docs/LANGUAGE.md (Kernels) has the formulas. A kernel module sharing the delta rule's checks,
convolution, states and nodes; its arithmetic is `kda_chunks`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from ..ir.graph import Op
from ..shapes import T
from .base import Site
from .base_kernel import KernelWhere
from .base_recurrent import convolved_heads, decoded, gated_norm, projection, recurrent
from .delta_rule import DeltaRuleKernel
from .kda_chunks import channel_recurrence, channel_step, kda_gates

__all__ = ["KDA", "KERNEL"]


@dataclass(frozen=True)
class KDA:
    """Kimi delta attention: a causal depthwise convolution of width `conv` on q, k and v,
    L2-normed q and k, a per-head beta, a log decay per key channel (its forget logits of
    rank `forget_rank`, or one projection where None; bounded below by `lower_bound` where
    set), the delta-rule state update in chunks of `chunk` tokens, and an RMSNorm (eps `eps`)
    gated by the sigmoid of a gate on its output (of rank `gate_rank`, or one projection)."""

    name: ClassVar[str] = "kda"
    conv: int
    chunk: int
    eps: float
    forget_rank: int | None
    gate_rank: int | None
    lower_bound: float | None


def _none(e: Any) -> bool:
    return isinstance(e, ast.Name) and e.id == "none"


class _KDA(DeltaRuleKernel):
    name = "kda"
    params = (("conv", False), ("chunk", False), ("eps", False), ("forget_rank", False),
              ("gate_rank", False), ("lower_bound", False))
    described = "Kimi delta attention"
    attributes = ("chunk", "scale", "weights", "lower_bound", "padding", "decoding", "form")
    carries = "a Kimi delta attention layer carries a state and a convolution window"
    kv_heads = ("Kimi delta attention has as many query and key heads as value heads",
                "remove `kv_heads`")

    def read(self, c: Any, args: dict) -> KDA:
        base = super().read(c, {k: v for k, v in args.items() if k in ("conv", "chunk", "eps")})

        def rank(key: str) -> int | None:
            return None if key not in args or _none(args[key]) else c.positive(args[key], key)

        bound = None
        if "lower_bound" in args and not _none(args["lower_bound"]):
            bound = c.number(args["lower_bound"])
            if not bound < 0:
                raise c.error(f"the forget gate's lower bound is a log decay, below 0: found "
                              f"{bound:g}", args["lower_bound"].span,
                              hint="Ling 3: lower_bound = -5")
        return KDA(base.conv, base.chunk, base.eps, rank("forget_rank"), rank("gate_rank"),
                   bound)

    def resolve(self, kernel: KDA, where: KernelWhere) -> KDA:
        return kernel

    def value_problems(self, c: Any, kernel: KDA, where: KernelWhere) -> list[tuple]:
        return []  # (as many query and key heads as value heads: nothing to divide)

    def own_weights(self, s: Any, p: str) -> list:
        """Its projections, convolution, gates and gated norm (transformers'
        KimiLinearDeltaAttention: `f_a_proj`/`f_b_proj` and `g_a_proj`/`g_b_proj` with a
        rank, BailingHybridDeltaAttention's `f_proj` and `g_proj` without)."""
        from ..weight_table import Weight

        kernel = s.kernel
        keys, values = s.heads * s.head_dim, s.heads * s.value_dim

        def linear(name: str, rows: int, cols: int, bias: bool = False) -> list:
            out = [Weight(f"{p}{name}.weight", (rows, cols), "linear", cols)]
            return out + ([Weight(f"{p}{name}.bias", (rows,), "linear_bias", cols)]
                          if bias else [])

        def pair(name: str, rank: int | None, rows: int) -> list:
            if rank is None:
                return linear(f"{name}_proj", rows, s.d_model)
            return linear(f"{name}_a_proj", rank, s.d_model) + linear(f"{name}_b_proj", rows,
                                                                        rank)

        return [*linear("q_proj", keys, s.d_model, "q" in s.bias),
                *linear("k_proj", keys, s.d_model, "k" in s.bias),
                *linear("v_proj", values, s.d_model, "v" in s.bias),
                *pair("f", kernel.forget_rank, keys), *linear("b_proj", s.heads, s.d_model),
                *pair("g", kernel.gate_rank, values),
                Weight(f"{p}conv1d.weight", (2 * keys + values, 1, kernel.conv), "linear",
                       kernel.conv),
                Weight(f"{p}dt_bias", (keys,), "norm_weight"),
                Weight(f"{p}A_log", (s.heads,), "decay"),
                Weight(f"{p}norm.weight", (s.value_dim,), "norm_weight")]

    def state_type(self, a: Any, state: str) -> Any:
        """`conv`: the convolution's last conv - 1 inputs (B, conv - 1, q, k and v widths);
        `state`: the recurrence's (B, heads, head_dim, value_dim)."""
        if state == "conv":
            return T("B", a.kernel.conv - 1, a.heads * (2 * a.head_dim + a.value_dim),
                     dtype="float")
        return T("B", a.heads, a.head_dim, a.value_dim, dtype="float")

    def layer(self, site: Site, kernel: KDA, x: str, cache: int | None) -> str:
        """The merged heads (B, L, heads * value_dim) before o_proj: each head's recurrence
        output, RMS-normed and gated by the sigmoid of its own gate. Decoding as the delta
        rule's (`cache`: past_key_values.{i}.conv and .state in, their presents out)."""
        b, s, p, prefix = site.b, site.spec, site.p, site.prefix
        heads, keys = s.heads, s.heads * s.head_dim
        linear = projection(site, x)
        q = linear("q", "q_proj", keys, "q" in s.bias)
        k = linear("k", "k_proj", keys, "k" in s.bias)
        v = linear("v", "v_proj", heads * s.value_dim, "v" in s.bias)

        def low_rank(name: str, rank: int | None, width: int) -> str:
            if rank is None:
                return linear(f"{name}_logits", f"{name}_proj", width, False)
            mid = linear(f"{name}_low", f"{name}_a_proj", rank, False)
            return linear(f"{name}_logits", f"{name}_b_proj", width, False, mid)

        forget = low_rank("f", kernel.forget_rank, keys)
        beta = linear("beta_logits", "b_proj", heads, False)
        gate = low_rank("g", kernel.gate_rank, heads * s.value_dim)
        (qh, kh, vh), skip, padding = convolved_heads(site, kernel.conv, (q, k, v), heads,
                                                      cache)
        fh = b.emit(Op.SPLIT_HEADS, f"{p}f_heads", (forget,), T("B", heads, "L", s.head_dim),
                    heads=heads, dim=s.head_dim)
        rule = {"kernel": self.name, "chunk": kernel.chunk, "scale": s.scale,
                "weights": (f"{prefix}A_log", f"{prefix}dt_bias"),
                "lower_bound": kernel.lower_bound, "padding": padding,
                "decoding": cache is not None, "form": "ops"}
        o = recurrent(site, (qh, kh, vh, beta, fh), skip, rule, cache)
        return gated_norm(site, o, gate, kernel.eps, "sigmoid")

    def chunked(self, chunk: int) -> tuple[str, ...]:
        return (f"Kimi delta attention in chunks of {chunk}: each chunk's pair decays per key "
                f"channel at once (O(L x {chunk} x d_k) per head), one Scan step per chunk "
                "carrying the d_k x d_v state per head (when decoding: from the cached state "
                "and convolution window)",)

    def run(self, xp: Any, args: list, tensors: list, real: Any, branch: Any, *,
            chunk: int, scale: float, weights: tuple[str, ...], lower_bound: float | None,
            padding: Any, decoding: bool, form: str) -> Any:
        """q, k, v heads, beta logits (B, L, H) and forget logits (B, H, L, d_k) (decoding:
        the past state after them); the gates of A_log and dt_bias; one pass the outputs
        (B, H, L, dv), decoding the outputs and the final state packed (`decoded`). (A
        `form` other than `ops` is its strategy's lowering, strategies/kda.py.)"""
        q, k, v, b, f = args[:5]
        beta, g = kda_gates(xp, b, f, *tensors, lower_bound)
        tokens = real()
        if not decoding:
            return channel_recurrence(xp, q, k, v, beta, g, chunk, scale, None, tokens)[0]
        state = args[5]
        return branch(lambda: xp.shape(q, 2) == 1, (
            ("step", lambda: decoded(xp, *channel_step(xp, q, k, v, beta, g, scale, state,
                                                       tokens))),
            ("chunks", lambda: decoded(xp, *channel_recurrence(xp, q, k, v, beta, g, chunk,
                                                               scale, state, tokens)))))


KERNEL = _KDA()
