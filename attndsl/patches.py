"""A vision stack's input (`patches = patches(size = P, ...)`, docs/LANGUAGE.md "Vision
encoders"): an image cut into P x P patches, each projected to one token row, an optional
class token, a distillation token and register tokens before them, and a learned table of
2-D positions, interpolated to other grids.
The dataclass, and the image sizes `verify` draws for a count of patches."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["INTERPOLATION_A", "Patches", "image_shape", "patch_counts"]

# the cubic convolution's parameter a of the bicubic interpolation (torch's, ONNX Resize's
# `cubic_coeff_a`)
INTERPOLATION_A = -0.75


@dataclass(frozen=True)
class Patches:
    """`patches(size = P, channels = C, bias = true, class_token = false,
    distillation_token = false, registers = 0, grid = none, antialias = false)`:
    pixel_values [B, C, H, W] -> rows [B, (class token + distillation token + registers +)
    gh * gw, d_model], gh = H // P, gw = W // P; `grid = g`: a learned table of g x g patch
    positions (and a row for the class and the distillation token each before them),
    bicubic-interpolated to gh x gw where the grid differs (`antialias`: PIL's antialiased
    bicubic)."""

    size: int
    channels: int = 3
    bias: bool = True
    class_token: bool = False
    grid: int | None = None
    registers: int = 0
    antialias: bool = False
    distillation_token: bool = False

    @property
    def tokens(self) -> int:
        """The learned tokens with a position row (the class and the distillation token)."""
        return int(self.class_token) + int(self.distillation_token)

    @property
    def prefix(self) -> int:
        """Token rows before the patches' (the class and distillation tokens', then the
        registers')."""
        return self.tokens + self.registers

    @property
    def table_rows(self) -> int:
        """Rows of `position_embeddings.weight`: the grid's, after the class and distillation
        tokens' (registers have no position)."""
        return 0 if self.grid is None else self.grid * self.grid + self.tokens

    def rows(self, height: int, width: int) -> int:
        """The token rows of an image of height x width pixels: the prefix tokens', then
        (height // P) (width // P) patches'."""
        return self.prefix + (height // self.size) * (width // self.size)

    def text(self) -> str:
        parts = [f"size = {self.size}"]
        if self.channels != 3:
            parts.append(f"channels = {self.channels}")
        if not self.bias:
            parts.append("bias = false")
        if self.class_token:
            parts.append("class_token = true")
        if self.distillation_token:
            parts.append("distillation_token = true")
        if self.registers:
            parts.append(f"registers = {self.registers}")
        if self.grid is not None:
            parts.append(f"grid = {self.grid}")
        if self.antialias:
            parts.append("antialias = true")
        return f"patches({', '.join(parts)})"


def image_shape(p: Patches, n: int) -> tuple[int, int]:
    """The image (H, W) in pixels that `verify` draws for n patches: gh x gw patches, gh the
    largest divisor of n up to sqrt(n) (a prime n: one row of n, or one column where n is 3
    more than a multiple of 4), with P - 1 extra pixel rows and one extra column, which the
    patches leave out (the grid floors H / P and W / P)."""
    gh = max(k for k in range(1, math.isqrt(n) + 1) if n % k == 0)
    gw = n // gh
    if gh == 1 and n % 4 == 3:
        gh, gw = n, 1
    return gh * p.size + p.size - 1, gw * p.size + 1


def patch_counts(p: Patches) -> dict[int, str]:
    """The patch counts `verify` checks a vision stack at, each with why."""
    out = {1: "one patch", 13: "a row of 13 patches (a prime)",
           11: "a column of 11 patches (a prime)", 35: "5 x 7 patches (not square)"}
    if p.grid is not None:
        g = p.grid
        out[g * g] = f"the table's own grid ({g} x {g}: no interpolation)"
        out.setdefault((g + 1) * (g + 2), f"{g + 1} x {g + 2} patches (interpolated up)")
    return dict(sorted(out.items()))
