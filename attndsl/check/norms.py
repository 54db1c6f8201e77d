"""Norms: a stack's `norm` (with its placement), and the norm calls the q/k norm mechanisms read
through `norm_value`."""

from __future__ import annotations

from .. import ast
from ..spec import Norm
from .masks import Masks
from .values import FLOAT32_TINY, Param

__all__ = ["PLACEMENTS", "Norms"]

PLACEMENTS = ("pre", "post", "sandwich", "output")
_NORMS = {"layernorm": (Param("eps"), Param("bias"), Param("affine"), Param("unit_offset")),
          "rmsnorm": (Param("eps"), Param("unit_offset"), Param("affine"))}


class Norms(Masks):
    def norm_value(self, e: ast.Expr, placement: bool, table: dict | None = None,
                   ) -> tuple[Norm, str | None]:
        """`layernorm(eps = 1e-5, bias = true, affine = true, unit_offset = false)` or
        `rmsnorm(eps = 1e-6, unit_offset = false, affine = true)` (`affine = false`: no weight),
        with a leading `placement` argument for stacks (`table`: the norms allowed; a mechanism's
        own, such as q/k norms': `l2norm(eps = 1e-6)`, `across_heads`, a layernorm without bias)."""
        table = _NORMS if table is None else table
        name, _ = self.callee(e, table, "norm")
        params = table[name]
        if placement:
            params = (Param("placement", True), *params)
        args = self.bind(e, name, params)
        where = None
        if placement:
            where = self.word(args["placement"], PLACEMENTS, "norm placement")
        eps = Norm.default_eps(name)
        if "eps" in args:
            eps = self.number(args["eps"])
            if not FLOAT32_TINY <= eps <= 1.0:
                raise self.error(f"norm eps must be in [{FLOAT32_TINY:.3g}, 1], found {eps:g}",
                                 args["eps"].span, hint="typical values are 1e-5, 1e-6, 1e-12")
        flags = {k: self.boolean(args[k], k)
                 for k in ("unit_offset", "bias", "across_heads", "affine") if k in args}
        affine = flags.get("affine", True)
        article = "an" if name == "rmsnorm" else "a"
        if not affine and flags.get("bias"):
            raise self.error(f"{article} {name} with `affine = false` has no weight and no bias",
                             args["bias"].span, hint="leave out `bias = true`")
        if not affine and flags.get("unit_offset"):
            raise self.error(f"{article} {name} with `affine = false` has no weight to offset",
                             args["unit_offset"].span, hint="leave out `unit_offset = true`")
        bias = flags.get("bias", table is _NORMS and affine)  # a q/k layernorm has none
        return Norm(name, eps, flags.get("unit_offset", False), bias=name == "layernorm" and bias,
                    across_heads=flags.get("across_heads", False), affine=affine), where

    def placements_value(self, e: ast.Expr) -> tuple[str, ...]:
        """`placements = [pre, output, ...]`: block i's norms placed as entry i % n says
        (pre, sandwich or output: each ends with the stack's final norm)."""
        if not isinstance(e, ast.List) or not e.items:
            raise self.error("placements must be a non-empty list of norm placements, like "
                             "[pre, output]", e.span,
                             hint="block i takes entry i % n: pre, sandwich or output")
        return tuple(self.word(item, PLACEMENTS[:1] + PLACEMENTS[2:], "block placement")
                     for item in e.items)

    def check_placements(self, e: dict[str, ast.Entry], placement: str, residual: str,
                         others: tuple[str, ...]) -> None:
        """Placements per block: the stack's norm is not `post` (whose stack has no final
        norm), its residual sequential, and none of the keys (`others`, set) that read one
        placement for every block."""
        where = e["placements"]
        if placement == "post" or residual != "sequential":
            raise self.error("`placements` needs a stack norm of pre, sandwich or output "
                             "placement and a sequential residual", where.value.span,
                             hint="OLMo Hybrid: `norm = rmsnorm(pre, ...)`, placements = "
                                  "[pre, pre, pre, output]")
        for key in others:
            raise self.error(f"`{key}` reads one placement for every block, and `placements` "
                             f"gives each its own", e[key].key_span,
                             hint=f"remove `{key}` or `placements`")
