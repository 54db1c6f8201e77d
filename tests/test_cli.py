"""Commands end to end: explain (golden IR text), run, and file-level errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from attndsl.cli import main

from .conftest import EXAMPLES, ROOT, golden


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_explain_prints_the_ir(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(path.relative_to(ROOT))]) == 0
    golden(ROOT / "tests" / "golden" / f"{path.stem}.ir", capsys.readouterr().out)


def test_run_sizes_the_memory_rows_ids_by_the_memory(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A per-image cross attention's memory_segment_ids follow --memory-length, not --length."""
    out = tmp_path / "m"
    assert main(["compile", "examples/cross_attention.attn", "--name", "flamingo_per_image",
                 "--export", "onnx", "-o", str(out)]) == 0
    assert main(["run", str(out / "flamingo_per_image.onnx"), "--length", "5",
                 "--memory-length", "9"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"memory_segment_ids\s+int64\s+\[1, 9\]", text)
    assert re.search(r"segment_ids\s+int64\s+\[1, 5\]", text)


def test_run_with_random_and_given_inputs(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    assert main(["compile", "examples/t5_relative.attn", "--name", "t5_cross", "--export",
                 "onnx", "-o", str(out)]) == 0
    model = out / "t5_cross.onnx"
    assert main(["run", str(model), "--batch", "2", "--length", "5", "--memory-length", "9",
                 "--output", str(tmp_path / "y.npz")]) == 0
    text = capsys.readouterr().out
    assert "memory" in text and "[2, 9, 256]" in text and "[2, 5, 256]" in text
    assert "latency" in text
    y = np.load(tmp_path / "y.npz")["y"]
    assert y.shape == (2, 5, 256) and np.isfinite(y).all()
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "x.npz", x=rng.standard_normal((1, 3, 256)).astype(np.float32),
             memory=rng.standard_normal((1, 4, 256)).astype(np.float32),
             key_lengths=np.array([2], dtype=np.int64))
    assert main(["run", str(model), "--inputs", str(tmp_path / "x.npz")]) == 0
    np.savez(tmp_path / "bad.npz", x=np.zeros((1, 3, 256), np.float32))
    assert main(["run", str(model), "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "missing input(s) memory, key_lengths" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["run", "no/such.onnx"], 2, "no such model file"),
    (["compile", "examples/llama_gqa.attn", "--export", "onnx", "--name", "nope"], 2,
     "no layer named `nope` (layers: llama_attn, llama_decoder)"),
    (["compile", "examples/missing.attn", "--export", "onnx"], 2, "no such file"),
    (["compile", "examples/llama_gqa.attn"], 2, "--export"),
    (["verify", "examples/llama_gqa.attn", "--lengths", "0"], 2, "integer in [1, 2048]"),
    (["compile", "examples/llama_gqa.attn", "--export", "onnx", "--weights", "w.pt"], 2,
     "w.pt: no such weights file"),  # for the top layer, llama_decoder
    (["explain", "tests/invalid/heads_zero.attn"], 2, "heads must be a positive integer"),
])
def test_errors_are_one_clear_message(argv: list[str], code: int, message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unreadable_model_is_a_runtime_error(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["run", str(bad)]) == 3
    assert "could not load" in capsys.readouterr().err


def test_bench_prints_a_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["bench", "examples/mistral_local.attn", "--lengths", "8,33", "-q"]) == 0
    out = capsys.readouterr().out
    for backend in ("torch eager", "torch sdpa (dense mask)", "portable on cpu",
                    "ort-cpu on cpu"):
        assert out.count(backend) == 2
    assert main(["bench", "examples/bloom_alibi.attn", "--lengths", "16", "--targets",
                 "ort-cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["backend"] for r in rows} == {"torch eager", "torch sdpa (dense mask)",
                                            "ort-cpu on cpu"}
    assert all(r["latency_ms"] > 0 and r["gflops"] > 0 for r in rows)
    assert main(["bench", "examples/bloom_alibi.attn", "--repeat", "3"]) == 2


def test_bench_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from .test_tools import _png_size_and_pixels

    plot = tmp_path / "p.png"
    assert main(["bench", "examples/mistral_local.attn", "--lengths", "16,64", "--targets",
                 "ort-cpu", "-q", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    width, height, pixels = _png_size_and_pixels(plot.read_bytes())
    assert (width, height) == (640, 400)
    legend = re.findall(r"#([0-9a-f]{6})  mistral_local: (.+)", out)
    assert [b for _, b in legend] == ["torch eager", "torch sdpa (dense mask)", "ort-cpu on cpu"]
    for colour, _ in legend:  # every series is drawn
        rgb = np.array([int(colour[i:i + 2], 16) for i in (0, 2, 4)], np.uint8)
        assert (pixels == rgb).all(-1).sum() >= 49


def test_growth_exponents_are_log_log_slopes() -> None:
    """latency = c L^2 and memory = c' L give slopes 2 and 1; lengths below 1024 and peaks
    under 1 MB are left out of the fit."""
    from attndsl.bench import Measurement
    from attndsl.bench_report import growth_exponents

    rows = [Measurement("a", L, 1, "x", 3e-6 * L**2, 0.01 * L, None) for L in (1024, 2048, 8192)]
    rows.append(Measurement("a", 512, 1, "x", 1.0, 5.0, None))  # below the fitted range
    rows += [Measurement("a", L, 1, "y", 0.5 * L, 0.5, None) for L in (1024, 4096)]
    fits = {backend: (lengths, a, b) for _, backend, lengths, a, b in growth_exponents(rows)}
    assert fits["x"][0] == [1024, 2048, 8192]
    assert fits["x"][1] == pytest.approx(2.0) and fits["x"][2] == pytest.approx(1.0)
    assert fits["y"][1] == pytest.approx(1.0) and fits["y"][2] is None


def test_bench_reports_growth_with_the_plans_theory(capsys) -> None:
    assert main(["bench", "examples/mistral_local.attn", "--lengths", "1024,2048",
                 "--targets", "ort-cpu", "-q"]) == 0
    out = capsys.readouterr().out
    growth = out[out.index("# growth with L"):]
    row = next(line for line in growth.splitlines() if "ort-cpu on cpu" in line)
    assert row.split()[-1] == "1"  # block-sparse window: linear in L
    assert "torch eager" in growth


def test_explain_decode_prints_the_decoding_form_and_its_layout(capsys) -> None:
    assert main(["explain", "examples/mistral_local.attn", "--decode"]) == 0
    out = capsys.readouterr().out
    assert "%past_key_values.0.key = input" in out and "output present.0.key" in out
    assert "cache layout in_place:" in out and "gqa_cache(local_window_size=64)" in out
    assert main(["explain", "examples/mistral_local.attn", "--decode", "--bounded-cache",
                 "--target", "portable"]) == 0
    out = capsys.readouterr().out
    assert "cache layout bounded:" in out and "= tail" in out
    assert main(["explain", "examples/bert_padding.attn", "--decode"]) == 2
    assert "cannot decode" in capsys.readouterr().err
    assert main(["explain", "examples/mistral_local.attn", "--bounded-cache"]) == 2
