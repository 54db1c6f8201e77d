"""BART and the encoder-decoders built as it is, imported from checkpoints as they are
(`attndsl import` of a tiny model saved by transformers): the encoder's hidden states, the
decoder's logits and greedy generation exact against transformers, at B = 2 with the source
padded."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
import torch

import attndsl

tf = pytest.importorskip("transformers")

MODELS = {  # model type -> (config class, model class)
    "bart": ("BartConfig", "BartForConditionalGeneration"),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration"),
    "marian": ("MarianConfig", "MarianMTModel"),
    "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration"),
    "blenderbot": ("BlenderbotConfig", "BlenderbotForConditionalGeneration"),
    "m2m_100": ("M2M100Config", "M2M100ForConditionalGeneration"),
}
PAD, EOS = 1, 2
SOURCES = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]


def _model(kind: str, path, **changes) -> torch.nn.Module:
    """A tiny model of `kind` with every trained tensor redrawn (norms around 1, the logits'
    bias too), saved to `path`; Marian's and Pegasus's position tables stay the sinusoid they
    are built as (a checkpoint's)."""
    config, model = (getattr(tf, n) for n in MODELS[kind])
    cfg = config(vocab_size=50, d_model=16, encoder_layers=2, decoder_layers=2,
                 encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=24,
                 decoder_ffn_dim=40, max_position_embeddings=64, pad_token_id=PAD,
                 bos_token_id=0, eos_token_id=EOS, decoder_start_token_id=EOS,
                 forced_eos_token_id=None, scale_embedding=kind != "pegasus", **changes)
    torch.manual_seed(len(kind))
    m = model(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "embed_positions" in name and kind in ("marian", "pegasus"):
                continue
            norm = "norm" in name and name.endswith("weight")
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() > 1 else 0.2) + (1.0 if norm else 0))
        for name, b in m.named_buffers():
            if name.endswith("final_logits_bias"):
                b.copy_(torch.randn_like(b))
    m.save_pretrained(path)
    return m


