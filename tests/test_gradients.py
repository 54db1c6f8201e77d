"""Gradients of the torch module (issue 28): for every example layer and random specs from the
property generator, on each of the module's paths (`auto`: SDPA and block-sparse attention where
the torch plan takes them; `blocks`: the same with block-sparse attentions in attndsl's own
block-sparse form even where small shapes would take SDPA; `dense`: the graph's own nodes),
the module's float64 autograd
gradients (of the inputs and of every parameter) give the directional derivative of the NumPy
oracle (central differences, float64) along a random direction, and the float32 module's
gradients are finite and agree with them. At L = 7 (B = 3, a row whose keys are all hidden where
the spec pads), L = 1 (B = 2) and, for layers the torch plan runs block-sparse, L = 70 (several
blocks of 16, 32 or 64 queries, the last one partial). The `auto` and `dense` paths run on a
cover of the examples' layers by default (every feature of their planned graphs, every torch
path), on every layer with --deep; `blocks` on every layer that has a block-sparse attention."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import attndsl
from attndsl.backends import reference
from attndsl.ir import build
from attndsl.planner import torch_paths
from attndsl.verify import make_inputs

from .conftest import DEEP, EXAMPLES, plan_cover

LAYERS = [(path, name) for path in EXAMPLES for name in attndsl.load(path)]
EPS = 1e-7  # small enough that no ReLU or routing kink falls inside (T5's did at 1e-6)


def _gradients(module, inputs: dict, r: np.ndarray | np.random.Generator, dtype,
               ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """The gradients of sum(y * r), and r: given, or drawn from a generator in y's shape (the
    module's forward pass serves for both)."""
    feed = {k: torch.tensor(v, dtype=dtype, requires_grad=True) if v.dtype.kind == "f"
            else torch.from_numpy(v) for k, v in inputs.items()}
    y = module(**feed)
    if isinstance(r, np.random.Generator):
        r = r.standard_normal(tuple(y.shape))
    (y * torch.from_numpy(r).to(dtype)).sum().backward()
    out = {k: p.grad.double() for k, p in module.named_parameters() if p.grad is not None}
    return out | {f"input:{k}": t.grad.double() for k, t in feed.items()
                  if t.is_floating_point() and t.grad is not None}, r


def _check(layer, length: int, path: str) -> None:
    inputs = make_inputs(layer.spec, 3 if length > 1 else 2, length, np.random.default_rng(length))
    module32 = layer.to_torch(seed=2, path=path)
    module = copy.deepcopy(module32).double()  # the same weights, widened
    weights = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    graph = build(layer.spec)
    rng = np.random.default_rng(7)
    grads, r = _gradients(module, inputs, rng, torch.float64)  # r: the module's output shape
    # the directional derivative of the oracle's sum(y * r) along random (inputs, weights)
    directions = {k: rng.standard_normal(v.shape) for k, v in weights.items()}
    directions |= {f"input:{k}": rng.standard_normal(v.shape) for k, v in inputs.items()
                   if v.dtype.kind == "f"}

    def moved(sign: float) -> float:
        w = {k: v + sign * EPS * directions[k] for k, v in weights.items()}
        x = {k: v + sign * EPS * directions[f"input:{k}"] if v.dtype.kind == "f" else v
             for k, v in inputs.items()}
        y = reference.run(graph, x, w)
        assert y.shape == r.shape, (y.shape, r.shape)
        return float((y * r).sum())

    numeric = (moved(1.0) - moved(-1.0)) / (2 * EPS)
    analytic = sum(float((grads[k].numpy() * d).sum()) for k, d in directions.items()
                   if k in grads)
    # 1e-4: the module keeps float32 where the formulas' dtype rules say (a norm's statistics),
    # so its float64 gradients are good to about 1e-5, while a wrong one is off by O(1)
    assert abs(numeric - analytic) <= 1e-4 * max(1.0, abs(numeric)), (numeric, analytic)
    # a router's selection bias only chooses experts (DeepSeek trains it by load balancing,
    # not by gradient), as a lightning indexer only chooses keys (DeepSeek-V3.2 trains it by
    # its own loss against the attention's scores): every other weight gets one
    unused = [k for k in weights if k not in grads and not k.endswith("selection_bias")
              and "indexer." not in k]
    assert not unused, f"no gradient reaches {unused}"
    g32, _ = _gradients(module32, inputs, r, torch.float32)
    for k, g in grads.items():
        assert torch.isfinite(g32[k]).all(), k
        assert float((g32[k] - g).abs().max()) <= 2e-3 * max(1.0, float(g.abs().max())), k


