"""Falcon-H1 (`falcon_h1`): attention and a Mamba2 mixer side by side in every block
(`parallel`), its muP multipliers folded into the weights: `attndsl generate` gives
transformers' greedy tokens for a left-padded batch, and the decoding model its logits, on
both targets; the genai export refuses it, naming why; and `parallel`'s diagnostics."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers as tf

import attndsl
from attndsl.errors import SpecError

from .conftest import refused_where
from .test_generation import SIZES, generates_as, refused_by_genai_then_decoding
from .test_transformers import redraw


@pytest.mark.parametrize(("target", "rms_norm"), [("ort-cpu", False), ("portable", True)])
def test_falcon_h1_generates_as_transformers(tmp_path: Path, target: str, rms_norm: bool,
                                             capsys) -> None:
    """Every multiplier away from 1; the mixer without its norm (y * silu(z)) or with it
    before its gate."""
    config = tf.FalconH1Config(
        num_hidden_layers=2, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_state=16,
        mamba_n_groups=2, mamba_chunk_size=5, mamba_rms_norm=rms_norm,
        attention_in_multiplier=0.8, key_multiplier=1.3, attention_out_multiplier=0.7,
        ssm_in_multiplier=1.2, ssm_out_multiplier=0.6,
        ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.5], mlp_multipliers=[1.4, 0.5],
        embedding_multiplier=2.0, lm_head_multiplier=0.5, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, **SIZES)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11)
    out = refused_by_genai_then_decoding(model, tmp_path, target, capsys,
                                         "`parallel` kernel's state")
    generates_as(model, out / "falcon_h1.decode.onnx", capsys)


_SPEC = """attention ssm {{
    d_model   = 16
    heads     = 2
    head_dim  = 8
    value_dim = 8
    bias      = false
    kernel    = mamba2()
    mask      = causal
}}
attention a {{
    d_model  = {d}
    heads    = 2
    head_dim = 8
    mask     = causal
    {kernel}
}}
transformer t {{
    attention = a
    parallel  = {parallel}
    layers    = 2
    ffn       = swiglu(24)
    norm      = rmsnorm({placement})
}}
"""


@pytest.mark.parametrize(("fill", "words", "at"), [
    (dict(parallel="a"), "must be a recurrent kernel's layer", "a\n    layers"),
    (dict(parallel="nope"), "no attention named `nope`", "nope"),
    (dict(d=32), "`ssm` has d_model 16, the stack 32", "ssm\n"),
    (dict(kernel="kernel = mamba2()\n    bias = false"), "whose kernel keeps states too",
     "ssm\n"),
    (dict(placement="post"), "`parallel` needs `norm = ...(pre, ...)`", "ssm\n"),
])
def test_parallel_is_refused_where_it_cannot_be(fill: dict, words: str, at: str) -> None:
    values = dict(d=16, kernel="", parallel="ssm", placement="pre") | fill
    refused_where(_SPEC.format(**values), words, at)


def test_random_specs_with_a_parallel_mixer_match_the_reference() -> None:
    """Stream 52 (past the seeds the default run takes): a Mamba2 mixer without its norm
    beside each block's attention (520), a delta-rule one (626), on every backend and target
    but the portable export (the generation test above exports one); a decodable stack with
    one (120: the delta rule in chunks of 3) decodes as one pass."""
    from .test_random_specs import check_stream

    check_stream(((520, ("parallel = p", "mamba2(", "norm = none")),
                  (626, ("parallel = p", "delta_rule("))), portable=-1,
                 decoding=(120, "parallel = p"))


def test_a_parallel_attentions_mask_inputs_are_the_stacks() -> None:
    """The parallel attention's padding (key_lengths) is an input of the stack even where the
    pattern's masks read none, and every backend and target skips its padding slots."""
    text = _SPEC.format(d=16, kernel="", parallel="ssm", placement="pre").replace(
        "kernel    = mamba2()\n    mask      = causal",
        "kernel    = mamba2()\n    mask      = causal & padding(side = left)")
    layer = attndsl.loads(text, "t.attn")["t"]
    assert layer.spec.runtime_inputs == ("key_lengths",)
    assert layer.verify(lengths=(1, 9), batches=(3,)).passed


def test_parallel_takes_no_placements_per_block() -> None:
    """Both attentions read the block's pre-normed input: `placements` is refused beside it."""
    text = _SPEC.format(d=16, kernel="", parallel="ssm", placement="pre").replace(
        "    layers    = 2", "    placements = [output]\n    layers    = 2")
    with pytest.raises(SpecError) as e:
        attndsl.loads(text, "t.attn")
    d = e.value.diagnostics[0]
    assert "`parallel` reads one placement" in d.message, d.message
    assert text[d.span.start:].startswith("parallel")
