"""Inkling (`inkling_text`) imported as a language model and generating: relative logits, the
full layers' logarithmic scaling, residual convolutions (their last inputs carried when
decoding), a dense layer and mixtures with sink experts. Its checkpoint's stack is held to
transformers in tests/test_hf_families.py; here the decoding model and `attndsl generate`.
onnxruntime-genai binds a key and a value cache (or a kernel's states) per layer, not a
convolution's inputs beside them: the genai export refuses it by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as tf

from attndsl.cli import main

from .conftest import refused_at
from .test_generation import NEW, PROMPTS, VOCAB, generates_as, refused_by_genai_then_decoding
from .test_hf_families import redraw
from .test_random_specs import check_stream


def _model(floor: int):
    config = tf.InklingTextConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4,
        swa_num_key_value_heads=1, swa_head_dim=8, d_rel=3, rel_extent=9,
        sliding_window_size=5, log_scaling_n_floor=floor, log_scaling_alpha=0.3,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=2, route_scale=2.0,
        local_layer_ids=[0, 1], mlp_layer_types=["dense", "sparse", "sparse"],
        vocab_size=VOCAB, bos_token_id=1, eos_token_id=2)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    return model


def _decoder(model, tmp_path: Path, target: str, capsys) -> Path:
    """The checkpoint imported, the genai export refused naming the convolutions' states,
    and the decoding model for `target`."""
    return refused_by_genai_then_decoding(model, tmp_path, target, capsys, why="a residual "
                                          "convolution's last inputs") / "inkling.decode.onnx"


@pytest.mark.parametrize("target", ["ort-cpu", "portable"])
def test_inkling_generates_as_transformers(tmp_path: Path, target: str, capsys) -> None:
    """`attndsl generate` gives transformers' greedy tokens for a left-padded batch, and one
    call of the decoding model its logits, its full layer's scaling from position 64 on
    (beyond these prompts: below, where it applies)."""
    model = _model(64)
    generates_as(model, _decoder(model, tmp_path, target, capsys), capsys)


def test_inkling_scales_logits_by_position_as_transformers(tmp_path: Path, capsys) -> None:
    """With the logarithmic scaling from position 2 on, each prompt alone: attndsl's tokens
    are transformers'. (For a left-padded row transformers scales by the row's index, its
    padding counted; attndsl by the token's position, as for an unpadded row: docs.)"""
    model = _model(2)
    decoder = _decoder(model, tmp_path, "ort-cpu", capsys)
    for prompt in PROMPTS:
        with torch.no_grad():
            want = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=NEW,
                                  do_sample=False, pad_token_id=0, eos_token_id=None)
        capsys.readouterr()
        assert main(["generate", str(decoder), "--max-new", str(NEW), "--json",
                     "--prompt-ids", ",".join(map(str, prompt))]) == 0
        got = json.loads(capsys.readouterr().out)["tokens"]
        assert got == [want[0, len(prompt):].tolist()]


def test_random_specs_with_sink_experts_match_the_reference() -> None:
    """Sink experts (`sink_experts`: Inkling's shared experts, scored by the router beside the
    routed ones), drawn from their own generator stream: a sigmoid router choosing by score
    plus a selection bias (1197), a softmax router in a language model (128), the gate on
    the experts' input (1021); 128 decoding as one pass."""
    check_stream(((1197, ("sink_experts", "router = sigmoid", "selection_bias = true")),
                  (128, ("sink_experts", "vocab")), (1021, ("sink_experts", "gate = input"))),
                 portable=1197, decoding=(128, "sink_experts"))


@pytest.mark.parametrize("args, words", [
    ("zero_experts = 1, sink_experts = 1", "identity experts"),
    ("groups = 2, sink_experts = 1", "groups of experts"),
    ("sink_experts = -1", "sink_experts"),
])
def test_sink_experts_are_refused_where_they_cannot_apply(args: str, words: str) -> None:
    text = ("attention a {\n    d_model = 16\n    heads = 2\n}\ntransformer t {\n    attention "
            "= a\n    layers = 1\n    norm = rmsnorm(pre)\n    ffn = moe(experts = 4, top_k = 2, "
            f"expert = swiglu(8), {args})\n}}\n")
    assert refused_at(text, words) == 9  # the `ffn` line


def test_inkling_config_spellings_are_read_as_transformers_reads_them(tmp_path: Path) -> None:
    """A checkpoint's config.json as Inkling's may write it: its attribute_map's aliases
    (sconv_kernel_size, sliding_window, num_local_experts), layer kinds from local_layer_ids,
    the first dense_mlp_idx layers dense with dense_intermediate_size (intermediate_size then
    the experts' width), no layer_types or mlp_layer_types: the logits are transformers'."""
    import numpy as np
    import onnxruntime as ort

    import attndsl

    config = tf.InklingTextConfig(
        hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=1, swa_head_dim=8,
        d_rel=3, rel_extent=9, sliding_window=6, sconv_kernel_size=3, intermediate_size=96,
        vocab_size=VOCAB, local_layer_ids=[0], num_local_experts=4, num_experts_per_tok=2,
        dense_mlp_idx=1, dense_intermediate_size=40)
    assert config.layer_types == ["hybrid_sliding", "hybrid", "hybrid"]
    assert (config.intermediate_size, config.moe_intermediate_size) == (40, 96)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 5, unit_offset=False)
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    for key in ("layer_types", "mlp_layer_types", "conv_kernel_size", "sliding_window_size",
                "n_routed_experts", "intermediate_size", "moe_intermediate_size"):
        saved.pop(key)
    saved |= {"sconv_kernel_size": 3, "sliding_window": 6, "num_local_experts": 4,
              "local_layer_ids": [0], "dense_mlp_idx": 1, "dense_intermediate_size": 40,
              "intermediate_size": 96}
    (folder / "config.json").write_text(json.dumps(saved))
    spec = tmp_path / "inkling.attn"
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    lm = attndsl.load(spec)["inkling"]
    session = ort.InferenceSession(lm.onnx_bytes(target="ort-cpu", weights=folder),
                                   providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(2).integers(1, VOCAB, size=(2, 11)).astype(np.int64)
    got = session.run(None, {"input_ids": ids})[0]
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))
