"""The NumPy reference's reading of a decoding call (docs/LANGUAGE.md, Decoding), written from
the document and sharing nothing with `backends/cache_slots.py`, the backends' reading: the
ops only decoding graphs hold (`cache`, `tail`, `rows`, `head_linear`) and what the new
tokens see of the cached keys.

A call holds T new tokens over S = attention_mask's width slots (the P cached and the T new
ones) and K keys (past and new). While a cache has kept every slot, K = S and key i stands
for slot i. A bounded cache (a window's) keeps fewer: without sink tokens its K keys stand
for the last K slots; with n sink tokens its first n keys stand for the slots of each row's
first n real tokens and key i >= n for slot S - K + i."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import Node
from .reference_masks import mask_of, visible

__all__ = ["FIRST", "cache", "decoding_visible", "head_linear", "key_slots", "rows", "seen_keys",
           "tail"]

Env = dict[str, np.ndarray]
# env[f"{cache}{FIRST}"]: how many first positions (sink tokens) a bounded cache's `tail`
# keeps (set by `run` from the graph, so that the mask over that cache knows which slots its
# first keys stand for)
FIRST = ":first"


def cache(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """past (B, h, P, d) then the T new keys or values (B, h, T, d), along the length axis:
    the cache a call attends to, and a growing cache's present."""
    return np.concatenate([env[node.args[0]], env[node.args[1]]], axis=2)


