"""Reformer's LSH attention (`kernel = lsh(buckets, rounds = 1, chunk = 64, seed = 0)`, Kitaev
et al. 2020): a shared query/key projection, queries hashed by `rounds` seeded random rotations
into `buckets` buckets, sorted by (bucket, position) and attended in chunks of `chunk` with the
previous chunk; the rounds merged by their log-sum-exp. docs/LANGUAGE.md (Kernels) has every
step. A kernel module (`base_kernel.Kernel`): its value, checks, node and arithmetic."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .. import masks as m
from ..ir.graph import Op
from ..shapes import T
from ..spec import Learned, Sinusoidal
from .base import Site
from .base_kernel import Kernel, KernelWhere

__all__ = ["KERNEL", "MAX_ROTATIONS", "LshKernel", "attend", "rotations"]

MAX_ROTATIONS = 2**26  # numbers drawn into the graph (256 MB of float32)
# the hooks whose mechanisms transform queries or keys apart, or modify the scores: an LSH
# kernel's keys are its normalised queries, and its chunks are its sparsity
_APART = ("projected", "heads", "rotated", "query", "scores")


@dataclass(frozen=True)
class LshKernel:
    """The spec's value: `buckets` (even), hash `rounds`, `chunk` length, rotation `seed`."""

    name: ClassVar[str] = "lsh"
    buckets: int
    rounds: int
    chunk: int
    seed: int


