"""Hostile checkpoints, round 2, as reviewed (issue 39): a tied spec over a checkpoint whose
head is its own, `gather`'s warning by default, the task prefix found once, and a config
without a layer count. Each test failed before its fix."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

import attndsl
from attndsl.cli import main

from .test_hostile_round2 import _changed, make_llama


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> dict:
    return make_llama(tmp_path_factory.mktemp("review"))



def test_a_tied_spec_does_not_drop_an_untied_checkpoints_head(llama, tmp_path, capsys) -> None:
    """`tie_embeddings = true` over a checkpoint whose config unties them and whose lm_head is
    its own dropped that head silently (exit 0, the embedding as the head); it is refused as
    unused, and left out only where the config ties them or the head is the embedding."""
    spec = tmp_path / "tied.attn"
    spec.write_text(llama["spec"].read_text().replace("vocab     = 100",
                                                      "vocab     = 100\n    tie_embeddings = true"))
    assert "tie_embeddings = true" in spec.read_text()
    args = ["compile", str(spec), "--export", "onnx", "--target", "ort-cpu", "-q"]
    assert main([*args, "--weights", str(llama["folder"]), "-o", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "`lm_head.weight` [100, 64] is not used by the spec" in err, err
    assert "ties its LM head to the embedding" in err and not (tmp_path / "a").exists()
    embedding = load_file(llama["folder"] / "model.safetensors")["model.embed_tokens.weight"]
    same = _changed(llama, "same_head", {"lm_head.weight": embedding.copy()})
    assert main([*args, "--weights", str(same), "-o", str(tmp_path / "b")]) == 0  # bit for bit
    tied = _changed(llama, "tied_config")
    config = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    assert main([*args, "--weights", str(tied), "-o", str(tmp_path / "c")]) == 0


def test_gather_allowing_unused_tensors_warns_by_default(llama) -> None:
    """gather(allow_unused=True) without `warn` left the tensors out with no word."""
    from attndsl.checkpoints import gather, open_checkpoint
    from attndsl.weight_table import weight_table

    folder = _changed(llama, "extra_gather", {"model.layers.0.mlp.extra.weight":
                                              np.ones((2, 2), np.float32)})
    spec = attndsl.load(llama["spec"])["llama"].spec
    wanted = {w.name: w.shape for w in weight_table(spec)}
    with pytest.warns(UserWarning, match=r"left out, as not used by the spec: "
                                         r"`model\.layers\.0\.mlp\.extra\.weight`"):
        gather(open_checkpoint(folder), spec, wanted, allow_unused=True)


def test_the_task_prefix_is_found_once_per_checkpoint(llama, capsys, monkeypatch) -> None:
    """Each missing tensor recomputed the checkpoint's common prefix over every name."""
    from attndsl import checkpoints

    calls = []
    prefix = checkpoints._task_prefix
    monkeypatch.setattr(checkpoints, "_task_prefix", lambda keys: calls.append(1) or prefix(keys))
    folder = _changed(llama, "three_missing", drop=tuple(
        f"model.layers.{i}.self_attn.{p}_proj.weight" for i in (0, 1) for p in "qk"))
    assert main(["compile", str(llama["spec"]), "--weights", str(folder), "--export",
                 "onnx"]) == 2
    err = capsys.readouterr().err
    assert err.count("missing `model.layers.") == 4, err
    assert len(calls) == 1


def test_a_config_without_a_layer_count_is_not_said_to_have_none(llama, tmp_path,
                                                                  capsys) -> None:
    """A stack shorter than the checkpoint, whose config has no layer-count field, was told
    "the checkpoint has None layers"."""
    folder = _changed(llama, "no_count")
    config = json.loads((folder / "config.json").read_text())
    del config["num_hidden_layers"]
    (folder / "config.json").write_text(json.dumps(config))
    spec = tmp_path / "one.attn"
    spec.write_text(llama["spec"].read_text().replace("layers    = 2", "layers    = 1"))
    assert main(["compile", str(spec), "--weights", str(folder), "--export", "onnx",
                 "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "tensors of layers past the spec's 1 block" in err, err
    assert "None" not in err and "config.json gives no layer count" in err, err