def rows(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """x[:, :, start:stop], Python's slice (negative: counted from the end; stop None: to
    the end): the delta rule's outputs and its final state, packed in one tensor."""
    return env[node.args[0]][:, :, node.attr("start"):node.attr("stop")]


def head_linear(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """(B, n, heads * i) -> (B, n, heads * o): W_h = rows h * block + start .. h * block +
    stop - 1 of `weight` (heads * block, c); head h's features x_h @ W_h (i = stop - start,
    o = c), or x_h @ W_h^T when transposed (i = c, o = stop - start). Latent attention's
    absorbed query (q_nope,h W_uk[h]) and its output (W_uv[h] o_h)."""
    x, weight = env[node.args[0]], w[node.attr("weight")]
    heads, block = node.attr("heads"), node.attr("block")
    start, stop = node.attr("start"), node.attr("stop")
    B, n, _ = x.shape
    parts = x.reshape(B, n, heads, -1)
    out = []
    for h in range(heads):
        W = weight[h * block + start:h * block + stop]  # (stop - start, c)
        out.append(parts[:, :, h] @ (W.T if node.attr("transposed") else W))
    return np.concatenate(out, axis=-1)


def _positions(attention_mask: np.ndarray) -> np.ndarray:
    """(B, S): each slot's position, the count of real tokens before it (0 at a padding slot
    before the first real token: a padding slot is never seen)."""
    return np.maximum(np.cumsum(attention_mask, axis=1) - 1, 0)


def call_positions(attention_mask: np.ndarray, T: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """((B, T) the positions of a call's T new tokens, (B, K) those of its K keys) in a cache
    without sink tokens (score biases never meet them: their cache grows, or keeps a window's
    last keys): key i stands for slot S - K + i."""
    pos = _positions(attention_mask)
    S = attention_mask.shape[1]
    return pos[:, S - T:], pos[:, S - K:]


def _sink_slot(attention_mask: np.ndarray, j: int) -> np.ndarray:
    """(B,): s_b(j), the slot of row b's j-th real token (counted from 0): the number of
    slots s with cumsum(attention_mask[b])[s] <= j; S where the row has no such token yet."""
    return (np.cumsum(attention_mask, axis=1) <= j).sum(axis=1)


def key_slots(attention_mask: np.ndarray, K: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """((B, K) the slot each of the K keys stands for, (B, K) whether it is shown there):
    every key while K = S; else key i >= first stands for slot S - K + i and key i < first
    for s_b(i), hidden when that slot is also among the last K - first (seen there) or the
    row has no i-th real token yet."""
    B, S = attention_mask.shape
    slots = np.broadcast_to(np.arange(S - K, S), (B, K)).copy()
    shown = np.ones((B, K), bool)
    if K < S:
        for i in range(min(first, K)):
            slots[:, i] = _sink_slot(attention_mask, i)
            shown[:, i] = slots[:, i] < S - K + first  # S (no such token) is hidden too
    return slots, shown


def tail(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """A bounded cache's present of the call's keys `full` (B, h, K, d), r = `keep` recent
    and n = `first` sink keys: all K while K <= n + r; else the last r alone without sinks,
    and with them, first the key of each row's j-th real token for j < n (whichever of the
    K keys stands for slot s_b(j) and is shown; zeros where the row has none yet, a slot
    no query sees until it is filled), then the last r."""
    full = env[node.args[0]]
    n, r = node.attr("first"), node.attr("keep")
    B, _, K, _ = full.shape
    if n + r >= K:
        return full
    if not n:
        return full[:, :, K - r:]
    attention_mask = env["attention_mask"]
    slots, shown = key_slots(attention_mask, K, n)
    kept = np.zeros((B, full.shape[1], n, full.shape[3]))
    for b in range(B):
        for j in range(n):
            found = np.flatnonzero(shown[b] & (slots[b] == _sink_slot(attention_mask, j)[b]))
            if found.size:
                kept[b, :, j] = full[b, :, found[0]]
    return np.concatenate([kept, full[:, :, K - r:]], axis=2)


def decoding_visible(node: Node, runtime: tuple[str, ...], env: Env) -> np.ndarray:
    """(B, T, K): what a call's T new tokens see of its K keys. Self attention: the mask read
    at positions (a query at slot S - T + t, a key at the slot it stands for, `key_slots`),
    with L = S as in one pass over the row's real tokens, and keys at padding slots (or not
    shown) hidden. Cross attention: the mask over the K cached memory rows (keys 0 .. K - 1;
    `padding` reads key_lengths, a decoder stack's memory_lengths), as in one pass.
    `runtime`: the mask's runtime inputs (attention_mask and the keys, or the memory rows
    first)."""
    T = env["x"].shape[1]
    if node.attr("memory"):
        K = env[runtime[0]].shape[2]
        B = env["x"].shape[0]
        lengths = env.get("memory_lengths" if "memory_lengths" in runtime else "key_lengths")
        seen = mask_of(node.attr("expr"), B, T, K, lengths, None)
        return np.broadcast_to(seen, (B, T, K))
    attention_mask, keys = env[runtime[0]], runtime[1]
    B, S = attention_mask.shape
    K = env[keys].shape[2]
    first = int(env.get(keys + FIRST, 0))
    slots, shown = key_slots(attention_mask, K, first)
    # every (query position, key position) pair of one pass over S tokens; `padding` shows
    # every key here, for attention_mask says which are real
    grid = mask_of(node.attr("expr"), B, S, S, np.full(B, S), None)
    grid = np.broadcast_to(grid, (B, S, S))
    pos = _positions(attention_mask)
    q_pos = pos[:, S - T:]  # (B, T)
    slots = np.minimum(slots, S - 1)  # a sink slot not yet filled: hidden, any slot will do
    k_pos = np.take_along_axis(pos, slots, axis=1)  # (B, K)
    real = np.take_along_axis(attention_mask, slots, axis=1) != 0
    b = np.arange(B)[:, None, None]
    return grid[b, q_pos[:, :, None], k_pos[:, None, :]] & (real & shown)[:, None, :]


def seen_keys(node: Node, runtime: tuple[str, ...], env: Env, S: int) -> np.ndarray:
    """The visibility a mask or core node says over S keys (one pass), its mask's runtime
    inputs `runtime`; a decoding call's over its cached and new keys (`decoding_visible`)."""
    decoding = runtime[:1] == ("attention_mask",) or node.attr("memory")
    return decoding_visible(node, runtime, env) if decoding else visible(node, env, S)
