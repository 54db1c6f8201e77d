"""A recurrent layer's cost against the sequence length: Kimi delta attention at
Kimi-Linear-48B-A3B's shapes (d_model 2304, 32 heads of 128, conv 4, forget and output gates of
rank 128, chunks of 64), lightning attention at MiniMax-Text-01's head layout at a third of
its width (d_model 2048, 32 heads of 64, chunks of 256) or Mamba2 at Bamba-9B's layout at half
its width (d_model 2048, 64 heads of 64 values, state 128, one group, conv 4, chunks of 64), on
ONNX Runtime's CPU provider, side
by side in one run: the ort-cpu model (the recurrence as com.microsoft.LinearAttention) and the
portable model (the chunked form in standard ops, a Scan step per chunk, as on ort-cuda).
Prefill: the one-pass model on L tokens. Decoding: the decoding model's step, one token after P
cached ones (the layer's fixed-size state, and KDA's convolution window, random: a step's cost
does not depend on its values). 2 threads, median of --repeat runs after a warm-up; the growth
exponent a of time ~ L^a is a log-log least-squares fit.

    .venv/bin/python benchmarks/recurrent.py --layer kda|lightning|mamba2 \
        [--lengths 1024,4096,16384,65536] [--chunked 16384] [--prefill 65536]

--provider cuda runs the ort-cuda model (LinearAttention, on onnxruntime-gpu 1.31's CUDA
kernel) and the portable model (the chunked form) on ONNX Runtime's CUDA provider instead, the
sessions' providers checked to begin with it, float32 with TF32 off.

Prints Markdown tables (BENCHMARKS.md, Recurrent layers' cost)."""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from delta_rule import _exponent, _median_ms, _session

import attndsl

SPECS = {"kda": ("""
attention kda {
    d_model  = 2304
    heads    = 32
    head_dim = 128
    bias     = false
    kernel   = kda(conv = 4, chunk = 64, eps = 1e-5, forget_rank = 128, gate_rank = 128)
    mask     = causal
}
""", 2304, 32 * 128 * 128 + 3 * 3 * 32 * 128,
    "state 32 x 128 x 128, convolution window 3 x 12,288"),
    "lightning": ("""
attention lightning {
    d_model  = 2048
    heads    = 32
    head_dim = 64
    bias     = false
    kernel   = lightning(layers = 80, chunk = 256)
    mask     = causal
}
""", 2048, 32 * 64 * 64, "state 32 x 64 x 64"),
    "mamba2": ("""
attention mamba2 {
    d_model   = 2048
    heads     = 64
    head_dim  = 128
    value_dim = 64
    bias      = false
    kernel    = mamba2(groups = 1, conv = 4, chunk = 64)
    mask      = causal
}
""", 2048, 64 * 128 * 64 + 3 * (2 * 128 + 64 * 64),
    "state 64 x 128 x 64, convolution window 3 x 4,352"),
    # Falcon-Mamba-7B's mixer at a quarter of its width: 2,048 channels of 16 state features
    "mamba": ("""
attention mamba {
    d_model   = 1024
    heads     = 2048
    head_dim  = 16
    value_dim = 1
    bias      = false
    kernel    = mamba(rank = 64, conv = 4, chunk = 16, norm = weightless)
    mask      = causal
}
""", 1024, 2048 * 16 + 3 * 2048, "state 2,048 x 16 x 1, convolution window 3 x 2,048")}
FORMS = {"LinearAttention (ort-cpu)": "ort-cpu", "chunked Scan (portable)": "portable"}
CUDA_FORMS = {"LinearAttention (ort-cuda)": "ort-cuda",
              "chunked Scan (portable on CUDA)": "portable"}


def _cuda_session(model: bytes) -> ort.InferenceSession:
    session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"use_tf32": "0"}),
                                                     "CPUExecutionProvider"])
    if session.get_providers()[0] != "CUDAExecutionProvider":
        raise SystemExit(f"the CUDA provider did not load: {session.get_providers()}")
    return session


def _step_feed(step, L: int, d_model: int, rng: np.random.Generator) -> dict:
    feed = {"x": rng.standard_normal((1, 1, d_model)).astype(np.float32),
            "attention_mask": np.ones((1, L + 1), np.int64),
            "position_ids": np.array([[L]], np.int64)}
    for i in step.get_inputs():
        if i.name.startswith("past_key_values."):
            shape = [1] + [d if isinstance(d, int) else L for d in i.shape[1:]]
            feed[i.name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    return feed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", choices=sorted(SPECS), default="kda")
    parser.add_argument("--lengths", default="1024,4096,16384,65536")
    parser.add_argument("--chunked", type=int, default=16384,
                        help="the longest prefill the chunked form runs (it is the slower)")
    parser.add_argument("--prefill", type=int, default=65536,
                        help="the longest prefill either form runs (KDA's one pass over 64k "
                             "tokens at its shapes needs more than 24 GiB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--provider", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    forms, session = (CUDA_FORMS, _cuda_session) if args.provider == "cuda" else (FORMS, _session)
    lengths = [int(n) for n in args.lengths.split(",")]
    text, d_model, state, layout = SPECS[args.layer]
    layer = attndsl.loads(text)[args.layer]
    rng = np.random.default_rng(0)
    prefill: dict[str, list[float | None]] = {}
    decode: dict[str, list[float]] = {}
    for form, target in forms.items():
        one_pass = session(layer.onnx_bytes(target=target))
        step = session(layer.decoder_bytes(target=target))
        prefill[form], decode[form] = [], []
        for L in lengths:
            if min(args.prefill, args.chunked if target == "portable" else L) >= L:
                x = rng.standard_normal((1, L, d_model)).astype(np.float32)
                prefill[form].append(_median_ms(one_pass, {"x": x}, args.repeat))
            else:
                prefill[form].append(None)
            decode[form].append(_median_ms(step, _step_feed(step, L, d_model, rng),
                                           max(args.repeat, 10)))
            print(f"# {form} L={L} done", flush=True)
    names = list(forms)
    print("\nPrefill, one pass over L tokens (ms; ms per token):\n")
    print("| L | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for i, L in enumerate(lengths):
        cells = [f"{p[i]:.1f} ({p[i] / L:.4f})" if p[i] is not None else "-"
                 for p in (prefill[n] for n in names)]
        print(f"| {L} | " + " | ".join(cells) + " |")
    for n in names:
        pairs = [(L, ms) for L, ms in zip(lengths, prefill[n], strict=True) if ms is not None]
        print(f"\nprefill growth exponent, {n}: "
              f"{_exponent([p[0] for p in pairs], [p[1] for p in pairs]):.3f}")
    print("\nDecoding, one token after P cached ones (ms per token):\n")
    print("| P | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for i, L in enumerate(lengths):
        print(f"| {L} | " + " | ".join(f"{decode[n][i]:.3f}" for n in names) + " |")
    for n in names:
        print(f"\ndecode growth exponent, {n}: {_exponent(lengths, decode[n]):.3f}")
    print(f"\n{args.layer} cache per layer: {state:,} values at any P ({layout})")


if __name__ == "__main__":
    main()
