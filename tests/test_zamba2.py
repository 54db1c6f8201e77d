"""Zamba2 (`zamba2`): Mamba2 layers and a shared transformer block beside the hybrid ones
(`side`, its attention `out_dim` wide): `attndsl generate` gives transformers' greedy tokens
for a left-padded batch, and the decoding model its logits, on both targets (adapters on
q, k, v and RoPE; plain projections with grouped kv heads and no positions); the genai export
refuses it, naming why; random specs with a side block (stream 55) on every backend and
target, one decoding as one pass; and the located diagnostics of `side` and `out_dim`."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers as tf

import attndsl

from .conftest import refused_where
from .test_generation import SIZES, VOCAB, generates_as, refused_by_genai_then_decoding
from .test_hf_families import redraw


@pytest.mark.parametrize(("target", "adapters"), [("ort-cpu", True), ("portable", False)])
def test_zamba2_generates_as_transformers(tmp_path: Path, target: str, adapters: bool,
                                          capsys) -> None:
    """Hybrid layers 0, 2 and 3 (two shared blocks taken in turn: the third use the first
    block's again); with adapters (q, k, v and the MLP's) and RoPE, kv heads the heads (as
    transformers needs with adapters), or without them, two kv heads, no positions and one
    shared block."""
    config = tf.Zamba2Config(
        num_hidden_layers=4, layers_block_type=["hybrid", "mamba", "hybrid", "hybrid"],
        n_mamba_heads=4, mamba_d_state=16, mamba_ngroups=2, chunk_size=5, adapter_rank=4,
        num_mem_blocks=2 if adapters else 1, use_shared_attention_adapter=adapters,
        use_mem_rope=adapters, time_step_min=0.01, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, **(SIZES | {"num_key_value_heads": 4 if adapters else 2,
                                    "vocab_size": VOCAB}))
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 7, False, gain=1.0)  # (test_hf_families.GAINS says why)
    out = refused_by_genai_then_decoding(model, tmp_path, target, capsys,
                                         "a `side` block's keys and values")
    generates_as(model, out / "zamba2.decode.onnx", capsys)


def test_random_specs_with_a_side_block_match_the_reference() -> None:
    """Stream 55: a side block beside some blocks of a softmax stack (217: beside a shortcut's
    pairs, a language model; 416; 542), on every backend and target (the portable export for
    542); 364 decoding as one pass, the side attention's cache beside the blocks' own."""
    from .test_random_specs import check_stream

    check_stream(((217, ("side = side(", "shortcut", "vocab")), (416, ("side = side(",)),
                  (542, ("side = side(",))), portable=542, decoding=(364, "side = side("))


_SPEC = """attention mixer {{
    d_model   = 16
    heads     = 2
    head_dim  = 8
    value_dim = 16
    bias      = false
    kernel    = mamba2()
    mask      = causal
}}
attention shared {{
    d_model  = {width}
    out_dim  = {out}
    heads    = 2
    mask     = causal
    {extra}
}}
transformer t {{
    attention = mixer
    layers    = 3
    ffn       = none
    norm      = rmsnorm({placement})
    side      = {side}
}}
"""


@pytest.mark.parametrize(("fill", "words", "at"), [
    (dict(side="side(attention = shared, ffn = gelu_glu(8), layers = [1, 3])"),
     "block 3 is not in the stack", "3]"),
    (dict(side="side(attention = shared, ffn = gelu_glu(8), layers = [1, 1])"),
     "block 1 is listed twice", "1])"),
    (dict(side="side(attention = shared, ffn = gelu_glu(8), layers = 1)"),
     "a list of block indices", "1)"),
    (dict(side="side(attention = shared, ffn = moe(experts = 2, top_k = 1, expert = "
                "swiglu(8)), layers = [1])"), "one MLP", "moe("),
    (dict(side="side(attention = nope, ffn = gelu_glu(8), layers = [1])"),
     "no attention named `nope`", "nope"),
    (dict(width=16), "needs d_model = 32 and out_dim = 16", "side("),
    (dict(out=8), "needs d_model = 32 and out_dim = 16", "side("),
    (dict(placement="post"), "`side` needs `norm = ...(pre, ...)`", "side("),
    (dict(extra="out_proj = false"), "out_dim is o_proj's width", "16\n"),
    (dict(extra="kernel = linear()"), "out_dim needs a softmax attention", "16\n"),
    (dict(extra="residual_conv = conv(width = 3, on = [out])"), "which `residual_conv` reads",
     "16\n"),
    (dict(extra="position = sinusoidal"), "add different absolute positions", "side("),
])
def test_side_and_out_dim_are_refused_where_they_cannot_be(fill: dict, words: str,
                                                           at: str) -> None:
    values = dict(width=32, out=16, extra="", placement="pre",
                  side="side(attention = shared, ffn = gelu_glu(8), layers = [1])") | fill
    refused_where(_SPEC.format(**values), words, at)


def test_a_side_attention_reads_the_patterns_position_streams() -> None:
    """Multimodal RoPE (position_ids [3, B, L]) on the side attention and plain RoPE on the
    pattern's is refused at `side`, and the other way round."""
    stack = """attention a {{
    d_model  = 16
    heads    = 2
    position = {a}
    mask     = causal
}}
attention s {{
    d_model  = 32
    out_dim  = 16
    heads    = 4
    position = {s}
    mask     = causal
}}
transformer t {{
    attention = a
    layers    = 2
    ffn       = swiglu(24)
    norm      = rmsnorm(pre)
    side      = side(attention = s, ffn = gelu_glu(8), layers = [0])
}}
"""
    plain, mrope = "rope(theta = 10000)", "rope(theta = 10000, mrope = [2, 1, 1])"
    for a, s in ((plain, mrope), (mrope, plain)):
        refused_where(stack.format(a=a, s=s), "read positions of different shapes", "side(")


