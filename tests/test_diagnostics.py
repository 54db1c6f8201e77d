"""Invalid specs: every one is diagnosed with file:line:col, the line and a caret, exit code 2,
never a traceback. Goldens in tests/invalid/*.expected; each .attn says why it is invalid."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from attndsl.cli import main
from attndsl.errors import SpecError
from attndsl.parser import MAX_BYTES

from .conftest import ROOT, golden

INVALID = sorted((ROOT / "tests" / "invalid").glob("*.attn"))
LOCATION = re.compile(r"^ --> (\S+):(\d+):(\d+)$", re.M)


def test_there_are_at_least_twenty_invalid_inputs() -> None:
    assert len(INVALID) >= 20
    for path in INVALID:
        assert path.read_text().startswith("# invalid: "), f"{path.name} must say why"


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_input_is_diagnosed(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rel = path.relative_to(ROOT).as_posix()
    assert main(["check", rel]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith("error: ")
    locations = LOCATION.findall(err)
    assert locations, "every diagnostic here points into the file"
    lines = path.read_text().splitlines()
    for file, line, _col in locations:
        assert file == rel
        assert 1 <= int(line) <= len(lines)
        # the caret line sits under the quoted source line
        quoted = f"{line} | {lines[int(line) - 1]}"
        assert quoted in err
    assert re.search(r"^\s+\| +\^+$", err, re.M)
    golden(path.with_suffix(".expected"), err)


def test_all_errors_in_a_file_are_reported_together(capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", "tests/invalid/several_errors.attn"])
    err = capsys.readouterr().err
    assert err.count("error: ") == 4


def _check_bytes(tmp_path: Path, data: bytes, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "input.attn"
    path.write_bytes(data)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: ")
    assert f"{path}:" in err
    return err


def test_empty_file_has_no_layers_but_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "empty.attn"
    path.write_bytes(b"")
    assert main(["check", str(path)]) == 0


def test_binary_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _check_bytes(tmp_path, b"attention a {\x00\x01\x02", capsys)
    assert "NUL" in err


def test_non_utf8_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _check_bytes(tmp_path, b"let A = 4\nlet B = \xff\xfe\n", capsys)
    assert "UTF-8" in err and ":2:9" in err


def test_ten_megabyte_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _check_bytes(tmp_path, b"let A = 1\n" * (10 * 1024 * 1024 // 10), capsys)
    assert f"{MAX_BYTES:,}" in err


def test_deeply_nested_parentheses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "let A = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    err = _check_bytes(tmp_path, text.encode(), capsys)
    assert "nested" in err


def test_deep_negation_chain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "mask m = " + "!" * 10000 + "causal\n"
    err = _check_bytes(tmp_path, text.encode(), capsys)
    assert "nested" in err


def test_integer_literal_with_thousands_of_digits(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    err = _check_bytes(tmp_path, b"let A = " + b"9" * 5000 + b"\n", capsys)
    assert "digits" in err


def test_missing_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "no/such/file.attn"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: no/such/file.attn: no such file"


def test_spec_error_carries_rendered_diagnostics() -> None:
    import attndsl

    with pytest.raises(SpecError) as info:
        attndsl.load("tests/invalid/kv_heads_divisibility.attn")
    assert "heads (12) must be divisible by kv_heads (5)" in str(info.value)
    assert info.value.diagnostics[0].span is not None


def test_console_script_never_prints_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.attn"
    path.write_bytes(b"attention { ] ) \xff")
    proc = subprocess.run([sys.executable, "-m", "attndsl.cli", "check", str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
