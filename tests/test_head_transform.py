"""A language model's prediction head (`head_transform = dense(...)`, BERT's and ModernBERT's):
the checker's located refusals. Its arithmetic is compared with transformers' BertLMHeadModel
and ModernBertDecoderForCausalLM (test_generation.py: logits, left-padded prompts, greedy
tokens, onnxruntime-genai), with the oracle on every backend in the example
examples/modernbert_decoder.attn and the random specs of its stream (test_random_specs.py)."""

from __future__ import annotations

import pytest

import attndsl

from .conftest import refused_at

STACK = """attention a {{
    d_model = 16
    heads = 2
    mask = causal
}}
transformer t {{
    attention = a
    layers = 1
    ffn = gelu(8)
    norm = layernorm(post)
{extra}}}
"""


@pytest.mark.parametrize(("extra", "words", "line"), [
    ("    head_transform = dense(norm = layernorm)\n", "`head_transform` needs `vocab`", 11),
    ("    vocab = 9\n    head_transform = dense(norm = layernorm, activation = relu2)\n",
     "activation", 12),
    ("    vocab = 9\n    head_transform = dense(activation = gelu)\n", "norm", 12),
    ("    vocab = 9\n    head_transform = swiglu(8)\n", "a head transform", 12),
])
def test_a_bad_head_transform_is_located(extra, words, line) -> None:
    assert refused_at(STACK.format(extra=extra), words) == line


def test_its_tensors_follow_the_final_norm() -> None:
    """The dense layer (its bias with `bias = true`, the default) and the norm, after the
    stack's last tensors and before the LM head's."""
    layer = attndsl.loads(STACK.format(extra="    vocab = 9\n    head_transform = dense(norm = "
                                             "layernorm(eps = 1e-12), activation = relu)\n"))["t"]
    names = [w.name for w in layer.graph().weights]
    tail = names[names.index("head_transform.dense.weight"):]
    assert tail == ["head_transform.dense.weight", "head_transform.dense.bias",
                    "head_transform.norm.weight", "head_transform.norm.bias",
                    "lm_head.weight"]


@pytest.mark.parametrize("head", ["BertLMHeadModel", "BertForMaskedLM"])
def test_an_untied_bert_reads_its_decoders_own_bias(tmp_path, head: str) -> None:
    """With tie_word_embeddings false transformers adds cls.predictions.decoder.bias, which is
    then not cls.predictions.bias (tied to it otherwise, and saved alone): the logits of a
    BERT decoder, and of a masked LM imported with `--head lm`, are transformers'."""
    import numpy as np
    import onnxruntime as ort
    import torch

    tf = pytest.importorskip("transformers")
    from attndsl.cli import main

    from .test_hf_families import redraw

    config = tf.BertConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=40,
                           num_attention_heads=4, vocab_size=61, pad_token_id=0,
                           is_decoder=head == "BertLMHeadModel", tie_word_embeddings=False)
    model = getattr(tf, head)(config).eval()
    redraw(model, 11, unit_offset=False)
    model.save_pretrained(tmp_path / "hf")
    assert main(["import", str(tmp_path / "hf"), "-o", str(tmp_path / "m.attn"),
                 "--head", "lm", "--padding", "none"]) == 0
    data = attndsl.load(tmp_path / "m.attn")["bert"].onnx_bytes(weights=tmp_path / "hf")
    ids = np.array([[5, 7, 9, 11, 2, 3, 4, 60, 1, 0]], dtype=np.int64)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids})[0]
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
