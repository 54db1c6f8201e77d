"""Mask expressions, resolved: one class per primitive of docs/LANGUAGE.md (`primitives.py`,
index comparisons in `index.py`, `&` `|` `!` in `combine.py`), each holding its parameters,
what it shows, its text, its cover and how far back it reaches (`base.MaskNode`).

Visibility uses only operators that NumPy arrays, torch tensors and the ONNX builder's
symbolic values share (`<=`, `&`, `%`, ...), so the PyTorch module, `show`, bench and the
direct ONNX lowering all run the same definition, computed from index ranges at run time:
nothing of size L x S is ever stored. (The NumPy reference reads docs/LANGUAGE.md on its own.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import ROLES, MaskContext, MaskNode, read_as, render
from .combine import And, Not, Or
from .cover import INF, Cover, fix
from .index import Compare, Index, index_value, render_index
from .primitives import (
    RANDOM_MULTIPLIER,
    RANDOM_PRIME,
    Causal,
    Chunked,
    Dilated,
    Document,
    Full,
    Global,
    Padding,
    Prefix,
    Random,
    Strided,
    Window,
    random_key_block,
)

__all__ = [
    "INF", "RANDOM_MULTIPLIER", "RANDOM_PRIME", "ROLES", "And", "Causal", "Chunked", "Compare",
    "Cover", "Dilated", "Document", "Full", "Global", "Index", "Mask", "MaskContext", "MaskNode",
    "Not", "Or", "Padding", "Prefix", "Random", "Strided", "Window", "evaluate", "fix",
    "index_value", "kept_keys", "lookahead", "primitives", "random_key_block", "reach_back",
    "read_as", "reads_documents", "real_keys", "render", "render_index", "runtime_inputs",
]

Mask = (Full | Causal | Window | Dilated | Chunked | Strided | Global | Prefix | Random | Padding
        | Document | Compare | And | Or | Not)


_FARTHEST = 1 << 17  # the farthest offset `lookahead` tries


def evaluate(mask: Mask, q: Any, k: Any, ctx: MaskContext) -> Any:
    """Boolean visibility of key positions k from query positions q (`MaskNode.visible`), at
    the sizes and runtime inputs of `ctx`."""
    return mask.visible(q, k, ctx)


def lookahead(mask: Mask) -> tuple[int, int] | None:
    """A (query, key) pair with key > query that `mask` shows, or None: a mask without one can
    decode token by token against a cache (a query never needs a key that comes after it).

    Checked on one sequence (L = S, every key real, one document) at queries 0 .. N-1 and keys
    q + d, for offsets d of 1 .. 64 and around every parameter p of the mask (p - 1, p, p + 1,
    2p, 2p + 1), N = 2 * max(p) + 64: every primitive's first key after its query lies at one
    of these offsets (a window's right edge, the next chunk or stride, a prefix or global
    token). Offsets stop at 2^17 keys: a parameter as large as 2^62 is valid, but the search
    allocates positions up to N plus its largest offset."""
    import numpy as np

    params = sorted(_parameters(mask)) or [1]
    offsets = set(range(1, 65))
    for p in params:
        offsets |= {p - 1, p, p + 1, 2 * p, 2 * p + 1}
    d = np.array(sorted(o for o in offsets if 1 <= o <= _FARTHEST), dtype=np.int64)
    n = min(2 * params[-1] + 64, 1 << 16)
    size = n + int(d[-1])
    q = np.arange(n, dtype=np.int64)[:, None]
    k = q + d[None, :]
    seen = mask.visible(q, k, MaskContext(size, size, key_lengths=np.array([size]),
                                          segment_ids=np.zeros((1, size), dtype=np.int64),
                                          document_positions=np.arange(size, dtype=np.int64)[None]))
    seen = np.broadcast_to(seen, (1, *k.shape))[0] if seen.ndim == 3 else seen
    hits = np.argwhere(seen & (k < size))
    if not len(hits):
        return None
    i, j = hits[0]
    return int(q[i, 0]), int(k[i, j])


def real_keys(mask: Mask) -> Mask:
    """The mask of a decoding graph: `padding` becomes `full`, for there the attention_mask
    input says which keys are real (and is applied to every mask)."""
    return mask.real_keys()


def kept_keys(mask: Mask) -> tuple[int, int] | None:
    """(n, r): the keys a query can see at most are the prefix keys, those at positions below
    n (`prefix(n)`), and the r before its own (`reach_back`); `&` takes the smaller bound, `|`
    both. None when unbounded. A bounded decoding cache keeps those n + r keys: the first n
    positions' and the recent ones."""
    return mask.kept_keys()


def reach_back(mask: Mask) -> int | None:
    """How many keys before its own a query can see at most, or None when unbounded: a
    window's left, a chunk's n - 1; `&` takes the nearer bound, `|` the farther. A decoding
    cache keeps only that many keys (the later queries cannot see the rest)."""
    return mask.reach_back()


def _parameters(mask: Mask) -> set[int]:
    return {p for leaf in primitives(mask) for p in leaf.parameters()}


def primitives(mask: Mask) -> Iterator[Mask]:
    """The primitives of a mask expression (its leaves), left to right."""
    return mask.leaves()


def runtime_inputs(mask: Mask) -> tuple[str, ...]:
    """The graph inputs a mask reads at run time, in the order of the graph's inputs."""
    found = {type(m) for m in primitives(mask)}
    if reads_documents(mask):
        found.add(Document)
    return tuple(n for n, t in (("key_lengths", Padding), ("segment_ids", Document))
                 if t in found)


def reads_documents(mask: Mask) -> bool:
    """Whether an index mask reads positions within documents (`qd`, `kd`)."""
    return any(isinstance(p, Compare) and (p.left.uses_documents() or p.right.uses_documents())
               for p in primitives(mask))
