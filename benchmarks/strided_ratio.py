"""Strided attention at a fixed ratio L / stride: `causal & (window(left = 63, right = 0) |
strided(n))` with n = L / 64, so each query scores its band of 64 keys and the 64 keys of its
residue class at every length, and the strided lowering should grow as L (exponent 1). Beside
it, the dense masked form of the same mask (sparsity = dense) where its L x L scores fit. Both
on ONNX Runtime (ort-cpu), timed round-robin after a warm-up.

    .venv/bin/python benchmarks/strided_ratio.py [--lengths 1024,4096,16384] [--ratio 64]

Prints a Markdown table and the least-squares slopes of log latency against log L
(BENCHMARKS.md, Long sequences)."""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import onnxruntime as ort

import attndsl

SPEC = """
attention strided {{
    d_model  = 512
    heads    = 8
    mask     = causal & (window(left = 63, right = 0) | strided({n}))
    sparsity = {sparsity}
}}
"""


def _slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / \
        sum((a - mx) ** 2 for a in lx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,4096,16384")
    parser.add_argument("--ratio", type=int, default=64, help="L / stride")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dense-up-to", type=int, default=8192,
                        help="longest length the dense form runs at (its L x L scores)")
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    lengths = [int(n) for n in args.lengths.split(",")]
    print("| L | stride | strided ms | dense ms | dense / strided |")
    print("|---|---|---|---|---|")
    measured: dict[str, list[float]] = {"strided": [], "dense": []}
    for L in lengths:
        n = L // args.ratio
        sessions = {}
        for form, sparsity in (("strided", "auto"), ("dense", "dense")):
            if form == "dense" and args.dense_up_to < L:
                continue
            layer = attndsl.loads(SPEC.format(n=n, sparsity=sparsity))["strided"]
            assert layer.plan("ort-cpu")[1][0].strategy == form
            sessions[form] = ort.InferenceSession(layer.onnx_bytes(target="ort-cpu", seed=0),
                                                  options, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(L).standard_normal((1, L, 512)).astype(np.float32)
        times: dict[str, list[float]] = {form: [] for form in sessions}
        for s in sessions.values():
            s.run(None, {"x": x})  # warm-up
        for _ in range(args.repeat):
            for form, s in sessions.items():
                start = time.perf_counter()
                s.run(None, {"x": x})
                times[form].append((time.perf_counter() - start) * 1e3)
        ms = {form: statistics.median(t) for form, t in times.items()}
        for form, value in ms.items():
            measured[form].append(value)
        dense = f"{ms['dense']:.1f}" if "dense" in ms else "-"
        ratio = f"{ms['dense'] / ms['strided']:.2f}x" if "dense" in ms else "-"
        print(f"| {L} | {n} | {ms['strided']:.1f} | {dense} | {ratio} |")
    print(f"\nlatency ~ L^a: strided a = {_slope(lengths, measured['strided']):.2f}"
          + (f", dense a = {_slope(lengths[:len(measured['dense'])], measured['dense']):.2f}"
             if len(measured["dense"]) > 1 else ""))


if __name__ == "__main__":
    main()
