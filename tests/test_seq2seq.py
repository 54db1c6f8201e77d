"""Encoder-decoder models (`encoder = e` on a decoder stack, docs/LANGUAGE.md): the encoder as
its model runs it (source ids through the shared embedding), greedy generation against the
NumPy reference's greedy loop, the command line's compile and generate, and the checks."""

from __future__ import annotations

import numpy as np
import pytest

import attndsl
from attndsl.backends import reference
from attndsl.cli import main
from attndsl.errors import SpecError
from attndsl.ir import build
from attndsl.seq2seq import encoder_weights
from attndsl.spec import encoder_of
from attndsl.weight_table import weight_table

MODEL = """
attention enc_self {
    d_model = 32
    heads = 4
    position = sinusoidal
    mask = padding
}
transformer enc {
    attention = enc_self
    layers = 2
    ffn = relu(48)
    norm = layernorm(pre)
}
attention dec_self {
    d_model = 32
    heads = 4
    kv_heads = 2
    position = sinusoidal
    mask = causal
}
attention dec_cross {
    d_model = 32
    heads = 4
    kind = cross
    memory_dim = 32
    mask = padding
}
transformer s2s {
    attention = dec_self
    cross = dec_cross
    encoder = enc
    decoder_start = 2
    layers = 2
    ffn = gelu(48)
    norm = layernorm(pre)
    vocab = 23
    embedding_scale = sqrt(32)
}
"""


def _weights(spec, seed: int) -> dict[str, np.ndarray]:
    """Weights large enough that greedy tokens vary from step to step (norm weights near 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for w in weight_table(spec):
        scale = 1.0 if w.init in ("embedding", "normal") else 0.1 if "bias" in w.init \
            else 1.5 / np.sqrt(max(w.fan_in, 1))
        out[w.name] = (rng.standard_normal(w.shape) * scale).astype(np.float32)
        if w.init in ("norm_weight",):
            out[w.name] = (1 + 0.1 * rng.standard_normal(w.shape)).astype(np.float32)
    return out


def _greedy_reference(spec, weights, sources, max_new):
    """The reference's greedy loop: the encoder's one pass over each source alone, then the
    decoder's one pass over the start token and the tokens so far, its last row's argmax."""
    encoder, decoder = build(encoder_of(spec)), build(spec)
    out = []
    for source in sources:
        ids = np.array([source], np.int64)
        memory = reference.run(encoder, {"input_ids": ids, "key_lengths": np.array([len(source)])},
                               encoder_weights(weights))
        tokens = [spec.decoder_start]
        for _ in range(max_new):
            logits = reference.run(decoder, {"input_ids": np.array([tokens], np.int64),
                                             "memory": memory,
                                             "memory_lengths": np.array([len(source)])}, weights)
            tokens.append(int(logits[0, -1].argmax()))
        out.append(tokens[1:])
    return out


def test_generation_gives_the_reference_greedy_tokens() -> None:
    """A batch of sources of different lengths (right-padded for the encoder, their padding
    hidden from both the encoder and the cross attention) gives, row by row, the tokens the
    reference's greedy loop gives each source alone."""
    layer = attndsl.loads(MODEL)["s2s"]
    weights = _weights(layer.spec, 4)
    sources = [[5, 6, 7, 8, 9, 10, 11], [12, 3], [20]]
    want = _greedy_reference(layer.spec, weights, sources, 6)
    assert len({tuple(t) for t in want}) > 1 and any(len(set(t)) > 1 for t in want)
    got = layer.generate(sources, max_new=6, weights=weights)
    assert got.tokens == want


def test_the_encoder_is_the_models_stack_over_its_shared_embedding() -> None:
    """The encoder's one pass equals its stack's (x = embed_tokens[ids] * embedding_scale)
    over the same weights: the embedding is the decoder's, the blocks the model's
    `encoder.*`."""
    layer = attndsl.loads(MODEL)["s2s"]
    weights = _weights(layer.spec, 5)
    assert "encoder.layers.1.self_attn.q_proj.weight" in weights
    assert not any(k.startswith("encoder.embed") for k in weights)
    ids = np.array([[4, 9, 1, 22], [7, 7, 0, 0]])
    lengths = np.array([4, 2])
    got = reference.run(layer.encoder().graph(), {"input_ids": ids, "key_lengths": lengths},
                        encoder_weights(weights))
    stack = attndsl.loads(MODEL)["enc"]
    x = weights["embed_tokens.weight"][ids].astype(np.float64) * np.sqrt(32)
    own = {k[len("encoder."):]: v for k, v in weights.items() if k.startswith("encoder.")}
    want = reference.run(stack.graph(), {"x": x, "key_lengths": lengths}, own)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_compile_writes_the_encoder_and_generate_reads_it(tmp_path, capsys) -> None:
    """`compile --decode` writes the decoding decoder and the encoder beside it; `generate`
    finds the encoder there and starts from the spec's decoder_start: the API's tokens."""
    spec = tmp_path / "s2s.attn"
    spec.write_text(MODEL)
    assert main(["compile", str(spec), "--name", "s2s", "--export", "onnx", "--decode", "-o",
                 str(tmp_path), "--seed", "3"]) == 0
    assert (tmp_path / "s2s.encoder.onnx").is_file()
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "s2s.decode.onnx"), "--prompt-ids", "5,6,7",
                 "--prompt-ids", "9", "--max-new", "5", "-q"]) == 0
    printed = capsys.readouterr().out.split()
    want = attndsl.loads(MODEL)["s2s"].generate([[5, 6, 7], [9]], max_new=5, seed=3).tokens
    assert printed == [",".join(map(str, t)) for t in want]
    (tmp_path / "s2s.encoder.onnx").unlink()
    assert main(["generate", str(tmp_path / "s2s.decode.onnx"), "--prompt-ids", "5"]) == 2
    assert "s2s.encoder.onnx: no such file" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    ("    cross = dec_cross\n", "it needs `cross`"),
    ("    decoder_start = 2\n", None),
    ("    decoder_start = 2\n|    decoder_start = 23\n", "decoder_start must be a token id below"),
    ("    ffn = relu(48)\n|    ffn = relu(48)\n    vocab = 9\n", None),  # (its own table)
    ("    ffn = relu(48)\n|    ffn = relu(48)\n    vocab = 9\n    tie_embeddings = true\n",
     "is an encoder"),
    ("    memory_dim = 32\n|    memory_dim = 16\n", "must be memory_dim"),
    ("    ffn = relu(48)\n|    ffn = relu(48)\n    embedding_norm = rmsnorm\n", None),
    ("    mask = padding\n}\ntransformer enc|    mask = padding(side = left)\n}\ntransformer enc",
     "sources are padded on the right"),
    ("    mask = padding\n}\ntransformer enc|    mask = document\n}\ntransformer enc",
     "sources are padded on the right"),
    ("    memory_dim = 32\n    mask = padding\n|    memory_dim = 32\n    mask = document\n",
     "reads no `document` ids yet"),
    ("    decoder_start = 2\n|    decoder_start = 2\n    encoder_input = states\n", None),
])
def test_an_encoder_decoder_is_checked(change: str, message: str | None) -> None:
    """Each change to the model above: refused with the message, or (None) accepted."""
    old, _, new = change.partition("|")
    text = MODEL.replace(old, new, 1)
    if message is None:
        attndsl.loads(text)
        return
    with pytest.raises(SpecError) as err:
        attndsl.loads(text)
    assert message in str(err.value)


