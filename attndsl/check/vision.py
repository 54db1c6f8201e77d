"""A vision stack's input (`patches = patches(size = P, ...)`: pixel_values in, one token row
per patch) and DINOv2's layer scale (`layer_scale = true`): their values and located checks."""

from __future__ import annotations

from typing import Any

from .. import ast
from ..patches import Patches
from ..position_spec import Relative2D
from ..spec import Attention, reads_streams
from .heads import Heads
from .values import Param

__all__ = ["PATCHES", "Visions"]

MAX_PATCH = 1024  # pixels on a side of one patch
MAX_CHANNELS = 4096
MAX_GRID = 1024  # patches on a side of the learned position table
MAX_REGISTERS = 1024
PATCHES = (Param("size", True), Param("channels"), Param("bias"), Param("class_token"),
           Param("distillation_token"), Param("registers"), Param("grid"), Param("antialias"))


class Visions(Heads):
    def patches_value(self, e: ast.Expr) -> Patches | None:
        """`none`, or `patches(size = P, channels = 3, bias = true, class_token = false,
        distillation_token = false, registers = 0, grid = none, antialias = false)`."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        self.callee(e, {"patches": None}, "a patch embedding")
        args = self.bind(e, "patches", PATCHES)
        size = self.positive(args["size"], "size")
        channels = self.positive(args["channels"], "channels") if "channels" in args else 3
        registers = self.non_negative(args["registers"], "registers") \
            if "registers" in args else 0
        for value, most, what in ((size, MAX_PATCH, "size"),
                                  (channels, MAX_CHANNELS, "channels"),
                                  (registers, MAX_REGISTERS, "registers")):
            if value > most:
                raise self.error(f"{what} must be at most {most}, found {value}",
                                 args[what].span)
        grid = None
        if "grid" in args and not (isinstance(args["grid"], ast.Name)
                                   and args["grid"].id == "none"):
            grid = self.positive(args["grid"], "grid")
            if grid > MAX_GRID:
                raise self.error(f"grid must be at most {MAX_GRID} patches a side, found "
                                 f"{grid}", args["grid"].span)
        flag = {k: self.boolean(args[k], k) for k in (
            "bias", "class_token", "distillation_token", "antialias") if k in args}
        if flag.get("distillation_token") and not flag.get("class_token"):
            raise self.error("a distillation token follows the class token (DeiT's), and "
                             "these patches have none", args["distillation_token"].span,
                             hint="add `class_token = true`")
        if flag.get("antialias") and grid is None:
            raise self.error("`antialias` is how the position table is resized, and these "
                             "patches have none", args["antialias"].span,
                             hint="add `grid = g` (the table's g x g positions), or remove "
                                  "`antialias`")
        return Patches(size, channels, flag.get("bias", True), flag.get("class_token", False),
                       grid, registers, flag.get("antialias", False),
                       flag.get("distillation_token", False))

    def check_vision(self, e: dict[str, ast.Entry], patches: Patches | None,
                     layer_scale: bool, attns: tuple[Attention, ...], placement: str,
                     residual: str, others: dict[str, Any], final_norm: bool,
                     plain: bool) -> None:
        """A vision stack reads no tokens and no memory (`others`: the keys that would, set
        where truthy), and its attentions no runtime inputs (no padding: every patch is
        real) and no multimodal position streams; layer scale needs pre norms, a sequential
        residual and blocks of one form (`plain`: no placements, no parallel attention)."""
        if patches is not None:
            where = e["patches"].value.span
            other = next((key for key, value in others.items() if value), None)
            if other is not None:
                raise self.error(f"`patches` and `{other}` do not combine: a vision stack "
                                 "reads an image, not tokens or memory rows",
                                 e[other].key_span, hint=f"remove `{other}` or `patches`")
            for a in attns:
                if isinstance(a.position, Relative2D) and \
                        patches.prefix > patches.class_token:
                    raise self.error(f"`{a.name}`'s relative_2d has rows for one token "
                                     "before the patches (a class token), not for registers "
                                     "or a distillation token",
                                     a.span("position") or where,
                                     hint="remove the patches' `registers` and "
                                          "`distillation_token`")
                if isinstance(a.position, Relative2D) and \
                        a.position.class_token != patches.class_token:
                    raise self.error(f"`{a.name}`'s relative_2d and the patches disagree on a "
                                     "class token", a.span("position") or where,
                                     hint="set relative_2d's class_token as the patches' "
                                          "class_token")
                if a.runtime_inputs or reads_streams(a) == 3:
                    names = ", ".join(a.runtime_inputs) or "position_ids"
                    raise self.error(f"`{a.name}` reads {names}: a vision stack's attentions "
                                     "read the image's patches alone (every patch is real)",
                                     a.span("mask" if a.runtime_inputs else "position")
                                     or where,
                                     hint="mask them with `full` (a ViT's), or a mask "
                                          "without padding or documents")
        if not final_norm and placement == "post":
            raise self.error("`final_norm = false` leaves out a pre-norm stack's final norm; "
                             "a post-norm stack has none", e["final_norm"].value.span,
                             hint="remove `final_norm`")
        if layer_scale and (placement != "pre" or residual != "sequential" or not plain):
            raise self.error("`layer_scale` needs `norm = ...(pre, ...)`, a sequential "
                             "residual and no `placements` or `parallel`",
                             e["layer_scale"].value.span,
                             hint="DINOv2's blocks: h = x + g1 * attn(norm1(x)), "
                                  "y = h + g2 * ffn(norm2(h))")

