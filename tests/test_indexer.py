"""DeepSeek sparse attention's lightning indexer (`indexer = lightning(...)`): each query's
latent attention over the top_k visible keys of largest index score. Checked against the
reference on every backend and target (random specs of its generator stream, decoding as one
pass), its tie rule on scores made equal, its refusals, and transformers' DeepseekV32Indexer
through the deepseek_v32 family (tests/test_hf_families.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attndsl
from attndsl.backends.torch_arrays import TorchArrays
from attndsl.errors import SpecError
from attndsl.ir import Node, Op
from attndsl.mechanisms.indexer import LOWEST, select
from attndsl.shapes import T

from .test_random_specs import check_stream

SPARSE = """
attention sparse {
    d_model = 64
    heads = 4
    head_dim = 24
    value_dim = 16
    latent = mla(kv_rank = 32, rope_dim = 8, q_rank = 24)
    position = rope(theta = 10000, interleaved = true)
    mask = causal & padding(side = left)
    indexer = lightning(heads = 4, head_dim = 16, top_k = 5)
}
"""


def test_random_specs_with_an_indexer_match_the_reference() -> None:
    """The indexer's stream (53): rope layouts half and interleaved, top_k 1 to 7, at the
    random-spec shapes (L = 1, primes past top_k, rows with no visible key), one portable
    export, and a decodable spec as prefill + steps."""
    check_stream(((159, ("indexer = lightning(", "rope = interleaved")),
                  (232, ("indexer = lightning(",))), portable=159,
                 decoding=(186, "indexer = lightning("))


def test_the_indexer_keeps_top_k_keys_and_drops_the_rest() -> None:
    """With top_k past every row's keys the layer is latent attention alone; with top_k = 5
    the rows of more than 5 visible keys differ from it, the others do not."""
    text = SPARSE.replace("causal & padding(side = left)", "causal")
    full = attndsl.loads(text.replace("top_k = 5", "top_k = 64"))["sparse"].to_torch(seed=1)
    sparse = attndsl.loads(text)["sparse"].to_torch(seed=1)
    x = torch.randn(2, 13, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (full(x) - sparse(x)).abs().amax(-1)
    assert float(diff[:, :5].max()) == 0.0
    assert float(diff[:, 5:].min()) > 1e-3, diff


def _oracle(q, k, w, seen, top_k, scale):
    from attndsl.backends.reference_indexer import select_keys

    node = Node(Op.SELECT_KEYS, "s", ("q", "k", "w", "v"), (("top_k", top_k), ("scale", scale)),
                T("B", "L", "n", dtype="float"))
    return select_keys(node, {"q": q, "k": k, "w": w, "v": seen}, {})


@pytest.mark.parametrize("top_k", [1, 2, 4, 9])
def test_ties_go_to_the_earlier_key(top_k: int) -> None:
    """Keys whose index scores are equal (every head's ReLU at 0, and repeated keys) are
    kept earlier first, as the document says; the arithmetic over torch, and the ONNX form
    through the portable target (test_random_specs), agree with the reference's loop."""
    rng = np.random.default_rng(0)
    B, H, L, D = 2, 3, 6, 4
    q = rng.standard_normal((B, H, L, D))
    k = rng.standard_normal((B, 1, L, D))
    k[:, :, 3] = k[:, :, 1]  # a repeated key: equal scores
    k[:, :, 4] = -10 * np.abs(k[:, :, 4])  # (with q > 0 below: every ReLU at 0)
    q[1] = np.abs(q[1])
    w = rng.uniform(0.5, 1.5, (B, L, H))
    seen = np.tril(np.ones((L, L), bool))[None].repeat(B, 0)
    seen[1, 5, 2] = False  # a key the mask hides
    want = _oracle(q, k, w, seen, top_k, 0.5)
    got = select(TorchArrays(torch.device("cpu")), *(torch.tensor(a) for a in (q, k, w, seen)),
                 top_k, 0.5).numpy()
    np.testing.assert_array_equal(got == 0, want == 0)  # (the backends' -inf: LOWEST)
    assert ((got == 0) | (got == LOWEST)).all() and ((want == 0) | (want == -np.inf)).all()
    kept = (want == 0) & seen
    np.testing.assert_array_equal(kept.sum(-1), np.minimum(seen.sum(-1), top_k))


@pytest.mark.parametrize(("entry", "words"), [
    ("latent = none", "the indexer scores keys from latent attention's query latent"),
    ("latent = mla(kv_rank = 32, rope_dim = 8)", "latent attention needs `q_rank`"),
    ("latent = mla(kv_rank = 32, rope_dim = 8, q_rank = 24)\n    softcap = 30",
     "a softcap would cap the -inf"),
])
def test_the_indexer_is_refused_where_it_cannot_apply(entry: str, words: str) -> None:
    text = SPARSE.replace("latent = mla(kv_rank = 32, rope_dim = 8, q_rank = 24)", entry)
    with pytest.raises(SpecError) as err:
        attndsl.loads(text)
    assert words in str(err.value), str(err.value)
    assert "indexer" in str(err.value)


def test_a_narrow_indexer_head_is_refused_at_its_entry() -> None:
    text = SPARSE.replace("head_dim = 16, top_k", "head_dim = 6, top_k")
    with pytest.raises(SpecError) as err:
        attndsl.loads(text)
    assert "head_dim (6) is too small" in str(err.value), str(err.value)
    text = SPARSE.replace("head_dim = 16, top_k", "head_dim = 7, top_k")
    with pytest.raises(SpecError) as err:
        attndsl.loads(text)
    assert "must be even" in str(err.value), str(err.value)


def test_decoding_gathers_the_chosen_keys_as_the_mask_would() -> None:
    """A decoding model attends over the top_k cache rows each query chose, gathered
    (`gather`): its step against 40 cached tokens equals the dense masked form's
    (`sparsity = dense`), for new queries that see more keys than top_k and fewer."""
    import onnxruntime as ort

    from attndsl.ir import build
    from attndsl.planner import plan

    text = SPARSE.replace("causal & padding(side = left)", "causal")
    layers = {form: attndsl.loads(t)["sparse"] for form, t in (
        ("gather", text), ("dense", text.replace("    mask = causal\n",
                                                 "    mask = causal\n    sparsity = dense\n")))}
    for form, layer in layers.items():
        assert [c.strategy for c in plan(build(layer.spec, decode=True), "ort-cpu")[1]] == \
            [form]
    rng = np.random.default_rng(1)
    for P, L in ((40, 1), (40, 3), (2, 2)):  # (2 + 2 keys: fewer than top_k)
        feed = {"x": rng.standard_normal((2, L, 64)).astype(np.float32),
                "attention_mask": np.ones((2, P + L), np.int64),
                "position_ids": np.broadcast_to(np.arange(P, P + L), (2, L)).astype(np.int64)}
        feed["attention_mask"][1, :2] = 0  # a left-padded row
        out = {}
        for form, layer in layers.items():
            session = ort.InferenceSession(layer.decoder_bytes(target="ort-cpu", seed=3),
                                           providers=["CPUExecutionProvider"])
            for i in session.get_inputs():
                if i.name.startswith("past_key_values."):
                    feed[i.name] = rng.standard_normal((2, 1, P, i.shape[3])).astype(np.float32) \
                        if form == "gather" else feed[i.name]
            out[form] = session.run(None, feed)
        for got, want in zip(out["gather"], out["dense"], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
