"""A decoder stack's cross attention (`cross = a`: every block attends over the memory rows,
an encoder's output, after its self attention): its located checks."""

from __future__ import annotations

from typing import Any

from .. import ast
from ..spec import Attention, Softmax
from .sides import Sides

__all__ = ["Crosses"]


class Crosses(Sides):
    def check_cross(self, e: dict[str, ast.Entry], cross: Attention,
                    attns: tuple[Attention, ...], placement: str, residual: str,
                    others: dict[str, Any]) -> None:
        """A softmax cross attention of its own projections, the stack's width, no positions
        (the memory's are the encoder's; the stack adds its own at its input), in pre- or
        post-norm blocks with a sequential residual, and none of the stack features whose
        block has no place for it (`others`: key -> value, set where truthy)."""
        where = e["cross"].value
        d_model = attns[0].d_model
        if cross.d_model != d_model or cross.width != d_model:
            raise self.error(f"`{cross.name}` reads and writes the stack's width ({d_model}); "
                             f"found d_model {cross.d_model}, out_dim {cross.width}",
                             where.span, hint=f"set `d_model = {d_model}` in attention "
                                              f"{cross.name}, and no `out_dim`")
        if not isinstance(cross.kernel, Softmax) or cross.projection is not None \
                or cross.variants:
            raise self.error(f"`{cross.name}`: a decoder block's cross attention is a softmax "
                             "attention with its own q, k and v projections", where.span)
        if cross.position is not None:
            raise self.error(f"`{cross.name}` reads the memory rows, whose positions the "
                             "encoder gave them: a decoder's cross attention takes no "
                             "`position`", cross.span("position") or where.span,
                             hint="remove it: the stack's absolute positions come from "
                                  "`attention`")
        if placement not in ("pre", "post") or residual != "sequential":
            raise self.error("`cross` needs `norm = ...(pre, ...)` or `(post, ...)` and a "
                             "sequential residual", where.span,
                             hint="pre: h' = h + cross(norm(h), memory); post: h' = "
                                  "norm(h + cross(h, memory))")
        other = next((key for key, value in others.items() if value), None)
        if other is not None:
            raise self.error(f"`cross` and `{other}` do not combine", e[other].key_span,
                             hint=f"remove `{other}` or `cross`")
