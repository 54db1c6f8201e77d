"""Training the torch module: forward + backward latency and peak memory of one attention layer
(d_model 256, 4 heads of 64, batch 1) against the sequence length, for three sparse masks:
`window` (causal & window(left = 255): a causal 256-key window), `bigbird`
(examples/bigbird.attn) and `longformer` (examples/longformer.attn's longformer_dilated), each
run three ways on the same weights and inputs, side by side in one process:

- `attndsl`: the module `to_torch()` makes (its torch plan: `explain --target torch`);
- `flex`: the same projections around a hand-written torch FlexAttention of the same mask
  (compiled, BlockMask from the mask_mod), the tool these users know;
- `sdpa+mask`: the same projections around F.scaled_dot_product_attention with the mask as a
  dense boolean L x L tensor;
- `dense`: the module's exact dense form (`to_torch(path = "dense")`, what it was before it was
  planned), up to L = 8192.

Time: median of --repeat runs of sum(y * r).backward() after a warm-up; memory: the process's
RSS growth during one run (Linux /proc; CUDA: torch's peak). On the CPU, torch 2.13's
FlexAttention has no backward, so its forward alone is timed there (and marked so).

`--train`: 100 Adam steps of a small two-layer windowed language model on a next-token task,
its loss every 20 steps, then the trained module exported (`export_onnx(weights = module)`)
and run in ONNX Runtime on fresh token ids: the largest difference from the module's logits.

    .venv/bin/python benchmarks/training.py [--lengths 1024,1536,2048,4096,8192,16384] [--repeat 3]
    .venv/bin/python benchmarks/training.py --train

Prints Markdown tables (BENCHMARKS.md, Training the torch module)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import attndsl
from attndsl import masks
from attndsl.backends import torch_attention
from attndsl.bench import _peak_mb, _return_freed_memory

ROOT = Path(__file__).resolve().parent.parent
WINDOW = """
attention window {
    d_model = 256
    heads   = 4
    mask    = causal & window(left = 255, right = 0)
}
"""
MODEL = """
attention local {
    d_model  = 64
    heads    = 4
    kv_heads = 2
    bias     = false
    position = rope(theta = 10000)
    mask     = causal & window(left = 31, right = 0)
}

transformer windowed_lm {
    attention = local
    layers    = 2
    ffn       = swiglu(128)
    norm      = rmsnorm(pre, eps = 1e-5)
    vocab     = 97
}
"""


def layers() -> dict[str, attndsl.Layer]:
    return {"window": attndsl.loads(WINDOW)["window"],
            "bigbird": attndsl.load(ROOT / "examples/bigbird.attn")["bigbird_attn"],
            "longformer": attndsl.load(ROOT / "examples/longformer.attn")["longformer_dilated"]}


class Baseline(torch.nn.Module):
    """The layer's projections (the attndsl module's own parameters) around a hand-written
    attention: FlexAttention or SDPA with a dense boolean mask."""

    def __init__(self, module: torch.nn.Module, layer: attndsl.Layer, how: str, L: int):
        super().__init__()
        self.m, self.how = module, how
        self.heads, self.expr = layer.spec.heads, layer.spec.mask
        self.scale = 1 / layer.spec.head_dim ** 0.5
        i = torch.arange(L)
        ctx = masks.MaskContext(L, L)
        if how == "flex":
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            def mask_mod(b, h, q, k):
                return masks.evaluate(self.expr, q, k, ctx)
            self.block_mask = create_block_mask(mask_mod, None, None, L, L, device="cpu")
            self.flex = torch.compile(flex_attention)
        else:
            self.mask = masks.evaluate(self.expr, i[:, None], i[None, :], ctx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.m

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (self.heads, -1)).transpose(1, 2)
        q, k, v = (heads(F.linear(x, getattr(m, p).weight, getattr(m, p).bias))
                   for p in ("q_proj", "k_proj", "v_proj"))
        if self.how == "flex":
            o = self.flex(q, k, v, block_mask=self.block_mask, scale=self.scale)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, scale=self.scale)
        return F.linear(o.transpose(1, 2).flatten(2), m.o_proj.weight, m.o_proj.bias)


def measure(module: torch.nn.Module, x: torch.Tensor, backward: bool,
            repeat: int) -> tuple[float, float | None]:
    """(median ms, RSS growth MB) of forward (+ backward) of sum(y * r)."""
    r = torch.randn(x.shape)

    def step() -> None:
        if backward:
            module.zero_grad(set_to_none=True)
            (module(x) * r).sum().backward()
        else:
            with torch.no_grad():
                module(x)
    step()  # warm-up (compiles FlexAttention)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), _peak_mb(step)


def speed(lengths: list[int], repeat: int) -> None:
    print("| mask | L | attndsl path | attndsl fwd+bwd ms | MB | flex fwd ms (no CPU bwd) | "
          "attndsl fwd ms | sdpa+mask fwd+bwd ms | MB | vs sdpa+mask | dense fwd+bwd ms | MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, layer in layers().items():
        path = ", ".join(sorted({c.strategy for c in layer.plan("torch")[1]}))
        for L in lengths:
            small = L * L <= torch_attention.SDPA_PAIRS and path == "block_sparse"
            torch.manual_seed(L)
            module = layer.to_torch(seed=0).train()
            x = torch.randn(1, L, 256)
            ours, ours_mb = measure(module, x, True, repeat)
            ours_fwd, _ = measure(module, x, False, repeat)
            flex, _ = measure(Baseline(module, layer, "flex", L), x, False, repeat)
            sdpa, sdpa_mb = measure(Baseline(module, layer, "sdpa", L), x, True, repeat)
            exact = "| - | - |"
            if L <= 8192:
                ms, mb = measure(layer.to_torch(seed=0, path="dense").train(), x, True, 1)
                exact = f"| {ms:.0f} | {mb or 0:.0f} |"
            shown = path + (" (as sdpa)" if small else "")
            print(f"| {name} | {L} | {shown} | {ours:.0f} | {ours_mb or 0:.0f} | {flex:.0f} | "
                  f"{ours_fwd:.0f} | {sdpa:.0f} | {sdpa_mb or 0:.0f} | "
                  f"{sdpa / ours:.1f}x faster {exact}", flush=True)


def train(steps: int = 100) -> None:
    from attndsl.backends.runtime import make_session

    layer = attndsl.loads(MODEL)["windowed_lm"]
    module = layer.to_torch(seed=0).train()
    opt = torch.optim.Adam(module.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    print("| step | loss |")
    print("|---|---|")
    for step in range(1, steps + 1):
        # next token = (previous + 1) mod 97 after a random start: learnable in a window
        start = torch.from_numpy(rng.integers(0, 97, (8, 1)))
        ids = (start + torch.arange(65)) % 97
        logits = module(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 20 == 0:
            print(f"| {step} | {loss.item():.4f} |", flush=True)
    module.eval()
    ids = rng.integers(0, 97, (3, 50))
    with torch.no_grad():
        want = module(torch.from_numpy(ids)).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        for target in ("ort-cpu", "portable"):
            path = layer.export_onnx(tmp, target=target, weights=module)
            got = make_session(path, "cpu").run(None, {"input_ids": ids})[0]
            print(f"\nexported ({target}) vs trained module, max |difference| of logits: "
                  f"{float(np.abs(got - want).max()):.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,1536,2048,4096,8192,16384")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--train", action="store_true", help="the 100-step training run")
    args = parser.parse_args()
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    _return_freed_memory()
    if args.train:
        train()
    else:
        speed([int(n) for n in args.lengths.split(",")], args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
