"""The IR of a gated delta-rule layer (`kernel = delta_rule(...)`, Gated DeltaNet as in
Qwen3-Next's linear-attention layers): q, k and v projections through one causal depthwise
convolution, the recurrence over heads, the gated RMSNorm. docs/LANGUAGE.md (Kernels) has the
formulas."""

from __future__ import annotations

from .. import masks
from ..shapes import T
from ..spec import Attention
from .graph import GraphBuilder, Op

__all__ = ["delta_rule"]


def delta_rule(b: GraphBuilder, s: Attention, p: str, prefix: str, x: str,
               cache: int | None = None) -> str:
    """The layer's merged heads (B, L, heads * value_dim) before o_proj: each value head's
    recurrence output, RMS-normed per head and gated by silu(z). `cache`: the layer's index
    when decoding: the convolution continues from past_key_values.{i}.conv (the last conv - 1
    inputs) and the recurrence from past_key_values.{i}.state (B, heads, head_dim,
    value_dim); both presents are written, and slots whose attention_mask is 0 change
    neither, as in one pass those a `padding` in the mask hides (key_lengths)."""
    kernel = s.kernel
    key_heads, dk, heads, dv = kernel.key_heads, s.head_dim, s.heads, s.value_dim
    keys, values = key_heads * dk, heads * dv

    def linear(out: str, proj: str, width: int, bias: bool) -> str:
        return b.emit(Op.LINEAR, f"{p}{out}", (x,), T("B", "L", width),
                      weight=f"{prefix}{proj}.weight",
                      bias=f"{prefix}{proj}.bias" if bias else None)

    q = linear("q", "q_proj", keys, "q" in s.bias)
    k = linear("k", "k_proj", keys, "k" in s.bias)
    v = linear("v", "v_proj", values, "v" in s.bias)
    z = linear("z", "z_proj", values, False)
    beta = linear("beta_logits", "b_proj", heads, False)
    decay = linear("decay_logits", "a_proj", heads, False)
    width = 2 * keys + values
    # the slots to skip: one pass, the mask's padding (key_lengths); decoding, attention_mask
    padding = next((m for m in masks.primitives(s.mask) if isinstance(m, masks.Padding)), None)
    skip = () if cache is not None or padding is None else ("key_lengths",)
    conv = (q, k, v, *skip) if cache is None else (q, k, v, f"past_key_values.{cache}.conv",
                                                   "attention_mask")
    common = {"weight": f"{prefix}conv1d.weight", "width": kernel.conv, "padding": padding,
              "decoding": cache is not None}
    mixed = b.emit(Op.CAUSAL_CONV, f"{p}conv", conv, T("B", "L", width), part="output",
                   **common)
    if cache is not None:
        b.emit(Op.CAUSAL_CONV, f"present.{cache}.conv", conv, T("B", kernel.conv - 1, width),
               part="state", **common)

    def heads_of(out: str, start: int, n: int, dim: int) -> str:
        cols = b.emit(Op.HEAD_SLICE, f"{p}{out}_cols", (mixed,), T("B", "L", n * dim),
                      heads=1, start=start, stop=start + n * dim)
        return b.emit(Op.SPLIT_HEADS, f"{p}{out}", (cols,), T("B", n, "L", dim), heads=n,
                      dim=dim)

    qh, kh = heads_of("q_heads", 0, key_heads, dk), heads_of("k_heads", keys, key_heads, dk)
    vh = heads_of("v_heads", 2 * keys, heads, dv)
    rule = {"chunk": kernel.chunk, "scale": s.scale,
            "weights": (f"{prefix}A_log", f"{prefix}dt_bias"), "padding": padding,
            "decoding": cache is not None}
    if cache is None:
        o = b.emit(Op.DELTA_RULE, f"{p}attn", (qh, kh, vh, beta, decay, *skip),
                   T("B", heads, "L", dv), **rule)
    else:  # the outputs and the final state in one tensor, then apart
        packed = b.emit(Op.DELTA_RULE, f"{p}attn_state", (qh, kh, vh, beta, decay,
                        f"past_key_values.{cache}.state", "attention_mask"),
                        T("B", heads, f"L + {dk}", dv), **rule)
        o = b.emit(Op.ROWS, f"{p}attn", (packed,), T("B", heads, "L", dv), start=0, stop=-dk)
        b.emit(Op.ROWS, f"present.{cache}.state", (packed,), T("B", heads, dk, dv),
               start=-dk, stop=None)
    o = b.emit(Op.NORM, f"{p}normed", (o,), T("B", heads, "L", dv), kind="rmsnorm",
               eps=kernel.eps, unit_offset=False, module=f"{prefix}norm", bias=False)
    o = b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), T("B", "L", values))
    gate = b.emit(Op.ACTIVATION, f"{p}gate", (z,), T("B", "L", values), kind="silu")
    return b.emit(Op.MUL, f"{p}gated", (o, gate), T("B", "L", values))
