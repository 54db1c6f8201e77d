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


def test_zero_experts_are_longcat_flashs_identities() -> None:
    """`zero_experts = Z` (LongCat-Flash's zero-computation experts): the oracle's mixture of
    E MLP experts and Z identities, routed by a softmax over all E + Z with a selection bias
    (`e_score_correction_bias`), its weights not renormalised, times routed_scale, equals
    transformers' LongcatFlashMoE, on tokens some of whose chosen experts are identities."""
    import transformers as tf
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashMoE

    import attndsl
    from attndsl.backends import reference, reference_experts
    from attndsl.ir.graph import Op

    config = tf.LongcatFlashConfig(hidden_size=24, expert_ffn_hidden_size=16,
                                   n_routed_experts=4, zero_expert_num=3,
                                   num_experts_per_tok=3, routed_scaling_factor=1.5)
    torch.manual_seed(5)
    moe = LongcatFlashMoE(config).double().eval()
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0.0, 0.4)
        moe.router.e_score_correction_bias.normal_(0.0, 0.1)
    x = torch.randn(40, 24, dtype=torch.float64)
    with torch.no_grad():
        want = moe(x[None])[0].numpy()
    router = moe.router.classifier.weight.detach().numpy()
    gates = reference_experts.route(x.numpy(), router, None, 3, "softmax", False, 1.5,
                                    moe.router.e_score_correction_bias.numpy())
    assert (gates[:, 4:] > 0).any() and (gates[:, :4] > 0).any()  # both kinds chosen
    stack = attndsl.loads("""attention a {
    d_model = 24
    heads = 2
}
transformer t {
    attention = a
    layers = 1
    ffn = moe(experts = 4, top_k = 3, expert = swiglu(16), zero_experts = 3,
              normalize = false, selection_bias = true, routed_scale = 1.5)
    norm = rmsnorm(pre)
}
""")["t"]
    node = next(n for n in stack.graph().nodes if n.op.value == "ffn")  # the oracle's reading
    w = {"layers.0.mlp.router.weight": router,
         "layers.0.mlp.router.selection_bias": moe.router.e_score_correction_bias.numpy()}
    for e in range(4):
        gate, up = moe.experts.gate_up_proj[e].detach().numpy().reshape(2, 16, 24)
        p = f"layers.0.mlp.experts.{e}."
        w |= {f"{p}gate_proj.weight": gate, f"{p}up_proj.weight": up,
              f"{p}down_proj.weight": moe.experts.down_proj[e].detach().numpy()}
    y = reference._IMPL[Op.FFN](node, {node.args[0]: x.numpy()}, w)
    # (transformers' router takes its logits, softmax and weights in float32)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
