"""Multi-head latent attention (DeepSeek-V2/V3, `latent = mla(kv_rank, rope_dim, q_rank = none,
eps = 1e-6)`): queries through a low-rank bottleneck and its RMSNorm, keys and values from one
RMS-normed latent per token, and a shared RoPE key joined to every head's keys. A projection
form (`base_projection.Projection`): its value, checks, weights, nodes and cache layout.

One pass expands the latent into every head's keys and values (`heads`), which enter the
attention core as any others. Decoding caches the latent instead (`decoding`): each token's
normed latent c and its rotated RoPE key, kv_rank + rope_dim values, attended in the absorbed
form (docs/LANGUAGE.md, Latent attention), whose output `merged` takes through W_uv. Its
nodes are generic ops: `join_heads` (features of two sets of heads side by side) and
`head_linear` (each head's features times its own rows of a weight)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from .. import ast
from ..ir.graph import Op
from ..shapes import T
from ..spec import Rope, Softmax
from ..weight_table import Weight, linear_weights
from .base import Site
from .base_projection import Projection, ProjectionWhere

__all__ = ["PROJECTION", "Latent"]


@dataclass(frozen=True)
class Latent:
    """Multi-head latent attention (DeepSeek-V2/V3, `latent = mla(...)`): queries through a
    rank-`q_rank` bottleneck with its RMSNorm (or one projection without it), keys and values
    from one RMS-normed latent of `kv_rank` features per token, and a shared key of `rope_dim`
    features that RoPE rotates beside the last rope_dim features of each query head."""

    key: ClassVar[str] = "latent"
    kv_rank: int
    rope_dim: int
    q_rank: int | None
    eps: float


_PARAMS = (("kv_rank", True), ("rope_dim", True), ("q_rank", False), ("eps", False))


class _Latent(Projection):
    key = "latent"
    name = "mla"
    params = _PARAMS
    cache = ("key",)  # each token's latent and RoPE key: the values are the latent
    genai = "latent attention (`{name}`) caches one latent row per token, no values"

    def read(self, c: Any, e: ast.Expr) -> Latent | None:
        """`none` or `mla(kv_rank = r, rope_dim = n, q_rank = none | m, eps = 1e-6)`."""
        from ..check.values import Param

        if isinstance(e, ast.Name) and e.id == "none":
            return None
        c.callee(e, {"mla": None}, "latent")
        args = c.bind(e, "mla", tuple(Param(n, required) for n, required in _PARAMS))
        q_rank = None
        if "q_rank" in args and not (isinstance(args["q_rank"], ast.Name)
                                     and args["q_rank"].id == "none"):
            q_rank = c.positive(args["q_rank"], "q_rank")
        rope_dim = c.positive(args["rope_dim"], "rope_dim")
        if rope_dim % 2:
            raise c.error(f"rope_dim must be even (RoPE rotates pairs), found {rope_dim}",
                          args["rope_dim"].span, hint="DeepSeek-V3: rope_dim = 64")
        eps = c.eps(args, 1e-6, "the latent norms'")
        return Latent(c.positive(args["kv_rank"], "kv_rank"), rope_dim, q_rank, eps)

    def conflicts(self, c: Any, latent: Latent, where: ProjectionWhere) -> bool:
        """Self attention with a softmax core, a kv head per head, RoPE on rope_dim features
        or no positions, and none of the keys whose projections or per-head arithmetic it
        replaces (the mechanisms without `with_projection`)."""
        from . import MECHANISMS

        e, at, heads, head_dim = where.entries, where.at, where.heads, where.head_dim
        position = where.position
        problems = []
        if where.kind != "self":
            problems.append(("latent attention projects keys and values from the tokens "
                             "themselves: it is self attention", at("kind"),
                             "remove `kind = cross`"))
        if not isinstance(where.kernel, Softmax):
            problems.append(("latent attention is a softmax attention", at("kernel"),
                             "use `kernel = softmax`"))
        if where.kv_heads not in (None, heads):
            problems.append((f"every head has its own keys and values from the latent: "
                             f"kv_heads must be heads ({heads})", at("kv_heads"),
                             "remove `kv_heads`"))
        if head_dim <= latent.rope_dim:
            problems.append((f"head_dim ({head_dim}) is the latent part's width plus "
                             f"rope_dim ({latent.rope_dim}): it must be larger", at("latent"),
                             "DeepSeek-V3: head_dim = 192 (128 + 64)"))
        if isinstance(position, Rope) and position.dim != latent.rope_dim:
            problems.append(("RoPE rotates the last rope_dim features of each head and the "
                             "shared key: `dim` is rope_dim", at("position"),
                             "remove `dim` from rope(...)"))
        elif position is not None and not isinstance(position, Rope):
            problems.append(("latent attention's positions are RoPE on its rope_dim features",
                             at("position"), "use `position = rope(...)` or none"))
        for key in (key for key, m in MECHANISMS.items() if not m.with_projection):
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "false")):
                problems.append((f"`{key}` and latent attention do not combine", at(key),
                                 f"remove `{key}`"))
        for message, span, hint in problems:
            c.error(message, span, hint=hint)
        return bool(problems)

    def rotated(self, latent: Latent) -> int:
        return latent.rope_dim

    def weights(self, s: Any, lat: Latent, p: str) -> list:
        """Its projections and norms (HF DeepseekV3Attention's)."""
        def norm(name: str, width: int) -> list:  # an RMSNorm's gain, no bias
            return [Weight(f"{name}.weight", (width,), "norm_weight")]

        from . import query_rows

        out, rows = [], s.heads * query_rows(s)  # (the mechanisms' rows after each head's)
        if lat.q_rank is None:
            out += linear_weights(f"{p}q_proj", rows, s.d_model, "q" in s.bias)
        else:
            out += linear_weights(f"{p}q_a_proj", lat.q_rank, s.d_model, "q" in s.bias)
            out += norm(f"{p}q_a_layernorm", lat.q_rank)
            out += linear_weights(f"{p}q_b_proj", rows, lat.q_rank, False)
        out += linear_weights(f"{p}kv_a_proj_with_mqa", lat.kv_rank + lat.rope_dim, s.d_model,
                              "k" in s.bias)
        out += norm(f"{p}kv_a_layernorm", lat.kv_rank)
        out += linear_weights(f"{p}kv_b_proj", s.heads * (s.head_dim - lat.rope_dim
                                                         + s.value_dim), lat.kv_rank, False)
        return out

    def heads(self, site: Site, lat: Latent, x: str) -> tuple[str, str, str]:
        """(q (B, H, L, head_dim), k (B, H, L, head_dim), v (B, H, L, value_dim)) of x: each
        head's q and k are its nope = head_dim - rope_dim latent features then its rope_dim
        rotated ones (the key's shared by every head)."""
        b, s, p = site.b, site.spec, site.p
        m = _Projections(site, lat, x)
        heads, nope, dv = s.heads, m.nope, s.value_dim
        expanded = m.linear("kv", m.c, "kv_b_proj", heads * (nope + dv), False)
        q_nope = m.part("q_nope", m.q, heads, 0, nope)
        k_nope = m.part("k_nope", expanded, heads, 0, nope)
        v = m.part("v_heads", expanded, heads, nope, nope + dv)
        q = b.emit(Op.JOIN_HEADS, f"{p}q_heads", (q_nope, m.q_rot),
                   T("B", heads, "L", s.head_dim))
        k = b.emit(Op.JOIN_HEADS, f"{p}k_heads", (k_nope, m.k_rot),
                   T("B", heads, "L", s.head_dim))
        return (q, k, v, *_selection(site, lat, m, x, None, None))

    def decoding(self, site: Site, lat: Latent, x: str, cache: int,
                 keep: tuple[int, int] | None) -> tuple[str, str, str, Any]:
        """The cache `present.{cache}.key` (B, 1, P + L, kv_rank + rope_dim) holds each
        token's normed latent c then its rotated RoPE key; the values are its first kv_rank
        features. Head h's query is its nope features times W_uk[h] (kv_b_proj's rows of head
        h's keys), kv_rank wide, then its rotated ones: q·k over [c | k_rope] is the expanded
        q·k, so the core is one kv head of kv_rank + rope_dim features with the layer's own
        scale, and `merged` takes its output (each head's mix of latents) through W_uv[h]."""
        b, s, p = site.b, site.spec, site.p
        m = _Projections(site, lat, x)
        heads, nope, dv, rank = s.heads, m.nope, s.value_dim, lat.kv_rank
        cols = b.emit(Op.HEAD_SLICE, f"{p}q_nope_cols", (m.q,), T("B", "L", heads * nope),
                      heads=heads, start=0, stop=nope)
        absorbed = b.emit(Op.HEAD_LINEAR, f"{p}q_absorbed", (cols,), T("B", "L", heads * rank),
                          weight=f"{site.prefix}kv_b_proj.weight", heads=heads,
                          block=nope + dv, start=0, stop=nope, transposed=False)
        q_lat = b.emit(Op.SPLIT_HEADS, f"{p}q_latent_heads", (absorbed,),
                       T("B", heads, "L", rank), heads=heads, dim=rank)
        width = rank + m.rope
        q = b.emit(Op.JOIN_HEADS, f"{p}q_heads", (q_lat, m.q_rot), T("B", heads, "L", width))
        c = b.emit(Op.SPLIT_HEADS, f"{p}c_heads", (m.c,), T("B", 1, "L", rank), heads=1,
                   dim=rank)
        k = b.emit(Op.JOIN_HEADS, f"{p}k_heads", (c, m.k_rot), T("B", 1, "L", width))
        shape, past = T("B", 1, "P + L", width), f"past_key_values.{cache}.key"
        if keep is None:
            k = b.emit(Op.CACHE, f"present.{cache}.key", (past, k), shape)
        else:
            k = b.emit(Op.CACHE, f"{p}key_cache", (past, k), shape)
            b.emit(Op.TAIL, f"present.{cache}.key", (k,), T("B", 1, f"<= {sum(keep)}", width),
                   keep=keep[1], first=keep[0])
        v = b.emit(Op.HEAD_SLICE, f"{p}latent_values", (k,), T("B", 1, "P + L", rank),
                   heads=1, start=0, stop=rank)
        return (q, k, v, replace(s, kv_heads=1, head_dim=width, value_dim=rank),
                *_selection(site, lat, m, x, cache, keep))

    def merged(self, site: Site, lat: Latent, o: str) -> str:
        """The absorbed core's merged heads (B, L, heads * kv_rank) -> (B, L, heads *
        value_dim): head h's mix of latents times W_uv[h]^T (kv_b_proj's rows of head h's
        values)."""
        s = site.spec
        nope, dv = s.head_dim - lat.rope_dim, s.value_dim
        return site.b.emit(Op.HEAD_LINEAR, f"{site.p}values", (o,), T("B", "L", s.heads * dv),
                           weight=f"{site.prefix}kv_b_proj.weight", heads=s.heads,
                           block=nope + dv, start=nope, stop=nope + dv, transposed=True)

    def cache_type(self, a: Any, lat: Latent, entry: str, rows: str) -> Any:
        """One latent and RoPE key per token."""
        return T("B", 1, rows, lat.kv_rank + lat.rope_dim, dtype="float")


def _selection(site: Site, lat: Latent, m: _Projections, x: str, cache: int | None,
               keep: tuple[int, int] | None) -> tuple[str, ...]:
    """(the selection of keys,) where a mechanism at the `keys` hook chooses them (the core's
    score bias `indexed`), else ()."""
    from . import at

    return tuple(mechanism.selection(replace(site, n="P + L" if cache is not None else "L"),
                                     value, m.c_q, x,
                                     lat.rope_dim if isinstance(site.spec.position, Rope)
                                     else 0, cache, keep)
                 for mechanism, value in at(site.spec, "keys"))


class _Projections:
    """The nodes both forms share: q (B, L, heads * head_dim) and the latent's parts."""

    def __init__(self, site: Site, lat: Latent, x: str):
        b, s, p, prefix, pos = site.b, site.spec, site.p, site.prefix, site.pos
        self.b, self.p, self.prefix = b, p, prefix
        self.rope, self.nope = lat.rope_dim, s.head_dim - lat.rope_dim

        def normed(out: str, arg: str, n: int, module: str) -> str:
            return b.emit(Op.NORM, f"{p}{out}", (arg,), T("B", "L", n), kind="rmsnorm",
                          eps=lat.eps, unit_offset=False, module=f"{prefix}{module}",
                          bias=False)

        from . import projected, query_rows

        rows = s.heads * query_rows(s)  # the mechanisms' rows follow each head's (Ling 3's)
        self.c_q = None  # the normed query latent (a `keys` hook mechanism's queries read it)
        if lat.q_rank is None:
            q = self.linear("q", x, "q_proj", rows, "q" in s.bias)
        else:
            c = self.linear("q_latent", x, "q_a_proj", lat.q_rank, "q" in s.bias)
            self.c_q = c = normed("q_latent_normed", c, lat.q_rank, "q_a_layernorm")
            q = self.linear("q", c, "q_b_proj", rows, False)
        self.q = q = projected(site, q)
        self.kv = self.linear("kv_latent", x, "kv_a_proj_with_mqa", lat.kv_rank + self.rope,
                              "k" in s.bias)
        c = b.emit(Op.HEAD_SLICE, f"{p}kv_latent_cols", (self.kv,), T("B", "L", lat.kv_rank),
                   heads=1, start=0, stop=lat.kv_rank)
        self.c = normed("kv_latent_normed", c, lat.kv_rank, "kv_a_layernorm")
        self.q_rot = self.part("q_rot", q, s.heads, self.nope, s.head_dim)
        self.k_rot = self.part("k_rot", self.kv, 1, lat.kv_rank, lat.kv_rank + self.rope)
        if isinstance(s.position, Rope):
            self.q_rot = b.emit(Op.ROPE, f"{p}q_rope", (self.q_rot, *pos),
                                T("B", s.heads, "L", self.rope), **s.position.attrs(self.rope))
            self.k_rot = b.emit(Op.ROPE, f"{p}k_rope", (self.k_rot, *pos),
                                T("B", 1, "L", self.rope), **s.position.attrs(self.rope))

    def linear(self, out: str, arg: str, proj: str, n: int, bias: bool) -> str:
        return self.b.emit(Op.LINEAR, f"{self.p}{out}", (arg,), T("B", "L", n),
                           weight=f"{self.prefix}{proj}.weight",
                           bias=f"{self.prefix}{proj}.bias" if bias else None)

    def part(self, out: str, arg: str, h: int, start: int, stop: int) -> str:
        """Features start .. stop - 1 of each of h heads, split into heads."""
        cols = self.b.emit(Op.HEAD_SLICE, f"{self.p}{out}_cols", (arg,),
                           T("B", "L", h * (stop - start)), heads=h, start=start, stop=stop)
        return self.b.emit(Op.SPLIT_HEADS, f"{self.p}{out}", (cols,),
                           T("B", h, "L", stop - start), heads=h, dim=stop - start)


PROJECTION = _Latent()
