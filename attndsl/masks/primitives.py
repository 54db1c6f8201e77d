"""The mask primitives of docs/LANGUAGE.md (Masks), one class each: its parameters, what it
shows, its text, its cover and how far back it reaches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import MaskContext, MaskNode
from .cover import INF, Cover

__all__ = ["RANDOM_MULTIPLIER", "RANDOM_PRIME", "Causal", "Chunked", "Dilated", "Document", "Full",
           "Global", "Padding", "Prefix", "Random", "Strided", "Window", "random_key_block"]


@dataclass(frozen=True)
class Full(MaskNode):
    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return (q >= 0) & (k >= 0)

    def text(self) -> str:
        return "full"


@dataclass(frozen=True)
class Causal(MaskNode):
    align: str = "top_left"  # or bottom_right: k <= q + (S - L)

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        if self.align == "top_left":
            return k <= q
        return k <= q + (ctx.S - ctx.L)

    def text(self) -> str:
        return "causal" if self.align == "top_left" else "causal(align = bottom_right)"

    def cover(self, self_attention: bool) -> Cover:
        return Cover(INF, 0) if self_attention or self.align == "top_left" else Cover()


@dataclass(frozen=True)
class Window(MaskNode):
    left: int
    right: int
    align: str = "top_left"  # or bottom_right: query q sits at position q + (S - L)

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        at = q if self.align == "top_left" else q + (ctx.S - ctx.L)
        return (k >= at - self.left) & (k <= at + self.right)

    def text(self) -> str:
        return f"window(left = {self.left}, right = {self.right}" + (
            ")" if self.align == "top_left" else ", align = bottom_right)")

    def cover(self, self_attention: bool) -> Cover:
        return Cover(self.left, self.right) if self_attention or self.align == "top_left" \
            else Cover()

    def reach_back(self) -> int | None:
        return self.left

    def parameters(self) -> set[int]:
        return {self.left, self.right}


@dataclass(frozen=True)
class Dilated(MaskNode):
    left: int
    right: int
    dilation: int

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return (k >= q - self.left) & (k <= q + self.right) & ((q - k) % self.dilation == 0)

    def text(self) -> str:
        return f"dilated(left = {self.left}, right = {self.right}, dilation = {self.dilation})"

    def cover(self, self_attention: bool) -> Cover:
        return Cover(self.left, self.right)

    def reach_back(self) -> int | None:
        return self.left

    def parameters(self) -> set[int]:
        return {self.left, self.right, self.dilation}


@dataclass(frozen=True)
class Chunked(MaskNode):
    n: int

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return q // self.n == k // self.n

    def text(self) -> str:
        return f"chunked({self.n})"

    def cover(self, self_attention: bool) -> Cover:
        return Cover(self.n - 1, self.n - 1)

    def reach_back(self) -> int | None:
        return self.n - 1

    def parameters(self) -> set[int]:
        return {self.n}


@dataclass(frozen=True)
class Strided(MaskNode):
    n: int

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return (q - k) % self.n == 0

    def text(self) -> str:
        return f"strided({self.n})"

    def cover(self, self_attention: bool) -> Cover:
        return Cover(-INF, -INF, strides=(self.n,)) if self_attention else Cover()

    def parameters(self) -> set[int]:
        return {self.n}


@dataclass(frozen=True)
class Global(MaskNode):
    first: int = 0  # tokens 0..first-1 are global
    tokens: tuple[int, ...] = ()  # and these

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        q_global = q < self.first
        k_global = k < self.first
        for t in self.tokens:
            q_global = q_global | (q == t)
            k_global = k_global | (k == t)
        return q_global | k_global

    def text(self) -> str:
        parts = ([f"first = {self.first}"] if self.first else []) + (
            [f"tokens = [{', '.join(map(str, self.tokens))}]"] if self.tokens else [])
        return f"global({', '.join(parts)})"

    def cover(self, self_attention: bool) -> Cover:
        return Cover(-INF, -INF, self.first, self.tokens, self.first, self.tokens)

    def parameters(self) -> set[int]:
        return {self.first, *self.tokens}


@dataclass(frozen=True)
class Prefix(MaskNode):
    n: int

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        return (k < self.n) & (q >= 0)

    def text(self) -> str:
        return f"prefix({self.n})"

    def kept_keys(self) -> tuple[int, int] | None:  # the prefix keys: the first n positions
        return self.n, 0

    def cover(self, self_attention: bool) -> Cover:
        return Cover(-INF, -INF, k_first=self.n)

    def parameters(self) -> set[int]:
        return {self.n}


# The BigBird-style random draw, exactly (docs/LANGUAGE.md): for query block i and draw j,
#   h = seed mod P;  h = (h*M + i + 1) mod P;  h = (h*M + j + 1) mod P;  h = (h*M) mod P twice;
#   key block = h mod ceil(S / block).
# Every product stays below 2**47, so int64 arithmetic is exact in NumPy, torch and ONNX.
RANDOM_PRIME = 2_147_483_647
RANDOM_MULTIPLIER = 48_271


def random_key_block(seed: int, query_block: Any, draw: int, num_key_blocks: Any) -> Any:
    """Key block of draw `draw` for query block(s) `query_block` (int or int64 array)."""
    p, m = RANDOM_PRIME, RANDOM_MULTIPLIER
    h = (seed % p * m + query_block + 1) % p
    h = (h * m + draw + 1) % p
    h = h * m % p
    h = h * m % p
    return h % num_key_blocks


@dataclass(frozen=True)
class Random(MaskNode):
    blocks: int
    block: int
    seed: int

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        q_block = q // self.block
        k_block = k // self.block
        # ceil(S / block) from S itself: k may hold only some keys (block-sparse gathers)
        num_key_blocks = (ctx.S + (self.block - 1)) // self.block
        seen = k_block < 0
        for j in range(self.blocks):
            seen = seen | (random_key_block(self.seed, q_block, j, num_key_blocks) == k_block)
        return seen

    def text(self) -> str:
        return f"random(blocks = {self.blocks}, block = {self.block}, seed = {self.seed})"

    def cover(self, self_attention: bool) -> Cover:
        return Cover(-INF, -INF, randoms=(self,))

    def parameters(self) -> set[int]:
        return {self.block, self.blocks * self.block}


@dataclass(frozen=True)
class Padding(MaskNode):
    side: str = "right"  # right: keys 0 .. n-1 are real; left: keys S-n .. S-1

    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        batch = (slice(None),) + (None,) * k.ndim  # (B, 1, ..., 1) against positions
        if self.side == "left":
            return (k >= ctx.S - ctx.key_lengths[batch]) & (q >= 0)
        return (k < ctx.key_lengths[batch]) & (q >= 0)

    def text(self) -> str:
        return "padding" if self.side == "right" else "padding(side = left)"

    def real_keys(self) -> MaskNode:
        return Full()


@dataclass(frozen=True)
class Document(MaskNode):
    def visible(self, q: Any, k: Any, ctx: MaskContext) -> Any:
        # gathers: (B, *q.shape), (B, *k.shape)
        keys = ctx.segment_ids if ctx.memory_segment_ids is None else ctx.memory_segment_ids
        return ctx.segment_ids[:, q] == keys[:, k]

    def text(self) -> str:
        return "document"
