"""A mixture of attention heads (JetMoE's MoA, `head_experts = moa(experts, top_k)`): a router
picks top_k of `experts` pairs of query and output projections per token; the keys and values
are the layer's own, shared by every pair. A projection form (`base_projection.Projection`)
with its own output: its value, checks, weights, nodes and arithmetic over the array
namespace (torch and ONNX from one text).

Slot j (the j-th expert a token picked, best first) makes kv_heads query heads, each reading
its kv head: query head h = g · top_k + j reads kv head g, as grouped-query attention groups
them, so the core is an ordinary one (heads = top_k · kv_heads) with its cache, kernels and
score modifiers. Each token's experts are computed as every expert's projection and a pick
(one matrix product for all experts, then a gather), which costs experts / top_k times the
routed projections' arithmetic: the attention core dominates at the lengths it is used at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from ..ir.graph import Op
from ..shapes import T
from ..spec import Rope, Softmax
from ..weight_table import Weight, linear_weights
from .base import Site
from .base_projection import Projection, ProjectionWhere

__all__ = ["PROJECTION", "HeadExperts"]

# the hooks whose mechanisms act inside the core, which a mixture of heads leaves as it is
_CORE_HOOKS = ("scores", "softmax")


@dataclass(frozen=True)
class HeadExperts:
    """A mixture of attention heads: `top_k` of `experts` (query, output) projection pairs
    per token, routed by the softmax of the router's top_k logits."""

    key: ClassVar[str] = "head_experts"
    experts: int
    top_k: int