class _Lsh(Kernel):
    name = "lsh"
    params = (("buckets", True), ("rounds", False), ("chunk", False), ("seed", False))
    described = "an LSH kernel"
    shares_keys = True
    own_projections = "its keys are its queries, while the variants share one k projection"
    scores = False
    undecodable = ("whose buckets and chunks are those of the whole sequence: a cache of "
                   "earlier keys cannot say which a new token would share a chunk with")
    inferred_shapes = True  # its chunk arithmetic's guards hold at every length, unprovably
    attributes = ("heads", "dim", "buckets", "rounds", "chunk", "seed", "scale", "causal",
                  "keys")

    def read(self, c: Any, args: dict) -> LshKernel:
        return LshKernel(
            c.positive(args["buckets"], "LSH buckets"),
            c.positive(args["rounds"], "LSH rounds") if "rounds" in args else 1,
            c.positive(args["chunk"], "LSH chunk") if "chunk" in args else 64,
            c.non_negative(args["seed"], "LSH seed") if "seed" in args else 0)

    def conflicts(self, c: Any, kernel: LshKernel, where: KernelWhere) -> bool:
        """Keys are the (normalised) queries of the same sequence, so no k projection, no
        cross attention, no kv groups; masks `causal` and `padding`. Its rotations (heads x
        head_dim x rounds x buckets / 2 numbers) are drawn into the graph: at most
        MAX_ROTATIONS."""
        from ..check.kernels import arg_span, mask_nodes
        from . import MECHANISMS

        failed, e, at = False, where.entries, where.at
        span = at("kernel")
        features = where.heads * where.head_dim
        if kernel.buckets % 2 or kernel.buckets < 2:
            c.error(f"LSH buckets must be even and at least 2, found {kernel.buckets}: a "
                    "rotation of buckets / 2 directions gives each a + and a - bucket",
                    arg_span(e["kernel"].value, "buckets") or span)
            failed = True
        elif features * kernel.rounds * (kernel.buckets // 2) > MAX_ROTATIONS:
            c.error(f"an LSH kernel's rotations would hold heads x head_dim x rounds x "
                    f"buckets / 2 = {features * kernel.rounds * (kernel.buckets // 2):,} "
                    f"numbers; attndsl caps them at {MAX_ROTATIONS:,}", span,
                    hint="Reformer used 2 to 8 rounds of up to a few hundred buckets")
            failed = True
        if where.kind == "cross":
            c.error("an LSH kernel needs self attention: its keys are its queries (shared "
                    "query/key projection)", at("kind"), hint="use kind = self")
            failed = True
        if where.kv_heads != where.heads:
            c.error("an LSH kernel's keys are its queries: kv_heads must equal heads",
                    at("kv_heads"), hint="remove kv_heads")
            failed = True
        if where.bias is not None and "k" in where.bias and "bias" in e:
            c.error("an LSH kernel has no k projection (keys are the queries), so no k bias",
                    at("bias"), hint="list only q, v and o")
            failed = True
        allowed = (m.Full, m.Causal, m.Padding)
        if where.mask is not None and (
                any(not isinstance(p, allowed) for p in m.primitives(where.mask)) or
                any(isinstance(p, m.Not | m.Or) for p in mask_nodes(where.mask))):
            c.error(f"an LSH kernel honours `full`, `causal`, `padding` and `&` of them, "
                    f"found `{m.render(where.mask)}`: a query sees only the keys hashed near it",
                    at("mask"), hint="use `mask = causal & padding`, or `kernel = softmax`")
            failed = True
        position = where.position
        if position is not None and not isinstance(position, Sinusoidal | Learned):
            c.error("an LSH kernel takes absolute positions only (sinusoidal, learned): "
                    "keys are the hashed queries themselves", at("position"),
                    hint="add positions to x with `sinusoidal` or `learned(max_len)`")
            failed = True
        apart = [key for key, mech in MECHANISMS.items() if mech.hook in _APART]
        for key in (*apart, "sparsity"):
            if key in e and getattr(e[key].value, "id", None) not in ("none", "auto"):
                c.error(f"`{key}` does not apply to an LSH kernel (its keys are normalised "
                        "queries and its chunks are its sparsity)", e[key].key_span,
                        hint=f"remove `{key}`")
                failed = True
        if where.dropout:
            c.error("attention dropout is not implemented for an LSH kernel",
                    e["dropout"].key_span, hint="remove `dropout`")
            failed = True
        return failed

    def lengths(self, kernel: LshKernel) -> dict[int, str]:
        c = kernel.chunk
        return {c: f"one LSH chunk ({c})", c + 1: f"one past an LSH chunk ({c})"}

    def pairs(self, kernel: LshKernel, batch: int, length: int, keys: int) -> int:
        """Per round, each query scores two chunks (all pairs within one chunk)."""
        if kernel.chunk >= length:
            return batch * length * length
        return batch * kernel.rounds * length * 2 * kernel.chunk

    def describe(self, kernel: LshKernel) -> str:
        return (f"lsh: of these, a query sees only the tokens hashed near it (its chunk of "
                f"{kernel.chunk} and the one before, in each of {kernel.rounds} hash round(s)), "
                "chosen at run time from the queries; itself only when nothing else is "
                "visible")

    def mask(self, node: Any) -> m.Mask:
        """Causal, & the padding of its keys."""
        keys = node.attr("keys")
        if not node.attr("causal"):
            return keys
        return m.Causal() if keys == m.Full() else m.And(m.Causal(), keys)

    def expand(self, site: Site, kernel: LshKernel, q: str, k: str | None, v: str) -> str:
        """On the shared query/key heads: `keys` is the mask's padding part (the keys it
        shows), `causal` whether it is causal too."""
        s = site.spec
        pads = [p for p in m.primitives(s.mask) if isinstance(p, m.Padding)]
        keys = functools.reduce(m.And, pads) if pads else m.Full()
        causal = any(isinstance(p, m.Causal) for p in m.primitives(s.mask))
        return site.b.emit(Op.KERNEL, f"{site.p}attn", (q, v, *s.runtime_inputs),
                           T("B", s.heads, "L", s.value_dim), kernel=self.name,
                           heads=s.heads, dim=s.head_dim, buckets=kernel.buckets,
                           rounds=kernel.rounds, chunk=kernel.chunk, seed=kernel.seed,
                           scale=s.scale, causal=causal, keys=keys)

    def apply(self, xp: Any, q: Any, k: Any, v: Any, kept: Any, *, heads: int, dim: int,
              buckets: int, rounds: int, chunk: int, seed: int, scale: float, causal: bool,
              keys: Any) -> Any:
        return attend(xp, q, v, kept, causal, rotations(seed, heads, dim, rounds, buckets),
                      buckets, rounds, chunk, scale)


SELF_SCORE = -1e5  # a token's score with itself (kept only when it has no other key)
HIDDEN_SCORE = -1e9  # a masked key's score (finite, as Reformer's: every row has its self)
NORM_EPS = 1e-6


def rotations(seed: int, heads: int, dim: int, rounds: int, buckets: int) -> np.ndarray:
    """The random rotations R [heads, dim, rounds * buckets / 2] (float32) of an LSH kernel,
    drawn as docs/LANGUAGE.md (Kernels) says: standard normals by Box-Muller from the
    Park-Miller stream (multiplier 48271, modulus 2^31 - 1) started at seed mod (2^31 - 2) + 1,
    in C order of [heads, dim, rounds, buckets / 2]."""
    P, M = 2147483647, 48271
    n = heads * dim * rounds * (buckets // 2)
    state = seed % (P - 1) + 1
    u = np.empty(n + n % 2)
    for t in range(len(u)):
        state = state * M % P
        u[t] = state / P
    radius = np.sqrt(-2.0 * np.log(u[0::2]))
    angle = 2.0 * np.pi * u[1::2]
    z = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=-1).reshape(-1)[:n]
    return z.reshape(heads, dim, rounds * (buckets // 2)).astype(np.float32)


def attend(xp, q: Any, v: Any, kept: Any | None, causal: bool,
                  rotations: Any, buckets: int, rounds: int, chunk: int,
                  scale: float) -> Any:
    """Reformer's LSH attention, docs/LANGUAGE.md (Kernels): q (B, H, L, d) the shared
    query/key heads, v (B, H, L, dv), `kept` (B|1, L) the keys the padding mask shows (None:
    all), `rotations` (H, d, rounds * buckets / 2) float32. Float32 throughout; returns
    (B, H, L, dv) in v's dtype.

    The L tokens are padded to Lp (a multiple of `chunk`, at least two) with hidden slots.
    Per round, each token's bucket is the argmax of [xR, -xR]; hidden keys and slots take
    bucket `buckets`. Sorting by bucket * Lp + position orders a round; the rounds' orders are
    laid end to end and cut into chunks, and a chunk's queries see its own and the previous
    chunk's keys (cyclically over all rounds' chunks; with L <= chunk the previous chunk holds
    only empty slots, so a round sees its tokens once). Keys are the
    queries over their RMS; a key the mask hides scores -1e9, the token itself -1e5. Each
    round's output is merged by the softmax of the rounds' log-sum-exps."""
    dtype = xp.dtype(v)
    q, v = xp.astype(q, "float32"), xp.astype(v, "float32")
    B, H, L, d, dv = xp.shape(q, 0), xp.shape(q, 1), xp.shape(q, 2), xp.shape(q, 3), \
        xp.shape(v, 3)
    c, half = chunk, buckets // 2
    # at least two chunks a round: with L <= c the second holds only empty slots, so a
    # chunk's previous one adds nothing and the round is standard attention, in one shape
    Lp = xp.int_max((L + (c - 1)) // c, 2) * c
    q, v = xp.pad(q, 2, Lp - L), xp.pad(v, 2, Lp - L)
    pos = xp.arange(Lp)  # (Lp,)
    real = pos < L
    if kept is not None:  # (B|1, L) -> (B|1, 1, 1, Lp)
        # padded as float32: ONNX Runtime's CUDA provider has no int64 Pad kernel
        shown = xp.pad(xp.astype(kept, "float32"), 1, Lp - L) > 0
        real = xp.reshape(real & shown, [-1, 1, 1, Lp])
    # hash: per round, the argmax of [xR, -xR] over the round's buckets / 2 directions
    rotated = xp.reshape(xp.matmul(q, xp.asarray(rotations, "float32")), [B, H, Lp, rounds, half])
    bucket = xp.swap_last(xp.argmax(xp.concat([rotated, -rotated], axis=-1), axis=-1))
    bucket = xp.where(real, bucket, xp.asarray(buckets, "int64"))  # (B, H, rounds, Lp)
    order, idx = xp.sort(bucket * Lp + pos)  # per round: by bucket, then position
    shown_key = order < buckets * Lp  # not a hidden key's bucket, not a padding slot
    rows = xp.reshape(xp.arange(B * H) * Lp, [B, H, 1, 1])

    def gather(t: Any, width: Any) -> Any:  # rows of (B, H, Lp, w) in sorted order
        return xp.take(xp.reshape(t, [-1, width]), idx + rows, 0)  # (B, H, rounds, Lp, w)

    qc = xp.reshape(gather(q, d), [B, H, -1, c, d])  # (B, H, N, c, d), N = rounds * Lp / c
    vc = xp.reshape(gather(v, dv), [B, H, -1, c, dv])
    pc = xp.reshape(idx, [B, H, -1, c])
    sc = xp.reshape(shown_key, [B, H, -1, c])
    kc = qc / xp.sqrt(xp.mean(qc * qc, axis=-1, keepdims=True) + NORM_EPS)

    def look_back(t: Any) -> Any:  # the previous chunk's then the chunk's own, on axis 3
        previous = xp.concat([xp.slice(t, 2, -1, None), xp.slice(t, 2, 0, -1)], axis=2)
        return xp.concat([previous, t], axis=3)

    k, vk, pk, sk = look_back(kc), look_back(vc), look_back(pc), look_back(sc)
    s = xp.matmul(qc, xp.swap_last(k)) * scale  # (B, H, N, c, 2c)
    q_pos, k_pos = pc[..., None], pk[:, :, :, None, :]
    hidden = ~sk[:, :, :, None, :]
    if causal:
        hidden = hidden | (k_pos > q_pos)
    s = xp.where(hidden, xp.asarray(HIDDEN_SCORE, "float32"), s)
    s = xp.where(k_pos == q_pos, xp.asarray(SELF_SCORE, "float32"), s)
    top = xp.amax(s, axis=-1, keepdims=True)
    e = xp.exp(s - top)
    total = xp.sum(e, axis=-1, keepdims=True)
    # normalised by the sum itself, not by exp(-lse): near -1e5 (a token alone with itself)
    # float32 holds the log-sum-exp only to 2^-7, which would scale the row by up to 0.4 %
    o = xp.matmul(e / total, vk)  # (B, H, N, c, dv)
    lse = top + xp.log(total)  # (B, H, N, c, 1)
    _, back = xp.sort(idx)  # each position's place in its round's order
    back = back + xp.reshape(xp.arange(B * H * rounds) * Lp, [B, H, rounds, 1])
    o = xp.take(xp.reshape(o, [-1, dv]), back, 0)  # (B, H, rounds, Lp, dv)
    if rounds > 1:
        weight = xp.softmax(xp.take(xp.reshape(lse, [-1]), back, 0), axis=2)  # (B, H, r, Lp)
        o = xp.sum(o * weight[..., None], axis=2, keepdims=False)
    else:
        o = xp.reshape(o, [B, H, Lp, dv])
    return xp.astype(xp.take(o, xp.arange(L), 2), dtype)


KERNEL = _Lsh()
