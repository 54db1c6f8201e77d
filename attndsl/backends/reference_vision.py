"""The reference's reading of a vision stack's input (docs/LANGUAGE.md, "Vision encoders"):
patches, the class token, the registers and the learned 2-D positions with their bicubic
interpolation (plain or antialiased), written from the formulas there in plain NumPy loops
(nothing shared with the backends)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["grid_of", "patch_rows", "relative_2d"]

A = -0.75  # the cubic convolution's parameter


def patch_rows(pixels: np.ndarray, attrs: Mapping, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """pixel_values (B, C, H, W) -> (B, [1 +] [1 +] [R +] gh * gw, d): patch (r, c) is the
    P x P block of pixels at rows r P .. r P + P - 1 and columns c P .. c P + P - 1, its row
    W . block + b, row-major (r, then c); the table's patch rows interpolated to gh x gw and
    added; the class token plus the table's row 0 first, the distillation token plus its
    row 1, then the R register rows."""
    P = attrs["size"]
    weight = w[attrs["weight"]]  # (d, C, P, P)
    d = weight.shape[0]
    B, _, H, W = pixels.shape
    gh, gw = H // P, W // P
    rows = np.zeros((B, gh * gw, d))
    for r in range(gh):
        for c in range(gw):
            block = pixels[:, :, r * P:(r + 1) * P, c * P:(c + 1) * P]  # (B, C, P, P)
            rows[:, r * gw + c] = np.einsum("bcij,dcij->bd", block, weight)
    if attrs.get("bias"):
        rows = rows + w[attrs["bias"]]
    cls = attrs.get("class_token")
    table = w[attrs["positions"]] if attrs.get("positions") else None
    if table is not None:
        g = attrs["grid"]
        before = (1 if cls else 0) + (1 if attrs.get("distillation_token") else 0)
        grid = table[before:].reshape(g, g, d)  # row before + r * g + c is patch (r, c)
        rows = rows + resize(grid, gh, gw, attrs.get("antialias", False)).reshape(gh * gw, d)
    if attrs.get("registers"):
        registers = w[attrs["registers"]]
        rows = np.concatenate([np.broadcast_to(registers, (B, *registers.shape)), rows], axis=1)
    if attrs.get("distillation_token"):  # (after the class token: the table's row 1)
        second = w[attrs["distillation_token"]] + (table[1] if table is not None else 0.0)
        rows = np.concatenate([np.broadcast_to(second, (B, 1, d)), rows], axis=1)
    if cls:
        first = w[cls] + (table[0] if table is not None else 0.0)
        rows = np.concatenate([np.broadcast_to(first, (B, 1, d)), rows], axis=1)
    return rows


def cubic(t: float, a: float = A) -> float:
    """Keys' cubic convolution kernel (a = -0.75: torch's bicubic; -0.5: PIL's)."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def _weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in): output i reads source coordinate s = (i + 1/2) n_in / n_out - 1/2 and
    its four neighbours floor(s) - 1 .. floor(s) + 2, weighed by cubic(s - j), an index
    outside 0 .. n_in - 1 reading the nearest edge."""
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        s = (i + 0.5) * n_in / n_out - 0.5
        f = int(np.floor(s))
        for j in range(f - 1, f + 3):
            m[i, min(max(j, 0), n_in - 1)] += cubic(s - j)
    return m


def _antialiased(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in), PIL's antialiased bicubic: with scale s = n_in / n_out, output i is
    centred at c = s (i + 1/2) and reads sources j from trunc(c - r + 1/2) (at least 0) to
    below trunc(c + r + 1/2) (at most n_in), r = 2 max(s, 1), weighed by the cubic kernel
    with a = -1/2 at (j + 1/2 - c) / max(s, 1), the weights divided by their sum."""
    scale = n_in / n_out
    stretch = max(scale, 1.0)
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        centre = scale * (i + 0.5)
        lo = max(int(centre - 2 * stretch + 0.5), 0)
        hi = min(int(centre + 2 * stretch + 0.5), n_in)
        for j in range(lo, hi):
            m[i, j] = cubic((j + 0.5 - centre) / stretch, -0.5)
        m[i] /= m[i].sum()
    return m


def resize(grid: np.ndarray, h: int, w: int, antialias: bool = False) -> np.ndarray:
    """(g1, g2, d) -> (h, w, d): bicubic interpolation along each axis (separable), or PIL's
    antialiased bicubic."""
    weights = _antialiased if antialias else _weights
    rows = np.einsum("ir,rcd->icd", weights(grid.shape[0], h), grid)
    return np.einsum("jc,icd->ijd", weights(grid.shape[1], w), rows)


def grid_of(pixels: np.ndarray, size: int, before: int) -> np.ndarray:
    """Each token's (row, column) (2, 1, n): the `before` tokens' (the class token's) (0, 0),
    then patch (r, c)'s, row-major."""
    gh, gw = pixels.shape[2] // size, pixels.shape[3] // size
    rows = [0] * before + [r for r in range(gh) for _ in range(gw)]
    cols = [0] * before + [c for _ in range(gh) for c in range(gw)]
    return np.array([[rows], [cols]], dtype=np.int64)


def relative_2d(pos: np.ndarray, table: np.ndarray, window: int, class_token: bool,
                ) -> np.ndarray:
    """docs/LANGUAGE.md, `relative_2d` -> (B | 1, H, L, L): the table's (2w - 1) x (2w - 1)
    offsets resized bilinearly to (2gh - 1) x (2gw - 1), gh and gw one past the largest row
    and column of `pos` (2, B | 1, L); query q and key k read the cell of their offset
    (r_q - r_k + gh - 1, c_q - c_k + gw - 1), or, where one is the class token (token 0),
    row size^2 (the class token to a patch), size^2 + 1 (a patch to it), size^2 + 2 (itself)."""
    size, heads = 2 * window - 1, table.shape[1]
    gh, gw = int(pos[0].max()) + 1, int(pos[1].max()) + 1
    grid = table[:size * size].reshape(size, size, heads)
    resized = np.einsum("ir,jc,rch->ijh", _linear(size, 2 * gh - 1), _linear(size, 2 * gw - 1),
                        grid)
    B, L = pos.shape[1], pos.shape[2]
    out = np.zeros((B, heads, L, L))
    for b in range(B):
        dr = pos[0, b][:, None] - pos[0, b][None, :] + gh - 1
        dc = pos[1, b][:, None] - pos[1, b][None, :] + gw - 1
        out[b] = resized[dr, dc].transpose(2, 0, 1)
        if class_token:
            out[b, :, 0, :] = table[size * size][:, None]
            out[b, :, :, 0] = table[size * size + 1][:, None]
            out[b, :, 0, 0] = table[size * size + 2]
    return out


def _linear(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in): torch's bilinear along one axis: output i reads the source coordinate
    s = max((i + 1/2) n_in / n_out - 1/2, 0), cells floor(s) and floor(s) + 1 (the last one
    past the end), weighed 1 - (s - floor(s)) and s - floor(s)."""
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        s = max((i + 0.5) * n_in / n_out - 0.5, 0.0)
        f = int(np.floor(s))
        m[i, f] += 1 - (s - f)
        m[i, min(f + 1, n_in - 1)] += s - f
    return m

