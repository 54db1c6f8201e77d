"""The language: examples check clean and cover the whole language; fmt is canonical,
idempotent and keeps comments and meaning; defaults are resolved; the grammar ships in the
package."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

import attndsl
from attndsl import ast
from attndsl.api import read_source
from attndsl.check import check
from attndsl.cli import main
from attndsl.fmt import format_module
from attndsl.parser import parse

from .conftest import EXAMPLES


def test_examples_check_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(EXAMPLES) >= 12
    assert main(["check", *map(str, EXAMPLES)]) == 0
    assert capsys.readouterr().out.count(": ok (") == len(EXAMPLES)


def test_examples_are_formatted() -> None:
    assert main(["fmt", "--check", *map(str, EXAMPLES)]) == 0


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_fmt_is_idempotent_and_keeps_comments_and_meaning(path: Path) -> None:
    source = read_source(path)
    # de-indent and squash the alignment of `=`: fmt must restore both
    messy = "\n".join(re.sub(r"^(\w+) +=", r"\1=", line.strip())
                      for line in source.text.splitlines())
    assert messy != source.text
    once = format_module(parse(attndsl.parser.decode(messy.encode(), "m")))
    twice = format_module(parse(attndsl.parser.decode(once.encode(), "m")))
    assert once == twice
    assert once == source.text  # the examples are canonical
    comments = [c.text for c in parse(source).comments]
    assert [c.text for c in parse(attndsl.parser.decode(once.encode(), "m")).comments] == comments
    assert check(parse(attndsl.parser.decode(messy.encode(), "m"))).layers == check(
        parse(source)).layers


def test_fmt_rewrites_in_place_and_diff_does_not(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.attn"
    path.write_text("attention a{d_model=64 heads=4  # four\nmask=(causal)&(window(3))}\n")
    assert main(["fmt", "--check", str(path)]) == 1
    assert main(["fmt", "--diff", str(path)]) == 0
    assert "+    mask    = causal & window(3)" in capsys.readouterr().out
    assert path.read_text().startswith("attention a{")
    assert main(["fmt", str(path)]) == 0
    assert path.read_text() == ("attention a {\n    d_model = 64\n    heads   = 4  # four\n"
                                "    mask    = causal & window(3)\n}\n")
    assert main(["fmt", "--check", str(path)]) == 0
    assert main(["check", str(path)]) == 0


def test_fmt_keeps_needed_parentheses() -> None:
    src = "let A = 10 - (4 - 1)\nmask m = (causal | full) & !(window(2) & prefix(1))\n"
    out = format_module(parse(attndsl.parser.decode(src.encode(), "m")))
    assert out == src


def test_defaults_are_resolved() -> None:
    spec = attndsl.loads("attention a {\n d_model = 64\n heads = 4\n}")["a"].spec
    assert (spec.kv_heads, spec.head_dim, spec.value_dim, spec.memory_dim) == (4, 16, 16, 64)
    assert spec.scale == pytest.approx(0.25)
    assert (spec.kind, spec.bias, spec.out_proj, spec.mechanism("softcap"),
            spec.mechanism("qk_norm")) == (
        "self", ("q", "k", "v", "o"), True, None, None)
    assert spec.mask == attndsl.masks.Full()
    assert spec.sparsity.mode == "auto" and spec.dropout == 0.0
    rope = attndsl.loads("attention a {\n d_model = 64\n heads = 4\n position = rope\n}")[
        "a"].spec.position
    assert (rope.theta, rope.dim, rope.interleaved) == (10000.0, 16, False)


def test_let_arithmetic_and_order_independence() -> None:
    spec = attndsl.loads("""
        attention a {
            d_model = D
            heads = H
            mask = window(left = (W - 1) // 2 * 2, right = -W + W)
        }
        let D = H * 16
        let H = 2 + 2
        let W = 9
    """)["a"].spec
    assert spec.d_model == 64 and spec.mask == attndsl.masks.Window(8, 0)


def test_numbers_with_division_powers_and_sqrt() -> None:
    """Python's rules: `**` binds tighter than unary minus and is right-associative; `/` and
    `sqrt` give numbers, and integers stay exact under `**` with a non-negative exponent."""
    program = attndsl.loads("""
        let QUERY_PRE_ATTN = 144
        let EPS = 10 ** -5
        let HALF = 2 ** 61 // 2 ** 60
        attention a {
            d_model = 64
            heads = 4
            scale = QUERY_PRE_ATTN ** -0.5
            softcap = 100 / 3 + sqrt(2) * -2 ** 2 - 2 ** 3 ** 2 / 1024
            mask = window(HALF * 2)
        }
    """)
    spec = program["a"].spec
    assert spec.scale == 144 ** -0.5 == 1 / 12
    assert spec.mechanism("softcap") == pytest.approx(
        100 / 3 + 2 ** 0.5 * -(2 ** 2) - 2 ** (3 ** 2) / 1024)
    assert spec.mask == attndsl.masks.Window(4, 4)
    src = "let A = (-2) ** 2 ** -1 / 3\nlet B = -(2 ** 3) ** 2\nlet C = sqrt(A) ** B\n"
    out = format_module(parse(attndsl.parser.decode(src.encode(), "m")))
    assert out == "let A = (-2) ** 2 ** -1 / 3\nlet B = -(2 ** 3) ** 2\nlet C = sqrt(A) ** B\n"


def test_examples_cover_the_language() -> None:
    keys: set[str] = set()
    tr_keys: set[str] = set()
    calls: set[str] = set()
    names: set[str] = set()
    ops: set[str] = set()
    kinds: set[type] = set()
    words: set[str] = set()
    all_calls: list[ast.Call] = []
    for path in EXAMPLES:
        for d in parse(read_source(path)).definitions:
            kinds.add(type(d))
            exprs = [d.value] if isinstance(d, ast.LetDef | ast.MaskDef) else [
                e.value for e in d.entries]
            if isinstance(d, ast.AttentionDef):
                keys |= {e.key for e in d.entries}
            if isinstance(d, ast.TransformerDef):
                tr_keys |= {e.key for e in d.entries}
            for e in exprs:
                for node in ast.walk(e):
                    if isinstance(node, ast.Call):
                        calls.add(node.func)
                        all_calls.append(node)
                        words |= {a.value.id for a in node.args if isinstance(a.value, ast.Name)}
                    elif isinstance(node, ast.Name):
                        names.add(node.id)
                    elif isinstance(node, ast.BinOp):
                        ops.add(node.op)
                    elif isinstance(node, ast.Not):
                        ops.add("!")
    from attndsl.check.layers import _ATTENTION_KEYS
    from attndsl.check.stacks import _KEYS as _TRANSFORMER_KEYS

    assert keys == set(_ATTENTION_KEYS)
    assert tr_keys == set(_TRANSFORMER_KEYS)
    used = calls | names
    assert {"sinusoidal", "learned", "rope", "alibi", "relative_bias"} <= used
    assert {"full", "causal", "window", "dilated", "chunked", "strided", "global", "prefix",
            "random", "padding", "document"} <= used
    assert {"&", "|", "!", "-", "*", "**"} <= ops
    assert {"relu", "gelu", "gelu_tanh", "swiglu", "geglu", "layernorm", "rmsnorm"} <= calls
    assert {"eps", "unit_offset"} <= {a.name for e in all_calls for a in e.args}
    assert {"pre", "post", "bottom_right", "elu", "relu", "softmax"} <= words | names
    assert {"linear", "block"} <= calls and {"dense", "auto"} <= names
    assert kinds == {ast.LetDef, ast.MaskDef, ast.AttentionDef, ast.TransformerDef}


def test_grammar_ships_inside_the_package() -> None:
    grammar = resources.files("attndsl.grammars").joinpath("attn.lark")
    assert grammar.is_file()
    assert grammar.read_text() == (Path(__file__).parent.parent / "grammars" / "attn.lark"
                                   ).read_text()


def test_absent_and_explicit_defaults_resolve_alike() -> None:
    implicit = attndsl.loads("attention a {\n d_model = 64\n heads = 4\n}")["a"].spec
    explicit = attndsl.loads("""attention a {
        d_model = 64
        heads = 4
        kv_heads = 4
        head_dim = 16
        value_dim = 16
        kind = self
        bias = true
        out_proj = true
        scale = auto
        softcap = none
        qk_norm = none
        position = none
        kernel = softmax
        mask = full
        sparsity = auto
        dropout = 0.0
    }""")["a"].spec
    assert implicit == explicit
