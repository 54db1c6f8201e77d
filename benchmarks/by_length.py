"""One file for every length: examples/seed_by_length.attn (standard <= 2000, sparse <= 10000,
linear beyond) against the mechanism each length selects, exported alone with the same weights.
Both run in ONNX Runtime (ort-cpu), timed round-robin at each length; the ratio is the cost of
the `If` and of sharing one file.

    .venv/bin/python benchmarks/by_length.py [--lengths 1000,5000,20000] [--repeat 7]

Prints a Markdown table (BENCHMARKS.md, Long sequences)."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import attndsl

SWITCH = Path(__file__).resolve().parent.parent / "examples" / "seed_by_length.attn"
ALONE = """
attention standard {
    d_model = 512
    heads   = 8
}
attention sparse {
    d_model = 512
    heads   = 8
    mask    = window(left = 256, right = 256) | global(first = 16)
}
attention linear {
    d_model = 512
    heads   = 8
    kernel  = linear(feature = elu)
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1000,5000,20000")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2

    def session(data: bytes) -> ort.InferenceSession:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    switch = attndsl.load(SWITCH)["choose_by_length"]
    both = session(switch.onnx_bytes(target="ort-cpu", seed=0))
    alone = attndsl.loads(ALONE)
    print("| L | mechanism | by_length ms | alone ms | ratio |")
    print("|---|---|---|---|---|")
    for L in (int(n) for n in args.lengths.split(",")):
        name = "standard" if L <= 2000 else "sparse" if L <= 10000 else "linear"
        single = session(alone[name].onnx_bytes(target="ort-cpu", seed=0))  # same draw
        x = np.random.default_rng(L).standard_normal((1, L, 512)).astype(np.float32)
        np.testing.assert_allclose(both.run(None, {"x": x})[0], single.run(None, {"x": x})[0],
                                   atol=1e-4)  # the same computation
        times: dict[str, list[float]] = {"both": [], "single": []}
        for _ in range(args.repeat):
            for key, s in (("both", both), ("single", single)):
                start = time.perf_counter()
                s.run(None, {"x": x})
                times[key].append((time.perf_counter() - start) * 1e3)
        a, b = statistics.median(times["both"]), statistics.median(times["single"])
        print(f"| {L} | {name} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
