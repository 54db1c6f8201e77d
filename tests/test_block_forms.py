"""A stack's block forms: blocks without a feed-forward (`ffn = none`: Mamba2's stacks;
`attention_only = [...]`: Nemotron-H's mixer layers that no MLP layer follows), h = x +
attn(norm(x)) alone, and norms placed per block (`placements`: OLMo Hybrid's), checked against
the oracle on every backend and target, decoded as one pass, and their diagnostics."""

from __future__ import annotations

import pytest

import attndsl
from attndsl.weight_table import weight_table

from .conftest import refused_where
from .test_random_specs import check_stream

_ATTN = """attention a {
    d_model  = 16
    heads    = 2
    head_dim = 8
    mask     = causal
}
"""


def _stack(extra: str, ffn: str = "swiglu(24)", norm: str = "rmsnorm(pre)") -> str:
    return (_ATTN + f"transformer t {{\n    attention = a\n    layers = 3\n    ffn = {ffn}\n"
            f"    norm = {norm}\n{extra}\n}}\n")


def test_random_specs_with_blocks_without_a_feed_forward_match_the_reference() -> None:
    """Stream 47 (past the seeds the default run takes): `ffn = none` (649, a decodable 437)
    and `attention_only` (430; a decodable 120), on every backend and target."""
    check_stream(((649, ("ffn = none",)), (430, ("attention_only = [",))), portable=430,
                 decoding=(437, "ffn = none"))
    check_stream((), portable=-1, decoding=(120, "attention_only = ["))


def test_blocks_without_a_feed_forward_have_no_mlp_or_its_norm() -> None:
    """The weight table and graph of `attention_only` blocks hold no `mlp.*` or `ffn_norm`,
    and `ffn = none` none in any block; the other blocks keep theirs."""
    t = attndsl.loads(_stack("    attention_only = [0, 2]"), "t.attn")["t"]
    names = {w.name for w in weight_table(t.spec)}
    for i, has in ((0, False), (1, True), (2, False)):
        assert (f"layers.{i}.ffn_norm.weight" in names) is has
        assert any(n.startswith(f"layers.{i}.mlp.") for n in names) is has
        assert f"layers.{i}.attn_norm.weight" in names
    t = attndsl.loads(_stack("", ffn="none"), "t.attn")["t"]
    names = {w.name for w in weight_table(t.spec)}
    assert not any(".mlp." in n or "ffn_norm" in n for n in names)
    assert "no feed-forward" in t.graph().summary


@pytest.mark.parametrize(("text", "words", "col_of"), [
    (_stack("    attention_only = [1, 1]"), "block 1 is listed twice", "1]"),
    (_stack("    attention_only = [3]"), "block 3 is not in the stack", "3]"),
    (_stack("    attention_only = [0, 1, 2]"), "every block is attention only", "[0, 1, 2]"),
    (_stack("    attention_only = 2"), "a list of block indices", "2\n"),
    (_stack("    attention_only = [1]", norm="rmsnorm(post)"), "need `norm = ...(pre, ...)`",
     "[1]"),
    (_stack("    residual = parallel", ffn="none"), "need `norm = ...(pre, ...)`", "none"),
    (_stack("    attention_only = [1]\n    ffn_conv = conv(width = 2)"),
     "`ffn_conv` reads each block's feed-forward", "ffn_conv ="),
    (_stack("    ffn_conv = conv(width = 2)", ffn="none"),
     "`ffn_conv` reads each block's feed-forward", "ffn_conv ="),
    (_stack("    residual_scale = depth", ffn="none"), "`residual_scale` reads", "residual_scale"),
])
def test_blocks_without_a_feed_forward_are_refused_where_they_cannot_be(
        text: str, words: str, col_of: str) -> None:
    refused_where(text, words, col_of.rstrip("\n"))


def test_random_specs_with_placements_per_block_match_the_reference() -> None:
    """Stream 49 (past the seeds the default run takes): `placements` over a sandwich stack
    with a layer pattern (52), and a decodable stack sharing keys (88)."""
    check_stream(((52, ("placements = [pre, pre]", "sandwich")),), portable=52,
                 decoding=(88, "placements = [sandwich, sandwich]"))


def test_placements_put_each_blocks_norms_where_its_entry_says() -> None:
    """Block i's norm tensors are those of placements[i % n]: pre's attn_norm and ffn_norm,
    output's post_attn_norm and post_ffn_norm, sandwich's four."""
    t = attndsl.loads(_stack("    placements = [pre, output, sandwich]"), "t.attn")["t"]
    names = {w.name for w in weight_table(t.spec)}
    want = {0: ("attn_norm", "ffn_norm"), 1: ("post_attn_norm", "post_ffn_norm"),
            2: ("attn_norm", "post_attn_norm", "ffn_norm", "post_ffn_norm")}
    for i, norms in want.items():
        got = {n.split(".")[2] for n in names if n.startswith(f"layers.{i}.")
               and "norm" in n.split(".")[2]}
        assert got == set(norms), (i, got)
    assert "norm.weight" in names  # the final norm


@pytest.mark.parametrize(("text", "words", "col_of"), [
    (_stack("    placements = [pre, post]"), "must be one of `pre`, `sandwich`", "post]"),
    (_stack("    placements = []"), "non-empty list", "[]"),
    (_stack("    placements = [pre, output]", norm="rmsnorm(post)"),
     "`placements` needs a stack norm of pre, sandwich or output", "[pre, output]"),
    (_stack("    placements = [pre]\n    residual = parallel"),
     "`placements` needs", "[pre]"),
    (_stack("    placements = [pre]\n    first_attn_norm = false"),
     "`first_attn_norm` reads one placement", "first_attn_norm ="),
    (_stack("    placements = [pre]", ffn="none"), "`ffn` reads one placement", "ffn ="),
])
def test_placements_are_refused_where_they_cannot_be(text: str, words: str,
                                                     col_of: str) -> None:
    test_blocks_without_a_feed_forward_are_refused_where_they_cannot_be(text, words, col_of)


@pytest.mark.parametrize("extra", ["    attention_only = [3]", "    placements = [pre, sandwich]"])
def test_the_parameter_count_is_the_weight_tables(extra: str) -> None:
    """`parameter_count` (the size limit, `usage`, the editor's hover) counts blocks without a
    feed-forward or placed by their own period as the weight table holds them."""
    import math

    from attndsl.weight_table import parameter_count

    text = _stack(extra).replace("layers = 3", "layers = 5")
    t = attndsl.loads(text, "t.attn")["t"].spec
    assert parameter_count(t) == sum(math.prod(w.shape) for w in weight_table(t))
