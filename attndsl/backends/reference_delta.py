"""The NumPy reference's reading of the gated delta rule (docs/LANGUAGE.md, Kernels:
`delta_rule`), written from the document: the causal convolution token by token and the
recurrence one token at a time, in float64 (the chunked form is the backends'). A decoding
call (`decoding`) starts from the past's inputs and state and returns them updated."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import Node

__all__ = ["causal_conv", "delta_rule", "kda", "real_tokens"]

Env = dict[str, np.ndarray]


def real_tokens(node: Node, env: Env, B: int, L: int) -> np.ndarray:
    """(B, L) bool: the tokens the mask's `padding` shows (key_lengths; all without one); a
    decoding call's: the new tokens' attention_mask."""
    if node.attr("decoding"):
        return env["attention_mask"][:, -L:] != 0
    padding = node.attr("padding")
    if padding is None:
        return np.ones((B, L), bool)
    n, t = env["key_lengths"][:, None], np.arange(L)[None, :]
    return t >= L - n if padding.side == "left" else t < n


def causal_conv(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """silu(y) (`activation` silu: the delta rule's, x = [q | k | v]), y (`none`) or x + y
    (`residual`: a residual convolution's), y_t[c] = sum_{j=0}^{K-1} W[c, 0, j]
    x_{t-K+1+j}[c] (+ bias[c] where the node has a `bias`), and no input before the first
    token; a padding slot's input is 0.
    Decoding: x_{-K+1} .. x_{-1} are the past's inputs (B, K - 1, C), and part `state` is the
    last K - 1 inputs of past and new, the next call's past."""
    runtime = 2 if node.attr("decoding") else int(node.attr("padding") is not None)
    n = len(node.args) - runtime  # the convolved inputs, then the runtime ones
    x = np.concatenate([env[a] for a in node.args[:n]], axis=-1)
    B, L, C = x.shape
    x = x * real_tokens(node, env, B, L)[..., None]
    weight, K = w[node.attr("weight")], node.attr("width")
    past = env[node.args[n]] if node.attr("decoding") else np.zeros((B, K - 1, C))
    full = np.concatenate([past, x], axis=1)  # input t at row t + K - 1
    if node.attr("part") == "state":
        return full[:, full.shape[1] - (K - 1):]
    y = np.zeros_like(x)
    for t in range(L):
        for j in range(K):
            y[:, t] += weight[:, 0, j] * full[:, t + j]
    if dict(node.attrs).get("bias") is not None:
        y = y + w[node.attr("bias")]
    if node.attr("activation") == "residual":  # its input added (a padding slot's is 0)
        return x + y
    return y if node.attr("activation") == "none" else y / (1.0 + np.exp(-y))


def delta_rule(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per value head h (key head h // (heads / key_heads)), from S = 0 (d_k x d_v):
    beta_t = sigmoid(b_t) (twice that with `negative`: negative eigenvalues), g_t = -exp(A_log)
    softplus(a_t + dt_bias), q and k L2-normed
    (x / sqrt(sum x^2 + 1e-6)), q times the scale; S <- exp(g_t) S, then
    S <- S + k_t (beta_t (v_t - S^T k_t))^T, and o_t = S^T q_t. A padding slot leaves S as
    it is. Decoding: S starts from the past state (B, H, d_k, d_v), and the result is the
    outputs then the final S, (B, H, L + d_k, d_v)."""
    q, k, v, b, a = (env[node.args[i]] for i in range(5))
    B, H, L, dv = v.shape
    real = real_tokens(node, env, B, L)
    groups = H // q.shape[1]
    a_log, dt_bias = (w[name] for name in node.attr("weights"))
    beta = (2.0 if node.attr("negative") else 1.0) / (1.0 + np.exp(-b))  # (B, L, H)
    g = -np.exp(a_log) * np.logaddexp(0.0, a + dt_bias)
    decoding = node.attr("decoding")
    out = np.zeros((B, H, L, dv))
    final = np.zeros((B, H, q.shape[-1], dv))
    for h in range(H):
        qh, kh = q[:, h // groups], k[:, h // groups]  # (B, L, dk)
        qh = qh / np.sqrt((qh * qh).sum(-1, keepdims=True) + 1e-6) * node.attr("scale")
        kh = kh / np.sqrt((kh * kh).sum(-1, keepdims=True) + 1e-6)
        S = env[node.args[5]][:, h] if decoding else np.zeros((B, qh.shape[-1], dv))
        for t in range(L):
            decayed = np.exp(g[:, t, h])[:, None, None] * S
            kt = kh[:, t]
            delta = beta[:, t, h][:, None] * (v[:, h, t] - np.einsum("bkv,bk->bv", decayed,
                                                                       kt))
            S = np.where(real[:, t, None, None], decayed + kt[:, :, None] * delta[:, None, :],
                         S)
            out[:, h, t] = np.einsum("bkv,bk->bv", S, qh[:, t])
        final[:, h] = S
    return np.concatenate([out, final], axis=2) if decoding else out


def kda(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Kimi delta attention, per head h from S = 0 (d_k x d_v): beta_t = sigmoid(b_t), per
    key channel c u = f_t[c] + dt_bias[h d_k + c] and g_t[c] = -exp(A_log[h]) softplus(u), or
    l sigmoid(exp(A_log[h]) u) with a lower bound l; q and k L2-normed (x / sqrt(sum x^2 +
    1e-6)), q times the scale; row c of S times exp(g_t[c]), then
    S <- S + k_t (beta_t (v_t - S^T k_t))^T, and o_t = S^T q_t. A padding slot leaves S as
    it is. Decoding as the delta rule's."""
    q, k, v, b, f = (env[node.args[i]] for i in range(5))  # f (B, H, L, d_k)
    B, H, L, dv = v.shape
    dk = q.shape[-1]
    real = real_tokens(node, env, B, L)
    a_log, dt_bias = (w[name] for name in node.attr("weights"))
    beta = 1.0 / (1.0 + np.exp(-b))  # (B, L, H)
    bound = node.attr("lower_bound")
    out = np.zeros((B, H, L, dv))
    final = np.zeros((B, H, dk, dv))
    for h in range(H):
        u = f[:, h] + dt_bias[h * dk:(h + 1) * dk]  # (B, L, d_k)
        rate = np.exp(a_log[h])
        g = (-rate * np.logaddexp(0.0, u) if bound is None
             else bound / (1.0 + np.exp(-rate * u)))
        qh = q[:, h] / np.sqrt((q[:, h] ** 2).sum(-1, keepdims=True) + 1e-6) * node.attr(
            "scale")
        kh = k[:, h] / np.sqrt((k[:, h] ** 2).sum(-1, keepdims=True) + 1e-6)
        S = env[node.args[5]][:, h] if node.attr("decoding") else np.zeros((B, dk, dv))
        for t in range(L):
            decayed = np.exp(g[:, t])[:, :, None] * S
            kt = kh[:, t]
            delta = beta[:, t, h][:, None] * (v[:, h, t] - np.einsum("bkv,bk->bv", decayed,
                                                                       kt))
            S = np.where(real[:, t, None, None], decayed + kt[:, :, None] * delta[:, None, :],
                         S)
            out[:, h, t] = np.einsum("bkv,bk->bv", S, qh[:, t])
        final[:, h] = S
    return np.concatenate([out, final], axis=2) if node.attr("decoding") else out
