"""What every mask node is: a `MaskNode` holds its parameters and says what it shows
(`visible`), how it reads (`text`), its cover, how far back it reaches and which runtime
inputs it needs; `MaskContext` carries the sizes and runtime inputs to every backend."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .cover import Cover

__all__ = ["ROLES", "MaskContext", "MaskNode", "read_as", "render"]


@dataclass(frozen=True)
class MaskContext:
    """L and S (ints or symbolic sizes) and the runtime inputs a mask may read:
    `key_lengths` int64 [B]; `segment_ids` int64 [B, L] (q and k index it, so they must lie
    in [0, L) wherever a document mask is evaluated); `document_positions` [B, L] (each
    token's position within its document: `qd`, `kd`); `memory_segment_ids` [B, S], the
    documents of cross attention's memory rows."""

    L: Any
    S: Any
    key_lengths: Any = None
    segment_ids: Any = None
    document_positions: Any = None
    memory_segment_ids: Any = None

    def at(self, L: Any, S: Any) -> MaskContext:
        return replace(self, L=L, S=S)


# graph inputs a mask reads in place of another runtime input: a decoder stack's cross
# attention reads its memory's padding from `memory_lengths`, the tokens' being `key_lengths`
ROLES = {"memory_lengths": "key_lengths"}


def read_as(operands: tuple[str, ...], env: Mapping) -> Mapping:
    """`env` (name -> value) as an attention node with these operands reads it: each operand
    that plays another runtime input's role (`ROLES`) under that input's name (a view: env
    is not copied)."""
    swapped = {ROLES[n]: env[n] for n in operands if n in ROLES and n in env}
    return ChainMap(swapped, env) if swapped else env


class MaskNode:
    """The protocol of a mask node (each a frozen dataclass of its parameters)."""

    level = 4  # its precedence when rendered: 1 `|`, 2 `&`, 3 `!`, 3.5 a comparison

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        """Boolean visibility of keys k from queries q: int64 position arrays (NumPy, torch
        or symbolic ONNX values) that broadcast against each other, with the operators they
        share (`<=`, `&`, `%`, ...); masks of runtime inputs add a leading batch axis."""
        raise NotImplementedError

    def text(self) -> str:
        """Canonical text (docs/LANGUAGE.md's spelling)."""
        raise NotImplementedError

    def cover(self, self_attention: bool) -> Cover:
        """A superset of its visible pairs (before `cover.fix`); no bound by default."""
        return Cover()

    def reach_back(self) -> int | None:
        """How many keys before its own a query can see at most; None: unbounded."""
        return None

    def kept_keys(self) -> tuple[int, int] | None:
        """(n, r): a query sees at most the prefix keys, those at positions below n
        (`prefix(n)`), and the r keys before its own (and its own); None: unbounded."""
        r = self.reach_back()
        return None if r is None else (0, r)

    def parameters(self) -> set[int]:
        """The sizes at which its visibility changes (for `lookahead`'s search)."""
        return set()

    def real_keys(self) -> MaskNode:
        """The node in a decoding graph, where attention_mask says which keys are real."""
        return self

    def children(self) -> tuple[MaskNode, ...]:
        return ()

    def leaves(self) -> Iterator[MaskNode]:
        if not self.children():
            yield self
        for child in self.children():
            yield from child.leaves()


def render(mask: MaskNode, parent: int | float = 0) -> str:
    """Canonical text of a resolved mask, parenthesised where `parent` binds tighter."""
    text = mask.text()
    return f"({text})" if mask.level < parent else text
