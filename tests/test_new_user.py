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

import attndsl
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


LINFORMER = """
attention short {
    d_model = 32
    heads   = 2
    kernel  = linformer(k = 8, max_len = 16)
}
"""


def test_a_linformer_model_records_and_enforces_its_length_limit(tmp_path: Path,
                                                                 capsys) -> None:
    """Beyond max_len ONNX Runtime itself fails deep in the graph; attndsl's commands refuse
    first, naming max_len, from the limit the model records."""
    import onnx
    import onnxruntime as ort

    spec = tmp_path / "short.attn"
    spec.write_text(LINFORMER)
    assert main(["compile", str(spec), "--export", "onnx", "-o", str(tmp_path)]) == 0
    model = tmp_path / "short.onnx"
    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    assert meta["attndsl.max_length"] == "16" and "max_len = 16" in meta["attndsl.max_length.why"]
    assert main(["run", str(model), "--length", "16"]) == 0
    capsys.readouterr()
    assert main(["run", str(model), "--length", "17"]) == 2
    err = capsys.readouterr().err
    assert "17 tokens, more than the 16 it takes" in err and "max_len = 16" in err
    with pytest.raises(Exception, match=r"dimension|broadcast|MatMul"):
        ort.InferenceSession(str(model)).run(None, {"x": np.zeros((1, 17, 32), np.float32)})
    assert main(["bench", str(spec), "--lengths", "8,17"]) == 2
    assert "cannot be measured at L = 17" in capsys.readouterr().err
    assert main(["verify", str(spec), "--lengths", "17"]) == 1  # nothing compared: not a pass
    assert "SKIPPED  17 tokens, more than the 16 it takes" in capsys.readouterr().out


def test_verify_chooses_its_lengths_from_the_spec() -> None:
    """Past every window (the tutorial's 512 keys: 521), both sides of every by_length
    threshold, primes elsewhere, and nothing past a Linformer's max_len."""
    import attndsl
    from attndsl.verify import default_lengths

    windowed = attndsl.loads("attention a {\n    d_model = 64\n    heads = 4\n"
                             "    mask = causal & window(left = 511, right = 0)\n}\n")["a"]
    chosen = default_lengths(windowed.spec)
    assert chosen[521] == "the first prime past the window's 512 keys"
    assert {1, 7, 61, 293} <= set(chosen)
    by_length = default_lengths(attndsl.load(ROOT / "examples/seed_by_length.attn")
                                ["choose_by_length"].spec)
    assert {2000, 2001, 10000, 10001} <= set(by_length)
    assert "up_to(10000)" in by_length[10001]
    short = attndsl.loads(LINFORMER)["short"]
    assert max(default_lengths(short.spec)) <= 16


