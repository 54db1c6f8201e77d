"""The IR of a stack's side block (`Transformer.side`, Zamba2's shared transformer block)
beside block i: s = side_proj(mlp(norm_f(attn(norm_s([x ; e]))))), from the block's input x
and the stack's input e as block 0 receives it, of existing ops: x and e joined along their
features as two one-head tensors (`join_heads`)."""

from __future__ import annotations

from ..shapes import T
from ..spec import Transformer
from .attention import attention
from .attention import norm as emit_norm
from .ffn import mlp
from .graph import GraphBuilder, Op

__all__ = ["side_block"]


def side_block(b: GraphBuilder, t: Transformer, i: int, x: str, e: str, cache: int | None,
               pos: tuple[str, ...], bounded: bool = False) -> str:
    """The side block's output s (B, L, d_model) beside block i; `cache`: the block's index when
    decoding (the side attention's keys and values at past_key_values.{i}.side_key and
    .side_value, beside the block's own caches or states; `bounded`: only those its mask can
    reach, as the block's own)."""
    p, d, side = f"layers.{i}.", t.d_model, t.side

    def head(name: str, v: str) -> str:  # (B, L, d) as one head (B, 1, L, d)
        return b.emit(Op.SPLIT_HEADS, f"{p}side_{name}_head", (v,), T("B", 1, "L", d),
                      heads=1, dim=d)

    joined = b.emit(Op.JOIN_HEADS, f"{p}side_joined", (head("x", x), head("e", e)),
                    T("B", 1, "L", 2 * d))
    u = b.emit(Op.MERGE_HEADS, f"{p}side_input", (joined,), T("B", "L", 2 * d))
    u = emit_norm(b, f"{p}side_in", u, T("B", "L", 2 * d), t.norm, f"{p}side_norm")
    a = attention(b, side.attention, f"{p}side_attn.", u, u, cache=cache, pos=pos, layer=i,
                  bounded=bounded, entries=("side_key", "side_value"))
    f = emit_norm(b, f"{p}side_ffn_in", a, T("B", "L", d), t.norm, f"{p}side_ffn_norm")
    f = mlp(b, side.ffn, f"{p}side_", f"{p}side_mlp.", f, T("B", "L", d))
    return b.emit(Op.LINEAR, f"{p}side_out", (f,), T("B", "L", d),
                  weight=f"{p}side_proj.weight", bias=None)
