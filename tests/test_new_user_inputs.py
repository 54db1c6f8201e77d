"""What a new user meets, round 2 (issue 39), items 1, 13 and three of item 11: token ids
outside the vocabulary, a float64 input to the torch module, the Python API's import and
generation, `run` on a genai folder, `run --output`'s presents, and the missing-runtime hint.
Each test failed before its fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attndsl
from attndsl.cli import main

from .conftest import ROOT

LM = ROOT / "examples" / "llama_lm.attn"  # vocab = 1000


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """llama_lm compiled three ways: one pass, decoding (--decode) and a genai folder."""
    out = tmp_path_factory.mktemp("models")
    for extra in (["--export", "onnx"], ["--export", "onnx", "--decode"], ["--export", "genai"]):
        assert main(["compile", str(LM), "--name", "llama_lm", "-o", str(out), *extra]) == 0
    return out


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it."""
    return subprocess.run([sys.executable, "-m", "attndsl.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_run_refuses_token_ids_outside_the_vocabulary(models: Path, tmp_path: Path) -> None:
    """A negative id used to wrap to a real token (exit 0); one past the table failed in ONNX
    Runtime's Gather."""
    cases = {"neg": [[5, -1, 3]], "hf": [[7, 8], [9, -100]], "over": [[1, 1000, 1001]]}
    for name, ids in cases.items():
        np.savez(tmp_path / f"{name}.npz", input_ids=np.array(ids, dtype=np.int64))
    done = _cli("run", str(models / "llama_lm.onnx"), "--inputs", str(tmp_path / "neg.npz"))
    assert done.returncode == 2, done.stderr
    assert "token id -1 at (batch 0, position 1)" in done.stderr
    assert "vocabulary of 1000 tokens" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    done = _cli("run", str(models / "llama_lm.onnx"), "--inputs", str(tmp_path / "hf.npz"))
    assert done.returncode == 2
    assert "(batch 1, position 1)" in done.stderr and "ignore index" in done.stderr
    done = _cli("run", str(models / "llama_lm.onnx"), "--inputs", str(tmp_path / "over.npz"))
    assert done.returncode == 2
    assert "token id 1000 at (batch 0, position 1)" in done.stderr and "and 1 more" in \
        done.stderr and "Gather" not in done.stderr


def test_generate_refuses_prompt_ids_outside_the_vocabulary(models: Path) -> None:
    """`generate --prompt-ids 5,5000` on a 1000-token vocabulary printed an internal error."""
    for model in (models / "llama_lm.decode.onnx", models / "llama_lm"):
        done = _cli("generate", str(model), "--prompt-ids", "5,6", "--prompt-ids", "7,8,5000",
                    "--max-new", "2")
        assert done.returncode == 2, done.stderr
        assert "token id 5000 at (batch 1, position 2)" in done.stderr
        assert "vocabulary of 1000 tokens" in done.stderr and "internal error" not in \
            done.stderr


def test_the_python_api_refuses_token_ids_outside_the_vocabulary(models: Path) -> None:
    import torch

    layer = attndsl.load(LM)["llama_lm"]
    module = layer.to_torch()
    assert module(torch.tensor([[0, 999]])).shape == (1, 2, 1000)  # the edges are tokens
    with pytest.raises(attndsl.UsageError, match=r"token id -1 at \(batch 0, position 1\)"):
        module(torch.tensor([[5, -1, 3]]))  # torch's embedding: "index out of range in self"
    with pytest.raises(attndsl.UsageError, match="vocabulary of 1000 tokens"):
        module(input_ids=torch.tensor([[5, 1000]]))
    weights = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    with pytest.raises(attndsl.UsageError, match=r"token id -2 at \(batch 0, position 0\)"):
        layer.reference({"input_ids": np.array([[-2, 3]])}, weights)  # NumPy would wrap it
    with pytest.raises(attndsl.UsageError, match=r"token id 1000 at \(batch 0, position 1\)"):
        layer.generate([[3, 1000]], 2)
    from attndsl.backends import runtime
    from attndsl.decoding import generate

    session = runtime.make_session(models / "llama_lm.decode.onnx")
    with pytest.raises(attndsl.UsageError, match=r"token id -5 at \(batch 0, position 0\)"):
        generate(session, [[-5]], 2)


def test_a_float_input_of_another_dtype_names_the_modules_dtype() -> None:
    """A float64 input (NumPy's default) failed with `expected m1 and m2 to have the same
    dtype` deep in a matmul."""
    import torch

    layer = attndsl.load(ROOT / "examples" / "llama_gqa.attn")["llama_attn"]
    module = layer.to_torch()
    x = np.random.default_rng(0).standard_normal((1, 5, 512))
    with pytest.raises(attndsl.UsageError, match=r"`x` is float64; this module takes float32"):
        module(torch.from_numpy(x))
    with pytest.raises(attndsl.UsageError, match=r"x.to\(torch.float32\)"):
        module(x=torch.from_numpy(x))
    y = module(torch.from_numpy(x).float())
    assert module.double()(torch.from_numpy(x)).dtype == torch.float64  # a double module
    assert torch.allclose(module(torch.from_numpy(x)).float(), y, atol=1e-4)
    half = layer.to_torch(dtype="float16")
    with pytest.raises(attndsl.UsageError, match="`x` is float32; this module takes float16"):
        half(torch.randn(1, 5, 512))


def test_load_imports_a_checkpoint_and_generates_its_greedy_tokens(tmp_path: Path) -> None:
    """The notebook user's path: `attndsl.load(folder)` imports a Hugging Face checkpoint as
    `attndsl import` does, and `Layer.generate` gives transformers' greedy tokens."""
    import torch
    import transformers as tf

    from .test_hf_families import redraw

    config = tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                            tie_word_embeddings=False)
    model = tf.AutoModelForCausalLM.from_config(config).eval()
    redraw(model, 3, unit_offset=False)
    model.save_pretrained(tmp_path)
    program = attndsl.load(tmp_path)
    assert list(program) == ["llama_attn", "llama"]
    assert attndsl.load(tmp_path / "config.json").source.text == program.source.text
    prompts = [[5, 17, 42, 8], [250, 3]]
    result = program["llama"].generate(prompts, 6, weights=tmp_path)
    for prompt, tokens in zip(prompts, result.tokens, strict=True):
        x = torch.tensor([prompt])
        with torch.no_grad():
            want = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=6,
                                  do_sample=False, eos_token_id=None, pad_token_id=0)
        assert tokens == want[0, len(prompt):].tolist()
    one = program["llama"].generate(prompts[1], 6, weights=tmp_path)  # one prompt, unwrapped
    assert one.tokens == [result.tokens[1]]


