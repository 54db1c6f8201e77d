"""Strategy `lsh`: Reformer's LSH attention, the kernel's own `kernel` node in standard ops (its
arithmetic in mechanisms/lsh.py, lowered as every kernel module's): queries hashed into
buckets by random rotations, sorted, and attended in chunks with the previous chunk;
O(L log L) time, O(L chunk) memory."""

from __future__ import annotations

from ..planner.cores import Core
from .base import Context, Match, Reject, Strategy

__all__ = ["STRATEGY"]


def match(a: Core, ctx: Context) -> Match | Reject:
    if a.kernel != "lsh":
        return Reject()
    return Match({}, ("LSH (Reformer): queries hashed into buckets, sorted, and attended in "
                      "chunks with the previous chunk, in standard ops (TopK sorts): "
                      "O(L log L) time, O(L chunk) memory; no fused kernel hashes",))


STRATEGY = Strategy("lsh", 20, match, lambda params: 1, None, fuses=False)
