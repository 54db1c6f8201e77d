"""`layernorm(affine = false)` (docs/LANGUAGE.md, Norms): OLMo's LayerNorm without a weight or
a bias, y = (x - mean(x)) / sqrt(var(x) + eps). The stack holds no norm tensors; the oracle
gives that formula; torch and every ONNX target match the oracle; `bias = true` beside it is
refused where it is written."""

from __future__ import annotations

import numpy as np
import pytest

import attndsl
from attndsl.errors import SpecError

SPEC = """attention a {{
    d_model  = 24
    heads    = 3
    kv_heads = 1
    position = rope(theta = 10000.0)
    mask     = causal
}}

transformer t {{
    attention = a
    layers    = 2
    ffn       = swiglu(40)
    norm      = layernorm({placement}, eps = 1e-05, affine = false)
}}
"""


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_a_layernorm_without_weight_matches_the_oracle_on_every_backend(placement: str) -> None:
    layer = attndsl.loads(SPEC.format(placement=placement))["t"]
    names = set(layer.to_torch().state_dict())
    assert not [n for n in names if "norm" in n], names  # neither weight nor bias
    report = layer.verify(lengths={5: "short", 19: "longer"}, batches=(1, 2))
    assert report.passed, report.text()


def test_the_oracle_computes_the_formula() -> None:
    """One layer whose attention and MLP add nothing (zero output projections): the stack is
    its final norm of x, which the oracle must give as the formula does."""
    layer = attndsl.loads(SPEC.format(placement="pre").replace("layers    = 2",
                                                                "layers    = 1"))["t"]
    weights = {k: v.detach().numpy() * 0.0 if ("o_proj" in k or "down_proj" in k)
               else v.detach().numpy() for k, v in layer.to_torch().state_dict().items()}
    x = np.random.default_rng(1).standard_normal((2, 6, 24)) * 3.0 + 1.5
    got = layer.reference({"x": x}, weights)
    centered = x - x.mean(-1, keepdims=True)
    want = centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + 1e-5)
    assert np.abs(np.asarray(got) - want).max() < 1e-9


def test_a_bias_beside_affine_false_is_refused_where_written() -> None:
    text = SPEC.format(placement="pre").replace("affine = false", "bias = true, affine = false")
    with pytest.raises(SpecError) as caught:
        attndsl.loads(text)
    message = str(caught.value)
    assert "`affine = false` has no weight and no bias" in message, message
    assert ":13:" in message, message  # the norm's line


RMS_SPEC = SPEC.replace("layernorm({placement}, eps = 1e-05, affine = false)",
                        "rmsnorm({placement}, eps = 1e-06, affine = false)") \
    .replace("    layers    = 2\n", "    layers    = 2\n    vocab     = 37\n"
             "    embedding_norm = rmsnorm(eps = 1e-06, affine = false)\n")


@pytest.mark.parametrize("placement", ["pre", "sandwich"])
def test_an_rmsnorm_without_weight_matches_the_oracle_on_every_backend(placement: str) -> None:
    """NanoChat's norms: `rmsnorm(affine = false)` in the blocks and on the embeddings holds
    no tensor, and every backend matches the oracle."""
    layer = attndsl.loads(RMS_SPEC.format(placement=placement))["t"]
    names = set(layer.to_torch().state_dict())
    assert not [n for n in names if "norm" in n], names
    report = layer.verify(lengths={5: "short", 19: "longer"}, batches=(1, 2))
    assert report.passed, report.text()


def test_the_oracle_computes_the_rmsnorm_formula() -> None:
    """As above for the LayerNorm: one layer adding nothing, so the stack is its final
    weightless RMSNorm, x / sqrt(mean(x^2) + eps)."""
    text = SPEC.format(placement="pre").replace("layers    = 2", "layers    = 1").replace(
        "layernorm(pre, eps = 1e-05, affine = false)", "rmsnorm(pre, eps = 0.01, affine = false)")
    layer = attndsl.loads(text)["t"]
    weights = {k: v.detach().numpy() * 0.0 if ("o_proj" in k or "down_proj" in k)
               else v.detach().numpy() for k, v in layer.to_torch().state_dict().items()}
    x = np.random.default_rng(1).standard_normal((2, 6, 24)) * 0.2 + 0.1
    got = layer.reference({"x": x}, weights)
    want = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 0.01)
    assert np.abs(np.asarray(got) - want).max() < 1e-9


def test_a_unit_offset_beside_a_weightless_rmsnorm_is_refused_where_written() -> None:
    text = RMS_SPEC.format(placement="pre").replace("rmsnorm(pre, eps = 1e-06, affine = false)",
                                                    "rmsnorm(pre, unit_offset = true, "
                                                    "affine = false)")
    with pytest.raises(SpecError) as caught:
        attndsl.loads(text)
    message = str(caught.value)
    assert "an rmsnorm with `affine = false` has no weight to offset" in message, message
    assert ":15:" in message, message  # the stack norm's line
