"""How `attndsl bench` reports: the machine line, the table (text or Markdown, with speed
against torch SDPA), JSON, and the latency-against-length plot."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from . import __version__
from .bench import Measurement

__all__ = ["COLOURS", "FIT_FROM", "PLOT_SIZE", "growth_exponents", "machine_summary", "plot_png",
           "render_growth", "render_table", "to_json"]

FIT_FROM = 1024  # the growth exponents fit lengths from here up


def machine_summary() -> str:
    from .backends.runtime import onnxruntime

    ort = onnxruntime()

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = ""
    if torch.cuda.is_available():
        gpu = f"; GPU {torch.cuda.get_device_name()} (CUDA {torch.version.cuda}"
        with contextlib.suppress(Exception):
            import subprocess

            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                     "--format=csv,noheader"], capture_output=True, text=True,
                                    timeout=10).stdout.strip().splitlines()[0]
            gpu += f", driver {driver}"
        gpu += ")"
    return (f"{cpu}, {os.cpu_count()} cores{gpu}; Python {platform.python_version()}, "
            f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"onnxruntime {ort.__version__}, numpy {np.__version__}, attndsl {__version__}")


def render_table(rows: list[Measurement], *, markdown: bool = False) -> str:
    base = {(r.layer, r.length): r.latency_ms for r in rows
            if r.backend == "torch sdpa (dense mask)" and r.latency_ms}
    head = ["layer", "L", "backend", "latency ms", "vs sdpa", "peak MB", "GFLOP/s", "note"]
    body = []
    for r in rows:
        ref = base.get((r.layer, r.length))
        speed = f"{ref / r.latency_ms:.2f}x" if ref and r.latency_ms else "-"
        body.append([r.layer, str(r.length), r.backend,
                     f"{r.latency_ms:.1f}" if r.latency_ms is not None else "-", speed,
                     f"{r.peak_mb:.0f}" if r.peak_mb is not None else "-",
                     f"{r.gflops:.1f}" if r.gflops is not None else "-", r.note])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row).rstrip() for row in body]
    return "\n".join(lines)


def growth_exponents(rows: list[Measurement]) -> list[tuple[str, str, list[int], float,
                                                             float | None]]:
    """(layer, backend, lengths, latency exponent, peak-memory exponent) for every backend
    measured at two or more lengths >= FIT_FROM: the least-squares slope of log(value)
    against log(L), so latency ~ L^a. Memory is fitted where every peak is at least 1 MB
    (smaller growth is allocator noise)."""
    out = []
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for r in rows:
        if r.latency_ms is not None and r.length >= FIT_FROM:
            groups.setdefault((r.layer, r.backend), []).append(r)
    for (layer, backend), found in groups.items():
        if len({r.length for r in found}) < 2:
            continue
        x = np.log([r.length for r in found])
        latency = float(np.polyfit(x, np.log([r.latency_ms for r in found]), 1)[0])
        peaks = [r.peak_mb for r in found]
        memory = None
        if all(p is not None and p >= 1 for p in peaks):
            memory = float(np.polyfit(x, np.log(peaks), 1)[0])
        out.append((layer, backend, sorted(r.length for r in found), latency, memory))
    return out


def render_growth(rows: list[Measurement], theory: dict[tuple[str, str], float] | None = None,
                  *, markdown: bool = False) -> str:
    """The growth exponents as a table ('' when nothing has two lengths >= FIT_FROM), with
    the exponent the layer's plan predicts for ONNX Runtime's rows (`theory`)."""
    fits = growth_exponents(rows)
    if not fits:
        return ""
    theory = theory or {}
    head = ["layer", "backend", "lengths", "latency ~ L^a", "peak memory ~ L^b", "theory"]
    body = [[layer, backend, f"{lengths[0]}..{lengths[-1]} ({len(lengths)})", f"{a:.2f}",
             f"{b:.2f}" if b is not None else "-",
             f"{theory[(layer, backend)]:g}" if (layer, backend) in theory else "-"]
            for layer, backend, lengths, a, b in fits]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    return "\n".join(lines + [fmt.format(*row).rstrip() for row in body])


def to_json(rows: list[Measurement]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=2)


PLOT_SIZE = (640, 400)
COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
            (140, 86, 75), (227, 119, 194), (127, 127, 127)]


def plot_png(rows: list[Measurement]) -> tuple[np.ndarray, list[tuple[str, tuple[int, ...]]]]:
    """Latency against length on log-log axes, one coloured line per (layer, backend); grid
    lines at each measured length and at every power of ten milliseconds. Returns the RGB image
    and the legend (label, colour), which the caller prints; the axes are labelled in the
    picture (lengths in tokens, latency in ms, both log scale)."""
    from .glyphs import draw_text, text_width

    width, height = PLOT_SIZE
    margin = 40
    image = np.full((height, width, 3), 255, np.uint8)
    points = [r for r in rows if r.latency_ms]
    series: dict[str, list[Measurement]] = {}
    for r in points:
        series.setdefault(f"{r.layer}: {r.backend}", []).append(r)
    if not points:
        return image, []
    xs = sorted({np.log2(r.length) for r in points})
    ys = [np.log10(r.latency_ms) for r in points]
    x0, x1 = xs[0], max(xs[-1], xs[0] + 1)
    y0, y1 = np.floor(min(ys)), np.ceil(max(ys) + 1e-9)

    def px(x: float, y: float) -> tuple[int, int]:
        return (int(margin + (x - x0) / (x1 - x0) * (width - 2 * margin)),
                int(height - margin - (y - y0) / (y1 - y0) * (height - 2 * margin)))

    for x in xs:
        image[margin:height - margin, px(x, y0)[0]] = 220
        label = str(round(2 ** x))
        draw_text(image, label, px(x, y0)[0] - text_width(label) // 2, height - margin + 4)
    for y in np.arange(y0, y1 + 1):
        image[px(x0, y)[1], margin:width - margin] = 220
        label = f"{10.0 ** y:g}"
        draw_text(image, label, margin - 3 - text_width(label), px(x0, y)[1] - 3)
    image[height - margin, margin:width - margin] = 0
    image[margin:height - margin, margin] = 0
    draw_text(image, "sequence length L (tokens, log scale)", width // 2 - 110, height - 12)
    draw_text(image, "latency (ms, log scale)", margin, 6)
    legend = []
    for i, (label, runs) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        legend.append((label, colour))
        coords = [px(np.log2(r.length), np.log10(r.latency_ms))
                  for r in sorted(runs, key=lambda r: r.length)]
        for (ax, ay), (bx, by) in itertools.pairwise(coords):
            steps = max(abs(bx - ax), abs(by - ay), 1)
            for t in np.linspace(0, 1, steps + 1):
                cx, cy = round(ax + t * (bx - ax)), round(ay + t * (by - ay))
                image[cy - 1:cy + 2, cx - 1:cx + 2] = colour
        for cx, cy in coords:
            image[cy - 3:cy + 4, cx - 3:cx + 4] = colour
    return image, legend
