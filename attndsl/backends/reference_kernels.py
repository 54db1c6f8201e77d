"""The NumPy reference's reading of each kernel module's `kernel` node (docs/LANGUAGE.md,
Kernels), written from the document, by the kernel's name (`READINGS`): the linear kernel's
feature maps and running sums, Reformer's rotations, buckets, sorted chunks and the merge of
rounds, the short convolution's window token by token (the delta rule's token by token is in
reference_delta.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..ir import Node
from .reference_delta import delta_rule, kda, real_tokens
from .reference_masks import mask_of

__all__ = ["READINGS", "kernel", "lightning", "linear_attention", "lsh_attention", "mamba",
           "mamba2", "short_conv"]

Env = dict[str, np.ndarray]


def _feature(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "elu":
        return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))
    if kind == "relu":
        return np.maximum(x, 0.0)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def linear_attention(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    q, k, v = (env[node.args[i]] for i in range(3))
    fq, fk = _feature(q, node.attr("feature")), _feature(k, node.attr("feature"))
    B, H, L, _ = q.shape
    out = np.zeros((B, H, L, v.shape[-1]))
    # the sums over the keys query t sees: all of them, or (causal) keys 0..t, kept running
    kv = np.zeros((B, H, fk.shape[-1], v.shape[-1]))  # sum of phi(k_s) v_s^T
    z = np.zeros((B, H, fk.shape[-1]))  # sum of phi(k_s)
    if not node.attr("causal"):
        kv, z = np.einsum("bhsd,bhse->bhde", fk, v), fk.sum(2)
    for t in range(L):
        if node.attr("causal") and t < k.shape[2]:
            kv += np.einsum("bhd,bhe->bhde", fk[:, :, t], v[:, :, t])
            z += fk[:, :, t]
        num = np.einsum("bhd,bhde->bhe", fq[:, :, t], kv)
        den = np.einsum("bhd,bhd->bh", fq[:, :, t], z)
        out[:, :, t] = num / np.maximum(den, 1e-6)[..., None]
    return out


def _lsh_rotations(seed: int, heads: int, d: int, rounds: int, half: int) -> np.ndarray:
    """[heads, d, rounds, half] standard normals, Box-Muller over the Park-Miller stream, as
    the language reference writes the draw."""
    P, M = 2147483647, 48271
    state = seed % (P - 1) + 1
    values = []
    while len(values) < heads * d * rounds * half:
        state = state * M % P
        u1 = state / P
        state = state * M % P
        u2 = state / P
        radius = math.sqrt(-2.0 * math.log(u1))
        values += [radius * math.cos(2.0 * math.pi * u2), radius * math.sin(2.0 * math.pi * u2)]
    n = heads * d * rounds * half
    return np.array(values[:n], np.float32).astype(np.float64).reshape(heads, d, rounds, half)


def lsh_attention(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Reformer's LSH attention, step by step as docs/LANGUAGE.md (Kernels) says, one query
    slot at a time."""
    x, v = env[node.args[0]], env[node.args[1]]  # (B, H, L, d), (B, H, L, dv)
    B, H, L, d = x.shape
    n_buckets, rounds, c = node.attr("buckets"), node.attr("rounds"), node.attr("chunk")
    scale, causal = node.attr("scale"), node.attr("causal")
    R = _lsh_rotations(node.attr("seed"), H, d, rounds, n_buckets // 2)
    shown = np.broadcast_to(mask_of(node.attr("keys"), B, 1, L, env.get("key_lengths"),
                                     None)[:, 0], (B, L))
    Lp = -(-L // c) * c
    out = np.zeros((B, H, L, v.shape[-1]))
    for b in range(B):
        for h in range(H):
            xs = x[b, h]
            keys = xs / np.sqrt((xs**2).mean(-1, keepdims=True) + 1e-6)
            slots: list[int] = []  # every round's order, end to end; a slot holds a token
            for r in range(rounds):
                bucket = [n_buckets] * Lp  # empty slots and hidden keys: the extra bucket
                for i in range(L):
                    if shown[b, i]:
                        rotated = xs[i] @ R[h, :, r]
                        bucket[i] = int(np.argmax(np.concatenate([rotated, -rotated])))
                slots += sorted(range(Lp), key=lambda i: (bucket[i], i))
            chunks = len(slots) // c
            o_r = np.zeros((L, rounds, v.shape[-1]))
            lse_r = np.zeros((L, rounds))
            seen = np.concatenate([shown[b], np.zeros(Lp - L, bool)])  # empty slots hidden
            keys_ = np.concatenate([keys, np.zeros((Lp - L, d))])
            values = np.concatenate([v[b, h], np.zeros((Lp - L, v.shape[-1]))])
            for at, i in enumerate(slots):
                if i >= L:
                    continue
                j = at // c
                window = slots[j * c:(j + 1) * c]
                if Lp > c:  # with the previous chunk, cyclically
                    window = slots[(j - 1) % chunks * c:((j - 1) % chunks + 1) * c] + window
                t = np.array(window)
                s = scale * (keys_[t] @ xs[i])
                s[~seen[t] | ((t > i) if causal else False)] = -1e9
                s[t == i] = -1e5
                top = s.max()
                e = np.exp(s - top)
                o_r[i, at // Lp] = (e / e.sum()) @ values[t]
                lse_r[i, at // Lp] = top + math.log(e.sum())
            weight = np.exp(lse_r - lse_r.max(1, keepdims=True))
            weight /= weight.sum(1, keepdims=True)
            out[b, h] = (o_r * weight[..., None]).sum(1)
    return out


def short_conv(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """y_t = C_t * (b_conv + sum_{j=0}^{K-1} W[:, 0, j] u_{t-K+1+j}), u_t = B_t * x_t, per
    channel, K = width, u_s = 0 before the first token and at a slot the padding hides (one
    pass: key_lengths; decoding: the new tokens' attention_mask). Decoding: u_{-K+1} ..
    u_{-1} are the past's (B, K - 1, C), and the result is the outputs then the last K - 1
    inputs of past and new along the length, (B, 1, L + K - 1, C)."""
    gate_b, gate_c, x = (env[node.args[i]][:, 0] for i in range(3))  # (B, L, C)
    B, L, C = x.shape
    K = node.attr("width")
    real = real_tokens(node, env, B, L)
    names = node.attr("weights")
    weight = w[names[0]]
    bias = w[names[1]] if len(names) > 1 else np.zeros(C)
    inputs = {}  # token index -> its input u (B, C); the past at -K+1 .. -1
    for s in range(1, K):
        inputs[-s] = env[node.args[3]][:, K - 1 - s] if node.attr("decoding") else np.zeros(
            (B, C))
    for t in range(L):
        inputs[t] = np.where(real[:, t, None], gate_b[:, t] * x[:, t], 0.0)
    y = np.zeros((B, L, C))
    for t in range(L):
        total = bias[None, :].copy()
        for j in range(K):
            total = total + weight[:, 0, j] * inputs[t - K + 1 + j]
        y[:, t] = gate_c[:, t] * total
    if node.attr("decoding"):
        last = np.stack([inputs[s] for s in range(L - K + 1, L)], axis=1)
        y = np.concatenate([y, last], axis=1)
    return y[:, None]


def lightning(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per head h of H, rate r_h = 2^(-8 (h + 1) / H), times 1 - l / (n - 1 + 1e-5) + 1e-5
    at block l of a stack of n = `layers` where set; from S = 0 (d_k x d_v),
    S <- exp(-r_h) S + k_t v_t^T at each real token, o_t = S^T q_t (no scale). A padding slot
    leaves S as it is. Decoding: S starts from the past state (B, H, d_k, d_v), and the
    result is the outputs then the final S, (B, H, L + d_k, d_v)."""
    q, k, v = (env[node.args[i]] for i in range(3))
    B, H, L, dv = v.shape
    real = real_tokens(node, env, B, L)
    layers = node.attr("layers")
    depth = 1.0 if layers is None else 1 - node.attr("layer") / (layers - 1 + 1e-5) + 1e-5
    out = np.zeros((B, H, L, dv))
    final = np.zeros((B, H, q.shape[-1], dv))
    for h in range(H):
        rate = 2.0 ** (-8.0 * (h + 1) / H) * depth
        S = env[node.args[3]][:, h] if node.attr("decoding") else np.zeros((B, q.shape[-1], dv))
        for t in range(L):
            new = np.exp(-rate) * S + k[:, h, t][:, :, None] * v[:, h, t][:, None, :]
            S = np.where(real[:, t, None, None], new, S)
            out[:, h, t] = np.einsum("bkv,bk->bv", S, q[:, h, t])
        final[:, h] = S
    return np.concatenate([out, final], axis=2) if node.attr("decoding") else out


def mamba2(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Mamba2's scan, with C, B (B, G, N per token), x (B, H, L, P) and the dt logits
    (B, L, H): per head h (group h // (H / G)), dt_t = softplus(dt_t + dt_bias_h) clamped to
    [dt_min, dt_max], A_h = -exp(A_log_h); from S = 0 (N x P), S <- exp(dt_t A_h) S +
    B_t (dt_t x_t)^T at each real token, y_t = S^T C_t + D_h x_t. A padding slot leaves S as
    it is. Decoding: S starts from the past state (B, H, N, P), and the result is the outputs
    then the final S, (B, H, L + N, P)."""
    c, b, x, logits = (env[node.args[i]] for i in range(4))
    B, H, L, P = x.shape
    per_group = H // c.shape[1]
    a_log, dt_bias, d = (w[name] for name in node.attr("weights"))
    dt = np.logaddexp(0.0, logits + dt_bias)
    dt = np.clip(dt, node.attr("dt_min"), node.attr("dt_max") or np.inf)
    real = real_tokens(node, env, B, L)
    b, c = (np.repeat(m, per_group, axis=1) for m in (b, c))  # each head's group: (B, H, L, N)
    S = env[node.args[4]] if node.attr("decoding") else np.zeros((B, H, c.shape[-1], P))
    out = np.zeros((B, H, L, P))
    for t in range(L):  # every head at once
        step = dt[:, t]  # (B, H)
        new = (np.exp(-np.exp(a_log) * step)[:, :, None, None] * S
               + b[:, :, t, :, None] * (step[:, :, None] * x[:, :, t])[:, :, None, :])
        S = np.where(real[:, t, None, None, None], new, S)
        out[:, :, t] = np.einsum("bhnp,bhn->bhp", S, c[:, :, t]) + d[:, None] * x[:, :, t]
    return np.concatenate([out, S], axis=2) if node.attr("decoding") else out


def mamba(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Mamba's scan, with C, B (B, 1, L, N), x (B, H, L, P) and the dt logits (B, L, H): per
    head h, dt_t = softplus(dt_t + dt_bias_h), A_h = -exp(A_log_h) (N); from S = 0 (N x P),
    S <- exp(dt_t A_h) * S (row n by exp(dt_t A_h[n])) + B_t (dt_t x_t)^T at each real token,
    y_t = S^T C_t + D_h x_t. A padding slot leaves S as it is. Decoding: S starts from the past
    state (B, H, N, P), and the result is the outputs then the final S, (B, H, L + N, P)."""
    c, b, x, logits = (env[node.args[i]] for i in range(4))
    B, H, L, P = x.shape
    N = c.shape[-1]
    a_log, dt_bias, d = (w[name] for name in node.attr("weights"))
    dt = np.logaddexp(0.0, logits + dt_bias)  # (B, L, H)
    real = real_tokens(node, env, B, L)
    S = env[node.args[4]] if node.attr("decoding") else np.zeros((B, H, N, P))
    out = np.zeros((B, H, L, P))
    for t in range(L):  # every head at once
        step = dt[:, t]  # (B, H)
        decay = np.exp(-np.exp(a_log)[None] * step[:, :, None])  # (B, H, N)
        new = decay[..., None] * S + b[:, 0, t][:, None, :, None] * \
            (step[:, :, None] * x[:, :, t])[:, :, None, :]
        S = np.where(real[:, t, None, None, None], new, S)
        out[:, :, t] = np.einsum("bhnp,bn->bhp", S, c[:, 0, t]) + d[:, None] * x[:, :, t]
    return np.concatenate([out, S], axis=2) if node.attr("decoding") else out


# the oracle's own reading of each kernel module's `kernel` node, by the kernel's name
READINGS = {"delta_rule": delta_rule, "kda": kda, "lightning": lightning, "mamba2": mamba2,
            "mamba": mamba, "linear": linear_attention, "lsh": lsh_attention,
            "short_conv": short_conv}


def kernel(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """A kernel module's `kernel` node, read by its name."""
    return READINGS[node.attr("kernel")](node, env, w)
