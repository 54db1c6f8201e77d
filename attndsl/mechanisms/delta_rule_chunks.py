"""The gated delta rule's arithmetic (docs/LANGUAGE.md, Kernels: `delta_rule`), once over an
array namespace (`TorchArrays`, `OnnxArrays`) as `backends.formulas` is: the gates, and the
recurrence in its chunked form (Yang et al. 2024, "Gated Delta Networks"; as transformers'
torch_chunk_gated_delta_rule): within a chunk of C tokens the updates are matrix products,
the unit lower-triangular system (I + A) solved as the product (I - A)(I + A^2)(I + A^4)...
(A is nilpotent: A^C = 0), and one sequential step per chunk carries the state (`scan`: a
loop in torch, ONNX `Scan`). Work O(L C d + L d^2) per head. The helper of the kernel module
`delta_rule.py`."""

from __future__ import annotations

from typing import Any

from .base_recurrent import prepared

__all__ = ["delta_gates", "delta_step", "recurrence"]

Array = Any


def delta_gates(xp, beta_logits: Array, decay_logits: Array, a_log: Array,
                dt_bias: Array, negative: bool = False) -> tuple[Array, Array]:
    """(beta, g), float32 (B, H, L), of the logits (B, L, H): beta = sigmoid(b) (2 sigmoid(b)
    with `negative` eigenvalues) and the log decay g = -exp(A_log) softplus(a + dt_bias)."""
    b, a = xp.astype(beta_logits, "float32"), xp.astype(decay_logits, "float32")
    g = -(xp.exp(xp.astype(a_log, "float32")) * xp.softplus(a + xp.astype(dt_bias, "float32")))
    beta = xp.sigmoid(b)
    return xp.swap_last(beta * 2.0 if negative else beta), xp.swap_last(g)


def recurrence(xp, q: Array, k: Array, v: Array, beta: Array, g: Array, chunk: int,
               scale: float, groups: int, state: Array | None = None,
               real: Array | None = None) -> tuple[Array, Array]:
    """(o (B, H, L, dv) in v's dtype, the final state (B, H, dk, dv) float32) of q, k (B, Hk,
    L, dk), v (B, H, L, dv) and the gates (B, H, L) (`delta_gates`), from `state` or zeros:
    per value head, S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - (exp(g_t) S_{t-1})^T k_t))^T
    and o_t = S_t^T q_t, with q, k L2-normed (q times `scale`); value head h reads key head
    h // groups. A slot where `real` (B, L) is 0 (padding) leaves the state as it is (beta =
    g = 0 there)."""
    dtype = xp.dtype(v)
    q, k, v, beta, g = prepared(xp, q, k, v, beta, g, scale, groups, real)
    B, H, L = xp.shape(v, 0), xp.shape(v, 1), xp.shape(v, 2)
    pad = (chunk - L % chunk) % chunk  # padded tokens: beta = g = 0, k = v = 0, no update
    q, k, v = (xp.pad(t, 2, pad) for t in (q, k, v))
    beta, g = (xp.reshape(xp.pad(t, 2, pad), [B, H, -1, chunk]) for t in (beta, g))
    if state is None:  # zeros (B, H, dk, dv): a one-token outer product times 0
        state = xp.matmul(xp.swap_last(xp.slice(k, 2, 0, 1)), xp.slice(v, 2, 0, 1) * 0.0)
    qc, kc, vc = (xp.reshape(t, [B, H, -1, chunk, xp.shape(t, 3)]) for t in (q, k, v))
    idx = xp.arange(chunk)
    row, col = xp.reshape(idx, [chunk, 1]), xp.reshape(idx, [1, chunk])
    lower, strict = row >= col, row > col
    zero = xp.asarray(0.0, "float32")
    cum = xp.cumsum(g, axis=3)  # (B, H, n, C): log decay from the chunk's start
    ci = xp.reshape(cum, [B, H, -1, chunk, 1])
    diff = xp.where(lower, ci - xp.reshape(cum, [B, H, -1, 1, chunk]), zero)
    pair = xp.where(lower, xp.exp(diff), zero)  # exp(cum_i - cum_j), j <= i
    b5 = xp.reshape(beta, [B, H, -1, chunk, 1])
    kb = kc * b5
    m = -xp.where(strict, xp.matmul(kb, xp.swap_last(kc)) * pair, zero)
    solve, power = xp.astype(row == col, "float32") + m, m  # (I - A) ...
    span = 2
    while span < chunk:  # ... (I + A^2)(I + A^4)... = (I + A)^-1
        power = xp.matmul(power, power)
        solve = solve + xp.matmul(solve, power)
        span *= 2
    u = xp.matmul(solve, vc * b5)  # each token's write, before the state's read
    w = xp.matmul(solve, kb * xp.exp(ci))  # its decayed keys that read the state
    attn = xp.matmul(qc, xp.swap_last(kc)) * pair
    last = xp.slice(ci, 3, chunk - 1, chunk)  # (B, H, n, 1, 1)
    qd, kd, cd = qc * xp.exp(ci), kc * xp.exp(last - ci), xp.exp(last)

    def step(s: Array, xs: list[Array]) -> tuple[Array, Array]:
        u_i, w_i, q_i, a_i, k_i, c_i = xs
        new = u_i - xp.matmul(w_i, s)
        out = xp.matmul(q_i, s) + xp.matmul(a_i, new)
        return s * c_i + xp.matmul(xp.swap_last(k_i), new), out

    state, o = xp.scan(step, xp.astype(state, "float32"), [u, w, qd, attn, kd, cd], axis=2)
    o = xp.slice(xp.reshape(o, [B, H, -1, xp.shape(o, 4)]), 2, 0, L)
    return xp.astype(o, dtype), state


def delta_step(xp, q: Array, k: Array, v: Array, beta: Array, g: Array, scale: float,
               groups: int, state: Array, real: Array | None = None) -> tuple[Array, Array]:
    """`recurrence` for one token (L = 1), a decoding step: the recurrence itself, O(dk dv)
    per head, with no chunk to pad."""
    dtype = xp.dtype(v)
    q, k, v, beta, g = prepared(xp, q, k, v, beta, g, scale, groups, real)  # (B, H, 1, d)
    shape = [xp.shape(v, 0), xp.shape(v, 1), 1, 1]
    s = xp.astype(state, "float32") * xp.exp(xp.reshape(g, shape))
    delta = (v - xp.matmul(k, s)) * xp.reshape(beta, shape)  # (B, H, 1, dv)
    s = s + xp.matmul(xp.swap_last(k), delta)
    return xp.astype(xp.matmul(q, s), dtype), s
