"""A mixture of attention heads (`head_experts = moa(...)`, JetMoE's MoA): the oracle's reading
against transformers' own JetMoeMoA (its queries and its output), the checker's located
refusals, and random specs of its stream on every backend and target and decoding as one
pass. JetMoE itself (with its MLP's `output_bias`), imported from a tiny checkpoint, is
compared with transformers in test_hf_families.py and test_generation.py; the example
examples/jetmoe_moa.attn runs in every sweep of the examples."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attndsl
from attndsl.backends.reference_mechanisms import READINGS

from .conftest import refused_at

tf = pytest.importorskip("transformers")


def _moa(experts: int, top_k: int, kv: int, d: int, width: int):
    """transformers' JetMoeMoA, its weights drawn at random, and the same tensors under
    attndsl's names (the experts' projections stacked, as the JetMoE import reads them)."""
    from transformers.models.jetmoe.modeling_jetmoe import JetMoeMoA

    config = tf.JetMoeConfig(hidden_size=width, num_key_value_heads=kv, kv_channels=d,
                             num_local_experts=experts, num_experts_per_tok=top_k)
    torch.manual_seed(3)
    moa = JetMoeMoA(config).double().eval()
    with torch.no_grad():
        for p in moa.parameters():
            p.normal_(0.0, 0.5)
    w = {"router": moa.router.layer.weight.detach().numpy(),
         "q": moa.input_linear.weight.detach().numpy().reshape(-1, width),
         "o": moa.output_linear.weight.detach().numpy().reshape(-1, kv * d),
         "bias": moa.bias.detach().numpy()}
    return moa, w


@pytest.mark.parametrize(("experts", "top_k", "kv"), [(5, 2, 2), (4, 3, 1), (3, 1, 3)])
def test_the_oracle_reads_transformers_mixture_of_heads(experts, top_k, kv) -> None:
    """Query head g * top_k + j is head g of slot j's expert query (JetMoeMoA.map's [slot,
    head] order regrouped as grouped-query attention reads it), and the output of merged
    heads is JetMoeMoA.reduce's: every slot through its expert's output projection, weighted
    by its gate, summed, plus the bias."""
    d, width, B, L = 4, 10, 2, 7
    moa, w = _moa(experts, top_k, kv, d, width)
    x = np.random.default_rng(0).normal(size=(B, L, width))
    attrs = {"experts": experts, "top_k": top_k, "heads": kv, "dim": d, "width": width}
    with torch.no_grad():
        want_q, _, topo = moa.map(torch.from_numpy(x))  # (B, L, top_k, kv * d)
    got_q = READINGS["head_experts"](x, {**attrs, "part": "q", "weights": ("router", "q")}, w)
    got_q = got_q.reshape(B, L, kv, top_k, d).transpose(0, 1, 3, 2, 4).reshape(want_q.shape)
    np.testing.assert_allclose(got_q, want_q.numpy(), rtol=1e-12, atol=1e-12)
    a = np.random.default_rng(1).normal(size=(B, L, top_k, kv * d))  # heads per slot
    with torch.no_grad():
        want = moa.reduce(torch.from_numpy(a), topo).numpy()
    merged = a.reshape(B, L, top_k, kv, d).transpose(0, 1, 3, 2, 4).reshape(B, L, -1)
    got = READINGS["head_experts"](merged, {**attrs, "part": "o", "weights": (
        "router", "o", "bias")}, w, x)
    # (transformers' router takes its logits and gates in float32 even in a float64 module)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


ATTN = """attention a {{
    d_model = 24
    heads = 4
    kv_heads = 2
    head_dim = 6
    head_experts = moa(experts = 5, top_k = 2)
    mask = causal
{extra}}}
"""


@pytest.mark.parametrize(("extra", "words", "line"), [
    ("    kind = cross\n", "it is self attention", 8),
    ("    qk_norm = rmsnorm\n", "`qk_norm` and a mixture of attention heads", 8),
    ("    output_gate = sigmoid\n", "`output_gate` and a mixture of attention heads", 8),
    ("    out_proj = false\n", "the experts' output projections are the layer's", 8),
    ("    kernel = linear(feature = elu)\n", "is a softmax attention", 8),
    ("    latent = mla(kv_rank = 4, rope_dim = 2)\n", "each replace the attention's "
     "projections", 8),
])
def test_what_a_mixture_of_heads_cannot_take_is_located(extra, words, line) -> None:
    assert refused_at(ATTN.format(extra=extra), words) == line


@pytest.mark.parametrize(("text", "words", "line"), [
    (ATTN.format(extra="").replace("heads = 4", "heads = 6"),
     "heads must be top_k x kv_heads (4), found 6", 3),
    (ATTN.format(extra="").replace("top_k = 2", "top_k = 6"),
     "top_k (6) must be at most the number of experts (5)", 6),
])
def test_sizes_a_mixture_of_heads_cannot_have_are_located(text, words, line) -> None:
    assert refused_at(text, words) == line


def test_scores_and_softmax_mechanisms_combine_with_it() -> None:
    """A softcap and learned sinks act inside the core, which the mixture leaves as it is:
    every backend and target computes the oracle's."""
    text = ATTN.format(extra="    softcap = 5.0\n    sinks = learned\n")
    report = attndsl.loads(text, "moa.attn")["a"].verify(lengths=[1, 9], batches=[2])
    assert report.passed, report.text()


def test_random_specs_with_a_mixture_of_heads_match_the_reference() -> None:
    """Drawn from its own generator stream: one pass on every backend and target (seeds 54: a
    stack with sinks; 60: a softcap; 1248: multimodal RoPE and the experts' query bias), and
    decodable specs (74; 249: RoPE, both biases) decoding as one pass."""
    from .test_random_specs import check_stream

    check_stream(((54, ("head_experts", "sinks")), (60, ("head_experts", "softcap")),
                  (1248, ("head_experts", "mrope"))), portable=60,
                 decoding=(74, "head_experts"))
    check_stream((), portable=0, decoding=(249, "head_experts"))


def test_random_mixtures_of_experts_with_a_bias_on_their_sum_match_the_reference() -> None:
    """`output_bias = true` (JetMoE's MLP), drawn from its own stream: seeds 283 and 489."""
    from .test_random_specs import check_stream

    check_stream(((283, ("output_bias = true",)), (489, ("output_bias = true",))),
                 portable=283)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_mixture_of_heads_in_half_precision_matches_the_reference(dtype) -> None:
    """Every expert chosen (top_k = experts): the output sums every slot, so a near-tie that
    half precision breaks otherwise than float64 only permutes the slots (each slot's queries
    and output projection are its expert's) and changes nothing; with fewer slots than
    experts the choice is discontinuous, as a mixture of experts' (test_dtypes). float16 on
    ort-cpu and ort-cuda's graphs, bfloat16 on the torch module."""
    layer = attndsl.loads(ATTN.format(extra="    position = rope(theta = 10000)\n").replace(
        "moa(experts = 5, top_k = 2)", "moa(experts = 2, top_k = 2)"), "moa.attn")["a"]
    targets = ("ort-cpu", "ort-cuda") if dtype == "float16" else ()
    report = layer.verify(dtype=dtype, targets=targets, lengths=(1, 9, 64), batches=(1, 2),
                          seed=4)
    assert report.passed, report.text()
