"""The NumPy reference's reading of the feed-forward units and of a mixture of experts
(docs/LANGUAGE.md, Transformer keys), written from the document: the activations, gpt-oss's
clamped unit, the xIELU activation, the router's gates, and the experts, every expert computed
on every token and the routed ones kept."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

__all__ = ["act", "experts", "glu", "route", "xielu"]


def act(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "relu2":  # squared ReLU
        return np.square(np.maximum(x, 0.0))
    if kind == "silu":
        return x / (1.0 + np.exp(-x))
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "quick_gelu":  # CLIP's: x sigmoid(1.702 x)
        return x / (1.0 + np.exp(-1.702 * x))
    if kind == "softplus":  # ln(1 + e^x), without overflow for large x
        return np.logaddexp(0.0, x)
    if kind == "gelu":
        erf = np.vectorize(math.erf)
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def glu(gate: np.ndarray, up: np.ndarray, alpha: float, limit: float) -> np.ndarray:
    """(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit)."""
    g = np.minimum(gate, limit)
    return (np.clip(up, -limit, limit) + 1.0) * g / (1.0 + np.exp(-alpha * g))


def route(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, top_k: int, router: str,
          normalize: bool, scale: float, selection: np.ndarray | None = None, groups: int = 1,
          top_groups: int = 1, group_score: str = "top2", threshold: float = 0.0,
          select_by: str = "probs", sink: int = 0) -> np.ndarray:
    """Each token's gates over the experts: p = softmax(x W^T + b) over the experts, or the
    sigmoid of each logit; the experts chosen by s = p + selection bias (s = the logit +
    selection bias with `select_by = logits`): with groups, only
    those of the top_groups groups (of consecutive experts) whose two best s summed (`top2`)
    or best s (`max`) rank highest; the top_k by s (the lower index first among equals);
    their p kept, renormalised to sum 1 with `normalize`, times `scale`; 0 for the others.
    The last `sink` experts are kept for every token beside the top_k (the selection bias is
    the others'), renormalised with them."""
    logits = x @ weight.T
    if bias is not None:
        logits = logits + bias
    if router == "sparsemixer":
        return _mixer(logits, threshold) * scale
    if router == "softmax":
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
    else:
        p = 1.0 / (1.0 + np.exp(-logits))
    s = logits if select_by == "logits" else p
    if sink:
        s = s.copy()
        s[..., s.shape[-1] - sink:] = np.inf  # every token's
        if selection is not None:
            s[..., :s.shape[-1] - sink] += selection
        top_k += sink
    elif selection is not None:
        s = s + selection
    if groups > 1:
        size = p.shape[-1] // groups
        ranked = -np.sort(-s.reshape(*s.shape[:-1], groups, size), axis=-1)
        score = ranked[..., :2].sum(-1) if group_score == "top2" else ranked[..., 0]
        best = np.argsort(-score, axis=-1, kind="stable")[..., :top_groups]
        allowed = np.zeros(score.shape, bool)
        np.put_along_axis(allowed, best, True, -1)
        s = np.where(np.repeat(allowed, size, axis=-1), s, -np.inf)
    top = np.argsort(-s, axis=-1, kind="stable")[..., :top_k]
    kept = np.take_along_axis(p, top, -1)
    if normalize:
        kept = kept / kept.sum(-1, keepdims=True)
    gates = np.zeros_like(p)
    np.put_along_axis(gates, top, kept * scale, -1)
    return gates


def _mixer(r: np.ndarray, threshold: float) -> np.ndarray:
    """The sparse mixer's gates: in round one the expert of highest logit m, its gate the
    softmax over the experts j with (m - r_j) / max(|r_j|, m) <= threshold; in round two the
    same over the others, m their highest logit (the lower index first among equals)."""
    gates = np.zeros_like(r)
    out = np.ones(r.shape, bool)  # the experts still in the running
    for _ in range(2):
        left = np.where(out, r, -np.inf)
        i = np.argmax(left, axis=-1)[..., None]
        m = np.take_along_axis(left, i, -1)
        with np.errstate(divide="ignore", invalid="ignore"):
            keep = out & ~((m - r) / np.maximum(np.abs(r), m) > threshold)
        e = np.where(keep, np.exp(r - m), 0.0)
        np.put_along_axis(gates, i, np.take_along_axis(e, i, -1) / e.sum(-1, keepdims=True), -1)
        np.put_along_axis(out, i, False, -1)
    return gates


def experts(x: np.ndarray, gates: np.ndarray, w: Mapping[str, np.ndarray], *, experts: int,
            prefix: str, unit: str, gated: bool, bias: bool, gate: str, alpha: float,
            limit: float) -> np.ndarray:
    """sum over experts e of g_e * expert_e(x) (`gate = output`) or expert_e(g_e * x)
    (`gate = input`, over the experts with g_e > 0): every expert on every token; `unit` the
    experts' activation (or `clamped_swiglu`)."""

    def linear(h: np.ndarray, name: str) -> np.ndarray:
        y = h @ w[f"{name}.weight"].T
        return y + w[f"{name}.bias"] if bias else y

    def mlp(h: np.ndarray, p: str) -> np.ndarray:
        if unit == "clamped_swiglu":
            return linear(glu(linear(h, f"{p}gate_proj"), linear(h, f"{p}up_proj"), alpha,
                              limit), f"{p}down_proj")
        if gated:
            return linear(act(linear(h, f"{p}gate_proj"), unit)
                          * linear(h, f"{p}up_proj"), f"{p}down_proj")
        return linear(act(linear(h, f"{p}fc1"), unit), f"{p}fc2")

    y = np.zeros_like(x)
    for e in range(experts):
        g = gates[..., e:e + 1]
        if gate == "input":
            y = y + np.where(g > 0, mlp(g * x, f"{prefix}{e}."), 0.0)
        else:
            y = y + g * mlp(x, f"{prefix}{e}.")
    return y


def xielu(u: np.ndarray, alpha_p: np.ndarray, alpha_n: np.ndarray, beta: float,
          eps: float) -> np.ndarray:
    """The xIELU activation (`ffn = xielu(n)`): a_p u^2 + beta u where u > 0, else
    a_n (expm1(min(u, eps)) - u) + beta u, with a_p = softplus(alpha_p) and
    a_n = beta + softplus(alpha_n)."""
    a_p = np.log1p(np.exp(alpha_p))
    a_n = beta + np.log1p(np.exp(alpha_n))
    return np.where(u > 0, a_p * u * u + beta * u,
                    a_n * (np.expm1(np.minimum(u, eps)) - u) + beta * u)