def test_run_takes_a_genai_folder(models: Path, capsys) -> None:
    """It said "no such model file" of the folder `compile --export genai` writes."""
    capsys.readouterr()
    assert main(["run", str(models / "llama_lm"), "--length", "5"]) == 0
    out = capsys.readouterr().out
    assert f"model    {models / 'llama_lm' / 'model.onnx'}" in out
    assert main(["run", str(models / "nothing")]) == 2
    assert "no such model file or genai folder" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["llama_lm.decode.onnx", "llama_lm"])
def test_run_output_keeps_every_output(models: Path, tmp_path: Path, model: str,
                                       capsys) -> None:
    """`run --output` kept logits alone and dropped a decoding model's present.*."""
    from attndsl.backends import runtime
    from attndsl.run import random_inputs

    saved = tmp_path / "y.npz"
    assert main(["run", str(models / model), "--length", "6", "--output", str(saved)]) == 0
    assert "every output" in capsys.readouterr().out
    path = models / model / "model.onnx" if (models / model).is_dir() else models / model
    session = runtime.make_session(path)
    want = session.run(None, random_inputs(session, 1, 6, 6))
    names = [o.name for o in session.get_outputs()]
    assert len(names) == 5 and names[1] == "present.0.key"
    with np.load(saved) as got:
        assert sorted(got.files) == sorted(names)
        for name, value in zip(names, want, strict=True):
            np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-6)


