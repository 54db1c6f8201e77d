"""attndsl/hf_lacks.py: the mechanism each refused model type lacks. Every entry is a model
type transformers knows and attndsl does not import (a type that becomes imported must leave
the table), and the import of such a checkpoint names the mechanism."""

from __future__ import annotations

from pathlib import Path

import transformers as tf
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from attndsl.cli import main
from attndsl.families import FAMILIES
from attndsl.hf_lacks import LACKS


def test_no_type_in_lacks_is_one_attndsl_imports() -> None:
    assert sorted(set(LACKS) & set(FAMILIES)) == []


def test_every_type_in_lacks_is_one_transformers_knows() -> None:
    assert sorted(set(LACKS) - set(CONFIG_MAPPING_NAMES)) == []


def test_lacks_is_sorted_and_names_a_mechanism() -> None:
    assert list(LACKS) == sorted(LACKS)
    vague = [t for t, p in LACKS.items()
             if len(p.split()) < 3 or "support" in p or p != p.strip() or p.endswith(".")]
    assert vague == []


def test_the_import_of_a_lacking_type_names_what_it_lacks(tmp_path: Path, capsys) -> None:
    """A tiny RWKV checkpoint, built from its config class: the refusal names the blocks it
    needs, as one diagnostic, no traceback, nothing written."""
    config = tf.RwkvConfig(vocab_size=97, hidden_size=16, num_hidden_layers=2,
                           attention_hidden_size=16, intermediate_size=32, context_length=16)
    tf.RwkvForCausalLM(config).save_pretrained(tmp_path / "rwkv")
    out = tmp_path / "rwkv.attn"
    assert main(["import", str(tmp_path / "rwkv"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert ("model_type `rwkv` is not one attndsl imports: it needs RWKV's time-mix (WKV "
            "recurrence)") in err, err
    assert "which attndsl cannot express yet" in err and "Traceback" not in err, err
    assert not out.exists()
