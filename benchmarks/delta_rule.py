"""The gated delta rule's cost against the sequence length, at Qwen3-Next-80B-A3B's shapes:
one delta-rule layer (d_model 2048, 16 key heads and 32 value heads of 128, conv 4, chunks of
64) and, beside it, one of its gated softmax layers (16 heads, 2 kv heads, head_dim 256).
Prefill: the one-pass ort-cpu model on L tokens. Decoding: the decoding model's step, one
token after P cached ones (the delta rule's fixed-size state and convolution window; the
softmax layer's growing cache of P keys and values), the past random (a step's cost does not
depend on its values). ONNX Runtime's CPU provider, 2 threads, median of --repeat runs
after a warm-up; the growth exponent a of time ~ L^a is a log-log least-squares fit.

    .venv/bin/python benchmarks/delta_rule.py [--lengths 1024,2048,4096,8192,16384] [--repeat 3]

Prints Markdown tables (BENCHMARKS.md, The delta rule's cost)."""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort

import attndsl

SPEC = """
attention delta {
    d_model   = 2048
    heads     = 32
    head_dim  = 128
    value_dim = 128
    bias      = false
    kernel    = delta_rule(key_heads = 16, conv = 4, chunk = 64)
    mask      = causal
}

attention softmax {
    d_model     = 2048
    heads       = 16
    kv_heads    = 2
    head_dim    = 256
    bias        = false
    qk_norm     = rmsnorm(eps = 1e-6, unit_offset = true)
    position    = rope(theta = 10000000, dim = 64)
    mask        = causal
    output_gate = sigmoid
}
"""


def _session(model: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _median_ms(session: ort.InferenceSession, feed: dict, repeat: int) -> float:
    session.run(None, feed)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _exponent(lengths: list[int], ms: list[float]) -> float:
    x, y = np.log(lengths), np.log(ms)
    return float(np.polyfit(x, y, 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,2048,4096,8192,16384")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    program = attndsl.loads(SPEC)
    rng = np.random.default_rng(0)
    prefill, decode = {}, {}
    for name in ("delta", "softmax"):
        layer = program[name]
        one_pass = _session(layer.onnx_bytes(target="ort-cpu"))
        step = _session(layer.decoder_bytes(target="ort-cpu"))
        prefill[name], decode[name] = [], []
        for L in lengths:
            if name == "delta":  # the softmax layer's prefill is another benchmark's
                x = rng.standard_normal((1, L, 2048)).astype(np.float32)
                prefill[name].append(_median_ms(one_pass, {"x": x}, args.repeat))
            feed = {"x": rng.standard_normal((1, 1, 2048)).astype(np.float32),
                    "attention_mask": np.ones((1, L + 1), np.int64),
                    "position_ids": np.array([[L]], np.int64)}
            for i in step.get_inputs():
                if i.name.startswith("past_key_values."):
                    shape = [1] + [d if isinstance(d, int) else L for d in i.shape[1:]]
                    feed[i.name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
            decode[name].append(_median_ms(step, feed, max(args.repeat, 10)))
            print(f"# {name} L={L} done", flush=True)
    print("\nPrefill, the delta-rule layer (one pass over L tokens):\n")
    print("| L | ms | ms per token |")
    print("|---|---|---|")
    for L, ms in zip(lengths, prefill["delta"], strict=True):
        print(f"| {L} | {ms:.1f} | {ms / L:.4f} |")
    print(f"\nprefill growth exponent: {_exponent(lengths, prefill['delta']):.3f}")
    print("\nDecoding, one token after P cached ones:\n")
    print("| P | delta rule ms/token | gated softmax ms/token |")
    print("|---|---|---|")
    for i, L in enumerate(lengths):
        print(f"| {L} | {decode['delta'][i]:.3f} | {decode['softmax'][i]:.3f} |")
    print(f"\ndecode growth exponent: delta rule {_exponent(lengths, decode['delta']):.3f}, "
          f"gated softmax {_exponent(lengths, decode['softmax']):.3f}")
    state = 32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)
    print(f"\ndelta-rule cache per layer: {state:,} values at any P; the softmax layer's at "
          f"P = {lengths[-1]}: {2 * 2 * 256 * lengths[-1]:,}")


if __name__ == "__main__":
    main()
