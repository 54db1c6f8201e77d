"""show (terminal grid, PNG), Triton repositories, Polygraphy-format inputs/outputs, and
examples/run_onnx.py."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest

import attndsl
from attndsl.cli import main
from attndsl.polygraphy_json import decode_array
from attndsl.show import png_layout

from .conftest import EXAMPLES, ROOT

LAYERS = [(p, n) for p in EXAMPLES for n in attndsl.load(p)]


def _png_size_and_pixels(data: bytes) -> tuple[int, int, np.ndarray]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
            assert body[8:10] == b"\x08\x02"  # 8-bit RGB
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height = size
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + 3 * width)
    return width, height, raw[:, 1:].reshape(height, width, 3)


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_show_draws_every_example(path: Path, name: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "mask.png"
    assert main(["show", str(path), "--name", name, "--length", "13"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"^\s*\d+ │ ", line)]
    assert len(rows) == 13
    assert main(["show", str(path), "--name", name, "--length", "13", "--png", str(png)]) == 0
    summary = capsys.readouterr().out  # the picture has the rows
    assert "│" not in summary and out.splitlines()[-1] in summary
    spec = attndsl.load(path)[name].spec
    attn = getattr(spec, "attention", spec)
    visible = sum(row.count("█") for row in rows)
    assert f"density: {visible} of {13 * 13} pairs" in out
    width, height, pixels = _png_size_and_pixels(png.read_bytes())
    panels = attn.heads if type(attn.position).__name__ in ("Alibi", "RelativeBias") else 1
    at = png_layout(13, 13, panels)
    assert width >= at.left + panels * at.pitch and height > at.top + 13 * at.scale
    # each panel's white cells are exactly the masked pairs of the grid
    for i in range(panels):
        x0 = at.left + i * at.pitch
        cells = pixels[at.top:at.top + 13 * at.scale:at.scale, x0:x0 + 13 * at.scale:at.scale]
        assert (~(cells == 255).all(-1)).sum() == visible
    # the axes are labelled: dark pixels in the margins above and left of the panels
    assert (pixels[:at.top - 2, at.left:] < 128).any()
    assert (pixels[at.top:, :at.left - 2] < 128).any()


def test_show_grid_matches_the_mask(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "examples/mistral_local.attn", "--length", "70"]) == 0
    rows = [line.split(" │ ")[1] for line in capsys.readouterr().out.splitlines()
            if " │ " in line]
    assert rows[0] == "█" + "·" * 69
    assert rows[69] == "·" * 6 + "█" * 64  # window of 64 ending at the diagonal


def test_triton_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "examples/t5_relative.attn", "--name", "t5_cross", "--export",
                 "triton", "-o", str(tmp_path)]) == 0
    folder = tmp_path / "t5_cross"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t5_cross"]
    model = onnx.load(str(folder / "1" / "model.onnx"))
    config = (folder / "config.pbtxt").read_text()
    assert 'backend: "onnxruntime"' in config and "dynamic_batching" in config
    assert "kind: KIND_GPU" in config and 'name: "t5_cross"' in config
    declared = re.findall(r'name: "(\w+)"\s+data_type: (\w+)\s+dims: \[ ([^\]]*) \]', config)
    types = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.INT64: "TYPE_INT64"}
    graph = [*model.graph.input, *model.graph.output]
    assert [d[0] for d in declared] == [v.name for v in graph]
    for (name, dtype, dims), value in zip(declared, graph, strict=True):
        t = value.type.tensor_type
        assert dtype == types[t.elem_type], name
        want = [d.dim_value or -1 for d in t.shape.dim][1:] or [1]
        assert [int(x) for x in dims.split(",")] == want, name
    props = {p.key: p.value for p in model.metadata_props}
    assert props["attndsl.target"] == "ort-cuda"
    before = (folder / "config.pbtxt").read_text()
    assert main(["compile", "examples/t5_relative.attn", "--name", "nope", "--export",
                 "triton", "-o", str(tmp_path)]) == 2
    assert (folder / "config.pbtxt").read_text() == before


def test_verify_saves_polygraphy_files(tmp_path: Path) -> None:
    inputs, outputs = tmp_path / "inputs.json", tmp_path / "outputs.json"
    assert main(["verify", "examples/bert_padding.attn", "--name", "bert_self", "--batches",
                 "2", "--targets", "ort-cpu", "-q", "--save-inputs", str(inputs),
                 "--save-outputs", str(outputs)]) == 0
    feeds = json.loads(inputs.read_text())
    assert len(feeds) == 4  # one per length
    for feed in feeds:
        assert set(feed) == {"x", "key_lengths"}
        assert feed["x"]["polygraphy_class"] == "ndarray"
    results = json.loads(outputs.read_text())
    assert results["polygraphy_class"] == "RunResults"
    runners = dict(results["lst"])
    assert set(runners) == {"attndsl-reference", "torch", "ort-cpu on cpu"}
    model = attndsl.load("examples/bert_padding.attn")["bert_self"].onnx_bytes()
    from attndsl.backends import runtime

    session = runtime.make_session(model)
    for feed, result in zip(feeds, runners["attndsl-reference"], strict=True):
        arrays = {k: decode_array(v) for k, v in feed.items()}
        y = result["outputs"]["y"]["values"]
        want = decode_array(y)
        assert result["polygraphy_class"] == "IterationResult"
        np.testing.assert_allclose(runtime.run(session, arrays), want, atol=1e-4)


def test_float16_polygraphy_files_hold_what_the_model_takes(tmp_path: Path) -> None:
    """A float16 model is fed float16 and compared with float16 outputs; the inputs feed the
    model as they are, through plain session.run (as Polygraphy does)."""
    inputs, outputs = tmp_path / "inputs.json", tmp_path / "outputs.json"
    assert main(["verify", "examples/mistral_local.attn", "--batches", "1", "--targets",
                 "ort-cpu", "--dtype", "float16", "-q", "--save-inputs", str(inputs),
                 "--save-outputs", str(outputs)]) == 0
    feeds = [{k: decode_array(v) for k, v in f.items()} for f in json.loads(inputs.read_text())]
    assert {f["x"].dtype for f in feeds} == {np.dtype(np.float16)}
    runners = dict(json.loads(outputs.read_text())["lst"])
    model = attndsl.load("examples/mistral_local.attn")["mistral_local"].onnx_bytes(
        dtype="float16")
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for feed, result in zip(feeds, runners["ort-cpu on cpu"], strict=True):
        want = decode_array(result["outputs"]["y"]["values"])
        assert want.dtype == np.float16
        np.testing.assert_array_equal(session.run(None, feed)[0], want)
    assert main(["verify", "examples/mistral_local.attn", "--dtype", "bfloat16",
                 "--save-inputs", str(tmp_path / "never.json")]) == 2
    assert not (tmp_path / "never.json").exists()


def test_run_onnx_example_needs_only_onnxruntime(tmp_path: Path) -> None:
    assert main(["compile", "examples/packed_documents.attn", "--export", "onnx", "-o",
                 str(tmp_path)]) == 0
    proc = subprocess.run([sys.executable, "examples/run_onnx.py",
                           str(tmp_path / "packed_causal.onnx")], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "segment_ids" in proc.stdout and "finite: True" in proc.stdout


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_run_and_triton_work_on_every_example(path: Path, name: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(path), "--name", name, "--export", "triton", "-o",
                 str(tmp_path)]) == 0
    model = tmp_path / name / "1" / "model.onnx"
    config = (tmp_path / name / "config.pbtxt").read_text()
    graph = onnx.load(str(model)).graph
    for value in [*graph.input, *graph.output]:
        assert f'name: "{value.name}"' in config
    capsys.readouterr()
    assert main(["run", str(model), "--batch", "2", "--length", "9", "--memory-length", "5",
                 "--output", str(tmp_path / "y.npz")]) == 0
    saved = np.load(tmp_path / "y.npz")
    y = saved["logits" if "logits" in saved.files else "y"]
    patches = getattr(attndsl.load(path)[name].spec, "patches", None)  # (9 patches, and the
    rows = 9 + (patches.prefix if patches else 0)  # class token of a vision stack)
    assert y.shape[:2] == (2, rows) and np.isfinite(y).all()


def test_the_wheel_lists_every_package() -> None:
    """A package missing from pyproject's list installs in editable mode and is absent from
    a wheel: every folder of attndsl/ with an __init__.py is listed."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    root = Path(__file__).parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(root).parts)
             for p in (root / "attndsl").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def test_no_module_is_over_400_lines() -> None:
    """docs/ARCHITECTURE.md's promise: a module does one thing and stays readable."""
    from .conftest import ROOT

    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "attndsl").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
