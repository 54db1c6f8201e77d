"""What a new user meets first: the defects found trying the product from a fresh clone (issue
23), each held by a test that failed before its fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib
import transformers as tf

from attndsl.cli import main

from .conftest import ROOT
from .test_hf_families import redraw


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny random Llama saved as save_pretrained writes it, with a byte-level BPE
    tokenizer beside it (tokenizer.json, tokenizer_config.json)."""
    from tokenizers import ByteLevelBPETokenizer

    folder = tmp_path_factory.mktemp("hf") / "tiny-llama"
    config = tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                            tie_word_embeddings=False)
    model = tf.AutoModelForCausalLM.from_config(config).eval()
    redraw(model, 5, unit_offset=False)
    model.save_pretrained(folder)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 8,
                            vocab_size=290, special_tokens=["<|endoftext|>"])
    tf.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                         bos_token="<|endoftext|>",
                         unk_token="<|endoftext|>").save_pretrained(folder)
    return folder


def test_compile_with_weights_takes_the_files_top_layer(checkpoint: Path, tmp_path: Path,
                                                        capsys) -> None:
    """`import` says "compile with --weights on the checkpoint folder": doing just that
    compiles the stack (the layer no other layer uses), not every layer."""
    spec = tmp_path / "llama.attn"
    assert main(["import", str(checkpoint), "-o", str(spec)]) == 0
    assert "Compile with `--weights`" in spec.read_text()
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["compile", str(spec), "--weights", str(checkpoint), "--export", "onnx",
                 "-o", str(out)]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["llama.onnx"]
    # two top layers: --name still chooses, and the message lists them
    two = tmp_path / "two.attn"
    two.write_text(spec.read_text() + "\nattention extra {\n    d_model = 64\n    heads = 4\n}\n")
    assert main(["compile", str(two), "--weights", str(checkpoint), "--export", "onnx",
                 "-o", str(out)]) == 2
    assert "(llama, extra); name the one" in capsys.readouterr().err


def test_genai_folder_carries_the_checkpoints_tokenizer(checkpoint: Path, tmp_path: Path) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    spec = tmp_path / "llama.attn"
    assert main(["import", str(checkpoint), "-o", str(spec)]) == 0
    assert main(["compile", str(spec), "--export", "genai", "--weights", str(checkpoint),
                 "-o", str(tmp_path / "out"), "--target", "portable"]) == 0
    folder = tmp_path / "out" / "llama"
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in folder.iterdir()}
    tokenizer = og.Tokenizer(og.Model(str(folder)))
    text = "the lazy fox"
    ids = tokenizer.encode(text)
    want = tf.AutoTokenizer.from_pretrained(checkpoint)(text)["input_ids"]
    assert list(ids) == want
    assert tokenizer.decode(ids) == text


def test_run_draws_token_ids_from_the_vocabulary(tmp_path: Path) -> None:
    from attndsl.backends import runtime
    from attndsl.run import random_inputs

    assert main(["compile", "examples/llama_lm.attn", "--export", "onnx", "-o",
                 str(tmp_path)]) == 0
    session = runtime.make_session(tmp_path / "llama_lm.onnx")
    ids = random_inputs(session, batch=2, length=50, memory_length=50)["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (2, 50)
    assert ids.min() >= 0 and ids.max() < 1000  # vocab = 1000
    assert len(np.unique(ids)) > 20


def test_generate_says_what_a_one_pass_model_lacks(tmp_path: Path, capsys) -> None:
    assert main(["compile", "examples/llama_lm.attn", "--export", "onnx", "-o",
                 str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "llama_lm.onnx"), "--prompt-ids", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "no KV cache" in err and "--decode" in err and "internal error" not in err


def test_the_decoding_form_lives_beside_the_one_pass_form(tmp_path: Path) -> None:
    for extra in ([], ["--decode"]):
        assert main(["compile", "examples/llama_lm.attn", "--export", "onnx", "-o",
                     str(tmp_path), *extra]) == 0
    one_pass, decoding = tmp_path / "llama_lm.onnx", tmp_path / "llama_lm.decode.onnx"
    assert one_pass.read_bytes() != decoding.read_bytes()
    import onnx

    names = {i.name for i in onnx.load(one_pass, load_external_data=False).graph.input}
    assert names == {"input_ids"}


def test_show_png_prints_a_summary_not_the_grid(tmp_path: Path, capsys) -> None:
    assert main(["show", "examples/bigbird.attn", "--length", "512", "--png",
                 str(tmp_path / "m.png")]) == 0
    out = capsys.readouterr().out
    assert "density:" in out and "│" not in out and len(out) < 2000
    assert (tmp_path / "m.png").stat().st_size > 0


def test_the_runtime_is_an_extra_with_a_clear_error_without_one(tmp_path: Path) -> None:
    """The package does not require onnxruntime (which would sit beside onnxruntime-gpu);
    `cpu` and `gpu` extras bring one. Without either, compile works and run says what to
    install (exit 3)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("onnxruntime") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert extras["cpu"][0].startswith("onnxruntime>=") and \
        extras["gpu"][0].startswith("onnxruntime-gpu>=")
    hide = ("import sys; sys.modules['onnxruntime'] = None; from attndsl.cli import main; "
            "sys.exit(main(sys.argv[1:]))")

    def attndsl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", hide, *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=300)

    done = attndsl("compile", "examples/gpt2.attn", "--export", "onnx", "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    model = next(tmp_path.glob("*.onnx"))
    done = attndsl("run", str(model))
    assert done.returncode == 3
    assert "ONNX Runtime is not installed" in done.stderr and "attndsl[cpu]" in done.stderr
    assert "Traceback" not in done.stderr


def test_profiled_sessions_leave_no_file_behind(tmp_path: Path, monkeypatch) -> None:
    """The CUDA placement check profiles a session's first run: the profile goes to a
    temporary folder and is removed once read, never into the working folder."""
    import tempfile

    from attndsl.api import loads
    from attndsl.backends import runtime

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    layer = loads("attention a {\n    d_model = 32\n    heads = 2\n}\n")["a"]
    session = runtime.make_session(layer.onnx_bytes(), "cpu", profile=True)
    runtime.run(session, {"x": np.ones((1, 5, 32), np.float32)})
    assert "MultiHeadAttention" in runtime.placements(session)
    assert list(tmp_path.rglob("*.json")) == []
    assert "onnxruntime_profile_*.json" in (ROOT / ".gitignore").read_text()


def test_the_torch_module_names_its_inputs_and_what_is_missing() -> None:
    import inspect

    import torch

    import attndsl
    from attndsl.errors import UsageError

    module = attndsl.load(ROOT / "examples/bert_padding.attn")["bert_self"].to_torch()
    assert list(inspect.signature(module).parameters) == ["x", "key_lengths"]
    x = torch.randn(1, 5, 192)
    with pytest.raises(UsageError, match="takes x, key_lengths: missing key_lengths"):
        module(x)
    with pytest.raises(UsageError, match="no input named `lengths`"):
        module(x, lengths=torch.tensor([5]))
    assert module(x, key_lengths=torch.tensor([3])).shape == (1, 5, 192)
