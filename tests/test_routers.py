"""The routers of a mixture of experts against transformers' own: PhiMoE's sparse mixer at
inference (eval mode: no jitter, the best expert of each round), in the reference and in the
arithmetic the torch module and the ONNX lowering share."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.mark.parametrize("threshold", [0.02, 0.3, 3.0])
def test_sparse_mixer_matches_phimoe(threshold: float) -> None:
    """Gates of `router = sparsemixer, threshold = t` equal transformers' sparsemixer(scores,
    jitter_eps = t / 2, training = False), placed at its two chosen experts; logits of both
    signs, so the relative threshold keeps some experts and drops others."""
    from transformers.models.phimoe.modeling_phimoe import sparsemixer

    from attndsl.backends import reference_experts
    from attndsl.backends.torch_arrays import TorchArrays
    from attndsl.mechanisms.moe import route

    g = torch.Generator().manual_seed(7)
    x, weight = torch.randn(64, 24, generator=g), torch.randn(7, 24, generator=g) / 3
    logits = x @ weight.T
    weights, indices = sparsemixer(logits, jitter_eps=threshold / 2, training=False)
    want = np.zeros((64, 7))
    np.put_along_axis(want, indices.numpy(), weights.double().numpy(), -1)
    assert (want > 0).sum(-1).tolist() == [2] * 64
    assert want.sum(-1).min() < 2.0  # some round's softmax spans kept experts besides its own
    ref = reference_experts.route(x.double().numpy(), weight.double().numpy(), None, 2,
                                  "sparsemixer", False, 1.0, threshold=threshold)
    np.testing.assert_allclose(ref, want, atol=1e-6)
    ours = route(TorchArrays(x.device), logits, 2, "sparsemixer", False, 1.5,
                 threshold=threshold)
    np.testing.assert_allclose(ours.numpy(), 1.5 * want, atol=1e-5)
