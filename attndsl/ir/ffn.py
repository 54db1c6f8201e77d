"""The IR of a block's feed-forward: one MLP, or a mixture of experts: a router's top-k
weights per token (`route`), the experts each token was routed to (`experts`, which runs a
token through its own experts only) and the shared expert beside them."""

from __future__ import annotations

from ..shapes import T, TensorType
from ..spec import Ffn, Transformer
from .graph import GraphBuilder, Op

__all__ = ["feed_forward", "mlp"]


def feed_forward(b: GraphBuilder, t: Transformer, i: int, x: str) -> str:
    """Block i's feed-forward of x: `mlp.*`, or its mixture of experts."""
    p = f"layers.{i}."
    d = T("B", "L", t.d_model)
    m, ffn = t.layer_moe(i), t.layer_ffn(i)
    if m is None:
        return mlp(b, ffn, p, f"{p}mlp.", x, d)
    gates = b.emit(Op.ROUTE, f"{p}routing", (x,), T("B", "L", m.experts),
                   weight=f"{p}mlp.router.weight",
                   bias=f"{p}mlp.router.bias" if m.router_bias else None, top_k=m.top_k,
                   router=m.router, normalize=m.normalize, scale=m.routed_scale,
                   selection=f"{p}mlp.router.selection_bias" if m.selection_bias else None,
                   groups=m.groups, top_groups=m.top_groups, group_score=m.group_score)
    y = b.emit(Op.EXPERTS, f"{p}routed", (x, gates), d, experts=m.experts, top_k=m.top_k,
               act=ffn.activation, gated=ffn.gated, bias=ffn.bias, alpha=ffn.alpha,
               limit=ffn.limit, gate=m.gate, prefix=f"{p}mlp.experts.")
    if m.shared is None:
        return y
    shared = mlp(b, m.shared, f"{p}shared_", f"{p}mlp.shared.", x, d)
    if m.shared_gate:  # Qwen2-MoE: shared(x) * sigmoid(x W_g^T), one gate per token
        one = T("B", "L", 1)
        g = b.emit(Op.LINEAR, f"{p}shared_scale", (x,), one,
                   weight=f"{p}mlp.shared_gate.weight", bias=None)
        g = b.emit(Op.ACTIVATION, f"{p}shared_scale_act", (g,), one, kind="sigmoid")
        shared = b.emit(Op.MUL, f"{p}shared_scaled", (shared, g), d)
    return b.emit(Op.ADD, f"{p}moe_out", (y, shared), d)


def mlp(b: GraphBuilder, ffn: Ffn, p: str, w: str, x: str, d: TensorType) -> str:
    """fc2(act(fc1(x))), or down(act(gate(x)) * up(x)) for the gated forms; `p` prefixes the
    node names, `w` the weights' (`layers.0.mlp.`)."""
    hidden = T("B", "L", ffn.hidden)

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
        return linear("mlp_out", m, "down_proj", d)
    h = linear("fc1", x, "fc1", hidden)
    h = b.emit(Op.ACTIVATION, f"{p}act", (h,), hidden, kind=ffn.activation)
    return linear("mlp_out", h, "fc2", d)
