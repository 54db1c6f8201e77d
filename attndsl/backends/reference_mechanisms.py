"""The oracle's reading of each mechanism module's transform (`apply` nodes), written from
docs/LANGUAGE.md, sharing nothing with `attndsl/mechanisms/`: one function per mechanism,
(heads (B, h, n, d) in float64, the node's attributes, the weights) -> heads."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["READINGS"]


def _temperature(x: np.ndarray, attrs: dict[str, Any], w: Mapping[str, np.ndarray],
                 pos: np.ndarray | None = None) -> np.ndarray:
    """`temperature = log(floor = f, scale = a, offset = o)`: the query at token position p
    (0 .. n - 1 in one pass, a decoding call's position_ids (B, n)) times 1 + a * ln(1 +
    floor((p + o) / f)); `power(base = b, exponent = e, offset = o)`: times
    (1 + (p + o) / b) ** e; `log_ratio(floor = n, scale = a, offset = o)`: times 1 + a *
    ln(max((p + o) / n, 1)). x: the query heads, or relative_logits' relative states."""
    p = np.arange(x.shape[2])[None] if pos is None else pos
    if attrs["kind"] == "power":
        factor = (1.0 + (p + attrs["offset"]) / attrs["floor"]) ** attrs["scale"]
    elif attrs["kind"] == "log_ratio":
        factor = 1.0 + attrs["scale"] * np.log(np.maximum((p + attrs["offset"]) / attrs["floor"],
                                                          1.0))
    else:
        factor = 1.0 + attrs["scale"] * np.log1p(np.floor((p + attrs["offset"]) / attrs["floor"]))
    return x * factor[:, None, :, None]


def _differential(o: np.ndarray, attrs: dict[str, Any], w: Mapping[str, np.ndarray],
                  pos: np.ndarray | None = None) -> np.ndarray:
    """`differential = lambda(...)`: merged heads (B, L, H * 2 dv); head i of H/2 is
    (1 - lambda_init) * rmsnorm(a_i - lambda a_{i + H/2}) over its 2 dv features, lambda =
    exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init."""
    B, L, _ = o.shape
    heads, init, eps = attrs["heads"], attrs["lambda_init"], attrs["eps"]
    q1, k1, q2, k2 = (w[name] for name in attrs["weights"])
    lam = math.exp(float(q1 @ k1)) - math.exp(float(q2 @ k2)) + init
    a = o.reshape(B, L, heads, -1)
    d = a[:, :, : heads // 2] - lam * a[:, :, heads // 2:]
    d = d / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    return ((1 - init) * d).reshape(B, L, -1)


def _softcap(s: np.ndarray, attrs: dict[str, Any], w: Mapping[str, np.ndarray],
              pos: np.ndarray | None = None) -> np.ndarray:
    """`softcap = c` (an attention's scores (B, H, L, S)) and `logit_softcap = c` (a language
    model's logits (B, L, vocab)): c * tanh(s / c)."""
    c = attrs["softcap"]
    return c * np.tanh(s / c)


def _qk_norm(x: np.ndarray, attrs: dict[str, Any], w: Mapping[str, np.ndarray],
             pos: np.ndarray | None = None) -> np.ndarray:
    """`qk_norm = layernorm(head_weights = true)`: each head i of x (B, h, n, d) is
    (x_i - mean(x_i)) / sqrt(var(x_i) + eps) * w[i] (+ b[i]), w and b [h, d]."""
    weight, *bias = (w[name] for name in attrs["weights"])
    centered = x - x.mean(-1, keepdims=True)
    y = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + attrs["eps"])
    y = y * weight[:, None, :]
    return y + bias[0][:, None, :] if bias else y


def _clip_qkv(x: np.ndarray, attrs: dict[str, Any], w: Mapping[str, np.ndarray],
              pos: np.ndarray | None = None) -> np.ndarray:
    """`clip_qkv = c`: a projection's output (B, n, width) with each entry clamped to
    [-c, c]."""
    return np.clip(x, -attrs["limit"], attrs["limit"])


def _head_experts(x: np.ndarray, attrs: dict[str, Any], w: Mapping[str, np.ndarray],
                  routed: np.ndarray | None = None) -> np.ndarray:
    """`head_experts = moa(experts = E, top_k = k)`: each token's router logits r = x_r W_r^T
    (x_r: the attention's input), its k experts e_1 .. e_k of highest r (the lower index first
    among equals) and their gates g_j = softmax_j(r_{e_j}). Part q: x (B, L, d_model) -> query
    head g k + j = features g dim .. (g + 1) dim - 1 of x Q_{e_j}^T (+ its bias rows), Q_e
    rows e c .. (e + 1) c - 1 of the stacked weight (c = kv_heads dim). Part o: merged heads
    x (B, L, kv_heads k dim) -> sum_j g_j a_j O_{e_j}^T (+ the output bias), a_j the heads g k
    + j side by side, O_e rows e d_model .. (e + 1) d_model - 1 of the stacked weight."""
    router, stacked, *bias = (w[name] for name in attrs["weights"])
    k, heads, dim, width = attrs["top_k"], attrs["heads"], attrs["dim"], attrs["width"]
    source = x if attrs["part"] == "q" else routed
    logits = source @ router.T  # (B, L, E)
    chosen = np.argsort(-logits, axis=-1, kind="stable")[..., :k]  # (B, L, k), best first
    top = np.take_along_axis(logits, chosen, -1)
    gates = np.exp(top - top.max(-1, keepdims=True))
    gates = gates / gates.sum(-1, keepdims=True)
    B, L = x.shape[:2]
    if attrs["part"] == "q":
        c = heads * dim
        out = np.zeros((B, L, heads, k, dim))
        for b in range(B):
            for t in range(L):
                for j in range(k):
                    e = chosen[b, t, j]
                    q = stacked[e * c:(e + 1) * c] @ x[b, t]
                    if bias:
                        q = q + bias[0][e * c:(e + 1) * c]
                    out[b, t, :, j] = q.reshape(heads, dim)
        return out.reshape(B, L, -1)
    a = x.reshape(B, L, heads, k, dim)
    out = np.zeros((B, L, width))
    for b in range(B):
        for t in range(L):
            for j in range(k):
                e = chosen[b, t, j]
                out[b, t] += gates[b, t, j] * (stacked[e * width:(e + 1) * width]
                                               @ a[b, t, :, j].reshape(-1))
    return out + bias[0] if bias else out


# each: (x, its node's attributes, the weights, a decoding call's position_ids, or the value
# its node names second, or None) -> y
READINGS: dict[str, Callable[..., np.ndarray]] = {"temperature": _temperature,
                                                  "differential": _differential,
                                                  "softcap": _softcap,
                                                  "qk_norm": _qk_norm,
                                                  "clip_qkv": _clip_qkv,
                                                  "head_experts": _head_experts}