def test_the_missing_runtime_hint_needs_no_constraints_file(models: Path, monkeypatch,
                                                             capsys) -> None:
    """A wheel user has no constraints.txt; the hint named it as what to install with."""
    from attndsl.targets import check_ort_version

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    assert main(["run", str(models / "llama_lm.onnx")]) == 3
    err = capsys.readouterr().err
    assert 'pip install "attndsl[cpu]"' in err and "Traceback" not in err
    assert "pip install -c constraints.txt" not in err
    monkeypatch.undo()
    with pytest.raises(attndsl.ExportError) as caught:
        check_ort_version("ort-cpu", "1.20.0")
    assert "constraints.txt" not in str(caught.value) and 'onnxruntime==' in str(caught.value)


def test_a_bfloat16_output_is_saved_by_its_bits() -> None:
    """`run --output` reads every output back on the CPU; NumPy has no bfloat16, so such an
    output is widened from its bits (a CUDA bfloat16 model's presents)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from attndsl.run import _float32

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString())
    binding = session.io_binding()
    x = np.array([[1.0, 2.5, -3.0], [1e-3, 7.0, 0.1]], dtype=np.float32)
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu")
    session.run_with_iobinding(binding)
    got = _float32(binding.get_outputs()[0])
    assert got.dtype == np.float32 and got.shape == (2, 3)
    np.testing.assert_allclose(got, x, rtol=2 ** -8)  # bfloat16 keeps 8 bits of mantissa
    assert got[1, 0] != x[1, 0]  # rounded, so read from the bfloat16 bits, not x


def test_load_checks_import_options_as_the_command_line_does(tmp_path: Path) -> None:
    """`attndsl.load(folder, padding=..., head=...)` took any value (a typo went through to the
    reader); it takes the `import` command's choices, one tuple for both."""
    from attndsl.arguments import build_parser
    from attndsl.usage import HEADS, PADDINGS

    imp = next(a for a in build_parser()._actions if a.dest == "command").choices["import"]
    choices = {a.dest: a.choices for a in imp._actions}
    assert choices["padding"] is PADDINGS and choices["head"] is HEADS
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(attndsl.UsageError, match="padding: expected one of auto, none, left, "
                                                 "right, got 'rigth'"):
        attndsl.load(tmp_path, padding="rigth")
    with pytest.raises(attndsl.UsageError, match="head: expected one of auto, lm, none"):
        attndsl.load(tmp_path / "config.json", head="LM")


def test_generate_checks_its_prompts_before_building_the_model(monkeypatch) -> None:
    """Layer.generate built the whole decoding model, then refused the prompts."""
    from attndsl.api import Layer

    def built(*args, **kwargs):
        raise AssertionError("the decoding model was built before the checks")

    monkeypatch.setattr(Layer, "decoder_model", built)
    program = attndsl.load(LM)
    layer = program["llama_lm"]
    with pytest.raises(attndsl.UsageError, match=r"token id 1000 at \(batch 0, position 1\)"):
        layer.generate([[3, 1000]], 2)
    with pytest.raises(attndsl.UsageError, match="every prompt needs at least one token id"):
        layer.generate([[3], []], 2)
    attention = program[next(n for n in program if n != "llama_lm")]
    with pytest.raises(attndsl.UsageError, match="is not a language model"):
        attention.generate([[3]], 2)


def test_token_ids_are_not_checked_where_there_is_no_table_or_while_tracing(monkeypatch
                                                                            ) -> None:
    """_check_ids ended in StopIteration on a graph without an embedding, and read the ids
    back (a host sync) while tracing, where they are symbols."""
    import torch

    from attndsl.backends import inputs

    program = attndsl.load(LM)
    attention = program[next(n for n in program if n != "llama_lm")]
    inputs._check_ids(attention.graph(), torch.tensor([[-1]]))  # no table: nothing to check
    graph = program["llama_lm"].graph()
    with pytest.raises(attndsl.UsageError, match="token id -1"):
        inputs._check_ids(graph, torch.tensor([[-1]]))
    monkeypatch.setattr(torch.jit, "is_tracing", lambda: True)
    inputs._check_ids(graph, torch.tensor([[-1]]))
