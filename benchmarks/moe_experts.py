"""Mixture-of-experts cost against the number of experts: two stacks alike but for their
experts (8 or 64 SwiGLU experts, each token routed to 2), and beside them the same 64 experts
with every token routed to all of them (top_k = 64: what running all experts for all tokens
costs). Each in both ONNX forms of ort-cpu: com.microsoft.MoE (what ort-cpu plans for these
softmax-routed SwiGLU experts) and the gather/scatter graph (what ort-cuda and the forms the
kernel cannot run get). Per-token latency on ONNX Runtime's CPU provider for each number of
tokens per call (1: decoding's shape; more: a prompt), timed round-robin after a warm-up.

    .venv/bin/python benchmarks/moe_experts.py [--tokens 1,256,1024] [--repeat 10]

Prints a Markdown table (BENCHMARKS.md, Mixture of experts): a token's cost should follow
top_k, not the number of experts (64 vs 8 experts at top-2 within 1.3x)."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np
import onnxruntime as ort

import attndsl
from attndsl.backends.finalize import finalize
from attndsl.backends.lower import build_model
from attndsl.planner.rewrites import rewrites
from attndsl.strategies import LOWERINGS

SPEC = """
attention attn {{
    d_model  = 256
    heads    = 4
    kv_heads = 2
    position = rope(theta = 10000)
    mask     = causal
}}

transformer moe_stack {{
    attention = attn
    layers    = 2
    ffn       = moe(experts = {experts}, top_k = {top_k}, expert = swiglu(512))
    norm      = rmsnorm(pre, eps = 1e-5)
}}
"""
FORMS = (("8 experts, top-2", 8, 2), ("64 experts, top-2", 64, 2),
         ("64 experts, all 64", 64, 64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,256,1024", help="tokens per call, each a row")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    # sessions take turns: threads left spinning by one would slow the next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {}
    for label, experts, top_k in FORMS:
        layer = attndsl.loads(SPEC.format(experts=experts, top_k=top_k))["moe_stack"]
        for form in ("moe", "graph"):
            sessions[f"{label}, {form}"] = ort.InferenceSession(
                _model(layer, form), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    print("| tokens per call | experts, form | ms per token | vs 8 experts, top-2 (same form) |")
    print("|---|---|---|---|")
    for L in (int(n) for n in args.tokens.split(",")):
        x = rng.standard_normal((1, L, 256)).astype(np.float32)
        for session in sessions.values():  # warm-up
            session.run(None, {"x": x})
        timings: dict[str, list[float]] = {label: [] for label in sessions}
        for _ in range(args.repeat):
            for label, session in sessions.items():
                start = time.perf_counter()
                session.run(None, {"x": x})
                timings[label].append((time.perf_counter() - start) * 1e3 / L)
        for label, cells in timings.items():
            base = statistics.median(timings[f"{FORMS[0][0]}, {label.rsplit(', ', 1)[1]}"])
            ms = statistics.median(cells)
            print(f"| {L} | {label} | {ms:.4f} | {ms / base:.2f}x |", flush=True)


def _model(layer, form: str) -> bytes:
    """The ort-cpu model of a stack with its mixtures as planned (`moe`: com.microsoft.MoE)
    or as the gather/scatter graph (`graph`)."""
    graph, _ = layer.plan("ort-cpu")
    nodes = tuple(dataclasses.replace(n, attrs=tuple(
        (k, form if k == "kernel" else v) for k, v in n.attrs)) for n in graph.nodes)
    state = layer._weights(0, None, "float32")
    model = build_model(dataclasses.replace(graph, nodes=nodes), state, "float32",
                        strategies=LOWERINGS, rewrites=rewrites(graph, "ort-cpu"))
    return finalize(model, layer._provenance(0, "ort-cpu", "float32", None)).bytes()


if __name__ == "__main__":
    main()
