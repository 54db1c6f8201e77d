"""The IR of multi-head latent attention's projections (DeepSeek-V2/V3, `latent = mla(...)`):
queries through a low-rank bottleneck and its RMSNorm, keys and values from one RMS-normed
latent per token, and a shared RoPE key joined to every head's keys.

One pass expands the latent into every head's keys and values (`latent_heads`), which enter
the attention core as any others. Decoding caches the latent instead (`absorbed_heads`): each
token's normed latent c and its rotated RoPE key, kv_rank + rope_dim values, attended in the
absorbed form (docs/LANGUAGE.md, Latent attention)."""

from __future__ import annotations

from dataclasses import replace

from ..shapes import T
from ..spec import Attention, Norm, Rope
from .graph import GraphBuilder, Op

__all__ = ["absorbed_heads", "latent_heads", "unabsorbed"]


class _Projections:
    """The nodes both forms share: q (B, L, heads * head_dim) and the latent's parts."""

    def __init__(self, b: GraphBuilder, s: Attention, p: str, prefix: str, x: str,
                 pos: tuple[str, ...]):
        self.b, self.s, self.p, self.prefix = b, s, p, prefix
        lat = s.latent
        rms = Norm("rmsnorm", lat.eps)
        self.rope, self.nope = lat.rope_dim, s.head_dim - lat.rope_dim

        def normed(out: str, arg: str, n: int, module: str) -> str:
            return b.emit(Op.NORM, f"{p}{out}", (arg,), T("B", "L", n), kind="rmsnorm",
                          eps=rms.eps, unit_offset=False, module=f"{prefix}{module}",
                          bias=False)

        if lat.q_rank is None:
            q = self.linear("q", x, "q_proj", s.heads * s.head_dim, "q" in s.bias)
        else:
            c = self.linear("q_latent", x, "q_a_proj", lat.q_rank, "q" in s.bias)
            c = normed("q_latent_normed", c, lat.q_rank, "q_a_layernorm")
            q = self.linear("q", c, "q_b_proj", s.heads * s.head_dim, False)
        self.q = q
        self.kv = self.linear("kv_latent", x, "kv_a_proj_with_mqa", lat.kv_rank + self.rope,
                              "k" in s.bias)
        c = b.emit(Op.HEAD_SLICE, f"{p}kv_latent_cols", (self.kv,), T("B", "L", lat.kv_rank),
                   heads=1, start=0, stop=lat.kv_rank)
        self.c = normed("kv_latent_normed", c, lat.kv_rank, "kv_a_layernorm")
        self.q_rot = self.part("q_rot", q, s.heads, self.nope, s.head_dim)
        self.k_rot = self.part("k_rot", self.kv, 1, lat.kv_rank, lat.kv_rank + self.rope)
        if isinstance(s.position, Rope):
            r = s.position
            self.q_rot = b.emit(Op.ROPE, f"{p}q_rope", (self.q_rot, *pos),
                                T("B", s.heads, "L", self.rope), theta=r.theta, dim=self.rope,
                                interleaved=r.interleaved, scaling=r.scaling)
            self.k_rot = b.emit(Op.ROPE, f"{p}k_rope", (self.k_rot, *pos),
                                T("B", 1, "L", self.rope), theta=r.theta, dim=self.rope,
                                interleaved=r.interleaved, scaling=r.scaling)

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


def latent_heads(b: GraphBuilder, s: Attention, p: str, prefix: str, x: str,
                 pos: tuple[str, ...]) -> tuple[str, str, str]:
    """(q (B, H, L, head_dim), k (B, H, L, head_dim), v (B, H, L, value_dim)) of x: each head's
    q and k are its nope = head_dim - rope_dim latent features then its rope_dim rotated ones
    (the key's shared by every head)."""
    m = _Projections(b, s, p, prefix, x, pos)
    heads, nope, dv = s.heads, m.nope, s.value_dim
    expanded = m.linear("kv", m.c, "kv_b_proj", heads * (nope + dv), False)
    q_nope = m.part("q_nope", m.q, heads, 0, nope)
    k_nope = m.part("k_nope", expanded, heads, 0, nope)
    v = m.part("v_heads", expanded, heads, nope, nope + dv)
    q = b.emit(Op.JOIN_HEADS, f"{p}q_heads", (q_nope, m.q_rot), T("B", heads, "L", s.head_dim))
    k = b.emit(Op.JOIN_HEADS, f"{p}k_heads", (k_nope, m.k_rot), T("B", heads, "L", s.head_dim))
    return q, k, v