def test_side_refuses_what_it_does_not_combine_with_and_takes_none_of_it() -> None:
    """`parallel`, `placements` and `kv_shared_layers` are refused beside a side block, at
    their keys; written as none (or 0) they are not."""
    text = _SPEC.format(width=32, out=16, extra="", placement="pre",
                        side="side(attention = shared, ffn = gelu_glu(8), layers = [1])")
    refused_where(text.replace("    layers    = 3", "    placements = [pre]\n    layers    = 3"),
                  "`side` and `placements` do not combine", "placements")
    for allowed in ("    parallel = none", "    kv_shared_layers = 0"):
        program = attndsl.loads(text.replace("    layers    = 3", f"{allowed}\n    layers    = 3"))
        assert program["t"].spec.side is not None


def test_adapters_are_added_to_a_half_precision_weight_in_float32() -> None:
    """W + B A of a bfloat16 checkpoint's tensors is their float64 sum rounded once to
    float32, not to bfloat16 (which would move a logit by 6e-2 of its size)."""
    import ml_dtypes
    import numpy as np

    from attndsl.families.zamba2 import _merged

    rng = np.random.default_rng(0)
    w, down, up = (rng.standard_normal(s).astype(ml_dtypes.bfloat16)
                   for s in ((6, 5), (2, 5), (6, 2)))
    got = _merged([w, down, up], None, {})
    want = (w.astype(np.float64) + up.astype(np.float64) @ down.astype(np.float64))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_a_blocks_attention_writes_the_stacks_width() -> None:
    """`out_dim` is a side attention's: a block's own attention writing another width is
    refused at the stack's `attention`."""
    text = _SPEC.format(width=32, out=16, extra="", placement="pre", side="none").replace(
        "attention = mixer", "attention = shared")
    refused_where(text, "`shared` writes 16 wide (its out_dim), the stack 32",
                  "shared\n    layers")
