"""The torch module's planned paths (issue 28): which path each attention takes
(`explain --target torch`), FlexAttention's forward against the oracle on the CPU, one state
dict for every path, dropout, and the CPU's missing FlexAttention backward as a clear error.
(Every path against the oracle: test_random_specs and verify run `to_torch()`'s plan; its
gradients: test_gradients.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attndsl
from attndsl.backends import reference
from attndsl.cli import main
from attndsl.errors import UsageError
from attndsl.ir import build
from attndsl.planner import torch_paths
from attndsl.verify import make_inputs

from .conftest import ROOT

BANDED = """
attention alibi_window {
    d_model  = 96
    heads    = 6
    kv_heads = 2
    position = alibi
    softcap  = 20.0
    mask     = causal & window(left = 40, right = 0)
}

attention t5_local {
    d_model  = 64
    heads    = 4
    position = relative_bias(buckets = 16, max_distance = 64, bidirectional = true)
    mask     = window(20) & padding
}
"""


def _oracle_error(layer, module, batch: int, length: int) -> float:
    inputs = make_inputs(layer.spec, batch, length, np.random.default_rng(length))
    weights = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
    want = reference.run(build(layer.spec), inputs, weights)
    with torch.no_grad():
        got = module(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()
    return float(np.abs(got - want).max())


def _layers():
    banded = attndsl.loads(BANDED)
    return [attndsl.load(ROOT / "examples/bigbird.attn")["bigbird_attn"],
            attndsl.load(ROOT / "examples/longformer.attn")["longformer_attn"],
            attndsl.load(ROOT / "examples/mistral_local.attn")["mistral_local"],
            banded["alibi_window"], banded["t5_local"]]


def test_flex_forward_is_the_oracles_on_cpu() -> None:
    """path = 'flex': FlexAttention (compiled on the CPU) with the mask's BlockMask and the
    score formulas (ALiBi, T5 buckets, softcap) as its score_mod, runtime padding included,
    at lengths that are no multiple of its blocks, L = 1 and rows with no visible key."""
    for layer in _layers():
        assert [c.strategy for c in layer.plan("torch")[1]] == ["block_sparse"], layer.name
        module = layer.to_torch(seed=1, path="flex")
        for length in (70, 1, 131):
            assert _oracle_error(layer, module, 3, length) < 2e-5, (layer.name, length)


def test_block_sparse_is_the_oracles_at_many_blocks(monkeypatch) -> None:
    """The default path, several query blocks and a partial last one, with biases; planned in
    the block-sparse form (SDPA_SIDE = 0) and as small shapes run it (SDPA with the mask where
    there is no bias, softcap or sink)."""
    for side in (0, torch_paths.SDPA_SIDE):
        monkeypatch.setattr(torch_paths, "SDPA_SIDE", side)
        for layer in _layers():
            module = layer.to_torch(seed=1)
            for length in (200, 1):
                assert _oracle_error(layer, module, 2, length) < 2e-5, (layer.name, length)


def test_flex_has_no_cpu_backward() -> None:
    layer = attndsl.load(ROOT / "examples/mistral_local.attn")["mistral_local"]
    module = layer.to_torch(path="flex")
    x = torch.randn(1, 9, 256, requires_grad=True)
    with pytest.raises(UsageError, match="no CPU backward"):
        module(x)
    with pytest.raises(UsageError, match="unknown torch path `fast`"):
        layer.to_torch(path="fast")


def test_every_path_has_one_state_dict() -> None:
    """A trained module's state dict is the documented weight names whatever its path: it
    loads into the dense module, which computes the same output."""
    for layer in _layers():
        auto, dense = layer.to_torch(seed=4), layer.to_torch(seed=5, path="dense")
        assert auto.state_dict().keys() == dense.state_dict().keys()
        dense.load_state_dict(auto.state_dict())
        x = torch.randn(2, 45, layer.spec.d_model)
        extra = {"key_lengths": torch.tensor([45, 3])} if "key_lengths" in \
            auto.graph.inputs else {}
        with torch.no_grad():
            assert torch.allclose(auto(x, **extra), dense(x, **extra), atol=1e-5)


def test_dropout_applies_in_training_only() -> None:
    layer = attndsl.loads("""
attention drop {
    d_model = 32
    heads   = 2
    dropout = 0.5
    mask    = causal & window(left = 4, right = 0)
}
attention drop_full {
    d_model = 32
    heads   = 2
    dropout = 0.5
    mask    = causal
}""")
    for name, path in (("drop", "block_sparse"), ("drop_full", "sdpa")):
        module = layer[name].to_torch()
        assert [c.strategy for c in layer[name].plan("torch")[1]] == [path]
        x = torch.randn(1, 20, 32)
        with torch.no_grad():
            assert torch.equal(module(x), module(x))  # eval: no dropout
            module.train()
            assert not torch.equal(module(x), module(x))


def test_explain_names_each_torch_path(capsys: pytest.CaptureFixture[str]) -> None:
    def explain(path: str) -> str:
        assert main(["explain", str(ROOT / path), "--target", "torch"]) == 0
        return capsys.readouterr().out

    assert "attention: block_sparse(block=32, key_blocks=6)" in explain(
        "examples/longformer.attn")
    assert "FlexAttention" in explain("examples/bigbird.attn")
    assert "sdpa\n      - F.scaled_dot_product_attention (is_causal" in explain(
        "examples/llama_lm.attn")
    text = explain("examples/bloom_alibi.attn")
    assert "dense\n      - the exact dense form: ALiBi's score bias" in text
    assert main(["explain", str(ROOT / "examples/llama_lm.attn"), "--target", "torch",
                 "--decode"]) == 2