def absorbed_heads(b: GraphBuilder, s: Attention, p: str, prefix: str, x: str,
                   pos: tuple[str, ...], cache: int,
                   keep: tuple[int, int] | None) -> tuple[str, str, str, Attention]:
    """Decoding: (q, keys, values, the core's attention). The cache `present.{cache}.key`
    (B, 1, P + L, kv_rank + rope_dim) holds each token's normed latent c then its rotated RoPE
    key; the values are its first kv_rank features. Head h's query is its nope features
    times W_uk[h] (kv_b_proj's rows of head h's keys), kv_rank wide, then its rotated ones:
    q·k over [c | k_rope] is the expanded q·k, so the core is one kv head of kv_rank +
    rope_dim features with the layer's own scale, and `unabsorbed` takes its output (each
    head's mix of latents) through W_uv[h]."""
    m = _Projections(b, s, p, prefix, x, pos)
    heads, nope, dv, rank = s.heads, m.nope, s.value_dim, s.latent.kv_rank
    cols = b.emit(Op.HEAD_SLICE, f"{p}q_nope_cols", (m.q,), T("B", "L", heads * nope),
                  heads=heads, start=0, stop=nope)
    absorbed = b.emit(Op.HEAD_LINEAR, f"{p}q_absorbed", (cols,), T("B", "L", heads * rank),
                      weight=f"{prefix}kv_b_proj.weight", heads=heads, block=nope + dv,
                      start=0, stop=nope, transposed=False)
    q_lat = b.emit(Op.SPLIT_HEADS, f"{p}q_latent_heads", (absorbed,),
                   T("B", heads, "L", rank), heads=heads, dim=rank)
    width = rank + m.rope
    q = b.emit(Op.JOIN_HEADS, f"{p}q_heads", (q_lat, m.q_rot), T("B", heads, "L", width))
    c = b.emit(Op.SPLIT_HEADS, f"{p}c_heads", (m.c,), T("B", 1, "L", rank), heads=1, dim=rank)
    k = b.emit(Op.JOIN_HEADS, f"{p}k_heads", (c, m.k_rot), T("B", 1, "L", width))
    shape, past = T("B", 1, "P + L", width), f"past_key_values.{cache}.key"
    if keep is None:
        k = b.emit(Op.CACHE, f"present.{cache}.key", (past, k), shape)
    else:
        k = b.emit(Op.CACHE, f"{p}key_cache", (past, k), shape)
        b.emit(Op.TAIL, f"present.{cache}.key", (k,), T("B", 1, f"<= {sum(keep)}", width),
               keep=keep[1], sinks=keep[0])
    v = b.emit(Op.HEAD_SLICE, f"{p}latent_values", (k,), T("B", 1, "P + L", rank), heads=1,
               start=0, stop=rank)
    return q, k, v, replace(s, kv_heads=1, head_dim=width, value_dim=rank)


def unabsorbed(b: GraphBuilder, s: Attention, p: str, prefix: str, o: str) -> str:
    """The absorbed core's merged heads (B, L, heads * kv_rank) -> (B, L, heads * value_dim):
    head h's mix of latents times W_uv[h]^T (kv_b_proj's rows of head h's values)."""
    nope, dv = s.head_dim - s.latent.rope_dim, s.value_dim
    return b.emit(Op.HEAD_LINEAR, f"{p}values", (o,), T("B", "L", s.heads * dv),
                  weight=f"{prefix}kv_b_proj.weight", heads=s.heads, block=nope + dv,
                  start=nope, stop=nope + dv, transposed=True)
