"""The IR of multi-head latent attention's projections (DeepSeek-V2/V3, `latent = mla(...)`):
queries through a low-rank bottleneck and its RMSNorm, keys and values from one RMS-normed
latent per token, and a shared RoPE key joined to every head's keys. The heads it returns
enter the attention core as any others."""

from __future__ import annotations

from ..shapes import T
from ..spec import Attention, Norm, Rope
from .graph import GraphBuilder, Op

__all__ = ["latent_heads"]


def latent_heads(b: GraphBuilder, s: Attention, p: str, prefix: str, x: str,
                 pos: tuple[str, ...]) -> tuple[str, str, str]:
    """(q (B, H, L, head_dim), k (B, H, L, head_dim), v (B, H, L, value_dim)) of x: each head's
    q and k are its nope = head_dim - rope_dim latent features then its rope_dim rotated ones
    (the key's shared by every head)."""
    lat, heads, width = s.latent, s.heads, s.head_dim
    rope, nope, dv = lat.rope_dim, s.head_dim - lat.rope_dim, s.value_dim
    rms = Norm("rmsnorm", lat.eps)

    def linear(out: str, arg: str, proj: str, n: int, bias: bool) -> str:
        return b.emit(Op.LINEAR, f"{p}{out}", (arg,), T("B", "L", n),
                      weight=f"{prefix}{proj}.weight",
                      bias=f"{prefix}{proj}.bias" if bias else None)

    def normed(out: str, arg: str, n: int, module: str) -> str:
        return b.emit(Op.NORM, f"{p}{out}", (arg,), T("B", "L", n), kind="rmsnorm",
                      eps=rms.eps, unit_offset=False, module=f"{prefix}{module}", bias=False)

    def part(out: str, arg: str, h: int, start: int, stop: int) -> str:
        """Features start .. stop - 1 of each of h heads, split into heads."""
        cols = b.emit(Op.HEAD_SLICE, f"{p}{out}_cols", (arg,), T("B", "L", h * (stop - start)),
                      heads=h, start=start, stop=stop)
        return b.emit(Op.SPLIT_HEADS, f"{p}{out}", (cols,), T("B", h, "L", stop - start),
                      heads=h, dim=stop - start)

    if lat.q_rank is None:
        q = linear("q", x, "q_proj", heads * width, "q" in s.bias)
    else:
        c = linear("q_latent", x, "q_a_proj", lat.q_rank, "q" in s.bias)
        c = normed("q_latent_normed", c, lat.q_rank, "q_a_layernorm")
        q = linear("q", c, "q_b_proj", heads * width, False)
    kv = linear("kv_latent", x, "kv_a_proj_with_mqa", lat.kv_rank + rope, "k" in s.bias)
    c = b.emit(Op.HEAD_SLICE, f"{p}kv_latent_cols", (kv,), T("B", "L", lat.kv_rank), heads=1,
               start=0, stop=lat.kv_rank)
    c = normed("kv_latent_normed", c, lat.kv_rank, "kv_a_layernorm")
    expanded = linear("kv", c, "kv_b_proj", heads * (nope + dv), False)
    k_rot = part("k_rot", kv, 1, lat.kv_rank, lat.kv_rank + rope)
    q_nope, q_rot = part("q_nope", q, heads, 0, nope), part("q_rot", q, heads, nope, width)
    k_nope = part("k_nope", expanded, heads, 0, nope)
    v = part("v_heads", expanded, heads, nope, nope + dv)
    if isinstance(s.position, Rope):
        r = s.position
        q_rot = b.emit(Op.ROPE, f"{p}q_rope", (q_rot, *pos), T("B", heads, "L", rope),
                       theta=r.theta, dim=rope, interleaved=r.interleaved, scaling=r.scaling)
        k_rot = b.emit(Op.ROPE, f"{p}k_rope", (k_rot, *pos), T("B", 1, "L", rope),
                       theta=r.theta, dim=rope, interleaved=r.interleaved, scaling=r.scaling)
    q = b.emit(Op.JOIN_HEADS, f"{p}q_heads", (q_nope, q_rot), T("B", heads, "L", width))
    k = b.emit(Op.JOIN_HEADS, f"{p}k_heads", (k_nope, k_rot), T("B", heads, "L", width))
    return q, k, v
