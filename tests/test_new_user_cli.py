"""What a new user meets at the command line, round 2 (issue 39: verify's verdicts and help,
compile's skipped layers, seeds and quantization options, show's length, ruler and --svg),
each held by a test that failed before its fix, through the CLI as the user runs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import attndsl
from attndsl.cli import main

from .conftest import ROOT

# Linformer projects at most max_len = 16 keys: verify must skip any longer length
SHORT = """attention short {
    d_model = 32
    heads   = 4
    kernel  = linformer(k = 8, max_len = 16)
}
"""

# a tiny stack and its attention: a weights file holds the stack's tensors
STACK = """attention tiny_attn {
    d_model  = 32
    heads    = 4
    kv_heads = 2
    bias     = false
    mask     = causal
}

transformer tiny_stack {
    attention = tiny_attn
    layers    = 2
    ffn       = swiglu(48)
    norm      = rmsnorm(pre)
}
"""

# BigBird's shape with a 512-token window: at 24 tokens every pair is visible
BIGBIRD_512 = """attention wide_bigbird {
    d_model = 32
    heads   = 4
    mask    = window(left = 256, right = 255) | global(first = 2)
}
"""


def _spec(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / f"{name}.attn"
    path.write_text(text)
    return path


def _attndsl(*args: str) -> subprocess.CompletedProcess:
    """The CLI as the user runs it: its own process, its exit code, its two streams."""
    return subprocess.run([sys.executable, "-m", "attndsl.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)


def _rows(out: str) -> list[str]:
    """The report's table rows (each starts with its shape)."""
    return [line for line in out.splitlines() if line.startswith("B=")]