def test_verify_says_why_and_skips_what_would_not_fit(monkeypatch, capsys) -> None:
    from attndsl import verify

    assert main(["verify", "examples/mistral_local.attn", "--batches", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the lengths line wraps
    assert "lengths: 1 (one token)" in out and "the first prime past the window" in out
    monkeypatch.setattr(verify, "VERIFY_MEMORY", verify.reference_bytes(
        __import__("attndsl").load(ROOT / "examples/mistral_local.attn")["mistral_local"].spec,
        1, 61, None))  # 61 fits at batch 1, not at batch 3; 293 not at all
    assert main(["verify", "examples/mistral_local.attn", "--lengths", "61,293"]) == 0
    lines = capsys.readouterr().out.splitlines()
    skipped = [line for line in lines if "SKIPPED" in line]
    assert len(skipped) == 3, skipped  # B=3 L=61, B=1 and B=3 L=293
    assert "--batches 1 would fit" in next(s for s in skipped if "B=3 L=61" in s)


def test_the_references_memory_stays_within_its_estimate() -> None:
    """The estimate that keeps verify within 8 GB, held against the reference's real peak
    (NumPy's allocations, traced) on softmax cores with a mask, a score bias and a stack."""
    import tracemalloc

    import attndsl
    from attndsl.backends import reference
    from attndsl.verify import make_inputs, reference_bytes

    for path, name in (("bloom_alibi", "bloom_attn"), ("llama_lm", "llama_lm"),
                       ("t5_relative", "t5_cross"), ("bigbird", "bigbird_attn")):
        layer = attndsl.load(ROOT / f"examples/{path}.attn")[name]
        weights = {k: v.detach().double().numpy()
                   for k, v in layer.to_torch().state_dict().items()}
        inputs = make_inputs(layer.spec, 2, 300, np.random.default_rng(0))
        memory = inputs["memory"].shape[1] if "memory" in inputs else None
        tracemalloc.start()
        try:
            reference.run(layer.graph(), inputs, weights)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= reference_bytes(layer.spec, 2, 300, memory), name


def test_fmt_breaks_a_call_too_long_for_one_line(tmp_path: Path) -> None:
    """An imported Llama 3 config's RoPE (139 characters on one line) is written one argument
    per line; fmt keeps its meaning and is idempotent."""
    import attndsl

    config = tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, rope_parameters={
                                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192})
    config.save_pretrained(tmp_path)
    spec = tmp_path / "llama.attn"
    assert main(["import", str(tmp_path), "-o", str(spec)]) == 0
    text = spec.read_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "    position = rope(\n" in text
    assert main(["fmt", "--check", str(spec)]) == 0
    flat = attndsl.loads(text.replace(text[text.index("    position"):text.index("\n    )\n") + 6],
                                      "    position = rope(theta = 500000.0, scaling = llama3("
                                      "factor = 32.0, low_freq_factor = 1.0, high_freq_factor = "
                                      "4.0, original_max_position = 8192))"))
    assert flat.resolved.layers == attndsl.load(spec).resolved.layers


def test_readme_tutorial_hash_and_counts_are_current(tmp_path: Path, capsys) -> None:
    """The tutorial's spec compiles to the bytes README shows, and README's counts hold."""
    import re

    readme = (ROOT / "README.md").read_text()
    spec = re.search(r"```attn\n(# my_layer\.attn.*?)```", readme, re.S).group(1)
    (tmp_path / "my_layer.attn").write_text(spec)
    assert main(["compile", str(tmp_path / "my_layer.attn"), "--export", "onnx", "-o",
                 str(tmp_path)]) == 0
    wrote = capsys.readouterr().out.strip().rsplit(" (", 1)[1]
    assert f"wrote exported/my_layer.onnx ({wrote}" in readme
    invalid = len(list((ROOT / "tests" / "invalid").glob("*.attn")))
    assert f"golden diagnostics for {invalid} invalid inputs" in readme


_NO_TORCH = r'''
import builtins, sys
real = builtins.__import__
def guarded(name, *args, **kwargs):
    if name == "torch" or name.startswith("torch."):
        raise SystemExit(f"imported {name}")
    return real(name, *args, **kwargs)
builtins.__import__ = guarded
import attndsl
from attndsl.cli import main
out = sys.argv[1]
for args in (["compile", "examples/llama_lm.attn", "--export", "onnx", "-o", out],
             ["compile", "examples/bigbird.attn", "--export", "onnx", "--target", "ort-cuda",
              "--dtype", "float16", "-o", out],
             ["compile", "examples/llama_lm.attn", "--export", "onnx", "--decode", "-o", out],
             ["compile", "examples/llama_lm.attn", "--export", "genai", "-o", out + "/genai"],
             ["run", out + "/llama_lm.onnx", "--length", "5"],
             ["run", out + "/bigbird_attn.onnx", "--length", "300"],
             ["compile", "examples/llama_gqa.attn", "--name", "llama_attn", "--export", "onnx",
              "--weights", sys.argv[2], "-o", out],
             ["compile", sys.argv[3] + "/spec.attn", "--export", "onnx", "--weights",
              sys.argv[3] + "/hf", "--dtype", "float16", "-o", out]):
    assert main(args) == 0, args
'''


def test_compile_for_onnx_runtime_and_run_never_import_torch(tmp_path: Path) -> None:
    """`compile --target ort-cpu|ort-cuda` (forward, decoding, genai, with --weights from a
    .safetensors file or a Hugging Face checkpoint) and `run` work without torch: seeded
    weights are drawn by NumPy, .safetensors files are read by NumPy and the lowering reads the
    graph alone (torch took 2.7 s of a 3-4 s compile)."""
    import subprocess
    import sys

    import torch
    from safetensors.torch import save_file

    layer = attndsl.load(ROOT / "examples/llama_gqa.attn")["llama_attn"]
    weights = tmp_path / "w.safetensors"
    save_file(layer.to_torch(seed=3).state_dict(), str(weights))
    hf = tmp_path / "ckpt"
    tf.LlamaForCausalLM(tf.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=40)).to(dtype=torch.bfloat16).save_pretrained(hf / "hf")
    assert main(["import", str(hf / "hf"), "-o", str(hf / "spec.attn")]) == 0
    done = subprocess.run([sys.executable, "-c", _NO_TORCH, str(tmp_path), str(weights),
                           str(hf)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-500:]
