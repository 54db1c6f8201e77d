"""`attndsl show`: the mask of a layer at a given length, as a terminal grid (one row per query)
with a legend and the density of visible pairs, and as a PNG with one panel per head where
masks or biases differ by head (ALiBi slopes, T5 relative-bias tables)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import masks
from .glyphs import HEIGHT, WIDTH, text_width
from .limits import beyond_limits, length_limits
from .mechanisms import kernel_of, selector_of
from .positions import alibi_slopes, t5_bucket_float32
from .spec import (
    Alibi,
    Attention,
    RelativeBias,
    Transformer,
)

__all__ = ["MAX_COLUMNS", "MAX_SHOW_LENGTH", "PANEL_GAP", "RAMP", "VISIBLE", "Layout",
           "default_length", "example_runtime_inputs", "head_panels", "mask_grid",
           "panel_scale", "png_layout", "png_panels", "terminal_grid", "ticks"]

PANEL_GAP = 4  # pixels between panels (and around the picture)
SHORT_LENGTH = 24  # enough rows to see a mask's shape when it names no extent
MAX_SHOW_LENGTH = 2048  # `show --length`'s cap: one pixel per key in the picture
MAX_COLUMNS = 128  # a wider grid draws each character for a square block of pairs


def default_length(spec: Attention | Transformer) -> tuple[int, str]:
    """The length `show` (and a notebook's card) draws unless told, and why: the longest of
    the lengths verify picks for the mask (the first prime past its window, chunk, global,
    prefix, random-block or stride extent), where a window shows its edge, else 24. Within
    the lengths the core serving short lengths serves (`Selector.longest`), the layer's length
    limits, and 2048."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    selector = selector_of(attn.variants)
    up_to = selector.longest(attn, SHORT_LENGTH) if selector else None
    longest = min(MAX_SHOW_LENGTH, up_to if up_to else MAX_SHOW_LENGTH)
    from .verify import mask_lengths

    limits = length_limits(spec)
    fits = {n: why for n, why in mask_lengths(_layer_attention(spec, SHORT_LENGTH)).items()
            if SHORT_LENGTH < n <= longest and beyond_limits(
                limits, n, n if "memory_length" in limits else None) is None}
    if not fits:  # 24, or fewer where the layer takes fewer (a kernel's key limit)
        return min([(SHORT_LENGTH, ""), *((n, f"the longest it takes: {why}")
                                          for n, why in limits.values())])
    n = max(fits)
    return n, fits[n]


def example_runtime_inputs(attn: Attention, L: int, S: int) -> dict[str, np.ndarray]:
    """What `show` assumes for runtime masks: 3/4 of the keys valid; two packed documents."""
    out = {}
    if "key_lengths" in attn.runtime_inputs:
        out["key_lengths"] = np.array([max(1, (3 * S) // 4)])
    if "segment_ids" in attn.runtime_inputs:
        out["segment_ids"] = (np.arange(L)[None, :] >= (L + 1) // 2).astype(np.int64)
        half = (L + 1) // 2  # positions within the two documents
        out["document_positions"] = np.where(np.arange(L) < half, np.arange(L),
                                             np.arange(L) - half)[None]
    if "memory_segment_ids" in attn.runtime_inputs:  # the memory's rows: two images likewise
        out["memory_segment_ids"] = (np.arange(S)[None, :] >= (S + 1) // 2).astype(np.int64)
    return out


def mask_grid(attn: Attention, L: int, S: int) -> np.ndarray:
    """Boolean (L, S) visibility for batch row 0 with the example runtime inputs."""
    q, k = np.arange(L)[:, None], np.arange(S)[None, :]
    context = masks.MaskContext(L, S, **example_runtime_inputs(attn, L, S))
    visible = masks.evaluate(attn.mask, q, k, context)
    visible = np.asarray(visible)
    return np.broadcast_to(visible[0] if visible.ndim == 3 else visible, (L, S)).copy()


def _layer_attention(spec: Attention | Transformer, L: int) -> Attention:
    """The first layer's attention as it runs at query length L (the core its selector
    chooses)."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    selector = selector_of(attn.variants)
    return attn if selector is None else selector.serving(attn, L)


def _chosen(spec: Attention | Transformer, L: int) -> str:
    """What names the core a selector chooses at L (`Selector.label`), else ''."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    selector = selector_of(attn.variants)
    return "" if selector is None else selector.label(attn, L)


def terminal_grid(spec: Attention | Transformer, L: int, S: int | None = None, *,
                  rows: bool = True, why: str = "") -> str:
    """The mask's grid (one row per query, one column per key; past MAX_COLUMNS keys or
    queries, one character per square block of pairs); without `rows`, the summary alone: the
    mask, the legend of assumed runtime inputs and the density. `why`: the reason for L when
    `show` chose it (`default_length`)."""
    attn = _layer_attention(spec, L)
    S = S or L
    grid = mask_grid(attn, L, S)
    chose = f" ({why}; --length to choose)" if why else ""
    lines = [f"{spec.name}: mask `{masks.render(attn.mask)}` at L = {L}"
             + (f", S = {S}" if S != L else "") + _chosen(spec, L) + chose]
    step = -(-max(L, S) // MAX_COLUMNS)  # pairs per character along each axis
    if rows:
        lines += _grid_rows(grid, step)
    visible = int(grid.sum())
    notes = []
    runtime = example_runtime_inputs(attn, L, S)
    if "key_lengths" in runtime:
        notes.append(f"key_lengths = {int(runtime['key_lengths'][0])}")
    if "segment_ids" in runtime:
        notes.append(f"two documents split at {(L + 1) // 2}")
    if "memory_segment_ids" in runtime:
        notes.append(f"memory rows of two documents split at {(S + 1) // 2}")
    block = f"each character {step} x {step} pairs: █ all visible, ▒ some, · none" \
        if rows and step > 1 else "█ key visible from query (row)  · masked"
    lines.append(f"legend: {block}"
                 + (f"  (runtime inputs assumed: {', '.join(notes)})" if notes else ""))
    lines.append(f"density: {visible} of {L * S} pairs visible ({100 * visible / (L * S):.1f}%)"
                 + (f"; {int((~grid.any(1)).sum())} row(s) see no key" if not grid.any(1).all()
                    else ""))
    kernel = kernel_of(attn.kernel)
    if kernel is not None and kernel.describe(attn.kernel):
        lines.append(kernel.describe(attn.kernel))
    return "\n".join(lines)


def _grid_rows(grid: np.ndarray, step: int) -> list[str]:
    """The ruler (the key index k at every tenth column, written out whole) and one line per
    query, or per `step` queries: a character per `step` x `step` block of pairs."""
    L, S = grid.shape
    rows, cols = -(-L // step), -(-S // step)
    padded = np.zeros((rows * step, cols * step), np.int64)
    padded[:L, :S] = grid
    seen = padded.reshape(rows, step, cols, step).sum(axis=(1, 3))
    full = np.minimum(L - np.arange(rows)[:, None] * step, step) * \
        np.minimum(S - np.arange(cols)[None, :] * step, step)  # pairs in each block
    width = max(3, len(str((rows - 1) * step)))  # the corner names the axes: q\k
    ruler = [" "] * cols
    for c in range(0, cols, 10):  # whole numbers, each within its ten columns
        label = str(c * step)
        if c + len(label) <= cols:  # never a number cut short at the right edge
            ruler[c:c + len(label)] = label
    lines = ["q\\k".rjust(width) + "   " + "".join(ruler).rstrip()]
    for r in range(rows):
        row = "".join("█" if v == n else "·" if v == 0 else "▒"
                      for v, n in zip(seen[r], full[r], strict=True))
        lines.append(f"{r * step:>{width}} │ {row}")
    return lines


def panel_scale(L: int, S: int) -> int:
    """Pixels per cell: panels are about 256 pixels wide, at least one pixel per cell."""
    return max(1, 256 // max(L, S))


def head_panels(spec: Attention | Transformer, L: int, S: int | None = None
                ) -> list[tuple[np.ndarray, tuple[float, float] | None]]:
    """One (RGB (L, S, 3), bias range or None) per head where biases differ by head, else one:
    masked pairs white, visible pairs dark or coloured by the head's score bias (`_panel`)."""
    attn = _layer_attention(spec, L)
    S = S or L
    grid = mask_grid(attn, L, S)
    q, k = np.arange(L)[:, None], np.arange(S)[None, :]
    if isinstance(attn.position, Alibi):
        a = attn.position
        slopes = alibi_slopes(attn.heads, a.slopes, a.max_bias, attn.scale if a.scaled else 1.0)
        biases = [-s * np.abs(q - k) for s in slopes]
    elif isinstance(attn.position, RelativeBias):
        p = attn.position
        bucket = t5_bucket_float32(np, k - q, p.buckets, p.max_distance, p.bidirectional)
        # the default relative_attention_bias of seed 0, so the picture matches `compile`
        from .backends.torch import seeded_module

        table = seeded_module(attn, 0).relative_attention_bias.weight.detach().numpy()
        biases = [table[bucket, h] for h in range(attn.heads)]
    else:
        biases = [None]
    return [_panel(grid, bias) for bias in biases]


@dataclass(frozen=True)
class Layout:
    """Where `png_panels` puts things: panel i's cell (q, k) starts at pixel (y, x) = (top + q
    * scale, left + i * pitch + k * scale)."""

    left: int
    top: int
    scale: int
    pitch: int


def png_layout(L: int, S: int, panels: int) -> Layout:
    s = panel_scale(L, S)
    text = 2 * (HEIGHT + 3)  # a row of tick numbers and the axis' name above it
    return Layout(left=PANEL_GAP + text_width(str(L - 1)) + 4 + HEIGHT + 6,
                  top=PANEL_GAP + text + (HEIGHT + 3 if panels > 1 else 0), scale=s,
                  pitch=S * s + max(PANEL_GAP, 4 * (WIDTH + 1)))


def png_panels(spec: Attention | Transformer, L: int, S: int | None = None) -> np.ndarray:
    """RGB picture: the head panels (`head_panels`) side by side, with axes (the key index k
    along the top, the query index q down the left, ticks at round numbers), each panel's
    head and bias range, a legend and, for biases, a colour bar (low to high)."""
    from .glyphs import draw_text

    S = S or L
    panels = head_panels(spec, L, S)
    at = png_layout(L, S, len(panels))
    s, biased = at.scale, panels[0][1] is not None
    legend = 3 * (HEIGHT + 4) + (2 * (HEIGHT + 4) if biased else 0)
    height = at.top + L * s + PANEL_GAP + legend + PANEL_GAP
    width = max(at.left + len(panels) * at.pitch,
                at.left + 64 + text_width("score bias: low -> high (each head over its range)")
                + PANEL_GAP)
    image = np.full((height, width, 3), 255, np.uint8)
    grey = (110, 110, 110)
    draw_text(image, "key index k ->", at.left, PANEL_GAP)
    for i, (rgb, _) in enumerate(panels):
        x0 = at.left + i * at.pitch
        image[at.top:at.top + L * s, x0:x0 + S * s] = np.repeat(np.repeat(rgb, s, 0), s, 1)
        for k in ticks(S):
            label = str(k)
            draw_text(image, label, x0 + k * s + s // 2 - text_width(label) // 2,
                      at.top - HEIGHT - 3 - (HEIGHT + 3 if len(panels) > 1 else 0), grey)
            image[at.top - 2:at.top, x0 + k * s + s // 2] = grey
        if len(panels) > 1:
            draw_text(image, f"head {i}", x0, at.top - HEIGHT - 2)
    for q in ticks(L):
        label = str(q)
        y = at.top + q * s + s // 2
        draw_text(image, label, at.left - 4 - text_width(label), y - HEIGHT // 2, grey)
    for j, ch in enumerate("q|v"):  # the axis' name and an arrow, down the left edge
        draw_text(image, ch, PANEL_GAP, at.top + j * (HEIGHT + 2))
    y = at.top + L * s + PANEL_GAP + 2
    if biased:  # each panel's bias range under it
        for i, (_, (lo, hi)) in enumerate(panels):
            draw_text(image, f"{lo + 0.0:.3g} .. {hi + 0.0:.3g}", at.left + i * at.pitch, y, grey)
        y += HEIGHT + 4
    swatch = RAMP[1] if biased else VISIBLE
    image[y:y + HEIGHT, at.left:at.left + HEIGHT] = swatch
    draw_text(image, "visible" + (": coloured by the score bias" if biased else ""),
              at.left + HEIGHT + 4, y)
    y += HEIGHT + 4
    image[y:y + HEIGHT, at.left:at.left + HEIGHT] = grey
    image[y + 1:y + HEIGHT - 1, at.left + 1:at.left + HEIGHT - 1] = 255
    draw_text(image, "hidden", at.left + HEIGHT + 4, y)
    if biased:
        y += HEIGHT + 4
        ramp = np.linspace(0, 1, 60)[None, :, None]
        lo, hi = np.array(RAMP[0]), np.array(RAMP[1])
        image[y:y + HEIGHT, at.left:at.left + 60] = (lo + (hi - lo) * ramp).astype(np.uint8)
        draw_text(image, "score bias: low -> high (each head over its range)", at.left + 64, y)
    return image


def ticks(n: int) -> list[int]:
    """0, the last index, and round numbers between (none crowding the last)."""
    if n <= 1:
        return [0]
    step = 10 ** int(np.log10(max(1, n - 1)))
    if (n - 1) / step < 3:
        step = max(1, step // 2)
    return sorted({0, n - 1, *range(step, n - 1, step)} - set(range(n - 1 - step // 2, n - 1)))


VISIBLE = (40, 60, 120)
RAMP = ((40, 60, 120), (255, 220, 30))  # a bias's colours: dark blue (low) to yellow (high)


def _panel(grid: np.ndarray, bias: np.ndarray | None
           ) -> tuple[np.ndarray, tuple[float, float] | None]:
    out = np.full((*grid.shape, 3), 255, np.uint8)
    if bias is None:
        out[grid] = VISIBLE
        return out, None
    values = bias[grid]
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    t = (bias - lo) / (hi - lo) if hi > lo else np.ones_like(bias)
    (r0, g0, b0), (r1, g1, b1) = RAMP
    ramp = np.stack([r0 + (r1 - r0) * t, g0 + (g1 - g0) * t, b0 + (b1 - b0) * t], axis=-1)
    out[grid] = np.clip(ramp[grid], 0, 255).astype(np.uint8)
    return out, (lo, hi)
