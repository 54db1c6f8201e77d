"""The oracle's reading of the lightning indexer's key selection (docs/LANGUAGE.md, Sparse
attention): for each query, the index score of every key, I = sum_h w_h relu(scale q_h . k)
(w already times H^-1/2), and the min(top_k, visible) visible keys of largest I, ties to the
earlier key. A plain loop over rows, written from the document."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import Node

__all__ = ["select_keys"]


def select_keys(node: Node, env: dict, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """A select_keys node: (B, L, n), -inf on the visible keys each query drops, 0 on the
    others (those it keeps, and those the mask hides)."""
    q, k, weight, seen = (env[a] for a in node.args)
    top_k, scale = node.attr("top_k"), node.attr("scale")
    B, H, L, _ = q.shape
    n = k.shape[2]
    seen = np.broadcast_to(seen, (B, L, n))
    out = np.zeros((B, L, n))
    for b in range(B):
        for t in range(L):
            index = [sum(weight[b, t, h] * max(0.0, scale * float(q[b, h, t] @ k[b, 0, s]))
                         for h in range(H)) for s in range(n)]
            keys = sorted((s for s in range(n) if seen[b, t, s]), key=lambda s: (-index[s], s))
            out[b, t, keys[top_k:]] = -np.inf  # the visible keys it drops
    return out
