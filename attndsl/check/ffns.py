"""A stack's feed-forward (one MLP, `swiglu(n)`, ..., or a feed-forward form's call: its
module reads it, mechanisms.FFNS) and its blocks' other forms: blocks without one
(`attention_only`), an attention beside each block's own (`parallel`)."""

from __future__ import annotations

from typing import Any

from .. import ast
from ..mechanisms import FFNS, ffn_of
from ..spec import GATED, Ffn
from .layers import Layers
from .values import FLOAT32_MAX, FLOAT32_TINY, Param

__all__ = ["FeedForwards"]

MLPS = ("relu", "relu2", "gelu", "gelu_tanh", "quick_gelu", *GATED)


class FeedForwards(Layers):
    def ffn_form(self, e: ast.Expr) -> tuple[Ffn | None, Any]:
        """An MLP (and None), or a feed-forward form's MLP (the form its blocks are made of)
        and value; (None, None) for `none`, blocks without a feed-forward."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None, None
        name, _ = self.callee(e, dict.fromkeys((*MLPS, *FFNS)), "ffn")
        return FFNS[name].read(self, e) if name in FFNS else (self.ffn_value(e), None)

    def check_ffn_layers(self, form: Any, layers: int, e: ast.Expr) -> None:
        """What the feed-forward form `e` says of a stack of `layers` blocks."""
        if form is not None:
            ffn_of(form).check_layers(self, form, layers, e)

    def block_indices(self, e: ast.Expr, layers: int | None, what: str,
                      hint: str) -> tuple[int, ...]:
        """A list of distinct blocks of the stack (`what`: the key's words, `hint` what
        they name), in order."""
        if not isinstance(e, ast.List):
            raise self.error(f"{what} must be a list of block indices, like [1, 4]", e.span,
                             hint=hint)
        blocks = [self.non_negative(i, "a block index") for i in e.items]
        for n, (item, i) in enumerate(zip(e.items, blocks, strict=True)):
            if i in blocks[:n]:
                raise self.error(f"block {i} is listed twice", item.span)
            if layers is not None and i >= layers:
                raise self.error(f"block {i} is not in the stack: its blocks are 0 .. "
                                 f"{layers - 1}", item.span,
                                 hint=f"{what} names blocks of `layers = {layers}`")
        return tuple(sorted(blocks))

    def attention_only_value(self, e: ast.Expr, layers: int | None) -> tuple[int, ...]:
        """`attention_only = [i, ...]`: distinct blocks of the stack that have no
        feed-forward (`[]`: none)."""
        blocks = self.block_indices(e, layers, "attention_only",
                                    "the blocks whose feed-forward is left out")
        if layers is not None and len(blocks) == layers:
            raise self.error("every block is attention only: the feed-forward would never "
                             "run", e.span, hint="use `ffn = none` for a stack without one")
        return blocks

    def check_attention_alone(self, e: dict[str, ast.Entry], placement: str, residual: str,
                              ffn_conv: int | None, shortcut: Any, depth: bool) -> None:
        """Blocks without a feed-forward (`ffn = none`, `attention_only`) are pre-norm blocks
        with a sequential residual, h = x + attn(norm(x)), without the keys that read the
        feed-forward."""
        key = "attention_only" if "attention_only" in e else "ffn"
        where = e[key].value
        if placement != "pre" or residual != "sequential":
            raise self.error(f"blocks without a feed-forward (`{key}`) need `norm = "
                             "...(pre, ...)` and a sequential residual", where.span,
                             hint="such a block is h = x + attn(norm(x)) (Mamba2's, "
                                  "Nemotron-H's layers)")
        readers = {"ffn_conv": ffn_conv is not None, "shortcut": shortcut is not None,
                   "residual_scale": depth}
        for other in (k for k, reads in readers.items() if reads):
            raise self.error(f"`{other}` reads each block's feed-forward, and `{key}` leaves "
                             "it out", e[other].key_span,
                             hint="`residual_scale = depth` numbers two sublayers a block: "
                                  "give it a number" if other == "residual_scale"
                             else f"remove `{other}`")

    def check_parallel(self, e: dict[str, ast.Entry], parallel: Any, attns: tuple,
                       placement: str, residual: str) -> None:
        """`parallel = a`: an attention with its own layer and decoding states (a recurrent
        kernel: its states sit beside the pattern's keys and values, which must be caches of
        keys and values), of the stack's width, in pre-norm blocks with a sequential
        residual."""
        from ..mechanisms import kernel_of

        where = e["parallel"].value
        module = kernel_of(parallel.kernel)
        if module is None or not module.own_layer or not module.states:
            raise self.error(f"`{parallel.name}` runs beside each block's attention and keeps "
                             "its own decoding states: it must be a recurrent kernel's layer",
                             where.span, hint="Falcon-H1: an attention with `kernel = "
                                              "mamba2(...)`")
        if parallel.d_model != attns[0].d_model:
            raise self.error(f"`{parallel.name}` has d_model {parallel.d_model}, the stack "
                             f"{attns[0].d_model}", where.span)
        stateful = next((a for a in attns if kernel_of(a.kernel) is not None
                         and kernel_of(a.kernel).states), None)
        if stateful is not None:
            raise self.error(f"`{parallel.name}` beside `{stateful.name}`, whose kernel keeps "
                             "states too: a block keeps one set of them", where.span,
                             hint="the pattern's attentions keep keys and values")
        if placement != "pre" or residual != "sequential":
            raise self.error("`parallel` needs `norm = ...(pre, ...)` and a sequential "
                             "residual", where.span,
                             hint="both attentions read the block's normed input: h = x + "
                                  "attn(norm(x)) + parallel(norm(x))")

    def ffn_value(self, e: ast.Expr) -> Ffn:
        """`relu(n)`, `relu2(n)`, `gelu(n)`, `gelu_tanh(n)` (biases by default), `swiglu(n)`,
        `geglu(n)` (none by default); `bias = true | false` overrides."""
        name, _ = self.callee(e, dict.fromkeys(MLPS), "ffn")
        clamped = name == "clamped_swiglu"
        args = self.bind(e, name, (Param("hidden", True), Param("bias"))
                         + ((Param("alpha"), Param("limit")) if clamped else ()))
        hidden = self.positive(args["hidden"], "ffn width")
        bias = self.boolean(args["bias"], "bias") if "bias" in args else name not in GATED
        if not clamped:
            return Ffn(name, hidden, bias)
        values = {}
        for key, default in (("alpha", 1.702), ("limit", 7.0)):
            values[key] = self.number(args[key]) if key in args else default
            if not FLOAT32_TINY <= values[key] <= FLOAT32_MAX:
                raise self.error(f"{key} must be a number > 0 that float32 can hold, found "
                                 f"{values[key]:g}", args[key].span,
                                 hint="gpt-oss: alpha = 1.702, limit = 7.0")
        return Ffn(name, hidden, bias, values["alpha"], values["limit"])
