"""A mask's cover: a cheap superset of its visible (query, key) pairs -- a band around the
diagonal, global rows and columns, random key blocks, residue classes -- from which the sparse
strategies size their work. Each primitive gives its own (`cover(self_attention)`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..shapes import MAX_LENGTH

__all__ = ["INF", "Cover", "fix"]

INF = math.inf


@dataclass(frozen=True)
class Cover:
    """A superset of a mask's visible pairs: the band q - left <= k <= q + right, plus every
    key for global queries, every query for global keys, and random key blocks."""

    left: float = INF
    right: float = INF
    q_first: int = 0  # queries 0..q_first-1 see every key
    q_tokens: tuple[int, ...] = ()
    k_first: int = 0  # keys 0..k_first-1 are seen by every query
    k_tokens: tuple[int, ...] = ()
    randoms: tuple[Any, ...] = ()  # the masks' Random primitives
    strides: tuple[int, ...] = ()  # every key k with k = q (mod n), for each n (self only)

    @property
    def banded(self) -> bool:
        return self.left < INF and self.right < INF

    def key_blocks(self, n: int) -> int:
        """Key blocks visited per query block at block size n."""
        band = math.ceil(self.left / n) + math.ceil(self.right / n) + 1
        globals_ = len(self.global_key_blocks(n))
        return band + globals_ + sum(r.blocks for r in self.randoms)

    def global_key_blocks(self, n: int) -> tuple[int, ...]:
        blocks = set(range(math.ceil(self.k_first / n)))
        blocks |= {t // n for t in self.k_tokens}
        return tuple(sorted(blocks))

    def union(self, other: Cover) -> Cover:
        return Cover(max(self.left, other.left), max(self.right, other.right),
                     max(self.q_first, other.q_first),
                     tuple(sorted(set(self.q_tokens) | set(other.q_tokens))),
                     max(self.k_first, other.k_first),
                     tuple(sorted(set(self.k_tokens) | set(other.k_tokens))),
                     self.randoms + other.randoms,
                     tuple(sorted(set(self.strides) | set(other.strides))))

    def cost(self) -> float:
        extra = self.q_first + len(self.q_tokens) + self.k_first + len(self.k_tokens)
        # a residue class holds L / n keys: weighed at the longest length that can exist
        strided = sum(MAX_LENGTH / n for n in self.strides)
        return self.left + self.right + extra + sum(r.blocks * r.block for r in self.randoms) \
            + strided

    def describe(self) -> str:
        parts = []
        if self.banded:
            parts.append(f"band q-{int(self.left)}..q+{int(self.right)}")
        if self.k_first or self.k_tokens:
            parts.append(f"{self.k_first + len(self.k_tokens)} global key(s)")
        if self.q_first or self.q_tokens:
            parts.append(f"{self.q_first + len(self.q_tokens)} global query row(s)")
        for r in self.randoms:
            parts.append(f"{r.blocks} random block(s) of {r.block}")
        parts += [f"every {n}th key (k = q mod {n})" for n in self.strides]
        return ", ".join(parts)


def fix(c: Cover) -> Cover:
    """A band of -inf means 'no band part'; keep it as an empty band at the diagonal."""
    return replace(c, left=max(c.left, 0), right=max(c.right, 0))
