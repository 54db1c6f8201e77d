"""Models over protobuf's 2 GiB keep their tensors in ONNX external data (`<name>.onnx.data`).
The limit is lowered here so that small models take the same path; `--deep` also compiles and
runs a real 3.2 GB stack."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from attndsl.backends import exported, runtime
from attndsl.cli import main
from attndsl.errors import ExportError

from .conftest import ROOT

LM = "examples/llama_lm.attn"


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Models over 200 kB take the external-data path (llama_lm is about 2 MB)."""
    monkeypatch.setattr(exported, "MAX_ONNX_BYTES", 200_000)


def _outputs(model: Path, feed: dict) -> np.ndarray:
    return runtime.run(runtime.make_session(model), feed)


def test_compile_writes_external_data_byte_identically(tmp_path: Path, small_limit) -> None:
    for out in ("a", "b"):
        assert main(["compile", LM, "--name", "llama_lm", "--export", "onnx", "-o",
                     str(tmp_path / out)]) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    assert sorted(p.name for p in a.iterdir()) == ["llama_lm.onnx", "llama_lm.onnx.data"]
    for name in ("llama_lm.onnx", "llama_lm.onnx.data"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    model = onnx.load(a / "llama_lm.onnx", load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data
                 if e.key == "location"}
    assert locations == {"llama_lm.onnx.data"}
    assert (a / "llama_lm.onnx").stat().st_size < 200_000
    offsets = [int(e.value) for t in model.graph.initializer for e in t.external_data
               if e.key == "offset"]
    assert offsets and all(o % 4096 == 0 for o in offsets)


def test_external_data_runs_as_the_single_file(tmp_path: Path, monkeypatch,
                                               capsys) -> None:
    assert main(["compile", LM, "--name", "llama_lm", "--export", "onnx", "-o",
                 str(tmp_path / "one")]) == 0
    monkeypatch.setattr(exported, "MAX_ONNX_BYTES", 200_000)
    assert main(["compile", LM, "--name", "llama_lm", "--export", "onnx", "-o",
                 str(tmp_path / "two")]) == 0
    assert not (tmp_path / "one" / "llama_lm.onnx.data").exists()
    feed = {"input_ids": np.arange(11, dtype=np.int64)[None] * 7}
    one = _outputs(tmp_path / "one" / "llama_lm.onnx", feed)
    two = _outputs(tmp_path / "two" / "llama_lm.onnx", feed)
    np.testing.assert_array_equal(one, two)
    capsys.readouterr()
    assert main(["run", str(tmp_path / "two" / "llama_lm.onnx"), "--length", "9"]) == 0
    assert "logits" in capsys.readouterr().out


def test_verify_and_bench_load_external_data(small_limit, capsys) -> None:
    import attndsl

    layer = attndsl.load(ROOT / LM)["llama_lm"]
    model = layer.onnx_model()
    assert model.external
    with pytest.raises(ExportError, match="over 2 GB"):
        model.bytes()
    report = layer.verify(lengths=(1, 9), targets=("ort-cpu",))
    assert report.passed, report.text()
    assert main(["bench", LM, "--name", "llama_lm", "--lengths", "16", "--repeat", "5",
                 "--targets", "ort-cpu"]) == 0
    assert "ort-cpu on cpu" in capsys.readouterr().out


def test_genai_and_decode_exports_generate_from_external_data(tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    assert main(["compile", LM, "--export", "genai", "-o", str(tmp_path / "one")]) == 0
    monkeypatch.setattr(exported, "MAX_ONNX_BYTES", 200_000)
    assert main(["compile", LM, "--export", "genai", "-o", str(tmp_path / "two")]) == 0
    assert main(["compile", LM, "--name", "llama_lm", "--export", "onnx", "--decode", "-o",
                 str(tmp_path / "d")]) == 0
    assert (tmp_path / "two" / "llama_lm" / "model.onnx.data").is_file()
    assert (tmp_path / "d" / "llama_lm.decode.onnx.data").is_file()
    capsys.readouterr()
    tokens = []
    for model in (tmp_path / "one" / "llama_lm", tmp_path / "two" / "llama_lm",
                  tmp_path / "d" / "llama_lm.decode.onnx"):
        assert main(["generate", str(model), "--prompt-ids", "5,6,7", "--max-new", "6"]) == 0
        tokens.append(capsys.readouterr().out)
    assert tokens[0] == tokens[1] == tokens[2]
    og = pytest.importorskip("onnxruntime_genai")
    m = og.Model(str(tmp_path / "two" / "llama_lm"))
    params = og.GeneratorParams(m)
    params.set_search_options(max_length=9, do_sample=False)
    generator = og.Generator(m, params)
    generator.append_tokens([[5, 6, 7]])
    got = []
    while not generator.is_done():
        generator.generate_next_token()
        got.append(int(generator.get_next_tokens()[0]))
    assert ",".join(map(str, got)) == tokens[0].strip()


def test_triton_repository_holds_the_data_file(tmp_path: Path, small_limit) -> None:
    assert main(["compile", LM, "--name", "llama_lm", "--export", "triton", "-o",
                 str(tmp_path)]) == 0
    folder = tmp_path / "llama_lm" / "1"
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "model.onnx.data"]


BIG = """
attention big_attn {
    d_model  = 4096
    heads    = 32
    position = rope(theta = 10000)
    mask     = causal
}

transformer big {
    attention = big_attn
    layers    = 6
    ffn       = gelu(8192)
    norm      = layernorm(pre)
}
"""


def test_a_real_three_gigabyte_stack_compiles_and_runs(tmp_path: Path, request,
                                                       capsys) -> None:
    """6 layers of d_model 4096: 805 M parameters, 3.2 GB of float32 weights."""
    if not request.config.getoption("--deep"):
        pytest.skip("a 3.2 GB model (minutes, ~12 GB of memory): run with --deep")
    spec = tmp_path / "big.attn"
    spec.write_text(BIG)
    assert main(["compile", str(spec), "--name", "big", "--export", "onnx", "-o",
                 str(tmp_path)]) == 0
    assert (tmp_path / "big.onnx.data").stat().st_size > 3_000_000_000
    assert main(["run", str(tmp_path / "big.onnx"), "--length", "16"]) == 0
    assert "NON-FINITE" not in capsys.readouterr().out
