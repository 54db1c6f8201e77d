"""Kimi Linear (`kimi_linear`) and Ling 3 (`bailing_hybrid`) imported as language models and
generating: Kimi delta attention layers (their state and convolution window carried when
decoding) and latent attention layers (one latent row cached per token; Ling 3's with RoPE and
a sigmoid gate per head), DeepSeek-V3's mixture with a dense first layer. Their stacks are held
to transformers in tests/test_hf_families.py; here the decoding model and `attndsl generate`.
onnxruntime-genai keeps a key and a value cache per layer: the genai export refuses latent
attention by name."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest
import transformers as tf

import attndsl

from .test_generation import NEW, PROMPTS, VOCAB, generates_as, refused_by_genai_then_decoding
from .test_hf_families import redraw

SIZES = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
             kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
             vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _kimi():
    return tf.KimiLinearConfig(
        num_experts=6, num_experts_per_token=2, num_expert_group=2, topk_group=1,
        num_shared_experts=1, first_k_dense_replace=1,
        linear_attn_config={"head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 3,
                            "kda_layers": [1, 3], "full_attn_layers": [2]}, **SIZES)


def _ling():
    return tf.BailingHybridConfig(
        head_dim=8, num_experts=6, num_experts_per_tok=2, n_group=2, topk_group=1,
        layer_group_size=2, first_k_dense_replace=1, short_conv_kernel_size=4,
        rope_theta=10000.0, **SIZES)


@pytest.mark.parametrize(("make", "target"), [(_kimi, "ort-cpu"), (_kimi, "portable"),
                                              (_ling, "ort-cpu")],
                         ids=["kimi_linear-ort-cpu", "kimi_linear-portable",
                              "bailing_hybrid-ort-cpu"])
def test_kda_hybrids_generate_as_transformers(tmp_path: Path, make, target: str,
                                              capsys) -> None:
    """`attndsl generate` gives transformers' greedy tokens for a left-padded batch, and one
    call of the decoding model its logits; a KDA layer caches its state (heads x d_k x d_v)
    and convolution window, a latent layer one latent row per token."""
    model = tf.AutoModelForCausalLM.from_config(make(), attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    out = refused_by_genai_then_decoding(model, tmp_path, target, capsys,
                                         why="caches one latent row per token")
    decoder = next(out.glob("*.decode.onnx"))
    caches = {i.name: i.shape for i in ort.InferenceSession(str(decoder)).get_inputs()
              if i.name.startswith("past_key_values.")}
    assert caches["past_key_values.0.state"] == ["batch", 4, 8, 8]
    assert caches["past_key_values.0.conv"][2] == 3 * 4 * 8
    assert caches["past_key_values.1.key"] == ["batch", 1, "past_length", 16 + 4]
    generates_as(model, decoder, capsys)


def _minimax(tmp_path: Path):
    """A tiny MiniMax-Text-01 (two lightning layers around a softmax layer), its weights
    redrawn, saved under tmp_path / "hf"; the model and transformers' greedy tokens for each
    of PROMPTS alone."""
    import torch

    config = tf.MiniMaxConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, block_size=4,
        layer_types=["linear_attention", "full_attention", "linear_attention"],
        **{f"{k}_{p}_factor": v for k in ("full_attn", "linear_attn", "mlp")
           for p, v in (("alpha", 1.5), ("beta", 0.9))},
        vocab_size=VOCAB, bos_token_id=1, eos_token_id=2)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    model.save_pretrained(tmp_path / "hf")
    want = []
    for prompt in PROMPTS:
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=NEW,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
        want.append(out[0, len(prompt):].tolist())
    assert len({t for row in want for t in row}) >= 4, "a degenerate model proves little"
    return model, want


def test_the_minimax_genai_export_is_refused_by_name(tmp_path: Path, capsys) -> None:
    """onnxruntime-genai's RecurrentState asks each recurrent layer for a convolution window
    beside its state (0.18: "Model input was not found: past_key_values.0.conv"); a lightning
    layer carries its state alone: the genai export refuses it, writing nothing."""
    from attndsl.cli import main

    _minimax(tmp_path)
    spec, out = tmp_path / "m.attn", tmp_path / "out"
    assert main(["import", str(tmp_path / "hf"), "-o", str(spec)]) == 0
    capsys.readouterr()
    assert main(["compile", str(spec), "--export", "genai", "--weights", str(tmp_path / "hf"),
                 "-o", str(out)]) == 2
    assert "carries a state alone" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("target", ["ort-cpu", "portable"])
def test_minimax_generates_as_transformers(tmp_path: Path, target: str, capsys) -> None:
    """MiniMax-Text-01 (lightning attention layers, rates falling with the depth, a softmax
    layer, Mixtral's experts, the normed input as the residual): `attndsl generate` on a
    left-padded batch gives, for each prompt, transformers' greedy tokens for that prompt
    alone (transformers' own batched decoding of a left-padded MiniMax row differs from its
    forward over the row alone: docs/CHECKPOINTS.md); a lightning layer caches its state
    alone."""
    import json

    from attndsl.cli import main

    _, want = _minimax(tmp_path)
    folder, spec, out = tmp_path / "hf", tmp_path / "m.attn", tmp_path / "out"
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    assert main(["compile", str(spec), "--export", "onnx", "--decode", "--weights",
                 str(folder), "-o", str(out), "--target", target]) == 0
    decoder = next(out.glob("*.decode.onnx"))
    caches = {i.name: i.shape for i in ort.InferenceSession(str(decoder)).get_inputs()
              if i.name.startswith("past_key_values.")}
    assert caches["past_key_values.0.state"] == ["batch", 4, 16, 16]
    assert "past_key_values.0.key" not in caches and "past_key_values.0.conv" not in caches
    assert caches["past_key_values.1.key"] == ["batch", 2, "past_length", 16]
    argv = ["generate", str(decoder), "--max-new", str(NEW), "--json"]
    for prompt in PROMPTS:
        argv += ["--prompt-ids", ",".join(map(str, prompt))]
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == want


@pytest.mark.parametrize(("make", "field", "value", "says"), [
    (_ling, "layer_group_size", 0, "`layer_group_size` = 0"),
    (_ling, "kda_lower_bound", 1.0, "a log decay below 0"),
    (_kimi, "linear_attn_config", {"head_dim": "x", "full_attn_layers": 2, "kda_layers": [1]},
     "its `head_dim` must be an integer >= 1"),
])
def test_kda_configs_out_of_range_are_refused_by_name(tmp_path: Path, make, field, value,
                                                      says) -> None:
    import json

    from attndsl.errors import AttnError
    from attndsl.hf_import import import_config

    cfg = make().to_dict() | {field: value}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(AttnError) as caught:
        import_config(tmp_path)
    assert says in caught.value.render(), caught.value.render()


def test_configs_are_read_as_their_config_classes_read_them(tmp_path: Path) -> None:
    """Ling 3 ignores q_lora_rank (one q_proj); Kimi Linear's scale is qk_head_dim ** -0.5
    whatever its rope parameters; MiniMax's default RoPE base is 1e6, `num_experts` names its
    experts' count, its rotary embedding turns the whole head, its attention has no biases."""
    import json

    from attndsl.hf_import import import_config

    def imported(cfg: dict) -> str:
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        return import_config(tmp_path)

    ling = _ling().to_dict() | {"q_lora_rank": 8}
    assert "q_rank = none" in imported(ling)
    kimi = _kimi().to_dict() | {"rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                                    "mscale_all_dim": 1.0, "rope_theta": 1e4,
                                                    "original_max_position_embeddings": 8}}
    assert "\n    scale =" not in imported(kimi)
    minimax = {k: v for k, v in tf.MiniMaxConfig(num_hidden_layers=2).to_dict().items()
               if k not in ("rope_parameters", "rope_theta", "num_local_experts")}
    text = imported(minimax | {"num_experts": 4, "attention_bias": True,
                               "partial_rotary_factor": 0.5})
    assert "rope(theta = 1000000.0)" in text and "experts = 4," in text, text
    assert "bias = true" not in text


def test_kimi_layer_kinds_derived_from_linear_attn_config_are_refused_by_that_field(
        tmp_path: Path) -> None:
    """Without layer_types, Kimi Linear's kinds come from linear_attn_config's 1-based
    full_attn_layers and kda_layers: a layer neither names is refused naming that field."""
    import json

    from attndsl.hf_import import import_config

    _kimi().save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.pop("layer_types", None)
    cfg["linear_attn_config"]["kda_layers"] = [1]  # layer 3 has no kind
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(attndsl.SpecError) as caught:
        import_config(tmp_path, "right", "none")
    assert "`linear_attn_config` =" in str(caught.value) and "3 layers" in str(caught.value)
