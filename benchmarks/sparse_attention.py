"""DeepSeek sparse attention's decoding cost against the cache's length: one attention layer at
DeepSeek-V3.2's shapes (d_model 7168, 128 heads of 192 = 128 + 64 rotated, value_dim 128,
q_rank 1536, kv_rank 512; a lightning indexer of 64 heads of 128, top_k 2048) decoding one
token against P cached tokens, side by side in one run:

- `gather` (what attndsl plans when decoding, `explain`): each new query attends over the
  top_k cache rows its indexer chose, gathered; the indexer still scores every cached key;
- `dense masked` (`sparsity = dense`): the same selection as a mask over every cached key;
- `no indexer`: latent attention alone, over every cached key (DeepSeek-V3's layer).

All ort-cpu decoding models on ONNX Runtime's CPU provider with a growing cache (ort-cuda's
on the CUDA provider with `--provider cuda`); the past is random (a step's cost does not depend
on its values). The growth exponents are fitted to ms ~ P^a, and each form's cost per 1,024
more cached keys is its slope between the shortest and the longest past.

    .venv/bin/python benchmarks/sparse_attention.py [--past 1024,4096,16384,65536] [--repeat 5]

Prints a Markdown table (BENCHMARKS.md, DeepSeek sparse attention)."""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from delta_rule import _exponent
from latent_cache import step_feed

import attndsl

SPEC = """
attention dsa {
    d_model   = 7168
    heads     = 128
    head_dim  = 192
    value_dim = 128
    bias      = false
    latent    = mla(q_rank = 1536, kv_rank = 512, rope_dim = 64)
    position  = rope(theta = 10000, interleaved = true)
    mask      = causal
    indexer   = lightning(heads = 64, head_dim = 128, top_k = 2048)
}
"""
FORMS = {"gather": SPEC,
         "dense masked": SPEC.replace("    mask      = causal\n",
                                      "    mask      = causal\n    sparsity  = dense\n"),
         "no indexer": SPEC.replace(
             "    indexer   = lightning(heads = 64, head_dim = 128, top_k = 2048)\n", "")}


def _step(session: ort.InferenceSession, feed: dict, provider: str):
    """One decoding step as a call: on CUDA its inputs (the past above all) already on the
    device and its outputs left there (IO binding), so the step's own cost is timed, not the
    copies of the cache over PCIe that a generation loop keeps on the device."""
    if provider == "cpu":
        return lambda: session.run(None, feed)
    binding = session.io_binding()
    for name, array in feed.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
    for out in session.get_outputs():
        binding.bind_output(out.name, "cuda")

    def run() -> None:
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", default="1024,4096,16384,65536",
                        help="cached tokens, each a row")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--provider", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: the ort-cuda models on the CUDA provider (TF32 off)")
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    target = "ort-cuda" if args.provider == "cuda" else "ort-cpu"
    providers = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"] \
        if args.provider == "cuda" else ["CPUExecutionProvider"]
    sessions = {}
    for form, text in FORMS.items():
        model = attndsl.loads(text)["dsa"].decoder_bytes(target=target)
        sessions[form] = ort.InferenceSession(model, options, providers=providers)
        if args.provider == "cuda" and \
                sessions[form].get_providers()[0] != "CUDAExecutionProvider":
            raise SystemExit(f"the CUDA provider did not load: {sessions[form].get_providers()}")
        del model
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 7168)).astype(np.float32)
    lengths = [int(n) for n in args.past.split(",")]
    ms: dict[str, list[float]] = {form: [] for form in sessions}
    print("| cached tokens P | " + " | ".join(f"{f} (ms per token)" for f in sessions) + " |")
    print("|---|" + "---|" * len(sessions))
    for P in lengths:
        feeds = {form: step_feed(session, x, P, rng)[0] for form, session in sessions.items()}
        steps = {form: _step(session, feeds[form], args.provider)
                 for form, session in sessions.items()}
        timings: dict[str, list[float]] = {form: [] for form in sessions}
        for _ in range(args.repeat):
            for form in sessions:
                start = time.perf_counter()
                steps[form]()
                timings[form].append((time.perf_counter() - start) * 1e3)
        for form in sessions:
            ms[form].append(statistics.median(timings[form]))
        print(f"| {P} | " + " | ".join(f"{ms[f][-1]:.1f}" for f in sessions) + " |", flush=True)
    print()
    for form in sessions:
        slope = (ms[form][-1] - ms[form][0]) / (lengths[-1] - lengths[0]) * 1024
        print(f"{form}: growth exponent {_exponent(lengths, ms[form]):.3f}; "
              f"{slope:.3f} ms per 1,024 more cached keys")
    per_key = {"indexer": 64 * 128, "attention over a key": 128 * (512 + 64 + 512)}
    print(f"\nmultiply-adds per cached key: the indexer {per_key['indexer']:,}, attention "
          f"{per_key['attention over a key']:,} (gather: over 2,048 keys at any P)")


if __name__ == "__main__":
    main()
