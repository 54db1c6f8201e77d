"""What a new user meets, round 2 (issue 39): checkpoints holding tensors the spec does not
use (item 3), non-finite numbers in config.json (item 4), safetensors files whose tensors
overlap (item 5), a config without model_type and how a missing tensor is named (item 11);
layer kinds attndsl does not import (item 6) are in test_hostile_layer_kinds.py. Each held by a
test that failed before its fix."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import transformers as tf
from safetensors.numpy import load_file, save_file

import attndsl
from attndsl.cli import main
from attndsl.errors import SpecError

from .conftest import ROOT
from .test_hf_families import redraw

_LLAMA = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> dict[str, Path]:
    return make_llama(tmp_path_factory.mktemp("round2"))


def make_llama(root: Path) -> dict[str, Path]:
    """A tiny random Llama as save_pretrained writes it, and the spec `import` writes of it."""
    model = tf.AutoModelForCausalLM.from_config(tf.LlamaConfig(**_LLAMA)).eval()
    redraw(model, 5, unit_offset=False)
    model.save_pretrained(root / "llama")
    spec = root / "llama.attn"
    assert main(["import", str(root / "llama"), "-o", str(spec)]) == 0
    return {"root": root, "folder": root / "llama", "spec": spec}


def _changed(llama: dict[str, Path], name: str, add: dict | None = None,
             drop: tuple[str, ...] = ()) -> Path:
    """A copy of the checkpoint with tensors added and dropped."""
    folder = llama["root"] / name
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(llama["folder"], folder)
    tensors = load_file(folder / "model.safetensors")
    tensors.update(add or {})
    for key in drop:
        del tensors[key]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The command line as the user runs it."""
    return subprocess.run([sys.executable, "-m", "attndsl.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)


# item 3: tensors the spec does not use


def test_unused_checkpoint_tensors_are_refused_and_listed(llama, tmp_path) -> None:
    """Hunyuan's qk-norm in a Llama checkpoint and an unrelated tensor compiled with exit 0
    (2.0 off transformers, no word); now exit 2 naming each by its checkpoint name, and
    --allow-unused-weights compiles with a warning naming them both."""
    folder = _changed(llama, "extra", {
        "model.layers.0.self_attn.query_layernorm.weight": np.ones(16, np.float32),
        "model.vision_tower.proj.weight": np.ones((3, 5), np.float32)})
    out = tmp_path / "out"
    args = ("compile", str(llama["spec"]), "--weights", str(folder), "--export", "onnx",
            "--target", "ort-cpu", "-o", str(out))
    done = _cli(*args)
    assert done.returncode == 2, done.stderr
    for name in ("`model.layers.0.self_attn.query_layernorm.weight` [16] is not used",
                 "`model.vision_tower.proj.weight` [3, 5] is not used"):
        assert name in done.stderr, done.stderr
    assert "internal error" not in done.stderr and not out.exists()
    done = _cli(*args, "--allow-unused-weights")
    assert done.returncode == 0, done.stderr
    warning = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, done.stderr
    assert "`model.layers.0.self_attn.query_layernorm.weight` [16]" in warning[0]
    assert "`model.vision_tower.proj.weight` [3, 5]" in warning[0]
    # the model is the clean checkpoint's: the tensors left out change nothing
    layer = attndsl.load(llama["spec"])["llama"]
    ids = np.array([[5, 17, 3, 99]], np.int64)

    def logits(model_dir: Path) -> np.ndarray:
        session = ort.InferenceSession(str(model_dir / "llama.onnx"),
                                       providers=["CPUExecutionProvider"])
        return session.run(None, {"input_ids": ids})[0]

    clean = tmp_path / "clean"
    layer.export_onnx(clean, target="ort-cpu", weights=llama["folder"])
    np.testing.assert_array_equal(logits(out), logits(clean))


def test_verify_and_the_python_api_refuse_unused_tensors_too(llama, capsys) -> None:
    folder = _changed(llama, "extra_api", {"model.layers.1.mlp.extra.weight":
                                           np.ones((4, 4), np.float32)})
    assert main(["verify", str(llama["spec"]), "--name", "llama", "--weights", str(folder),
                 "--lengths", "3", "--batches", "1", "--targets", "ort-cpu"]) == 2
    assert "`model.layers.1.mlp.extra.weight` [4, 4] is not used" in capsys.readouterr().err
    assert main(["verify", str(llama["spec"]), "--name", "llama", "--weights", str(folder),
                 "--lengths", "3", "--batches", "1", "--targets", "ort-cpu",
                 "--allow-unused-weights"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "model.layers.1.mlp.extra.weight" in err, err
    from attndsl.checkpoints import allow_unused_weights

    layer = attndsl.load(llama["spec"])["llama"]
    with pytest.raises(SpecError, match=r"mlp\.extra\.weight` \[4, 4\] is not used"):
        layer.onnx_model(target="ort-cpu", weights=folder)
    with pytest.warns(UserWarning, match=r"left out, as not used by the spec: "
                                         r"`model\.layers\.1\.mlp\.extra\.weight`"):
        layer.onnx_model(target="ort-cpu", weights=allow_unused_weights(folder))
    assert main(["compile", str(llama["spec"]), "--export", "onnx",
                 "--allow-unused-weights"]) == 2
    assert "--allow-unused-weights goes with --weights" in capsys.readouterr().err


def test_a_stack_shorter_than_the_checkpoint_is_refused(llama, tmp_path, capsys) -> None:
    """A spec of 1 layer over a 2-layer checkpoint described a model that is not the
    checkpoint's, silently."""
    spec = tmp_path / "one.attn"
    spec.write_text(llama["spec"].read_text().replace("layers    = 2", "layers    = 1"))
    assert "layers    = 1" in spec.read_text()
    assert main(["compile", str(spec), "--weights", str(llama["folder"]), "--export", "onnx",
                 "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "9 tensors of layers past the spec's 1 block (from `model.layers.1." in err, err


def test_tensors_known_not_to_be_needed_are_accepted(tmp_path, capsys) -> None:
    """A tied head stored beside its embedding (it was refused as unused), RoPE's inv_freq
    buffers of older checkpoints and a classification head: known, not needed."""
    config = tf.LlamaConfig(**_LLAMA, tie_word_embeddings=True)
    model = tf.AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(tmp_path / "tied")
    tensors = load_file(tmp_path / "tied" / "model.safetensors")
    assert "lm_head.weight" not in tensors
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, np.float32)
    tensors["score.weight"] = np.ones((2, 64), np.float32)
    save_file(tensors, tmp_path / "tied" / "model.safetensors", metadata={"format": "pt"})
    spec = tmp_path / "tied.attn"
    assert main(["import", str(tmp_path / "tied"), "-o", str(spec)]) == 0
    assert "tie_embeddings = true" in spec.read_text()
    capsys.readouterr()
    assert main(["compile", str(spec), "--weights", str(tmp_path / "tied"), "--export", "onnx",
                 "--target", "ort-cpu", "-o", str(tmp_path / "out")]) == 0, \
        capsys.readouterr().err


def test_modules_the_forward_pass_does_not_run_are_known(llama, tmp_path, capsys) -> None:
    """Gemma 3's vision tower and projector beside its text stack, and DeepSeek-V3's
    multi-token prediction layer past num_hidden_layers, are outside every spec; a layer past
    the config's count in a Llama checkpoint is not."""
    from .test_hf_families import CASES, _model

    text = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 300}
    vision = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
              "num_attention_heads": 2, "image_size": 28, "patch_size": 14}
    gemma = tf.Gemma3ForConditionalGeneration(tf.Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=4))
    gemma.save_pretrained(tmp_path / "gemma3")
    deepseek = _model(CASES["deepseek_v3"][0]())
    deepseek.save_pretrained(tmp_path / "deepseek")
    tensors = load_file(tmp_path / "deepseek" / "model.safetensors")
    mtp = {k.replace("layers.2.", "layers.3."): v for k, v in tensors.items() if "layers.2." in k}
    tensors |= {**mtp, "layers.3.eh_proj.weight": np.ones((64, 128), np.float32),
                "layers.3.enorm.weight": np.ones(64, np.float32)}
    save_file(tensors, tmp_path / "deepseek" / "model.safetensors", metadata={"format": "pt"})
    for name in ("gemma3", "deepseek"):
        spec = tmp_path / f"{name}.attn"
        assert main(["import", str(tmp_path / name), "-o", str(spec), "--head", "none"]) == 0
        capsys.readouterr()
        assert main(["compile", str(spec), "--weights", str(tmp_path / name), "--export",
                     "onnx", "--target", "ort-cpu", "-o", str(tmp_path / "out")]) == 0, \
            capsys.readouterr().err
    past = _changed(llama, "past", {"model.layers.2.input_layernorm.weight":
                                    np.ones(64, np.float32)})
    capsys.readouterr()
    assert main(["compile", str(llama["spec"]), "--weights", str(past), "--export", "onnx",
                 "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "`model.layers.2.input_layernorm.weight` [64] is not used" in err, err
    assert "layer 2 is past config.json's 2 layers" in err, err


# item 11: a missing tensor, named once, by the checkpoint's name


def test_a_missing_tensor_is_named_once_by_the_checkpoints_name(llama, capsys) -> None:
    folder = _changed(llama, "missing", drop=("model.layers.0.self_attn.q_proj.weight",
                                              "model.layers.1.input_layernorm.weight"))
    assert main(["compile", str(llama["spec"]), "--weights", str(folder), "--export",
                 "onnx", "-o", str(llama["root"] / "out_missing")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "missing" in line]
    assert lines == [
        f"error: {folder}: missing `model.layers.0.self_attn.q_proj.weight` (shape [64, 64])",
        f"error: {folder}: missing `model.layers.1.input_layernorm.weight` (shape [64]; the "
        "spec's `layers.1.attn_norm.weight`)"], err


def test_a_config_without_model_type_says_so(tmp_path, capsys) -> None:
    config = tf.LlamaConfig(**_LLAMA).to_dict()
    del config["model_type"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["import", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "config.json has no `model_type`" in err and "None" not in err, err


# item 4: NaN and Infinity


@pytest.mark.parametrize(("field", "literal", "says"), [
    ("rms_norm_eps", "NaN", "`rms_norm_eps` = NaN: expected a finite number"),
    ("rope_scaling", "Infinity", "`rope_scaling.factor` = Infinity: expected a finite number"),
    ("initializer_range", "-Infinity", "`initializer_range` = -Infinity: expected a finite"),
])
def test_non_finite_numbers_in_config_json_are_named(tmp_path, capsys, field, literal,
                                                     says) -> None:
    """Python's json reads the bare literals NaN and Infinity, which JSON has not: a NaN
    epsilon was imported, and failed later as `unknown constant nan` in the generated spec."""
    config = tf.LlamaConfig(**_LLAMA).to_dict()
    config[field] = {"rope_type": "linear", "factor": "X"} if field == "rope_scaling" else "X"
    (tmp_path / "config.json").write_text(json.dumps(config).replace('"X"', literal))
    assert literal in (tmp_path / "config.json").read_text()
    assert main(["import", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and "internal error" not in err and "does not check" not in err, err


def test_a_checkpoint_whose_config_holds_nan_is_refused(llama, tmp_path, capsys) -> None:
    folder = _changed(llama, "nan_config")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "rms_norm_eps": float("nan")}))
    assert main(["compile", str(llama["spec"]), "--weights", str(folder), "--export", "onnx",
                 "-o", str(tmp_path / "out")]) == 2
    assert "`rms_norm_eps` = NaN: expected a finite number" in capsys.readouterr().err


# item 5: the safetensors data section


def _safetensors(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


_F2 = {"dtype": "F32", "shape": [2]}
_LAYOUTS = {  # name -> (header, bytes of data): what the reference reader accepts or refuses
    "tiled": ({"a": {**_F2, "data_offsets": [0, 8]}, "b": {**_F2, "data_offsets": [8, 16]}}, 16),
    "out_of_order": ({"b": {**_F2, "data_offsets": [8, 16]},
                      "a": {**_F2, "data_offsets": [0, 8]}}, 16),
    "overlap": ({"a": {**_F2, "data_offsets": [0, 8]}, "b": {**_F2, "data_offsets": [4, 12]}},
                16),
    "same_bytes": ({"a": {**_F2, "data_offsets": [0, 8]},
                    "b": {**_F2, "data_offsets": [0, 8]}}, 8),
    "hole": ({"a": {**_F2, "data_offsets": [0, 8]}, "b": {**_F2, "data_offsets": [12, 20]}},
             20),
    "not_from_zero": ({"a": {**_F2, "data_offsets": [4, 12]}}, 12),
    "trailing": ({"a": {**_F2, "data_offsets": [0, 8]}}, 12),
    "empty_tensor": ({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                      "b": {**_F2, "data_offsets": [0, 8]}}, 8),
    "nothing": ({}, 0),
    "nothing_but_bytes": ({}, 4),
}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_safetensors_layouts_are_read_as_the_reference_reader_reads_them(tmp_path,
                                                                         layout) -> None:
    """Overlapping tensors (one byte read as two tensors), gaps and trailing bytes were
    accepted; the safetensors library refuses them (its `validate`), and so does attndsl."""
    from safetensors import SafetensorError, safe_open

    from attndsl.checkpoint_files import read_tensors

    header, size = _LAYOUTS[layout]
    path = tmp_path / "w.safetensors"
    path.write_bytes(_safetensors(header, bytes(range(size))))
    try:
        with safe_open(str(path), "np"):
            reference = True
    except SafetensorError:
        reference = False
    try:
        read_tensors(path)
        ours = True
    except SpecError as exc:
        ours = False
        assert str(path) in exc.render()
    assert ours == reference, layout
    assert reference == (layout in ("tiled", "out_of_order", "empty_tensor", "nothing"))


def test_a_checkpoint_whose_tensors_overlap_is_refused(llama, tmp_path, capsys) -> None:
    """Point one tensor at another's bytes (same size), leaving its own unread: exit 0 before."""
    folder = _changed(llama, "overlap")
    data = (folder / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    k, v = "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"
    header[k]["data_offsets"] = header[v]["data_offsets"]
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text
                                               + data[8 + n:])
    assert main(["compile", str(llama["spec"]), "--weights", str(folder), "--export", "onnx",
                 "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "which overlap `model.layers.0.self_attn.k_proj.weight`'s" in err, err
    assert "internal error" not in err, err


