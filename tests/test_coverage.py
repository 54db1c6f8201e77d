"""The coverage table of docs/CHECKPOINTS.md against the sweep that makes it
(tools/coverage.py): a sample of model types by default (two imported exactly, one refused,
one out of scope), every type with --deep. Each type's status must be the table's, and so must
a refusal's or an out-of-scope reason (numbers of max errors aside), so the table cannot drift
from the code. The sweep builds tiny random checkpoints from transformers' config classes:
nothing downloads."""

from __future__ import annotations

import re
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import coverage

TABLE = ROOT / "docs" / "CHECKPOINTS.md"
SAMPLE = ("llama", "qwen3", "rwkv", "gemma3")


def _same(row: dict) -> tuple[str, str]:
    """What must match: the status, and the detail but for an exact type's error (a number
    that the last digit of a float32 sum may move)."""
    detail = re.sub(r"max error \S+", "max error N", row["detail"].replace("\n", " "))
    return row["status"], "" if row["status"] == "exact" else detail


def test_the_table_lists_every_type_of_the_causal_lm_mapping_once() -> None:
    table = coverage.read_table(TABLE)
    assert sorted(table) == coverage.all_types()
    assert not [t for t, r in table.items() if r["status"] in ("WRONG", "crash")], table


def test_the_sample_has_the_statuses_of_the_table() -> None:
    from coverage_check import check

    table = coverage.read_table(TABLE)
    got = {t: check(t).__dict__ for t in SAMPLE}
    assert {t: _same(r) for t, r in got.items()} == {t: _same(table[t]) for t in SAMPLE}
    # the sample is what it says: two exact, one refused naming why, one out of scope
    assert [got[t]["status"] for t in SAMPLE] == ["exact", "exact", "refused", "out of scope"]
    assert "`rwkv` is not one attndsl imports" in got["rwkv"]["detail"]


def test_a_refusal_detail_names_the_field_never_a_traceback() -> None:
    table = coverage.read_table(TABLE)
    for row in table.values():
        assert "Traceback" not in row["detail"], row
        if row["status"] == "refused":
            assert row["detail"], row


def test_the_table_section_is_what_write_makes(tmp_path) -> None:
    """--write replaces the marked section alone, and reading it back gives the rows."""
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{coverage.BEGIN}\nold\n{coverage.END}\nafter\n")
    rows = [{"model_type": "b", "status": "refused", "detail": "`x` \\| y", "genai": "-"},
            {"model_type": "a", "status": "exact", "detail": "max error 1e-06", "genai": "yes"}]
    coverage.write(doc, rows)
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert text.index("| `a` |") < text.index("| `b` |")  # sorted
    assert coverage.read_table(doc) == {r["model_type"]: r for r in rows}


def test_write_with_types_replaces_their_rows_alone(tmp_path) -> None:
    """`--types T --write FILE`: T's rows replaced, the others kept, the counts recomputed."""
    doc = tmp_path / "doc.md"
    doc.write_text(f"{coverage.BEGIN}\n{coverage.END}\n")
    old = [{"model_type": t, "status": "refused", "detail": "lacks x", "genai": "-"}
           for t in ("a", "b", "c")]
    coverage.write(doc, old)
    new = {"model_type": "b", "status": "exact", "detail": "max error 1e-06", "genai": "yes"}
    coverage.update(doc, [new])
    assert coverage.read_table(doc) == {"a": old[0], "b": new, "c": old[2]}
    assert "Counts: 1 exact, 2 refused." in doc.read_text()


@pytest.mark.skipif("not config.getoption('--deep')", reason="the whole sweep: --deep")
def test_every_type_has_the_status_of_the_table() -> None:
    table = coverage.read_table(TABLE)
    rows = coverage.sweep(coverage.all_types(), jobs=2)
    assert {r["model_type"]: _same(r) for r in rows} == {t: _same(r) for t, r in table.items()}
