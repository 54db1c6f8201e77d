"""The planner's cover of a mask: each primitive's own (`MaskNode.cover`), clamped to the
positions that can exist."""

from __future__ import annotations

import functools
from dataclasses import replace

from .. import masks as m
from ..masks import INF, Cover, fix
from ..spec import MAX_LENGTH

__all__ = ["INF", "Cover", "cover"]


@functools.cache  # asked by a strategy's match and again by its lowering
def cover(mask: m.Mask, *, self_attention: bool) -> Cover:
    """A cheap superset of `mask` (see Cover). Sound for every mask; tight for the usual ones.

    Positions never exceed MAX_LENGTH, so a band that reaches further is no band, and global
    positions beyond it are dropped: the cover's size follows what can exist, not a parameter's
    magnitude (`window(left = 10**7)` is unbounded, `prefix(10**18)` is MAX_LENGTH keys)."""
    c = fix(mask.cover(self_attention))
    band = (c.left, c.right) if max(c.left, c.right) < MAX_LENGTH else (INF, INF)
    return replace(c, left=band[0], right=band[1], q_first=min(c.q_first, MAX_LENGTH),
                   k_first=min(c.k_first, MAX_LENGTH),
                   q_tokens=tuple(t for t in c.q_tokens if t < MAX_LENGTH),
                   k_tokens=tuple(t for t in c.k_tokens if t < MAX_LENGTH))
