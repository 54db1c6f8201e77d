"""A stack's side block (`side = side(attention = a, ffn = mlp, layers = [i, ...])`, Zamba2's
shared transformer block): its value and its located checks; and how every attention of a
stack, its pattern's and its side block's, must read positions (`check_positions`)."""

from __future__ import annotations

from .. import ast
from ..mechanisms import MECHANISMS
from ..spec import Attention, Learned, Rope, Side, Sinusoidal, Softmax
from .ffns import FeedForwards
from .values import Param

__all__ = ["SIDE", "Sides"]

# `side(...)`'s parameters
SIDE = (Param("attention", True), Param("ffn", True), Param("layers", True))


class Sides(FeedForwards):
    def side_value(self, e: ast.Expr, layers: int | None) -> Side | None:
        """`none`, or `side(attention = a, ffn = mlp, layers = [i, ...])`: a softmax self
        attention of the file, one MLP and distinct blocks of the stack."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        self.callee(e, {"side": None}, "a side block")
        args = self.bind(e, "side", SIDE)
        attn = self.transformer_attention(args["attention"])
        ffn, form = self.ffn_form(args["ffn"])
        if ffn is None or form is not None:
            raise self.error("a side block's feed-forward is one MLP, such as gelu_glu(n)",
                             args["ffn"].span, hint="Zamba2's shared block runs one MLP")
        listed = args["layers"]
        blocks = self.block_indices(listed, layers, "a side block's layers",
                                    "the blocks the side block runs beside")
        if not blocks:
            raise self.error("a side block runs beside one block at least", listed.span,
                             hint="list the blocks, or write `side = none`")
        return Side(attn, ffn, blocks)

    def check_side(self, e: dict[str, ast.Entry], side: Side, d_model: int, placement: str,
                   residual: str) -> None:
        """The side attention reads [x ; e] (2 d_model) and writes d_model (`out_dim`), a
        softmax core of its own projections; the blocks are pre-norm with a sequential
        residual."""
        where = e["side"].value
        a = side.attention
        if a.d_model != 2 * d_model or a.width != d_model:
            raise self.error(f"`{a.name}` reads each listed block's input beside the stack's "
                             f"(2 x {d_model} wide) and writes the stack's width: it needs "
                             f"d_model = {2 * d_model} and out_dim = {d_model}, found d_model "
                             f"{a.d_model} and out_dim {a.width}", where.span,
                             hint=f"set `d_model = {2 * d_model}` and `out_dim = {d_model}` in "
                                  f"attention {a.name}")
        if not isinstance(a.kernel, Softmax) or a.projection is not None or a.variants:
            raise self.error(f"`{a.name}`: a side block's attention is a softmax attention with "
                             "its own q, k and v projections", where.span)
        if placement != "pre" or residual != "sequential":
            raise self.error("`side` needs `norm = ...(pre, ...)` and a sequential residual",
                             where.span, hint="the side block's output joins the block's "
                                              "attention input before its norm: h = x + "
                                              "attn(norm(x + s))")

    def check_widths(self, e: dict[str, ast.Entry], attns: tuple, d_model: int) -> None:
        """Every block's attention writes the stack's width (an `out_dim` is a side
        attention's)."""
        wide = next((x for x in attns if x.width != d_model), None)
        if wide is not None:
            raise self.error(f"`{wide.name}` writes {wide.width} wide (its out_dim), the stack "
                             f"{d_model}", e["attention"].value.span,
                             hint="a block's attention writes the stack's width: remove its "
                                  "`out_dim`")

    def check_positions(self, attn: Attention, attns: tuple[Attention, ...], span) -> None:
        """`attn` reads positions as the stack's other attentions `attns` do: the same
        absolute encoding (a stack adds it once, at its input) and position streams."""
        if _absolute(attn) != _absolute(attns[0]):
            raise self.error(f"`{attn.name}` and `{attns[0].name}` add different absolute "
                             "positions; a stack adds them once, at its input", span,
                             hint="give every attention of the stack the same `sinusoidal` "
                                  "or `learned` position, or none")
        streams = {_streams(a) for a in (*attns, attn)} - {None}
        reader = next((k for a in (*attns, attn) for k, _ in a.mechanisms
                       if MECHANISMS[k].reads_positions), None)
        n = max(streams, default=0)
        if n > 1 and reader is not None:
            raise self.error(f"`{reader}` reads one position per token, and the stack's "
                             f"positions give each token {n} (position_ids [{n}, B, L])", span,
                             hint=f"remove `{reader}`, or the stack's `mrope`, `axial` or "
                                  "`relative_2d`")
        if len(streams) > 1:
            raise self.error(f"`{attn.name}` and the stack's other attentions read positions "
                             "of different shapes: multimodal RoPE (mrope) reads position_ids "
                             "[3, B, L], axial RoPE and relative_2d [2, B, L], other RoPE and "
                             "absolute positions [B, L]", span,
                             hint="give every attention of the stack positions of one shape")


def _absolute(attn: Attention) -> object:
    return attn.position if isinstance(attn.position, Sinusoidal | Learned) else None


def _streams(attn: Attention) -> int | None:
    """How many position streams an attention reads: 3 (multimodal RoPE), 1 (other RoPE,
    absolute positions) or None (none)."""
    if getattr(attn.position, "streams", 0):  # (multimodal or axial RoPE, a 2-D bias)
        return attn.position.streams
    return 1 if isinstance(attn.position, Rope | Sinusoidal | Learned) else None