class _Moa(Projection):
    key = "head_experts"
    name = "moa"
    params = (("experts", True), ("top_k", True))
    output = True
    with_recurrent = None  # refused by its own rule: its core is a softmax's
    # its `apply` nodes' attributes: the part (q: the queries of x; o: the output of the merged
    # heads, routed by x, its second operand), the tensors (router, the experts' stacked
    # projections, their bias), and the sizes: heads per slot, features per head, d_model
    attributes = ("part", "weights", "experts", "top_k", "heads", "dim", "width")
    reads_positions = False

    def read(self, c: Any, e: ast.Expr) -> HeadExperts | None:
        """`none` or `moa(experts = E, top_k = k)`, 1 <= k <= E <= 1024."""
        from ..check.values import Param

        if isinstance(e, ast.Name) and e.id == "none":
            return None
        c.callee(e, {"moa": None}, "a mixture of attention heads")
        args = c.bind(e, "moa", tuple(Param(n, required) for n, required in self.params))
        experts = c.positive(args["experts"], "experts")
        if experts > 1024:
            raise c.error(f"experts must be at most 1024, found {experts:,}",
                          args["experts"].span, hint="JetMoE-8B: experts = 8")
        top_k = c.positive(args["top_k"], "top_k")
        if top_k > experts:
            raise c.error(f"top_k ({top_k}) must be at most the number of experts ({experts})",
                          args["top_k"].span, hint="each token runs top_k of the experts")
        return HeadExperts(experts, top_k)

    def conflicts(self, c: Any, moa: HeadExperts, where: ProjectionWhere) -> bool:
        """Self attention with a softmax core and its output projection, top_k query heads
        per kv head, and no mechanism that transforms the projections or the heads before
        the core or after it (the score and softmax mechanisms combine)."""
        from . import MECHANISMS

        e, at = where.entries, where.at
        problems = []
        if where.kind != "self":
            problems.append(("a mixture of attention heads routes each token's own queries: "
                             "it is self attention", at("kind"), "remove `kind = cross`"))
        if not isinstance(where.kernel, Softmax):
            problems.append(("a mixture of attention heads is a softmax attention",
                             at("kernel"), "use `kernel = softmax`"))
        if where.kv_heads is not None and where.heads != moa.top_k * where.kv_heads:
            problems.append((f"each of the top_k ({moa.top_k}) experts makes one query head "
                             f"per kv head: heads must be top_k x kv_heads "
                             f"({moa.top_k * where.kv_heads}), found {where.heads}",
                             at("heads"), f"`heads = {moa.top_k * where.kv_heads}`"))
        if where.out_proj is False:
            problems.append(("the experts' output projections are the layer's: it has "
                             "out_proj", at("out_proj"), "remove `out_proj = false`"))
        for key in (k for k, m in MECHANISMS.items() if m.hook not in _CORE_HOOKS and k in e):
            if not (isinstance(e[key].value, ast.Name)
                    and e[key].value.id in ("none", "false")):
                problems.append((f"`{key}` and a mixture of attention heads do not combine: "
                                 "its queries are the experts'", at(key), f"remove `{key}`"))
        for message, span, hint in problems:
            c.error(message, span, hint=hint)
        return bool(problems)

    def weights(self, s: Any, moa: HeadExperts, p: str) -> list:
        """The router, the experts' query projections stacked (expert e's rows e·c ..
        (e + 1)·c, c = kv_heads · head_dim), the keys' and values' projections, the experts'
        output projections stacked (expert e's rows e·d_model .. (e + 1)·d_model) and the
        output's one bias."""
        c, cv = s.kv_heads * s.head_dim, s.kv_heads * s.value_dim
        out = linear_weights(f"{p}router", moa.experts, s.d_model, False)
        out += linear_weights(f"{p}experts.q_proj", moa.experts * c, s.d_model, "q" in s.bias)
        out += linear_weights(f"{p}k_proj", c, s.d_model, "k" in s.bias)
        out += linear_weights(f"{p}v_proj", cv, s.d_model, "v" in s.bias)
        out += linear_weights(f"{p}experts.o_proj", moa.experts * s.d_model, cv, False)
        if "o" in s.bias:
            out.append(Weight(f"{p}o_proj.bias", (s.d_model,), "linear_bias", cv))
        return out

    def heads(self, site: Site, moa: HeadExperts, x: str) -> tuple[str, str, str]:
        """The routed queries (`apply`, part q), the keys and values, RoPE on both."""
        b, s, p, prefix = site.b, site.spec, site.p, site.prefix
        kv = s.kv_heads
        names = (f"{prefix}router.weight", f"{prefix}experts.q_proj.weight",
                 *((f"{prefix}experts.q_proj.bias",) if "q" in s.bias else ()))
        q = b.emit(Op.APPLY, f"{p}q", (x,), T("B", "L", s.heads * s.head_dim),
                   mechanism=self.key, part="q", weights=names, experts=moa.experts,
                   top_k=moa.top_k, heads=kv, dim=s.head_dim, width=s.d_model)
        q = b.emit(Op.SPLIT_HEADS, f"{p}q_heads", (q,), T("B", s.heads, "L", s.head_dim),
                   heads=s.heads, dim=s.head_dim)
        heads = []
        for part, width in (("k", s.head_dim), ("v", s.value_dim)):
            y = b.emit(Op.LINEAR, f"{p}{part}", (x,), T("B", "L", kv * width),
                       weight=f"{prefix}{part}_proj.weight",
                       bias=f"{prefix}{part}_proj.bias" if part in s.bias else None)
            heads.append(b.emit(Op.SPLIT_HEADS, f"{p}{part}_heads", (y,),
                                T("B", kv, "L", width), heads=kv, dim=width))
        k, v = heads
        if isinstance(s.position, Rope):
            q = b.emit(Op.ROPE, f"{p}q_rope", (q, *site.pos), T("B", s.heads, "L", s.head_dim),
                       **s.position.attrs())
            k = b.emit(Op.ROPE, f"{p}k_rope", (k, *site.pos), T("B", kv, "L", s.head_dim),
                       **s.position.attrs())
        return q, k, v

    def out(self, site: Site, moa: HeadExperts, o: str, x: str) -> str:
        """The merged heads through each slot's expert's output projection, weighted by its
        gate and summed (`apply`, part o, routed by x), plus the output's bias."""
        s, prefix = site.spec, site.prefix
        names = (f"{prefix}router.weight", f"{prefix}experts.o_proj.weight",
                 *((f"{prefix}o_proj.bias",) if "o" in s.bias else ()))
        return site.b.emit(Op.APPLY, f"{site.p}out", (o, x), T("B", "L", s.d_model),
                           mechanism=self.key, part="o", weights=names,
                           experts=moa.experts, top_k=moa.top_k, heads=s.kv_heads,
                           dim=s.value_dim, width=s.d_model)

    def apply(self, xp: Any, x: Any, routed: Any, *, part: str, weights: list[Any],
              experts: int, top_k: int, heads: int, dim: int, width: int) -> Any:
        """Part q: x (B, L, d_model) -> the queries (B, L, heads · top_k · dim), query head
        g · top_k + j the g-th head of slot j's expert. Part o: the merged heads x (B, L,
        heads · top_k · dim), routed by `routed` (B, L, d_model) -> (B, L, d_model)."""
        gates, picked = _route(xp, x if part == "q" else routed, weights[0], top_k)
        if part == "q":
            y = xp.matmul(x, xp.swap_last(weights[1]))  # every expert's queries
            if len(weights) > 2:
                y = y + weights[2]
            y = xp.reshape_axes(y, 2, 3, [experts, heads * dim])
            slots = [xp.reshape_axes(_pick(xp, y, picked, j, heads * dim), 2, 4,
                                     [heads, 1, dim]) for j in range(top_k)]
            return xp.reshape_axes(xp.concat(slots, axis=3), 2, 5, [heads * top_k * dim])
        a = xp.reshape_axes(x, 2, 3, [heads, top_k, dim])
        out = None
        for j in range(top_k):
            a_j = xp.reshape_axes(xp.slice(a, 3, j, j + 1), 2, 5, [heads * dim])
            y = xp.reshape_axes(xp.matmul(a_j, xp.swap_last(weights[1])), 2, 3,
                                [experts, width])
            y = xp.reshape_axes(_pick(xp, y, picked, j, width), 2, 4, [width])
            y = y * xp.astype(gates[..., j:j + 1], xp.dtype(x))
            out = y if out is None else out + y
        return out + weights[2] if len(weights) > 2 else out


def _route(xp: Any, x: Any, router: Any, top_k: int) -> tuple[Any, Any]:
    """The gates (B, L, top_k) float32, the softmax of the router's top_k logits, and the
    experts they pick (B, L, top_k), best first."""
    logits = xp.astype(xp.matmul(x, xp.swap_last(router)), "float32")
    top, picked = xp.topk(logits, top_k)
    return xp.softmax(top, axis=-1), picked


def _pick(xp: Any, y: Any, picked: Any, j: int, width: int) -> Any:
    """Row picked[..., j] of every expert's y (B, L, experts, width): (B, L, 1, width)."""
    index = xp.reshape_axes(picked[..., j:j + 1], 2, 3, [1, 1])
    return xp.take_along(y, xp.expand(index, [1, 1, 1, width]), 2)


PROJECTION = _Moa()
