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


@pytest.mark.parametrize("normalize", [False, True])
def test_choosing_by_logits_matches_kolibri1(normalize: bool) -> None:
    """Gates of `router = sigmoid, select_by = logits, selection_bias = true` equal
    Kolibri1TopKRouter's (the top k of logits + e_score_correction_bias, weighed by the
    sigmoid of their logits, renormalised with norm_topk_prob), in the reference and in the
    shared arithmetic; a bias large enough that choosing by sigmoid + bias differs."""
    import transformers as tf
    from transformers.models.kolibri1.modeling_kolibri1 import Kolibri1TopKRouter

    from attndsl.backends import reference_experts
    from attndsl.backends.torch_arrays import TorchArrays
    from attndsl.mechanisms.moe import route

    config = tf.Kolibri1Config(hidden_size=24, num_experts=7, num_experts_per_tok=3,
                               norm_topk_prob=normalize)
    router = Kolibri1TopKRouter(config)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        router.weight.copy_(torch.randn(7, 24, generator=g) / 3)
        router.e_score_correction_bias.copy_(torch.randn(7, generator=g))
    x = torch.randn(64, 24, generator=g)
    with torch.no_grad():
        _, weights, indices = router(x)
    want = np.zeros((64, 7))
    np.put_along_axis(want, indices.numpy(), weights.double().numpy(), -1)
    bias = router.e_score_correction_bias
    logits = x @ router.weight.detach().T
    by_score = torch.topk(logits.sigmoid() + bias, 3)[1].sort()[0]
    assert (by_score != indices.sort()[0]).any(), "the bias moves no choice: the test is weak"
    ref = reference_experts.route(x.double().numpy(), router.weight.detach().double().numpy(),
                                  None, 3, "sigmoid", normalize, 1.0,
                                  bias.double().numpy(), select_by="logits")
    np.testing.assert_allclose(ref, want, atol=1e-6)
    ours = route(TorchArrays(x.device), logits, 3, "sigmoid", normalize, 1.0, bias,
                 select_by="logits")
    np.testing.assert_allclose(ours.numpy(), want, atol=1e-5)


@pytest.mark.parametrize("family", ["aria_text", "dbrx", "dbrx_unnormalized"])
def test_softmax_routers_match_aria_and_dbrx(family: str) -> None:
    """Gates of a softmax router equal AriaTextTopKRouter's (a softmax over the top k logits:
    `normalize = true`) and DBRX's route_tokens_to_experts (the softmax's top k divided by
    their 1-norm: `normalize = true`; left as they are with moe_normalize_expert_weights
    null: `normalize = false`), in the reference and in the shared arithmetic."""
    import transformers as tf
    from transformers.models.aria.modeling_aria import AriaTextTopKRouter
    from transformers.models.dbrx.modeling_dbrx import DbrxFFN

    from attndsl.backends import reference_experts
    from attndsl.backends.torch_arrays import TorchArrays
    from attndsl.mechanisms.moe import route

    g = torch.Generator().manual_seed(3)
    x, weight = torch.randn(64, 24, generator=g), torch.randn(7, 24, generator=g) / 2
    logits = x @ weight.T
    normalize = family != "dbrx_unnormalized"
    if family == "aria_text":
        router = AriaTextTopKRouter(tf.AriaTextConfig(hidden_size=24, num_attention_heads=4,
                                                      moe_num_experts=7,
                                                      moe_topk=3))
        with torch.no_grad():
            router.weight.copy_(weight)
            _, weights, indices = router(x)
    else:
        ffn = DbrxFFN(tf.DbrxConfig(d_model=24, ffn_config={
            "moe_num_experts": 7, "moe_top_k": 3,
            "moe_normalize_expert_weights": 1.0 if normalize else None}))
        weights, indices = ffn.route_tokens_to_experts(logits)
    want = np.zeros((64, 7))
    np.put_along_axis(want, indices.numpy(), weights.double().numpy(), -1)
    assert np.allclose(want.sum(-1), 1.0) == normalize
    ref = reference_experts.route(x.double().numpy(), weight.double().numpy(), None, 3,
                                  "softmax", normalize, 1.0)
    np.testing.assert_allclose(ref, want, atol=1e-6)
    ours = route(TorchArrays(x.device), logits, 3, "softmax", normalize, 1.0)
    np.testing.assert_allclose(ours.numpy(), want, atol=1e-5)
