"""A layer's mask as an SVG picture with axes: one panel per head where score biases differ
(the cells as `show --png` draws them, embedded as a pixel-exact PNG), the key index along the
top, the query index down the side with ticks, a legend (visible / hidden) and, for bias heads,
a colour bar (low to high) and each panel's bias range. `show --svg` writes it; notebooks show it
(`_repr_html_`)."""

from __future__ import annotations

import base64
from html import escape

import numpy as np

from .png import encode_png
from .show import RAMP, VISIBLE, head_panels, ticks
from .spec import Attention, Transformer

__all__ = ["latency_svg", "mask_svg"]

_SIDE = 240  # a panel's longer side, in SVG units
_FONT = 'font-family="sans-serif" font-size="11"'


def _rgb(c: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*c)


def mask_svg(spec: Attention | Transformer, L: int, S: int | None = None) -> str:
    """The SVG text of the layer's mask at L queries and S keys (S = L by default)."""
    S = S or L
    panels = head_panels(spec, L, S)
    cell = _SIDE / max(L, S)
    w, h = S * cell, L * cell
    left, top, gap = 56, 46, 24
    biased = panels[0][1] is not None
    width = left + len(panels) * (w + gap) + (70 if biased else 0) + 10
    height = top + h + 66
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}">',
           '<rect width="100%" height="100%" fill="white"/>']
    for i, (rgb, bias) in enumerate(panels):
        x0 = left + i * (w + gap)
        data = base64.b64encode(encode_png(rgb)).decode()
        out.append(f'<image x="{x0:.1f}" y="{top}" width="{w:.1f}" height="{h:.1f}" '
                   f'preserveAspectRatio="none" style="image-rendering:pixelated" '
                   f'href="data:image/png;base64,{data}"/>')
        out.append(f'<rect x="{x0:.1f}" y="{top}" width="{w:.1f}" height="{h:.1f}" '
                   'fill="none" stroke="#888"/>')
        if len(panels) > 1:
            out.append(f'<text x="{x0 + w / 2:.1f}" y="12" text-anchor="middle" {_FONT}>'
                       f'head {i}</text>')
        if bias is not None:
            out.append(f'<text x="{x0 + w / 2:.1f}" y="{top + h + 14:.1f}" text-anchor="middle" '
                       f'{_FONT}>bias {bias[0]:.3g} … {bias[1]:.3g}</text>')
        for k in ticks(S):
            x = x0 + (k + 0.5) * cell
            out.append(f'<text x="{x:.1f}" y="{top - 5}" text-anchor="middle" {_FONT}>{k}</text>')
        if i == 0:
            for q in ticks(L):
                y = top + (q + 0.5) * cell + 4
                out.append(f'<text x="{left - 5}" y="{y:.1f}" text-anchor="end" {_FONT}>{q}'
                           '</text>')
    out.append(f'<text x="{left + w / 2:.1f}" y="{top - 20}" text-anchor="middle" {_FONT}>'
               'key index k →</text>')
    out.append(f'<text x="14" y="{top + h / 2:.1f}" text-anchor="middle" {_FONT} '
               f'transform="rotate(-90 14 {top + h / 2:.1f})">query index q →</text>')
    y = top + h + 30
    out.append(f'<rect x="{left}" y="{y - 9}" width="10" height="10" '
               f'fill="{_rgb(RAMP[1] if biased else VISIBLE)}"/>'
               f'<text x="{left + 14}" y="{y}" {_FONT}>visible'
               f'{" (coloured by the score bias)" if biased else ""}</text>')
    out.append(f'<rect x="{left}" y="{y + 7}" width="10" height="10" fill="white" '
               f'stroke="#888"/><text x="{left + 14}" y="{y + 16}" {_FONT}>hidden</text>')
    if biased:
        x = left + len(panels) * (w + gap)
        out.append('<defs><linearGradient id="bias" x1="0" y1="1" x2="0" y2="0">'
                   f'<stop offset="0" stop-color="{_rgb(RAMP[0])}"/>'
                   f'<stop offset="1" stop-color="{_rgb(RAMP[1])}"/></linearGradient></defs>')
        out.append(f'<rect x="{x}" y="{top}" width="12" height="{h:.1f}" fill="url(#bias)"/>')
        out.append(f'<text x="{x + 16}" y="{top + 8}" {_FONT}>high</text>'
                   f'<text x="{x + 16}" y="{top + h:.1f}" {_FONT}>low</text>'
                   f'<text x="{x}" y="{top - 8}" {_FONT}>score bias</text>')
    out.append(f"<title>{escape(spec.name)}: L = {L}, S = {S}</title></svg>")
    return "\n".join(out)


def latency_svg(series: dict[str, list[tuple[int, float]]],
                colours: list[tuple[int, int, int]]) -> str:
    """Latency (ms, log) against sequence length (tokens, log), one line per series of
    (length, ms) points, with labelled axes, ticks and a legend in the picture."""
    width, height, left, right, top, bottom = 720, 420, 70, 250, 20, 50
    points = [p for runs in series.values() for p in runs]
    lengths = sorted({n for n, _ in points})
    xs = [np.log2(n) for n in lengths]
    ys = [np.log10(ms) for _, ms in points]
    x0, x1 = xs[0], max(xs[-1], xs[0] + 1)
    y0, y1 = np.floor(min(ys)), np.ceil(max(ys) + 1e-9)
    y1 = max(y1, y0 + 1)

    def px(n: float, ms: float) -> tuple[float, float]:
        return (left + (np.log2(n) - x0) / (x1 - x0) * (width - left - right),
                height - bottom - (np.log10(ms) - y0) / (y1 - y0) * (height - top - bottom))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}"><rect width="100%" height="100%" fill="white"/>']
    for n in lengths:
        x, _ = px(n, 10 ** y0)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" '
                   f'stroke="#ddd"/><text x="{x:.1f}" y="{height - bottom + 15}" '
                   f'text-anchor="middle" {_FONT}>{n}</text>')
    for e in range(int(y0), int(y1) + 1):
        _, y = px(2 ** x0, 10.0 ** e)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" '
                   f'stroke="#ddd"/><text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" '
                   f'{_FONT}>{10.0 ** e:g}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 12}" '
               f'text-anchor="middle" {_FONT}>sequence length L (tokens, log scale)</text>')
    out.append(f'<text x="16" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
               f'{_FONT} transform="rotate(-90 16 {(top + height - bottom) / 2:.0f})">'
               'latency (ms, log scale)</text>')
    for i, (label, runs) in enumerate(series.items()):
        colour = _rgb(colours[i % len(colours)])
        coords = [px(n, ms) for n, ms in sorted(runs)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in coords]
        ly = top + 14 * i + 10
        out.append(f'<rect x="{width - right + 12}" y="{ly - 8}" width="10" height="10" '
                   f'fill="{colour}"/><text x="{width - right + 26}" y="{ly}" {_FONT}>'
                   f'{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)
