"""Which slots of a sequence a decoding cache holds, written once over an array namespace
(`TorchArrays`, `OnnxArrays`) for the torch module and the ONNX lowering: what the new tokens
see of the cached and new keys (`decoding_visible`), and the present a bounded cache keeps
(`bounded_present`): the last r keys, and where the mask shows the first n positions
(`prefix(n)`, `masks.kept_keys`) the keys of those first n positions too (docs/LANGUAGE.md,
Decoding).

A bounded cache with n first slots and r recent slots holds, once the keys outnumber n + r,
[the keys of each row's first n real tokens][the last r slots]; until then, every slot. A call
sees K keys (the past's and its own) over S = attention_mask's slots: K == S while the cache
has kept every slot, else its first n keys are the first tokens' and the rest the last K - n
slots. A first token still among those last slots is hidden in the first part (it is seen
once, where it is recent); a row with fewer than n real tokens so far has hidden first slots,
filled as its tokens arrive."""

from __future__ import annotations

from typing import Any

from .. import masks

__all__ = ["bounded_present", "decoding_visible"]

Array = Any


def _count(xp, n: Any) -> Array:
    """A length as a 0-d int64 array (the exporters cannot mix symbolic sizes into arithmetic
    on tensors)."""
    return xp.sum(xp.astype(xp.arange(n) >= 0, "int64"), axis=0)


def _first_slots(xp, attention_mask: Array, n: int) -> Array:
    """(B, n): the slot of each row's j-th real token, j < n (S where the row has none): the
    number of slots holding at most j real tokens."""
    counts = xp.cumsum(attention_mask, 1)  # (B, S)
    return xp.sum(xp.astype(counts[..., None] <= xp.arange(n), "int64"), axis=1)


def _key_slots(xp, attention_mask: Array, keys: Any, n: int) -> tuple[Array, Array]:
    """(B, K) the slot each of the K cached keys holds, and (B, K) whether it is seen there
    (False for a first slot whose token is also among the recent keys, or not yet come)."""
    S, K = _count(xp, xp.shape(attention_mask, 1)), _count(xp, keys)
    i = xp.arange(keys)  # (K,)
    recent = S - K + i  # (K,): the last K slots
    firsts = _first_slots(xp, attention_mask, n)  # (B, n)
    first = (K < S) & (i < n)  # (K,): a kept cache's first n keys are the first tokens'
    held = xp.take(firsts, xp.minimum(i, n - 1), axis=1)  # (B, K)
    slots = xp.where(first, held, recent)
    seen = ~(first & (held >= S - K + n)) & (slots < S)
    return xp.minimum(slots, S - 1), seen


def decoding_visible(xp, expr: Any, attention_mask: Array, x: Array,
                     keys: Any = None) -> Array:
    """(B, L, K) bool: what each of the L new tokens of x (B, L, d) sees of the K = `keys`
    (default: all S) keys of a call over the S slots of attention_mask (B, S): the last K
    slots, or with the first n positions kept too (`masks.kept_keys`) as the module says.
    Masks read token positions: a slot's is the number of real tokens (attention_mask 1)
    before it, so left padding shifts nothing; padded slots are hidden."""
    S = xp.shape(attention_mask, 1)

    def last(a: Array, n: Array) -> Array:  # the last n columns of (B, S)
        return xp.slice(a, 1, S - n, None)

    keys = S if keys is None else keys
    tokens = xp.cumsum(attention_mask, 1) - 1  # (B, S)
    q_tok = last(tokens, xp.shape(x, 1))
    real = xp.astype(attention_mask, "bool")
    n = (masks.kept_keys(expr) or (0, 0))[0]
    if n:
        slots, seen = _key_slots(xp, attention_mask, keys, n)
        k_tok = xp.take_along(tokens, slots, 1)
        real = xp.take_along(real, slots, 1) & seen
    else:
        k_tok, real = last(tokens, keys), last(real, keys)
    ctx = masks.MaskContext(S, S)
    return masks.evaluate(expr, q_tok[..., None], k_tok[:, None], ctx) & real[:, None]


def bounded_present(xp, full: Array, attention_mask: Array, first: int, recent: int) -> Array:
    """The present a bounded cache keeps of `full` (B, H, K, d), the past and new keys of a
    call over attention_mask (B, S): every key while K <= first + recent, else the keys of
    the `first` first real tokens then the last `recent` (the module says which)."""
    if not first:
        return xp.slice(full, 2, -recent, None)
    keys = xp.shape(full, 2)
    S, K = _count(xp, xp.shape(attention_mask, 1)), _count(xp, keys)
    j = xp.arange(first)  # (n,)
    slots = _first_slots(xp, attention_mask, first)  # (B, n)
    # the j-th first token's key in full: at its slot while the cache kept every slot; once
    # kept, at j, or among the recent keys while its token is still there (or only came now)
    at = xp.where(K < S, xp.where(slots >= S - K + first, slots - S + K, j), slots)
    at = xp.minimum(at, K - 1)
    size = xp.int_min(keys, first + recent)
    t = xp.arange(size)  # (size,)
    big = first + recent < K  # the cache keeps the first and the recent keys alone
    picked = xp.take(at, xp.minimum(t, first - 1), axis=1)  # (B, size)
    index = xp.where(big & (t < first), picked, xp.where(big, K - first - recent + t, t))
    return xp.take_slots(full, index)
