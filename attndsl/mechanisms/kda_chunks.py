"""Kimi delta attention's arithmetic (docs/LANGUAGE.md, Kernels: `kda`), once over an array
namespace (`TorchArrays`, `OnnxArrays`): its gates, and the delta rule with a log decay per key
channel in its chunked form (as transformers' chunk_kimi_delta_attention). Within a chunk of C
tokens the pair decays exp(G_i - G_j) (G the cumulative log decay from the chunk's start, j <= i,
so each is at most 1) are a (C, C, d_k) array per head, formed inside the step that carries the
state, so memory is O(C^2 d_k) per head whatever the length; the unit lower-triangular system
is solved as the delta rule's (`delta_rule_chunks`). Work O(L C d_k (C + d_v)) per head. The
helper of the kernel module `kda.py`."""

from __future__ import annotations

from typing import Any

from .base_recurrent import prepared

__all__ = ["channel_recurrence", "channel_step", "kda_gates"]

Array = Any


def kda_gates(xp, beta_logits: Array, f: Array, a_log: Array, dt_bias: Array,
              lower_bound: float | None) -> tuple[Array, Array]:
    """(beta (B, H, L), g (B, H, L, d_k)), float32, of the beta logits (B, L, H) and the
    forget logits f (B, H, L, d_k): beta = sigmoid(b); with u = f + dt_bias (per head and
    channel) and a = exp(A_log) (per head), g = -a softplus(u), or with a `lower_bound` l,
    g = l sigmoid(a u)."""
    f = xp.astype(f, "float32")
    u = f + xp.reshape(xp.astype(dt_bias, "float32"), [xp.shape(f, 1), 1, xp.shape(f, 3)])
    rate = xp.exp(xp.reshape(xp.astype(a_log, "float32"), [-1, 1, 1]))
    g = (-(rate * xp.softplus(u)) if lower_bound is None
         else xp.sigmoid(rate * u) * lower_bound)
    return xp.swap_last(xp.sigmoid(xp.astype(beta_logits, "float32"))), g


def channel_recurrence(xp, q: Array, k: Array, v: Array, beta: Array, g: Array, chunk: int,
                       scale: float, state: Array | None = None,
                       real: Array | None = None) -> tuple[Array, Array]:
    """(o (B, H, L, dv) in v's dtype, the final state (B, H, dk, dv) float32) of q, k (B, H,
    L, dk), v (B, H, L, dv), beta (B, H, L) and g (B, H, L, dk) (`kda_gates`), from `state` or
    zeros: per head, S_t = D_t S_{t-1} + k_t (beta_t (v_t - (D_t S_{t-1})^T k_t))^T with D_t =
    diag(exp(g_t)), and o_t = S_t^T q_t, q and k L2-normed (q times `scale`). A slot where
    `real` (B, L) is 0 (padding) leaves the state as it is (beta = g = 0 there)."""
    dtype = xp.dtype(v)
    q, k, v, beta, g = prepared(xp, q, k, v, beta, g, scale, 1, real, channels=True)
    B, H, L = xp.shape(v, 0), xp.shape(v, 1), xp.shape(v, 2)
    pad = (chunk - L % chunk) % chunk  # padded tokens: beta = g = 0, k = v = 0, no update
    q, k, v, g, beta = (xp.pad(t, 2, pad) for t in (q, k, v, g, beta))
    if state is None:  # zeros (B, H, dk, dv): a one-token outer product times 0
        state = xp.matmul(xp.swap_last(xp.slice(k, 2, 0, 1)), xp.slice(v, 2, 0, 1) * 0.0)
    qc, kc, vc, gc = (xp.reshape(t, [B, H, -1, chunk, xp.shape(t, 3)]) for t in (q, k, v, g))
    bc = xp.reshape(beta, [B, H, -1, chunk, 1])
    cum = xp.cumsum(gc, axis=3)  # (B, H, n, C, dk): log decay from the chunk's start
    idx = xp.arange(chunk)
    row, col = xp.reshape(idx, [chunk, 1]), xp.reshape(idx, [1, chunk])
    lower, strict = xp.reshape(row >= col, [chunk, chunk, 1]), row > col
    eye, zero = xp.astype(row == col, "float32"), xp.asarray(0.0, "float32")

    def step(s: Array, xs: list[Array]) -> tuple[Array, Array]:
        q_i, k_i, v_i, b_i, c_i = xs  # (B, H, C, d), b_i (B, H, C, 1)
        b_, h_, d = xp.shape(k_i, 0), xp.shape(k_i, 1), xp.shape(k_i, 3)

        def rows(t: Array) -> Array:  # (B, H, C, 1, d): token i against every j
            return xp.reshape(t, [b_, h_, chunk, 1, d])

        cols = xp.reshape(c_i, [b_, h_, 1, chunk, d])
        pair = xp.where(lower, xp.exp(xp.where(lower, rows(c_i) - cols, zero)), zero)
        kj = xp.reshape(k_i, [b_, h_, 1, chunk, d]) * pair  # exp(G_i - G_j) k_j
        kb = k_i * b_i
        m = -xp.where(strict, xp.sum(rows(kb) * kj, axis=-1), zero)
        solve, power, span = eye + m, m, 2
        while span < chunk:  # (I - A)(I + A^2)(I + A^4)... = (I + A)^-1, as the delta rule's
            power = xp.matmul(power, power)
            solve = solve + xp.matmul(solve, power)
            span *= 2
        new = xp.matmul(solve, v_i * b_i) - xp.matmul(xp.matmul(solve, kb * xp.exp(c_i)), s)
        last = xp.slice(c_i, 2, chunk - 1, chunk)  # (B, H, 1, d)
        out = xp.matmul(q_i * xp.exp(c_i), s) + xp.matmul(xp.sum(rows(q_i) * kj, axis=-1), new)
        s = s * xp.swap_last(xp.exp(last)) + xp.matmul(
            xp.swap_last(k_i * xp.exp(last - c_i)), new)
        return s, out

    state, o = xp.scan(step, xp.astype(state, "float32"), [qc, kc, vc, bc, cum], axis=2)
    o = xp.slice(xp.reshape(o, [B, H, -1, xp.shape(o, 4)]), 2, 0, L)
    return xp.astype(o, dtype), state


def channel_step(xp, q: Array, k: Array, v: Array, beta: Array, g: Array, scale: float,
                 state: Array, real: Array | None = None) -> tuple[Array, Array]:
    """`channel_recurrence` for one token (L = 1), a decoding step: the recurrence itself,
    O(dk dv) per head."""
    dtype = xp.dtype(v)
    q, k, v, beta, g = prepared(xp, q, k, v, beta, g, scale, 1, real, channels=True)
    s = xp.astype(state, "float32") * xp.swap_last(xp.exp(g))  # g (B, H, 1, dk): per row
    shape = [xp.shape(v, 0), xp.shape(v, 1), 1, 1]
    delta = (v - xp.matmul(k, s)) * xp.reshape(beta, shape)  # (B, H, 1, dv)
    s = s + xp.matmul(xp.swap_last(k), delta)
    return xp.astype(xp.matmul(q, s), dtype), s
