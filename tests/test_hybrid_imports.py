"""What the hybrid families' imports read beyond their tiny configs in test_hf_families
(Nemotron-H, OLMo Hybrid): transformers' legacy field names and layer kinds, fields its model
ignores, RoPE where config.json gives no parameters, and a spec of more blocks than the
checkpoint, refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers as tf

import attndsl
from attndsl.errors import SpecError
from attndsl.hf_import import import_config


def _config(tmp_path: Path, cfg: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return import_config(tmp_path)


def _nemotron(**kw) -> dict:
    return tf.NemotronHConfig(
        hidden_size=48, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, mamba_num_heads=6, mamba_head_dim=16, ssm_state_size=8, n_groups=2,
        chunk_size=5, vocab_size=61, layers_block_type=["linear_attention", "mlp",
                                                        "full_attention"], **kw).to_dict()


def test_nemotron_h_reads_the_legacy_mamba_names_over_the_fields(tmp_path) -> None:
    """mamba_n_groups, mamba_d_conv, mamba_chunk_size and mamba_dt_min win where given, as
    NemotronHConfig's __post_init__ reads them (the fields keep their defaults)."""
    cfg = _nemotron()
    cfg |= {"mamba_n_groups": 3, "mamba_d_conv": 2, "mamba_chunk_size": 7, "mamba_dt_min": 0.5}
    assert tf.NemotronHConfig(**{k: v for k, v in cfg.items() if k != "model_type"}
                              ).n_groups == 3
    text = _config(tmp_path, cfg)
    for words in ("groups = 3", "conv = 2", "chunk = 7", "dt_min = 0.5"):
        assert words in text, words


def test_nemotron_h_ties_no_head_and_reads_legacy_layer_kinds(tmp_path) -> None:
    """NemotronHForCausalLM ties nothing (`_tied_weights_keys = {}`), so a config saying
    tie_word_embeddings is read untied; `mamba` and `attention` are transformers' legacy names
    of linear_attention and full_attention."""
    cfg = _nemotron(tie_word_embeddings=True)
    cfg["layers_block_type"] = ["mamba", "mlp", "attention"]
    text = _config(tmp_path, cfg)
    assert "tie_embeddings" not in text
    stack = attndsl.loads(text)["nemotron_h"].spec
    assert [a.kernel.name if a.kernel and hasattr(a.kernel, "name") else "softmax"
            for a in stack.attentions] == ["mamba2", "softmax"]


@pytest.mark.parametrize(("rope", "theta"), [(None, "10000.0"), ("top", "500000.0")])
def test_olmo_hybrid_rotates_without_rope_parameters(tmp_path, rope, theta) -> None:
    """transformers 5.23 builds OLMo Hybrid's RoPE whatever config.json says: rope_parameters
    null means theta 10000, an old top-level rope_theta is read into them."""
    cfg = tf.OlmoHybridConfig(hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, vocab_size=61).to_dict()
    cfg["rope_parameters"] = None
    if rope == "top":
        del cfg["rope_parameters"]
        cfg["rope_theta"] = 5e5
    assert f"rope(theta = {theta})" in _config(tmp_path, cfg)


def test_a_spec_of_more_blocks_than_the_checkpoint_names_the_missing_tensors(tmp_path) -> None:
    """Nemotron-H's blocks read from two checkpoint layers each (`Names.blocks`): a spec of
    more blocks than the checkpoint has is refused by the tensors it lacks."""
    config = tf.NemotronHConfig(**{k: v for k, v in _nemotron().items()
                                   if k != "model_type"})
    model = tf.AutoModel.from_config(config)
    model.save_pretrained(tmp_path / "w")
    text = import_config(tmp_path / "w", head="none")
    assert "layers = 2" in text
    text = text.replace("layers = 2", "layers = 3")
    layer = attndsl.loads(text)["nemotron_h"]
    with pytest.raises(SpecError, match=r"missing `layers\.3\.norm\.weight`"):
        layer.onnx_bytes(weights=tmp_path / "w")
