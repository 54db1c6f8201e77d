"""Per-layer inputs (a stack's `per_layer_inputs = ple(width = P)`; Gemma 4's per-layer
embeddings): a second token embedding gives every layer P numbers of its own per token,
mixed with a projection of the token's embedding, and each block adds a gated projection of
them to its output (docs/LANGUAGE.md, Transformer keys). Existing ops only (embed, linear,
head_slice, norm, add, scale, activation, mul), so the oracle reads those."""

from __future__ import annotations

import math

from ..shapes import T
from ..spec import Transformer
from .attention import norm as emit_norm
from .graph import GraphBuilder, Op

__all__ = ["per_layer_inputs", "per_layer_output"]


def per_layer_inputs(b: GraphBuilder, t: Transformer, x: str) -> tuple[str, str]:
    """The token part, embed_tokens_per_layer[ids] * sqrt(P), and the context part,
    (x per_layer_model_projection^T) * d_model^-0.5, both [B, L, layers * P]; x is the
    scaled token embedding."""
    ple, width = t.per_layer_inputs, t.layers * t.per_layer_inputs.width
    tokens = b.emit(Op.EMBED, "ple_tokens", ("input_ids",), T("B", "L", width),
                    weight="embed_tokens_per_layer.weight", scale=math.sqrt(ple.width))
    context = b.emit(Op.LINEAR, "ple_context", (x,), T("B", "L", width),
                     weight="per_layer_model_projection.weight", bias=None)
    context = b.emit(Op.SCALE, "ple_context_scaled", (context,), T("B", "L", width),
                     factor=t.d_model ** -0.5)
    return tokens, context


def per_layer_output(b: GraphBuilder, t: Transformer, i: int, h: str,
                     parts: tuple[str, str]) -> str:
    """Block i's output h plus norm(W_up (act(W_gate h) * e_i)), with layer i's input
    e_i = (norm(context_i) + tokens_i) * 2^-0.5, the i-th P columns of each part."""
    ple, p, width = t.per_layer_inputs, f"layers.{i}.", t.per_layer_inputs.width
    shape = T("B", "L", width)
    tokens, context = (b.emit(Op.HEAD_SLICE, f"{p}ple_{what}", (part,), shape, heads=1,
                              start=i * width, stop=(i + 1) * width)
                       for what, part in zip(("tokens", "context"), parts, strict=True))
    context = emit_norm(b, f"{p}ple_context_normed", context, shape, t.norm,
                        "per_layer_projection_norm", bias=False)
    e = b.emit(Op.ADD, f"{p}ple_sum", (context, tokens), shape)
    e = b.emit(Op.SCALE, f"{p}ple_input", (e,), shape, factor=2.0 ** -0.5)
    g = b.emit(Op.LINEAR, f"{p}ple_gate", (h,), shape,
               weight=f"{p}per_layer_input_gate.weight", bias=None)
    g = b.emit(Op.ACTIVATION, f"{p}ple_gate_act", (g,), shape, kind=ple.activation)
    g = b.emit(Op.MUL, f"{p}ple_gated", (g, e), shape)
    d = T("B", "L", t.d_model)
    u = b.emit(Op.LINEAR, f"{p}ple_out", (g,), d, weight=f"{p}per_layer_projection.weight",
               bias=None)
    u = emit_norm(b, f"{p}ple_normed", u, d, t.norm, f"{p}post_per_layer_input_norm", bias=False)
    return b.emit(Op.ADD, f"{p}ple_resid", (h, u), d)
