"""Text encoders (docs/LANGUAGE.md, `lm_head = false`): token ids in, hidden states out;
CLIP's and SigLIP's text towers imported from checkpoints as they are, exact against
transformers; the keys of an LM head refused without one; no decoding form."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import attndsl
from attndsl.errors import SpecError, UsageError
from attndsl.weight_table import weight_table

from .conftest import refused_where
from .test_random_specs import check_stream
from .test_vision import _imported

tf = pytest.importorskip("transformers")

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 37, "vocab_size": 99, "max_position_embeddings": 20,
         "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}


@pytest.mark.parametrize("kind", ["CLIPText", "SiglipText"])
def test_an_imported_text_tower_is_transformers_model(tmp_path, kind: str) -> None:
    """`last_hidden_state` at B = 2, one row padded on the right (transformers' attention
    mask, attndsl's key_lengths), on ort-cpu and in the torch module, every row compared
    (CLIP's padded rows see the tokens before them, SigLIP's every real token)."""
    hf = getattr(tf, f"{kind}Model")(getattr(tf, f"{kind}Config")(**SMALL)).eval()
    layer = _imported(hf, len(kind), tmp_path)
    assert layer.spec.vocab == 99 and not layer.spec.head
    assert layer.name == kind.lower().replace("text", "_text_model")  # clip_text_model, ...
    ids, lengths = torch.randint(0, 99, (2, 13)), torch.tensor([13, 8])
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=(torch.arange(13)[None] < lengths[:, None])
                  .long()).last_hidden_state.numpy()
        from_torch = layer.to_torch(weights=tmp_path)(ids, key_lengths=lengths).numpy()
    session = ort.InferenceSession(layer.onnx_bytes(weights=tmp_path),
                                   providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["y"]
    got = session.run(None, {"input_ids": ids.numpy(), "key_lengths": lengths.numpy()})[0]
    for ours in (got, from_torch):
        assert ours.shape == want.shape
        assert float(np.abs(ours - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_random_stacks_without_an_lm_head_match_the_reference() -> None:
    """Stream 61's stacks of token ids in and hidden states out (`lm_head = false`), on
    every backend and target (the portable export for 147): with per-layer inputs and an
    embedding norm (52, and 147 with output norms), a shortcut (194)."""
    check_stream(((52, ("lm_head = false", "per_layer_inputs")),
                  (194, ("lm_head = false", "shortcut")),
                  (147, ("lm_head = false", "embedding_norm"))), portable=147)


_STACK = """attention a {{
    d_model = 16
    heads = 2
    position = learned(max_len = 32)
    mask = causal
}}
transformer t {{
    attention = a
    layers = 1
    ffn = quick_gelu(24)
    norm = layernorm(pre){extra}
}}
"""


@pytest.mark.parametrize(("extra", "words", "at"), [
    ("\n    lm_head = false", "`lm_head` needs `vocab`", "lm_head"),
    ("\n    vocab = 10\n    tie_embeddings = true\n    lm_head = false",
     "`tie_embeddings` is the LM head's", "tie_embeddings"),
    ("\n    vocab = 10\n    logit_softcap = 30.0\n    lm_head = false",
     "`logit_softcap` is the LM head's", "logit_softcap"),
    ("\n    vocab = 10\n    lm_head = no", "lm_head", "no"),
])
def test_what_a_stack_without_an_lm_head_cannot_take_is_refused_where_it_is(
        extra, words, at) -> None:
    refused_where(_STACK.format(extra=extra), words, at)


def test_a_stack_without_an_lm_head_has_no_lm_head_tensor_and_no_decoding_form() -> None:
    """Its tensors stop at the final norm; decoding, generation and the genai export are
    refused by name, before anything is built."""
    layer = attndsl.loads(_STACK.format(extra="\n    vocab = 10\n    lm_head = false"),
                          "t.attn")["t"]
    names = {w.name for w in weight_table(layer.spec)}
    assert "embed_tokens.weight" in names and "norm.weight" in names
    assert "lm_head.weight" not in names
    with pytest.raises(SpecError, match="has no LM head"):
        layer.decoder_model()
    with pytest.raises(SpecError, match="has no LM head"):
        layer.generate([1, 2, 3], 2)
    from attndsl.genai import check_genai

    with pytest.raises(UsageError, match="no LM head"):
        check_genai(layer.spec)
