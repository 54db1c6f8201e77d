"""Encoder-decoder greedy decoding against transformers' `generate` on the same checkpoint: a
random T5-small-sized model (d_model 512, 6 + 6 layers, 8 heads of 64, relu MLP of 2048, a
32128-token vocabulary, T5's relative buckets), saved by transformers, imported by `attndsl
import` and compiled for ort-cpu (its encoder, and its decoding decoder, the growing cache);
`attndsl` runs `seq2seq.generate_seq2seq` (the encoder once, then one decoder call per
token, the memory's keys and values cached on the first), `transformers` runs
T5ForConditionalGeneration.generate (greedy, its cache on, eager attention). Both generate
exactly `--new` tokens (no eos), batch `--batch`, a source of `--source` tokens; each is timed
generating 1 token and `--new` tokens, round-robin, `--repeat` times: the first token's time
is the 1-token run's (the encoder included), ms/token is (t(new) - t(1)) / (new - 1), medians.
The two generate the same tokens (checked here on the first run; tests/test_seq2seq_families.py
holds them equal at small sizes).

    .venv/bin/python benchmarks/seq2seq_decode.py [--source 128] [--new 64] [--batch 1]
        [--repeat 3] [--device cpu | cuda]

Prints a Markdown table (BENCHMARKS.md, Encoder-decoder generation)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers as tf

import attndsl
from attndsl.backends import runtime
from attndsl.seq2seq import generate_seq2seq


def _model(folder: Path) -> torch.nn.Module:
    cfg = tf.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6,
                      num_heads=8, feed_forward_proj="relu", decoder_start_token_id=0,
                      pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model = tf.T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # weights that make the greedy tokens vary
        for name, p in model.named_parameters():
            table = any(k in name for k in ("shared", "relative"))
            p.copy_(torch.randn_like(p) * (1.0 if table else 1.5 / p.shape[-1] ** 0.5
                                           if p.dim() > 1 else 0.1) + (p.dim() == 1))
    model.save_pretrained(folder)
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", type=int, default=128)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(2)
    target = f"ort-{args.device}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hf = _model(folder)
        start = time.perf_counter()
        program = attndsl.load(folder)
        layer = program["t5"]
        encoder = runtime.make_session(layer.encoder().onnx_model(weights=folder,
                                                                  target=target), args.device)
        decoder = runtime.make_session(layer.decoder_model(weights=folder, target=target),
                                       args.device)
        hf = hf.to(args.device)
        build_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    sources = rng.integers(2, 32128, size=(args.batch, args.source)).tolist()
    ids = torch.tensor(sources, device=args.device)

    def ours(n: int) -> list[list[int]]:
        return generate_seq2seq(encoder, decoder, sources, n, 0).tokens

    def theirs(n: int) -> list[list[int]]:
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                              min_new_tokens=n, do_sample=False, num_beams=1, eos_token_id=None)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return out[:, 1:].tolist()

    assert ours(args.new) == theirs(args.new), "the two generate different tokens"
    times: dict[str, dict[int, list[float]]] = {f"attndsl ({target})": {}, "transformers": {}}
    for _ in range(args.repeat):
        for name, run in ((f"attndsl ({target})", ours), ("transformers", theirs)):
            for n in (1, args.new):
                start = time.perf_counter()
                run(n)
                times[name].setdefault(n, []).append(time.perf_counter() - start)
    print(f"T5-small-sized random model, batch {args.batch}, source {args.source} tokens, "
          f"{args.new} new tokens, float32, {args.device}, medians of {args.repeat}; attndsl's "
          f"import and compile: {build_s:.1f} s\n")
    print("| backend | first token ms | ms/token | tokens/s | ms/token vs transformers |")
    print("|---|---|---|---|---|")
    rows = {}
    for name, by_n in times.items():
        first = statistics.median(by_n[1])
        per = (statistics.median(by_n[args.new]) - first) / (args.new - 1)
        rows[name] = (first, per)
    for name, (first, per) in rows.items():
        print(f"| {name} | {1000 * first:.1f} | {1000 * per:.2f} | {args.batch / per:.1f} | "
              f"{per / rows['transformers'][1]:.2f}x |")


if __name__ == "__main__":
    main()