def test_an_encoder_is_defined_above_its_decoder() -> None:
    head, _, tail = MODEL.partition("attention dec_self")
    enc = head[head.index("transformer enc"):]
    text = head.replace(enc, "") + "attention dec_self" + tail + enc
    with pytest.raises(SpecError) as err:
        attndsl.loads(text)
    assert "no transformer named `enc` above this one" in str(err.value)


def test_generation_refuses_what_it_cannot_do(tmp_path, capsys) -> None:
    """Sources of different lengths for an encoder whose mask hides no padding; `generate`
    of a decoder over memory rows without an encoder; each a usage error saying why."""
    from attndsl.errors import UsageError

    unpadded = attndsl.loads(MODEL.replace("    mask = padding\n}\ntransformer enc",
                                           "    mask = full\n}\ntransformer enc"))["s2s"]
    assert len(unpadded.generate([[5, 6], [7, 8]], max_new=2).tokens) == 2  # (equal lengths)
    with pytest.raises(UsageError, match="would attend its padding"):
        unpadded.generate([[5, 6, 7], [8]], max_new=2)
    spec = tmp_path / "dec.attn"
    spec.write_text(MODEL.replace("    encoder = enc\n    decoder_start = 2\n", ""))
    assert main(["compile", str(spec), "--name", "s2s", "--export", "onnx", "--decode", "-o",
                 str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "s2s.decode.onnx"), "--prompt-ids", "5"]) == 2
    assert "has no `encoder`" in capsys.readouterr().err


def test_run_feeds_a_decoder_stack_its_tokens_lengths(tmp_path) -> None:
    """`attndsl run`'s random inputs: a decoder stack's key_lengths count its tokens (every
    one real), memory_lengths its memory rows; a lone cross attention's key_lengths its
    memory rows."""
    from attndsl.backends import runtime
    from attndsl.run import random_inputs

    program = attndsl.loads(MODEL.replace("    mask = causal\n", "    mask = causal & padding\n"))
    stack = runtime.make_session(program["s2s"].onnx_bytes(), "cpu")
    feed = random_inputs(stack, 2, 16, 5)
    assert feed["key_lengths"].tolist() == [16, 16] and feed["memory_lengths"].tolist() == [5, 5]
    lone = runtime.make_session(program["dec_cross"].onnx_bytes(), "cpu")
    assert random_inputs(lone, 2, 16, 5)["key_lengths"].tolist() == [5, 5]


def test_torch_export_writes_the_encoder_with_the_models_weights(tmp_path, capsys) -> None:
    """`compile --export torch` of a model writes its encoder's program beside the decoder's,
    holding the model's encoder.* and shared embedding: the program computes what the
    reference computes of the encoder with the model's seeded weights."""
    import torch

    from attndsl.weight_table import seeded_weights

    spec = tmp_path / "s2s.attn"
    spec.write_text(MODEL)
    assert main(["compile", str(spec), "--name", "s2s", "--export", "torch", "-o",
                 str(tmp_path), "--seed", "4"]) == 0
    assert "s2s.encoder.pt2" in capsys.readouterr().out
    program = torch.export.load(tmp_path / "s2s.encoder.pt2").module()
    ids, lengths = np.array([[3, 9, 4], [5, 6, 0]]), np.array([3, 2])
    got = program(torch.from_numpy(ids), torch.from_numpy(lengths)).detach().numpy()
    layer = attndsl.loads(MODEL)["s2s"]
    want = reference.run(layer.encoder().graph(), {"input_ids": ids, "key_lengths": lengths},
                         encoder_weights(seeded_weights(weight_table(layer.spec), 4)))
    assert np.abs(got - want).max() <= 1e-4