def _session(model) -> ort.InferenceSession:
    return ort.InferenceSession(model.bytes(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("kind", list(MODELS))
def test_an_imported_encoder_decoder_is_transformers_model(tmp_path, kind: str) -> None:
    """The import's encoder (hidden states of the real source rows), decoder (logits over a
    target) and greedy tokens (against `generate`, no logits processor, stopped at eos) on
    ort-cpu, from the checkpoint folder."""
    _compare(_model(kind, tmp_path), tmp_path, kind)


def test_marian_with_a_table_per_stack(tmp_path) -> None:
    """Marian's `share_encoder_decoder_embeddings = false`: the encoder embeds the source
    with a table of its own (the encoder's `vocab`), the decoder its 40-token vocabulary
    (`decoder_vocab_size`), its head tied to its own table."""
    hf = _model("marian", tmp_path, share_encoder_decoder_embeddings=False,
                decoder_vocab_size=40)
    layer = _compare(hf, tmp_path, "marian")
    assert (layer.spec.vocab, layer.spec.encoder.vocab) == (40, 50)


def _compare(hf, tmp_path, kind: str):
    """The import of the checkpoint saved at `tmp_path` against `hf`; the imported layer."""
    program = attndsl.load(tmp_path)
    layer = program[list(program)[-1]]
    assert layer.spec.encoder is not None and layer.spec.decoder_start == EOS
    n = max(map(len, SOURCES))
    src = torch.tensor([s + [PAD] * (n - len(s)) for s in SOURCES])
    mask = (torch.arange(n)[None] < torch.tensor([len(s) for s in SOURCES])[:, None]).long()
    tgt = torch.tensor([[EOS, 20, 21, 22, 23], [EOS, 24, 25, 26, 27]])
    with torch.no_grad():
        want = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits.numpy()
        hidden = hf.get_encoder()(input_ids=src, attention_mask=mask).last_hidden_state.numpy()
    lengths = mask.sum(1).numpy()
    memory = _session(layer.encoder().onnx_model(weights=tmp_path)).run(
        None, {"input_ids": src.numpy(), "key_lengths": lengths})[0]
    real = mask.numpy().astype(bool)
    scale = max(1.0, float(np.abs(hidden).max()))
    assert np.abs(memory - hidden)[real].max() <= 1e-5 * scale
    logits = _session(layer.onnx_model(weights=tmp_path)).run(
        None, {"input_ids": tgt.numpy(), "memory": memory, "memory_lengths": lengths})[0]
    assert np.abs(logits - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))
    with torch.no_grad():
        greedy = hf.generate(src, attention_mask=mask, max_new_tokens=8, do_sample=False,
                             num_beams=1, no_repeat_ngram_size=0,
                             encoder_no_repeat_ngram_size=0)[:, 1:].tolist()
    ours = layer.generate(SOURCES, max_new=8, weights=tmp_path, eos=(EOS,)).tokens
    for row, tokens in zip(greedy, ours, strict=True):
        ended = row.index(EOS) + 1 if EOS in row else len(row)
        assert tokens == row[:ended], (kind, greedy, ours)
    return layer


def test_start_and_padding_tokens_are_transformers_defaults() -> None:
    """The import's start, bos and pad tokens where a config.json leaves them out (`TOKENS`)
    are the config classes' defaults."""
    from attndsl.families.bart import TOKENS

    for kind, (config, _) in MODELS.items():
        fields = {f.name: f.default for f in dataclasses.fields(getattr(tf, config))}
        want = tuple(fields.get(k) for k in ("decoder_start_token_id", "bos_token_id",
                                             "pad_token_id"))
        assert TOKENS[kind] == want, kind


@pytest.mark.parametrize("tied", [True, False])
def test_t5_imports_whole_with_its_decoder(tmp_path, tied: bool) -> None:
    """T5 (T5ForConditionalGeneration): the encoder (relative buckets both ways), the decoder
    of its own depth (causal buckets, cross attention without them), no q.k scaling, gated
    GELU; the head tied and the decoder's output times d_model^-0.5, or (T5 v1.1's
    `tie_word_embeddings = false`) a head of its own, unscaled. transformers' forward of a
    decoder deeper than its encoder fails with its cache: it runs without."""
    cfg = tf.T5Config(vocab_size=50, d_model=16, d_kv=4, d_ff=24, num_layers=2,
                      num_decoder_layers=3, num_heads=4, relative_attention_num_buckets=8,
                      relative_attention_max_distance=20, feed_forward_proj="gated-gelu",
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                      tie_word_embeddings=tied)
    torch.manual_seed(5)
    hf = tf.T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            table = any(k in name for k in ("shared", "embed", "relative"))
            p.copy_(torch.randn_like(p) * (1.0 if table else 1.5 / p.shape[-1] ** 0.5
                                           if p.dim() > 1 else 0.1) + (p.dim() == 1))
        if not tied:  # (a checkpoint's own head: transformers unties it on loading)
            hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight))
    hf.save_pretrained(tmp_path)
    program = attndsl.load(tmp_path)
    layer = program["t5"]
    assert layer.spec.layers == 3 and layer.spec.encoder.layers == 2
    assert layer.spec.tied == tied and (layer.spec.logit_scale == 0.25) == tied
    src = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    mask = (torch.arange(6)[None] < torch.tensor([6, 3])[:, None]).long()
    tgt = torch.tensor([[0, 20, 21, 22], [0, 23, 24, 25]])
    with torch.no_grad():
        want = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt,
                  use_cache=False).logits.numpy()
    lengths = mask.sum(1).numpy()
    memory = _session(layer.encoder().onnx_model(weights=tmp_path)).run(
        None, {"input_ids": src.numpy(), "key_lengths": lengths})[0]
    logits = _session(layer.onnx_model(weights=tmp_path)).run(
        None, {"input_ids": tgt.numpy(), "memory": memory, "memory_lengths": lengths})[0]
    assert np.abs(logits - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))
    with torch.no_grad():
        greedy = hf.generate(src, attention_mask=mask, max_new_tokens=8, do_sample=False,
                             num_beams=1, use_cache=False)[:, 1:].tolist()
    ours = layer.generate([[5, 6, 7, 8, 9, 10], [11, 12, 13]], max_new=8, weights=tmp_path,
                          eos=(1,)).tokens
    for row, tokens in zip(greedy, ours, strict=True):
        ended = row.index(1) + 1 if 1 in row else len(row)
        assert tokens == row[:ended], (greedy, ours)


