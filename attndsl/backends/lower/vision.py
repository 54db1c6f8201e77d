"""A vision stack's lowering: its image's patch rows (`patches`) and each token's place in
the image's grid (`grid`), their arithmetic `backends.formulas`'."""

from __future__ import annotations

from ...ir import Node, Op
from .. import formulas
from .builder import Lowering, lower, width


@lower(Op.PATCHES)
def _patches(lw: Lowering, node: Node) -> str:
    a = dict(node.attrs)
    w = {k: lw.weight(a[k], n) for k, n in (
        ("weight", 4), ("bias", 1), ("class_token", 1), ("distillation_token", 1),
        ("registers", 2), ("positions", 2)) if a.get(k)}
    return formulas.patch_embed(lw.xp, lw.sym(node), w, a["size"], a.get("grid"),
                                width(node.shape), a.get("antialias", False)).name


@lower(Op.GRID)
def _grid(lw: Lowering, node: Node) -> str:
    return formulas.grid_positions(lw.xp, lw.sym(node), node.attr("size"),
                                   node.attr("before")).name
