"""Strategy `short_conv`: the lowering of a short convolution's own `kernel` node
(mechanisms/short_conv.py) by the kernel's name (`LOWERINGS`): ONNX Runtime's
com.microsoft.CausalConvWithState where the planner set its `form` (`Kernel.planned`: the
target's provider has the kernel for the dtype, targets.py), else the module's standard ops.
The contrib op computes exactly the module's convolution: each channel's taps over the past
inputs (past_state, zeros before the first call) then the new ones, plus its bias, no
activation; channels last, as attndsl's (B, width - 1, C) state is laid out."""

from __future__ import annotations

from ..backends.conv import new_tokens
from ..backends.lower.attend import kept_keys
from ..backends.lower.builder import Lowering, Sym
from ..backends.lower.ops import kernel_form
from ..ir import Node
from ..mechanisms.short_conv import CONTRIB
from .base import Strategy, never

__all__ = ["STRATEGY"]



def lower_short_conv(lw: Lowering, node: Node) -> str:
    """C * CausalConvWithState(B * x) (padding slots' inputs 0), the outputs (B, 1, L, C),
    decoding then the present state along the length (the module's packed layout); the
    module's standard ops where its form is theirs."""
    if node.attr("form") != CONTRIB:
        return kernel_form(lw, node)
    b, xp = lw.b, lw.xp
    gate_b, gate_c, x = (lw.sym(node, i) for i in range(3))  # (B, 1, L, C)
    u = xp.reshape(gate_b * x, [0, -1, xp.shape(x, 3)])  # (B, L, C)
    L = xp.shape(u, 1)
    if node.attr("decoding"):
        real = new_tokens(xp, Sym(b, lw.env["attention_mask"], "int64", 2), L)
    elif node.attr("padding") is not None:
        kept = kept_keys(lw, node.attr("padding"), L)  # (B, 1, L)
        real = xp.astype(xp.reshape(kept, [xp.shape(kept, 0), -1]), "float32")
    else:
        real = None
    if real is not None:  # a padding slot's input is 0
        u = u * xp.reshape(real, [xp.shape(u, 0), -1, 1])
    weights = [lw.w(name) for name in node.attr("weights")]
    bias = weights[1] if len(weights) > 1 else ""
    past = lw.env[node.args[3]] if node.attr("decoding") else ""
    y, state = b.op(CONTRIB, u.name, weights[0], bias, past, outputs=2,
                    domain="com.microsoft", activation="none", channels_last=1)
    out = gate_c * xp.reshape(Sym(b, y, "float32", 3), [0, 1, -1, xp.shape(x, 3)])
    if node.attr("decoding"):
        state = xp.reshape(Sym(b, state, "float32", 3), [0, 1, -1, xp.shape(x, 3)])
        out = xp.concat([out, state], axis=2)
    return out.name


STRATEGY = Strategy("short_conv", None, never, lambda params: 1, lower_short_conv, fuses=False)