def test_whisper_imports_its_decoder_and_its_encoder_after_the_stem(tmp_path) -> None:
    """Whisper: the encoder over its convolutional stem's output (`encoder_input = states`:
    the stem stays outside, its output computed here by transformers' own convolutions), the
    decoder over the encoder's output, its greedy tokens those of transformers' forward step
    by step (WhisperForConditionalGeneration's `generate` adds its own prompt tokens and
    suppressions)."""
    cfg = tf.WhisperConfig(vocab_size=50, num_mel_bins=8, d_model=16, encoder_layers=2,
                           decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=40,
                           max_source_positions=10, max_target_positions=32,
                           decoder_start_token_id=3, pad_token_id=1, bos_token_id=1,
                           eos_token_id=2)
    torch.manual_seed(6)
    hf = tf.WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "encoder.embed_positions" in name:  # (the sinusoid it is built with)
                continue
            norm = "norm" in name and name.endswith("weight")
            p.copy_(torch.randn_like(p) * (1.0 if "embed" in name else 1.5 / p.shape[-1] ** 0.5
                                           if p.dim() > 1 else 0.1) + norm)
    hf.save_pretrained(tmp_path)
    layer = attndsl.load(tmp_path)["whisper"]
    assert layer.spec.encoder_input == "states" and "k" not in layer.spec.cross.bias
    features = torch.randn(2, 8, 20)
    conv = hf.model.encoder
    gelu = torch.nn.functional.gelu
    with torch.no_grad():
        stem = gelu(conv.conv2(gelu(conv.conv1(features)))).permute(0, 2, 1).numpy()
        hidden = conv(features).last_hidden_state.numpy()
    memory = _session(layer.encoder().onnx_model(weights=tmp_path)).run(None, {"x": stem})[0]
    assert np.abs(memory - hidden).max() <= 1e-5 * max(1.0, float(np.abs(hidden).max()))
    tokens = [[3], [3]]
    with torch.no_grad():
        for _ in range(6):
            logits = hf(input_features=features, decoder_input_ids=torch.tensor(tokens)).logits
            tokens = [[*t, n] for t, n in zip(tokens, logits[:, -1].argmax(-1).tolist(),
                                              strict=True)]
    ours = _session(layer.onnx_model(weights=tmp_path)).run(
        None, {"input_ids": np.array(tokens)[:, :-1], "memory": memory})[0]
    assert np.abs(ours - logits.numpy()).max() <= 1e-5 * max(1.0, float(logits.abs().max()))
    assert layer.generate(stem, max_new=6, weights=tmp_path).tokens == [t[1:] for t in tokens]


def test_a_t5_config_transformers_4_wrote_keeps_its_own_head(tmp_path) -> None:
    """Flan-T5's and T5 v1.1's config.json (written by transformers 4) says
    `tie_word_embeddings = false` and has no `scale_decoder_outputs`: its head is its own and
    unscaled, as transformers 5.23 reads it."""
    import json

    cfg = tf.T5Config(vocab_size=50, d_model=16, d_kv=4, d_ff=24, num_layers=1, num_heads=2,
                      tie_word_embeddings=False)
    hf = tf.T5ForConditionalGeneration(cfg)
    hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight))
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("scale_decoder_outputs", None)
    config["tie_word_embeddings"] = False
    (tmp_path / "config.json").write_text(json.dumps(config))
    layer = attndsl.load(tmp_path)["t5"]
    assert not layer.spec.tied and layer.spec.logit_scale == 1.0
    assert "lm_head.weight" in layer._weights(0, tmp_path, "float32")


def test_a_checkpoint_keeping_the_shared_embedding_as_the_decoders_reads_it(tmp_path) -> None:
    """A BART checkpoint whose shared embedding is saved as `model.decoder.embed_tokens.weight`
    alone (bart-large-cnn's, as transformers loads it by tying): read as the shared table."""
    from safetensors.numpy import load_file, save_file

    hf = _model("bart", tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["model.decoder.embed_tokens.weight"] = tensors.pop("model.shared.weight")
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    layer = attndsl.load(tmp_path)["bart"]
    ids = np.array([[5, 6, 7]])
    memory = _session(layer.encoder().onnx_model(weights=tmp_path)).run(
        None, {"input_ids": ids, "key_lengths": np.array([3])})[0]
    with torch.no_grad():
        want = hf.get_encoder()(input_ids=torch.tensor(ids)).last_hidden_state.numpy()
    assert np.abs(memory - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))
