"""The torch module runs the graph IR: its tensors are the graph's weight table, the spec's
parameter count agrees with it, and the SDPA form of the graph (bench's PyTorch baseline)
computes what the reference computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import attndsl
from attndsl.backends import reference
from attndsl.bench import _with_sdpa
from attndsl.verify import make_inputs, tolerance

from .conftest import EXAMPLES

LAYERS = [(p, n) for p in EXAMPLES for n in attndsl.load(p)]


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_module_tensors_are_the_graph_weights(path: Path, name: str) -> None:
    layer = attndsl.load(path)[name]
    graph = layer.graph()
    state = layer.to_torch().state_dict()
    assert {w.name: w.shape for w in graph.weights} == {
        k: tuple(v.shape) for k, v in state.items()}
    referenced = {v for n in graph.nodes for k, v in n.attrs
                  if k == "weight" or (k in ("bias", "sinks", "selection") and isinstance(v, str))}
    referenced |= {w for n in graph.nodes for k, v in n.attrs if k == "weights" for w in v}
    referenced |= {name for n in graph.nodes for k, v in n.attrs if k == "prefix"  # experts
                   for name in state if name.startswith(v)}
    referenced |= {f"{v}.{t}" for n in graph.nodes for k, v in n.attrs if k == "module"
                   for t in ("weight", "bias") if f"{v}.{t}" in state}
    assert referenced == set(state)


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_sdpa_baseline_matches_the_reference(path: Path, name: str) -> None:
    layer = attndsl.load(path)[name]
    module = layer.to_torch()
    sdpa = _with_sdpa(module)
    if sdpa is None:
        pytest.skip("SDPA cannot express this layer (softcap, sinks or a linear kernel)")
    weights = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
    for batch, length in ((1, 1), (3, 37)):
        inputs = make_inputs(layer.spec, batch, length, np.random.default_rng(length))
        want = reference.run(layer.graph(), inputs, weights)
        with torch.no_grad():
            got = sdpa(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()
        assert np.abs(got - want).max() <= tolerance(want)
