"""`attndsl show`: the mask of a layer at a given length, as a terminal grid (one row per query)
with a legend and the density of visible pairs, and as a PNG with one panel per head where
masks or biases differ by head (ALiBi slopes, T5 relative-bias tables)."""

from __future__ import annotations

import numpy as np

from . import masks
from .positions import alibi_slopes, t5_bucket_float32
from .spec import Alibi, Attention, LshKernel, RelativeBias, Transformer

__all__ = ["PANEL_GAP", "RAMP", "VISIBLE", "example_runtime_inputs", "head_panels", "mask_grid",
           "panel_scale", "png_panels",
           "terminal_grid"]

PANEL_GAP = 4  # pixels between panels (and around the picture)


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
    """The first layer's attention as it runs at query length L (its by_length variant)."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    variant = attn.variant_for(L)
    return attn if variant is None else variant.attention


def _variant(spec: Attention | Transformer, L: int) -> str:
    """' (by_length: L <= n)' (or L > n) for the variant that serves L, else ''."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    variant = attn.variant_for(L)
    if variant is None:
        return ""
    if variant.up_to is not None:
        return f" (by_length: L <= {variant.up_to})"
    return f" (by_length: L > {attn.variants[-2].up_to})"


def terminal_grid(spec: Attention | Transformer, L: int, S: int | None = None, *,
                  rows: bool = True) -> str:
    """The mask's grid (one row per query; without `rows`, the summary alone: the mask, the
    legend of assumed runtime inputs and the density)."""
    attn = _layer_attention(spec, L)
    S = S or L
    grid = mask_grid(attn, L, S)
    lines = [f"{spec.name}: mask `{masks.render(attn.mask)}` at L = {L}"
             + (f", S = {S}" if S != L else "") + _variant(spec, L)]
    if rows:
        width = len(str(L - 1))
        ruler = "".join(str(k // 10 % 10) if k % 10 == 0 else " " for k in range(S))
        lines.append(" " * (width + 3) + ruler)
        for qi in range(L):
            row = "".join("█" if v else "·" for v in grid[qi])
            lines.append(f"{qi:>{width}} │ {row}")
    visible = int(grid.sum())
    notes = []
    runtime = example_runtime_inputs(attn, L, S)
    if "key_lengths" in runtime:
        notes.append(f"key_lengths = {int(runtime['key_lengths'][0])}")
    if "segment_ids" in runtime:
        notes.append(f"two documents split at {(L + 1) // 2}")
    if "memory_segment_ids" in runtime:
        notes.append(f"memory rows of two documents split at {(S + 1) // 2}")
    lines.append("legend: █ key visible from query (row)  · masked"
                 + (f"  (runtime inputs assumed: {', '.join(notes)})" if notes else ""))
    lines.append(f"density: {visible} of {L * S} pairs visible ({100 * visible / (L * S):.1f}%)"
                 + (f"; {int((~grid.any(1)).sum())} row(s) see no key" if not grid.any(1).all()
                    else ""))
    if isinstance(attn.kernel, LshKernel):
        k = attn.kernel
        lines.append(f"lsh: of these, a query sees only the tokens hashed near it (its chunk of "
                     f"{k.chunk} and the one before, in each of {k.rounds} hash round(s)), "
                     "chosen at run time from the queries; itself only when nothing else is "
                     "visible")
    return "\n".join(lines)


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


def png_panels(spec: Attention | Transformer, L: int, S: int | None = None) -> np.ndarray:
    """RGB picture: the head panels (`head_panels`) side by side."""
    S = S or L
    s = panel_scale(L, S)
    panels = [rgb for rgb, _ in head_panels(spec, L, S)]
    height = L * s + 2 * PANEL_GAP
    width = len(panels) * (S * s + PANEL_GAP) + PANEL_GAP
    image = np.full((height, width, 3), 255, np.uint8)
    for i, panel in enumerate(panels):
        big = np.repeat(np.repeat(panel, s, axis=0), s, axis=1)
        x0 = PANEL_GAP + i * (S * s + PANEL_GAP)
        image[PANEL_GAP:PANEL_GAP + L * s, x0:x0 + S * s] = big
    return image


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
