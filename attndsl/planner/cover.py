"""Mask covers: a cheap superset of a mask's visible (query, key) pairs -- a band around the
diagonal, global rows and columns, random key blocks, residue classes -- from which the sparse
strategies size their work (`strategies.block_sparse`, `strategies.strided`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from .. import masks as m
from ..spec import MAX_LENGTH

__all__ = ["INF", "Cover", "cover"]

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
    randoms: tuple[m.Random, ...] = ()
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


@functools.cache  # asked by choose and again when fusing the node that carries it
def cover(mask: m.Mask, *, self_attention: bool) -> Cover:
    """A cheap superset of `mask` (see Cover). Sound for every mask; tight for the usual ones.

    Positions never exceed MAX_LENGTH, so a band that reaches further is no band, and global
    positions beyond it are dropped: the cover's size follows what can exist, not a parameter's
    magnitude (`window(left = 10**7)` is unbounded, `prefix(10**18)` is MAX_LENGTH keys)."""
    c = _fix(_cover(mask, self_attention))
    band = (c.left, c.right) if max(c.left, c.right) < MAX_LENGTH else (INF, INF)
    return replace(c, left=band[0], right=band[1], q_first=min(c.q_first, MAX_LENGTH),
                   k_first=min(c.k_first, MAX_LENGTH),
                   q_tokens=tuple(t for t in c.q_tokens if t < MAX_LENGTH),
                   k_tokens=tuple(t for t in c.k_tokens if t < MAX_LENGTH))


def _cover(mask: m.Mask, self_attention: bool) -> Cover:
    match mask:
        case m.Causal(align="top_left"):
            return Cover(INF, 0)
        case m.Causal():
            return Cover(INF, 0) if self_attention else Cover()
        case m.Window(left, right, align):
            return Cover(left, right) if self_attention or align == "top_left" else Cover()
        case m.Dilated(left, right, _):
            return Cover(left, right)
        case m.Chunked(n):
            return Cover(n - 1, n - 1)
        case m.Global(first, tokens):
            return Cover(-INF, -INF, first, tokens, first, tokens)
        case m.Prefix(n):
            return Cover(-INF, -INF, k_first=n)
        case m.Random() as r:
            return Cover(-INF, -INF, randoms=(r,))
        case m.Strided(n) if self_attention:
            return Cover(-INF, -INF, strides=(n,))
        case m.Compare(op, left, right) if self_attention:
            return _compare_cover(op, left, right)
        case m.Or(a, b):
            return _fix(_cover(a, self_attention).union(_cover(b, self_attention)))
        case m.And(a, b):
            ca = _cover(a, self_attention)
            cb = _cover(b, self_attention)
            both = _fix(Cover(min(ca.left, cb.left), min(ca.right, cb.right)).union(
                replace(ca, left=-INF, right=-INF)).union(replace(cb, left=-INF, right=-INF)))
            return min((_fix(ca), _fix(cb), both), key=Cover.cost)
    return Cover()  # full, strided, padding, document, negations: no bound


def _offset(e: m.Index) -> tuple[int, int] | None:
    """(a, c) with e = a * (k - q) + c for every q, k, when e is such an affine function of
    the offset k - q, else None."""
    linear = _linear(e)
    if linear is None or linear[0] != -linear[1]:
        return None
    return linear[1], linear[2]


def _linear(e: m.Index) -> tuple[int, int, int] | None:
    """(x, y, c) with e = x q + y k + c, when e is affine in q and k (sums, differences,
    constant multiples), else None."""
    match e.op:
        case "q":
            return 1, 0, 0
        case "k":
            return 0, 1, 0
        case "const":
            return 0, 0, e.value
        case "+" | "-":
            a, b = _linear(e.args[0]), _linear(e.args[1])
            if a is None or b is None:
                return None
            sign = 1 if e.op == "+" else -1
            return a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2]
        case "*":
            a, b = _linear(e.args[0]), _linear(e.args[1])
            if a is None or b is None:
                return None
            if a[:2] == (0, 0):
                a, b = b, a
            if b[:2] != (0, 0):
                return None  # a product of two indices
            return a[0] * b[2], a[1] * b[2], a[2] * b[2]
    return None


def _compare_cover(op: str, left: m.Index, right: m.Index) -> Cover:
    """The band of an index comparison of the offset d = k - q alone: `a d + c op 0`, or
    `abs(a d + c) op' r` (op' one of < <=); no band for anything else."""
    def band(lo: float, hi: float) -> Cover:  # lo <= d <= hi
        return Cover(max(-lo, 0) if lo > -INF else INF, max(hi, 0) if hi < INF else INF)

    if left.op == "abs" and op in ("<", "<=") and right.op == "const":
        inner = _offset(left.args[0])
        if inner is not None and inner[0] != 0:  # |a d + c| <= r: -r - c <= a d <= r - c
            r = right.value - (op == "<")
            a, c = inner
            lo, hi = sorted(((-r - c) / a, (r - c) / a))
            return band(math.floor(lo), math.ceil(hi)) if r >= 0 else Cover(-INF, -INF)
        return Cover()
    diff = _offset(m.Index("-", (left, right)))  # `k <= q` too: its sides alone are not
    if diff is None:
        return Cover()
    a, c = diff  # a d + c op 0
    if a == 0:
        return Cover()
    strict = op in ("<", ">")
    if op == "==":
        return band(math.floor(-c / a), math.ceil(-c / a))
    if op == "!=":
        return Cover()
    upper = op in ("<", "<=")  # a d + c < 0 (or <=): d below -c/a when a > 0
    bound = -c / a
    if (a > 0) == upper:  # d <= bound
        return band(-INF, math.ceil(bound) - (strict and float(bound).is_integer()))
    return band(math.floor(bound) + (strict and float(bound).is_integer()), INF)


def _fix(c: Cover) -> Cover:
    """A band of -inf means 'no band part'; keep it as an empty band at the diagonal."""
    return replace(c, left=max(c.left, 0), right=max(c.right, 0))