# `blocks`: the module planned with attndsl's block-sparse form at every shape (at small ones
# `auto` plans a bias-free block-sparse attention to run as SDPA with its mask: torch_paths)
PATHS = ["auto", "blocks", "dense"]


def _path(torch_path: str, monkeypatch) -> str:
    if torch_path == "blocks":
        monkeypatch.setattr(torch_paths, "SDPA_SIDE", 0)
        return "auto"
    return torch_path


def _blocked(path, name: str) -> bool:
    """Whether the torch plan runs an attention of the layer block-sparse."""
    return any(c.strategy == "block_sparse" for c in attndsl.load(path)[name].plan("torch")[1])


def _torch_cover(layers: list) -> set:
    """The portable cover (conftest.plan_cover), and, in order, each layer whose torch plan
    takes a torch path (SDPA, block-sparse, FlexAttention) no layer before it does."""
    cover, paths = set(plan_cover(layers, ("portable",))), set()
    for path, name in layers:
        taken = {c.strategy for c in attndsl.load(path)[name].plan("torch")[1]}
        if not taken <= paths:
            cover.add((path, name))
            paths |= taken
    return cover


# `auto` and `dense` (the graph's own nodes, as planned for the portable target) for the layers
# whose portable graphs together exercise every op, mask primitive and attribute kind any
# layer's does (conftest.plan_cover) and whose torch plans take every torch path, and for every
# layer with --deep; `blocks` for each layer with a block-sparse attention (elsewhere it is
# `auto`'s module)
COVER = set(LAYERS) if DEEP[0] else _torch_cover(LAYERS)
CASES = [(path, name, torch_path) for path, name in LAYERS for torch_path in PATHS
         if (torch_path != "blocks" or _blocked(path, name))
         and (torch_path == "blocks" or (path, name) in COVER)]


@pytest.mark.parametrize(("path", "name", "torch_path"), CASES,
                         ids=[f"{p.stem}:{n}-{t}" for p, n, t in CASES])
def test_module_gradients_are_the_oracles(path, name, torch_path, monkeypatch) -> None:
    layer = attndsl.load(path)[name]
    blocked = _blocked(path, name)
    for length in (7, 1, 70) if blocked and torch_path != "dense" else (7, 1):
        _check(layer, length, _path(torch_path, monkeypatch))


@pytest.mark.parametrize("torch_path", PATHS)
def test_random_spec_gradients_are_the_oracles(spec_seed: int, torch_path: str,
                                               monkeypatch) -> None:
    from .specgen import random_spec

    program = attndsl.loads(random_spec(spec_seed), f"random-{spec_seed}.attn")
    _check(program[list(program)[-1]], 7 if torch_path == "dense" else 40,
           _path(torch_path, monkeypatch))


def test_planned_paths_are_the_ones_tested() -> None:
    """The examples exercise every torch path (so the gradients above cover each)."""
    taken = {c.strategy for path, name in LAYERS
             for c in attndsl.load(path)[name].plan("torch")[1]}
    assert {"sdpa", "block_sparse", "dense"} <= taken, taken
    # and `blocks` runs somewhere (it is generated only where a layer is block-sparse)
    assert any(t == "blocks" for _, _, t in CASES)
