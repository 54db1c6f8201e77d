"""Multi-head latent attention's decoding cache at DeepSeek-V3's shapes: one attention layer
(d_model 7168, 128 heads, q_rank 1536, kv_rank 512, rope_dim 64, head_dim 192, value_dim 128)
decoding one token against P cached tokens, in the two forms of its decoding model: `latent`
(what attndsl compiles: each token's latent and RoPE key cached, 576 values, attended in the
absorbed form) and `expanded` (every head's keys and values cached, 128 x (192 + 128) values,
attended as in one pass; `ir.build(..., latent_cache=False)`). Both ort-cpu models, growing
cache, on ONNX Runtime's CPU provider; the past is random (a step's cost does not depend on
its values), the step's present is checked to hold P + 1 tokens, and each form's bytes per
token are read off it. (That both forms compute one pass's output is tests/test_decoding.py's.)

    .venv/bin/python benchmarks/latent_cache.py [--past 256,1024,4096] [--repeat 10]

Prints a Markdown table (BENCHMARKS.md, Latent attention's cache)."""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort

import attndsl
from attndsl.backends.finalize import finalize
from attndsl.backends.lower import build_model
from attndsl.ir import build
from attndsl.planner import plan
from attndsl.planner.rewrites import rewrites
from attndsl.strategies import LOWERINGS

SPEC = """
attention mla {
    d_model   = 7168
    heads     = 128
    head_dim  = 192
    value_dim = 128
    bias      = false
    latent    = mla(q_rank = 1536, kv_rank = 512, rope_dim = 64)
    position  = rope(theta = 10000, interleaved = true)
    mask      = causal
}
"""


def step_feed(session: ort.InferenceSession, x: np.ndarray, P: int,
              rng: np.random.Generator) -> tuple[dict, list]:
    """A decoding call's inputs for one new token after P cached ones (each cache random,
    small), and its outputs from one warm-up run, each present holding P + 1 tokens."""
    feed = {"x": x, "attention_mask": np.ones((1, P + 1), np.int64),
            "position_ids": np.array([[P]], np.int64)}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            feed[i.name] = rng.standard_normal((1, i.shape[1], P, i.shape[3])).astype(
                np.float32) * 0.1
    out = session.run(None, feed)  # warm-up
    assert all(o.shape[2] == P + 1 for o in out[1:]), "the present holds P + 1 tokens"
    return feed, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", default="256,1024,4096", help="cached tokens, each a row")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    layer = attndsl.loads(SPEC)["mla"]
    state = layer._weights(0, None, "float32")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {}
    for form, latent in (("latent", True), ("expanded", False)):
        graph, _ = plan(build(layer.spec, decode=True, own_cache=latent), "ort-cpu")
        model = finalize(build_model(graph, state, "float32", strategies=LOWERINGS,
                                     rewrites=rewrites(graph, "ort-cpu")),
                         layer._provenance(0, "ort-cpu", "float32", None, form="decode"))
        sessions[form] = ort.InferenceSession(model.bytes(), options,
                                              providers=["CPUExecutionProvider"])
    del state
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 7168)).astype(np.float32)
    print("| cached tokens P | form | cache values per token | cache MB at P | ms per token "
          "| vs expanded |")
    print("|---|---|---|---|---|---|")
    for P in (int(n) for n in args.past.split(",")):
        feeds, per_token = {}, {}
        for form, session in sessions.items():
            feeds[form], out = step_feed(session, x, P, rng)
            per_token[form] = sum(o[0, :, -1].size for o in out[1:])
        timings: dict[str, list[float]] = {form: [] for form in sessions}
        for _ in range(args.repeat):
            for form, session in sessions.items():
                start = time.perf_counter()
                session.run(None, feeds[form])
                timings[form].append((time.perf_counter() - start) * 1e3)
        base = statistics.median(timings["expanded"])
        for form, cells in timings.items():
            ms = statistics.median(cells)
            mb = per_token[form] * P * 4 / 1e6
            print(f"| {P} | {form} | {per_token[form]:,} | {mb:,.1f} | {ms:.2f} | "
                  f"{ms / base:.2f}x |", flush=True)
    print(f"\nexpanded / latent cache values per token: "
          f"{per_token['expanded'] / per_token['latent']:.1f}x")


if __name__ == "__main__":
    main()
