"""The IR of a block's feed-forward: one MLP, or a feed-forward form's nodes (its module's
`expand`, mechanisms.FFNS: its `ffn` node and any existing ops beside it)."""

from __future__ import annotations

from collections.abc import Callable

from ..shapes import T, TensorType
from ..spec import Ffn, Transformer
from .graph import GraphBuilder, Op

__all__ = ["feed_forward", "mlp", "shortcut"]


def feed_forward(b: GraphBuilder, t: Transformer, i: int, x: str) -> str:
    """Block i's feed-forward of x: `mlp.*`, or its form's nodes."""
    p = f"layers.{i}."
    d = T("B", "L", t.d_model)
    form, ffn = t.layer_feed_forward(i), t.layer_ffn(i)
    if form is None:
        return mlp(b, ffn, p, f"{p}mlp.", x, d)
    from ..mechanisms import ffn_of

    return ffn_of(form).expand(b, form, ffn, p, x, d)


def shortcut(b: GraphBuilder, t: Transformer, i: int, x: str) -> str:
    """Block i's shortcut of its feed-forward input x (`Transformer.shortcut`): its MLP or
    form, weights `layers.{i}.shortcut_mlp.*`."""
    p = f"layers.{i}.shortcut_"
    d = T("B", "L", t.d_model)
    if t.shortcut_form is None:
        return mlp(b, t.shortcut, p, f"{p}mlp.", x, d)
    from ..mechanisms import ffn_of

    return ffn_of(t.shortcut_form).expand(b, t.shortcut_form, t.shortcut, p, x, d)


def mlp(b: GraphBuilder, ffn: Ffn, p: str, w: str, x: str, d: TensorType,
        units: Callable[[str, TensorType], str] | None = None) -> str:
    """fc2(act(fc1(x))), or down(act(gate(x)) * up(x)) for the gated forms; `p` prefixes the
    node names, `w` the weights' (`layers.0.mlp.`); `units(h, type)`: a feed-forward form's
    nodes on the hidden units h before the last projection (a sub-norm), or None."""
    hidden = T("B", "L", ffn.hidden)
    units = units or (lambda h, _: h)

    def linear(out: str, arg: str, proj: str, shape: TensorType) -> str:
        return b.emit(Op.LINEAR, f"{p}{out}", (arg,), shape, weight=f"{w}{proj}.weight",
                      bias=f"{w}{proj}.bias" if ffn.bias else None)

    if ffn.gated:  # down(act(gate(x)) * up(x))
        g = linear("gate", x, "gate_proj", hidden)
        u = linear("up", x, "up_proj", hidden)
        if ffn.kind == "clamped_swiglu":
            m = b.emit(Op.CLAMPED_GLU, f"{p}gated", (g, u), hidden, alpha=ffn.alpha,
                       limit=ffn.limit)
        else:
            g = b.emit(Op.ACTIVATION, f"{p}gate_act", (g,), hidden, kind=ffn.activation)
            m = b.emit(Op.MUL, f"{p}gated", (g, u), hidden)
        return linear("mlp_out", units(m, hidden), "down_proj", d)
    h = linear("fc1", x, "fc1", hidden)
    h = b.emit(Op.ACTIVATION, f"{p}act", (h,), hidden, kind=ffn.activation)
    return linear("mlp_out", units(h, hidden), "fc2", d)
