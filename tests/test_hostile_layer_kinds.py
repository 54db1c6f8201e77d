"""Hostile checkpoints, round 2 (issue 39, item 6): a config whose `layer_types` holds a layer
kind the family's reader does not import, or one only other model types of transformers have,
is told that attndsl does not import that kind yet (no IndexError, no "fix the field"); a kind
no one knows is a field to fix."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import transformers as tf

from attndsl.cli import main
from attndsl.hf_fields import TRANSFORMERS_LAYER_TYPES

_LLAMA = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}



_READERS = {"llama": tf.LlamaConfig, "olmo2": tf.Olmo2Config, "granite": tf.GraniteConfig,
            "gemma2": tf.Gemma2Config, "gemma3_text": tf.Gemma3TextConfig,
            "smollm3": tf.SmolLM3Config, "qwen2_moe": tf.Qwen2MoeConfig,
            "gpt_oss": tf.GptOssConfig, "diffllama": tf.DiffLlamaConfig,
            "llama4_text": tf.Llama4TextConfig, "mistral": tf.MistralConfig,
            "qwen2": tf.Qwen2Config, "qwen3": tf.Qwen3Config, "qwen3_moe": tf.Qwen3MoeConfig,
            "mixtral": tf.MixtralConfig, "phi3": tf.Phi3Config, "cohere2": tf.Cohere2Config,
            "qwen3_next": tf.Qwen3NextConfig}


def _write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, default=str))
    return folder


# the kinds a family's layers have: no item to skip (issue 39, item 16's rule)
_OWN_KINDS = {"llama4_text": "chunked_attention", "qwen3_next": "linear_attention"}


@pytest.mark.parametrize(("family", "kind"), [
    (family, kind) for family in _READERS
    for kind in ("linear_attention", "chunked_attention", "indexed_attention", "conv")
    if _OWN_KINDS.get(family) != kind])
def test_a_layer_kind_a_reader_does_not_import_is_named(tmp_path, capsys, family,
                                                        kind) -> None:
    """linear_attention in a llama, olmo2, granite, gemma2, gemma3_text, smollm3, qwen2_moe,
    gpt_oss, diffllama or llama4_text config ended in IndexError (internal error, exit 3);
    kinds transformers knows were told to "fix the field in config.json"."""
    config = _READERS[family](hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2,
                              head_dim=16).to_dict()
    config["layer_types"] = ["full_attention", kind]
    folder = _write_config(tmp_path / family, config)
    assert main(["import", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"does not import layer kind `{kind}`" in err, err
    assert "internal error" not in err and "fix the field" not in err, err


# model types of transformers 5.23 whose layer_types hold kinds attndsl does not import
_OTHERS = {"zaya": "hybrid", "deepseek_v4": "compressed_sparse_attention",
           "qwen4_exp": "indexed_attention"}


@pytest.mark.parametrize("model_type", list(_OTHERS))
def test_a_model_of_layer_kinds_attndsl_does_not_import_says_so(tmp_path, capsys,
                                                                model_type) -> None:
    from transformers import CONFIG_MAPPING

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = CONFIG_MAPPING[model_type]().to_dict()
    kinds = config.get("layer_types") or config["text_config"]["layer_types"]
    assert _OTHERS[model_type] in kinds  # valid for transformers
    assert main(["import", str(_write_config(tmp_path, config))]) == 2
    err = capsys.readouterr().err
    assert f"`{_OTHERS[model_type]}`" in err and "which attndsl does not import yet" in err, err
    assert "fix the field" not in err, err


def test_a_layer_kind_no_one_knows_is_a_field_to_fix(tmp_path, capsys) -> None:
    config = tf.LlamaConfig(**_LLAMA).to_dict()
    config["layer_types"] = ["full_attention", "ful_attention"]
    assert main(["import", str(_write_config(tmp_path, config))]) == 2
    err = capsys.readouterr().err
    assert "`layer_types` = [\"full_attention\", \"ful_attention\"]: expected a list of " \
        "layer kinds" in err and "fix the field in config.json" in err, err


def test_the_layer_kinds_are_transformers_own() -> None:
    """TRANSFORMERS_LAYER_TYPES holds every kind transformers accepts (configuration_utils'
    ALLOWED_LAYER_TYPES) and, beyond them, exactly the legacy names it remaps: a kind added to
    transformers is not told to "fix the field", and no made-up kind is taken."""
    from transformers import configuration_utils as cu

    allowed = set(cu.ALLOWED_LAYER_TYPES)
    assert allowed <= set(TRANSFORMERS_LAYER_TYPES), allowed - set(TRANSFORMERS_LAYER_TYPES)
    legacy = set(getattr(cu, "_LEGACY_LAYER_TYPE_REMAP", {}))
    assert set(TRANSFORMERS_LAYER_TYPES) - allowed == legacy
