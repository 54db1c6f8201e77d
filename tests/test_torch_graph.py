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
from attndsl.ir.ops import OPS
from attndsl.verify import make_inputs, tolerance

from .conftest import EXAMPLES

ROOT = Path(__file__).parent.parent

LAYERS = [(p, n) for p in EXAMPLES for n in attndsl.load(p)]


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_module_tensors_are_the_graph_weights(path: Path, name: str) -> None:
    layer = attndsl.load(path)[name]
    graph = layer.graph()
    state = layer.to_torch().state_dict()
    assert {w.name: w.shape for w in graph.weights} == {
        k: tuple(v.shape) for k, v in state.items()}
    referenced = {v for n in graph.nodes for k, v in n.attrs  # (a core's `bias`: its kind)
                  if k == "weight" or (isinstance(v, str) and k in OPS[n.op].tensor_attrs())}
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


def test_a_trained_module_exports_its_own_weights(tmp_path: Path) -> None:
    """`export_onnx(weights=module)` after training: the model computes what the trained
    module does (ONNX Runtime within 1e-4), on the planned and the portable target; the same
    tensors saved and compiled with --weights give the same initializers; a module of
    another layer is refused with every mismatch named."""
    import onnx
    import onnxruntime as ort
    import torch
    from safetensors.torch import save_file

    from attndsl.cli import main
    from attndsl.errors import SpecError

    layer = attndsl.load(ROOT / "examples" / "llama_lm.attn")["llama_lm"]
    module = layer.to_torch(seed=1).train()
    ids = torch.randint(0, layer.spec.vocab, (4, 17), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    for _ in range(5):  # next-token prediction, enough to move every weight
        logits = module(input_ids=ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    module.eval()
    with torch.no_grad():
        want = module(input_ids=ids).numpy()
    untrained = layer.to_torch(seed=1)
    assert any(not torch.equal(a, b) for a, b in zip(
        module.state_dict().values(), untrained.state_dict().values(), strict=True))
    for target in ("ort-cpu", "portable"):
        path = layer.export_onnx(tmp_path / target, target=target, weights=module)
        got = ort.InferenceSession(str(path)).run(None, {"input_ids": ids.numpy()})[0]
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))
    save_file({k: v.contiguous() for k, v in module.state_dict().items()},
              str(tmp_path / "trained.safetensors"))
    assert main(["compile", str(ROOT / "examples" / "llama_lm.attn"), "--name", "llama_lm",
                 "--export", "onnx", "--weights", str(tmp_path / "trained.safetensors"),
                 "-o", str(tmp_path / "cli")]) == 0
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(
        tmp_path / "cli" / "llama_lm.onnx").graph.initializer}
    mine = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(
        tmp_path / "ort-cpu" / "llama_lm.onnx").graph.initializer}
    assert inits.keys() == mine.keys() and all(np.array_equal(inits[k], mine[k]) for k in inits)
    other = attndsl.load(ROOT / "examples" / "gemma_softcap.attn")["gemma_stack"].to_torch()
    with pytest.raises(SpecError) as err:
        layer.export_onnx(tmp_path / "x", weights=other)
    text = str(err.value)
    assert "the given weights: tensor `embed_tokens.weight` has shape [512, 256]" in text
    assert "unknown tensor `layers.1.post_ffn_norm.weight`" in text
