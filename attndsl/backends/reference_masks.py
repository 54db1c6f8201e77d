"""The NumPy reference's reading of masks (docs/LANGUAGE.md, Masks): each primitive written
again from the document as a dense boolean array, sharing nothing with `attndsl.masks`, the
definition the other backends run."""

from __future__ import annotations

import numpy as np

from .. import masks as m
from ..ir import Node

__all__ = ["mask_of", "visible"]

Env = dict[str, np.ndarray]


def visible(node: Node, env: Env, S: int) -> np.ndarray:
    """(B, L, S): what the node's mask shows of its S keys (the memory rows, or the tokens).
    L comes from the graph's input; runtime masks carry their own. A decoder stack's cross
    attention reads its memory's padding from memory_lengths (docs/LANGUAGE.md), any other
    mask from key_lengths."""
    x = env["x"]
    L, B = x.shape[1], x.shape[0]
    lengths = env.get("memory_lengths" if "memory_lengths" in node.args else "key_lengths")
    seen = mask_of(node.attr("expr"), B, L, S, lengths, env.get("segment_ids"),
                   env.get("memory_segment_ids"))
    return np.broadcast_to(seen, (B, L, S))


def mask_of(mask: m.Mask, B: int, L: int, S: int, key_lengths: np.ndarray | None,
             segment_ids: np.ndarray | None,
             memory_segment_ids: np.ndarray | None = None) -> np.ndarray:
    """Visibility (B, L, S) of a mask expression, read from the language reference's table."""
    q = np.arange(L)[None, :, None]  # (1, L, 1)
    k = np.arange(S)[None, None, :]  # (1, 1, S)

    def walk(e: m.Mask) -> np.ndarray:
        match e:
            case m.Full():
                return np.ones((1, L, S), bool)
            case m.Causal(align="top_left"):
                return k <= q
            case m.Causal():
                return k <= q + (S - L)
            case m.Window(a, c, align):
                shift = S - L if align == "bottom_right" else 0
                return (q + shift - a <= k) & (k <= q + shift + c)
            case m.Dilated(a, c, d):
                return (q - a <= k) & (k <= q + c) & ((q - k) % d == 0)
            case m.Chunked(n):
                return q // n == k // n
            case m.Strided(n):
                return (q - k) % n == 0
            case m.Global(first, tokens):
                special = np.zeros(max(L, S), bool)
                special[: min(first, len(special))] = True
                special[[t for t in tokens if t < len(special)]] = True
                return special[:L][None, :, None] | special[:S][None, None, :]
            case m.Prefix(n):
                return np.broadcast_to(k < n, (1, L, S))
            case m.Random(r, n, seed):
                return _random_blocks(r, n, seed, L, S)[None]
            case m.Padding(side):
                n = np.asarray(key_lengths)[:, None, None]
                return k >= S - n if side == "left" else k < n
            case m.Document():  # a cross attention's keys: the memory rows' own ids
                ids = np.asarray(segment_ids)
                keys = ids if memory_segment_ids is None else np.asarray(memory_segment_ids)
                return ids[:, :, None] == keys[:, None, :]
            case m.Compare(op, a, c):
                compare = {"<": np.less, "<=": np.less_equal, "==": np.equal,
                           "!=": np.not_equal, ">=": np.greater_equal, ">": np.greater}[op]
                docs = _document_positions(segment_ids) if segment_ids is not None else None
                seen = compare(_index(a, q, k, docs), _index(c, q, k, docs))
                return np.broadcast_to(seen, (seen.shape[0], L, S))
            case m.And(a, c):
                return walk(a) & walk(c)
            case m.Or(a, c):
                return walk(a) | walk(c)
            case m.Not(a):
                return ~walk(a)
        raise AssertionError(f"unknown mask {e!r}")

    return walk(mask)


def _index(e: m.Index, q: np.ndarray, k: np.ndarray, docs: np.ndarray | None) -> np.ndarray:
    """An index expression of q and k (and their positions within documents, `docs` [B, L]),
    in int64 with floor division and modulo."""
    if e.op in ("q", "k"):
        return q if e.op == "q" else k
    if e.op in ("qd", "kd"):  # (B, L, 1) or (B, 1, S)
        return docs[:, q[0]] if e.op == "qd" else docs[:, k[0]]
    if e.op == "const":
        return np.int64(e.value)
    args = [_index(x, q, k, docs) for x in e.args]
    ops = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
           "%": np.mod, "abs": np.abs, "min": np.minimum, "max": np.maximum}
    return ops[e.op](*args)


def _document_positions(segment_ids: np.ndarray) -> np.ndarray:
    """[B, L]: how many tokens of its document (its run of equal consecutive ids) come
    before each token."""
    out = np.zeros(segment_ids.shape, np.int64)
    for b, row in enumerate(segment_ids):
        for i in range(1, len(row)):
            out[b, i] = out[b, i - 1] + 1 if row[i] == row[i - 1] else 0
    return out


def _random_blocks(r: int, n: int, seed: int, L: int, S: int) -> np.ndarray:
    """(L, S): key k visible from q when k's block is one of the r blocks drawn for q's block,
    drawn with Python integers exactly as the language reference writes the hash."""
    P, M = 2147483647, 48271
    key_blocks = -(-S // n)
    seen = np.zeros((L, S), bool)
    for i in range(-(-L // n)):
        for j in range(r):
            h = ((seed % P) * M + i + 1) % P
            h = (h * M + j + 1) % P
            h = h * M % P
            h = h * M % P
            block = h % key_blocks
            seen[i * n:(i + 1) * n, block * n:(block + 1) * n] = True
    return seen