def test_verify_does_not_pass_a_skipped_shape(tmp_path: Path, capsys) -> None:
    """Skipped shapes say SKIPPED, never PASS, and are not counted; with nothing compared,
    verify says NOT VERIFIED and exits 1."""
    spec = _spec(tmp_path, SHORT, "short")
    done = _attndsl("verify", str(spec), "--lengths", "17", "--targets", "ort-cpu", "-q")
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert len(_rows(out)) == 2  # B = 1 and 3
    assert all("SKIPPED" in row and "PASS" not in row for row in _rows(out))
    assert "17 tokens, more than the 16 it takes" in out
    assert "NOT VERIFIED: nothing was compared (2 skipped shapes" in out
    assert "PASSED" not in out
    # one length that runs: its 4 comparisons are counted, the 2 skipped shapes are not
    assert main(["verify", str(spec), "--lengths", "5,17", "--targets", "ort-cpu", "-q"]) == 0
    out = capsys.readouterr().out
    assert "PASSED: 4 of 4 comparisons within tolerance (not counted: 2 skipped shapes)" in out
    assert sum(row.split()[-1] == "PASS" for row in _rows(out)) == 4
    assert main(["verify", str(spec), "--lengths", "5,17", "--targets", "ort-cpu",
                 "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["passed"] is True and report["compared"] == 4
    skipped = [c for c in report["comparisons"] if c["length"] == 17]
    assert len(skipped) == 2 and all(c["verdict"] == "SKIPPED" and c["passed"] is None
                                     for c in skipped)


def test_verify_shows_the_quantization_row_as_information(tmp_path: Path, capsys) -> None:
    """The quantization's own error (tolerance nan) is INFO, not PASS, and not counted."""
    pytest.importorskip("onnxruntime")
    spec = _spec(tmp_path, STACK, "stack")
    assert main(["verify", str(spec), "--name", "tiny_attn", "--quantize", "int8",
                 "--targets", "ort-cpu", "--lengths", "5", "--batches", "1", "-q"]) == 0
    out = capsys.readouterr().out
    [info] = [row for row in _rows(out) if " quantization " in row]
    assert "INFO" in info and "PASS" not in info and "nan" not in info
    assert "PASSED: 2 of 2 comparisons within tolerance (not counted: 1 informational row)" in out


def test_verify_help_says_lengths_replace_the_chosen_ones(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    says = text[text.rindex("--lengths LENGTHS"):text.rindex("--batches BATCHES")]  # not usage
    assert "always" not in says and "1,7,64,300" not in says
    assert "instead of those chosen from the spec" in says


def _stack_weights(tmp_path: Path) -> Path:
    """The stack's tensors, named as docs/LANGUAGE.md (Weights) names them, in a file."""
    from safetensors.torch import save_file

    layer = attndsl.loads(STACK, "stack.attn")["tiny_stack"]
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in layer.to_torch(seed=5).state_dict().items()},
              str(path))
    return path


def test_compile_with_weights_names_the_layers_it_does_not_compile(tmp_path: Path) -> None:
    """README: "for every layer of the file"; with --weights, the file's top layer alone
    (the weights are its), and the terminal says which layers were not compiled and why."""
    spec = _spec(tmp_path, STACK, "stack")
    weights = _stack_weights(tmp_path)
    out = tmp_path / "out"
    done = _attndsl("compile", str(spec), "--weights", str(weights), "--export", "onnx", "-q",
                    "-o", str(out))
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["tiny_stack.onnx"]
    assert "not its part tiny_attn" in err and "--name" in err


def test_weights_from_a_file_record_no_seed(tmp_path: Path, capsys) -> None:
    """The metadata and verify's header name the weights' source, not a seed that drew
    nothing; a --seed given with --weights is refused."""
    spec = _spec(tmp_path, STACK, "stack")
    weights = _stack_weights(tmp_path)
    assert main(["compile", str(spec), "--name", "tiny_stack", "--weights", str(weights),
                 "--export", "onnx", "-q", "-o", str(tmp_path / "w")]) == 0
    props = {p.key: p.value for p in onnx.load(tmp_path / "w" / "tiny_stack.onnx")
             .metadata_props}
    assert "attndsl.seed" not in props and len(props["attndsl.weights_sha256"]) == 64
    assert main(["compile", str(spec), "--name", "tiny_stack", "--export", "onnx", "-q",
                 "-o", str(tmp_path / "s")]) == 0  # seeded: the seed is the source
    props = {p.key: p.value for p in onnx.load(tmp_path / "s" / "tiny_stack.onnx")
             .metadata_props}
    assert props["attndsl.seed"] == "0" and "attndsl.weights_sha256" not in props
    capsys.readouterr()
    assert main(["compile", str(spec), "--name", "tiny_stack", "--weights", str(weights),
                 "--seed", "3", "--export", "onnx", "-o", str(tmp_path / "x")]) == 2
    assert "--seed draws random weights; with --weights" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["verify", str(spec), "--name", "tiny_stack", "--weights", str(weights),
                 "--targets", "ort-cpu", "--lengths", "3", "--batches", "1", "-q"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f"weights {weights}; inputs from seed 0" in head and "; seed 0" not in head


@pytest.mark.parametrize("flags", [["--quant-block", "64"], ["--quant-asymmetric"],
                                   ["--quant-accuracy", "1"]])
@pytest.mark.parametrize("command", ["compile", "verify"])
def test_quantization_options_without_quantize_are_refused(tmp_path: Path, capsys, flags,
                                                           command) -> None:
    spec = _spec(tmp_path, SHORT, "short")
    extra = ["--export", "onnx", "-o", str(tmp_path / "out")] if command == "compile" else []
    assert main([command, str(spec), *flags, *extra]) == 2
    err = capsys.readouterr().err
    assert f"{flags[0]} only shapes a quantized export: add --quantize" in err
    assert not (tmp_path / "out").exists()


def test_quant_block_reaches_the_export_with_quantize(tmp_path: Path) -> None:
    spec = _spec(tmp_path, STACK, "stack")
    assert main(["compile", str(spec), "--name", "tiny_attn", "--export", "onnx", "-q",
                 "--quantize", "int4", "--quant-block", "16", "-o", str(tmp_path)]) == 0
    props = {p.key: p.value for p in onnx.load(tmp_path / "tiny_attn.onnx").metadata_props}
    assert props["attndsl.quantization"].startswith("int4, block 16, symmetric")


def test_show_draws_a_wide_window_past_its_edge(tmp_path: Path, capsys) -> None:
    """At a fixed 24 tokens a 512-token window is all visible; the default length is the
    first prime past the window's keys, as verify picks, and the notebook draws the same."""
    spec = _spec(tmp_path, BIGBIRD_512, "wide")
    assert main(["show", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "at L = 521 (the first prime past the window's 512 keys" in out
    density = re.search(r"density: (\d+) of (\d+) pairs", out)
    assert density and int(density[1]) < int(density[2]) == 521 * 521
    rows = [line.split(" │ ")[1] for line in out.splitlines() if " │ " in line]
    assert rows and max(map(len, rows)) <= 128  # blocks of pairs, not 521 columns
    assert "·" in rows[-1] and "█" in rows[-1]  # the last queries no longer see the first keys
    html = attndsl.loads(BIGBIRD_512, "wide.attn")["wide_bigbird"]._repr_html_()
    assert "mask at L = 521" in html and "L = 521, S = 521</title>" in html
    # a spec that names no extent keeps 24 rows, or fewer where the layer takes fewer
    assert main(["show", "examples/llama_gqa.attn", "--name", "llama_attn"]) == 0
    assert "at L = 24\n" in capsys.readouterr().out
    assert main(["show", str(_spec(tmp_path, SHORT, "short"))]) == 0
    assert "at L = 16 (the longest it takes: `short`'s linformer" in capsys.readouterr().out


def test_show_ruler_writes_whole_key_indices(capsys) -> None:
    assert main(["show", "examples/mistral_local.attn", "--length", "120"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if " │ " in line)
    ruler, row = lines[first - 1], lines[first]
    start = row.index("│") + 2  # the column of key 0
    for k in range(0, 120, 10):  # each tick's number starts at its key's column
        assert ruler[start + k:].split()[0] == str(k)


def test_show_blocks_a_long_grid_exactly(capsys) -> None:
    """Past 128 keys a character is a square block of pairs: all visible, some, or none."""
    assert main(["show", "examples/llama_gqa.attn", "--name", "llama_attn", "--length",
                 "600"]) == 0
    out = capsys.readouterr().out
    rows = [line.split(" │ ")[1] for line in out.splitlines() if " │ " in line]
    assert len(rows) == 120 and {len(r) for r in rows} == {120}  # 5 x 5 pairs each
    assert "each character 5 x 5 pairs" in out
    for i, r in enumerate(rows):  # causal: full below the diagonal, half on it, none above
        assert r == "█" * i + "▒" + "·" * (119 - i)


def test_show_svg_prints_the_summary_not_the_grid(tmp_path: Path, capsys) -> None:
    picture = tmp_path / "m.svg"
    assert main(["show", "examples/bigbird.attn", "--length", "600", "--svg",
                 str(picture)]) == 0
    out = capsys.readouterr().out
    assert "│" not in out and "density:" in out and len(out) < 2000
    assert picture.read_text().startswith("<svg")


def test_verify_json_names_weights_allowed_to_hold_unused_tensors(tmp_path: Path,
                                                                  capsys) -> None:
    """`verify --json --weights W --allow-unused-weights` ended in an internal error (the
    report held the option's object, which JSON cannot write); the report names the file."""
    import torch
    from safetensors.torch import load_file, save_file

    spec = _spec(tmp_path, STACK, "stack")
    weights = _stack_weights(tmp_path)
    save_file({**load_file(weights), "extra.weight": torch.ones(2)}, weights)
    assert main(["verify", str(spec), "--name", "tiny_stack", "--weights", str(weights),
                 "--allow-unused-weights", "--json", "--targets", "ort-cpu", "--lengths", "3",
                 "--batches", "1"]) == 0
    out, err = capsys.readouterr()
    [report] = json.loads(out)
    assert report["weights"] == str(weights) and report["passed"] is True
    assert "internal error" not in err and "`extra.weight` [2]" in err


def test_layer_verify_names_its_weights_in_the_header(tmp_path: Path) -> None:
    """`Layer.verify(weights=...)` said `seed 0` as if the seed had drawn them: a file is named
    by its path, a trained module as such."""
    weights = _stack_weights(tmp_path)
    layer = attndsl.loads(STACK, "stack.attn")["tiny_stack"]
    options = {"targets": ("ort-cpu",), "lengths": (3,), "batches": (1,)}
    head = layer.verify(weights=weights, **options).text().splitlines()[0]
    assert f"weights {weights}; inputs from seed 0" in head, head
    module = layer.to_torch(seed=5)
    report = layer.verify(weights=module, **options)
    assert report.weights == "a module's tensors" and report.passed
    assert layer.verify(**options).weights is None  # drawn from the seed


def test_verify_help_says_both_sides_of_a_threshold(capsys) -> None:
    """--lengths' help said verify checks "the first prime past every ... by_length
    threshold"; it checks the threshold n and n + 1."""
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    says = text[text.rindex("--lengths LENGTHS"):text.rindex("--batches BATCHES")]
    assert "both sides of every by_length threshold n: n and n+1" in says, says
    assert "block and by_length threshold" not in says
