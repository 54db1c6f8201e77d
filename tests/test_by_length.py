"""by_length (docs/LANGUAGE.md, Choosing the core by length): at each length the layer computes
what the attention with that variant's keys computes alone, in the reference, torch and every
target, at lengths on both sides of every threshold; one ONNX file holds every branch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import attndsl
from attndsl.errors import SpecError

SPEC = """
attention switched {
    d_model   = 64
    heads     = 4
    kv_heads  = 2
    position  = rope(theta = 10000.0)
    mask      = padding
    by_length = [
        up_to(20),
        up_to(50, mask = padding & (window(left = 8, right = 8) | global(first = 2))),
        otherwise(kernel = linear(feature = elu), mask = full),
    ]
}
attention first {
    d_model  = 64
    heads    = 4
    kv_heads = 2
    position = rope(theta = 10000.0)
    mask     = padding
}
attention second {
    d_model  = 64
    heads    = 4
    kv_heads = 2
    position = rope(theta = 10000.0)
    mask     = padding & (window(left = 8, right = 8) | global(first = 2))
}
attention third {
    d_model  = 64
    heads    = 4
    kv_heads = 2
    position = rope(theta = 10000.0)
    kernel   = linear(feature = elu)
}
transformer stack {
    attention = [switched, first]
    layers    = 3
    ffn       = swiglu(96)
    norm      = rmsnorm(pre)
    vocab     = 50
}
"""
LENGTHS = (1, 19, 20, 21, 50, 51, 77)  # both sides of each threshold


def test_each_length_computes_its_variant_alone() -> None:
    program = attndsl.loads(SPEC, "switch.attn")
    layer = program["switched"]
    state = layer.to_torch(seed=3).state_dict()
    weights = {k: v.double().numpy() for k, v in state.items()}
    rng = np.random.default_rng(0)
    for L in LENGTHS:
        alone = "first" if L <= 20 else "second" if L <= 50 else "third"
        x = rng.standard_normal((3, L, 64))
        feed = {"x": x, "key_lengths": np.array([L, max(L - 7, 0), 0])}
        want = program[alone].reference(
            {k: v for k, v in feed.items() if k in program[alone].graph().inputs}, weights)
        np.testing.assert_allclose(layer.reference(feed, weights), want, atol=1e-12,
                                   err_msg=f"L = {L} should run `{alone}`")


@pytest.mark.parametrize("name", ["switched", "stack"])
def test_every_backend_and_target_matches_the_reference_across_thresholds(name) -> None:
    layer = attndsl.loads(SPEC, "switch.attn")[name]
    report = layer.verify(lengths=LENGTHS, batches=(1, 3),
                          targets=("portable", "ort-cpu", "ort-cuda"))
    failed = [(c.length, c.backend, c.max_abs) for c in report.comparisons if not c.passed]
    assert not failed
    assert {c.length for c in report.comparisons} == set(LENGTHS)


def test_one_onnx_file_holds_every_branch_and_is_reproducible() -> None:
    layer = attndsl.loads(SPEC, "switch.attn")["switched"]
    for target in ("ort-cpu", "portable"):
        data = layer.onnx_bytes(target=target, seed=1)
        assert data == layer.onnx_bytes(target=target, seed=1)
        model = onnx.load_from_string(data)
        ifs = [n for n in model.graph.node if n.op_type == "If"]
        assert len(ifs) == 1  # the first threshold; the second If is in its else branch
        inner = {n.op_type for a in ifs[0].attribute for n in a.g.node}
        assert "If" in inner
        weights = [t.name for t in model.graph.initializer if t.name.endswith("proj.weight")]
        assert sorted(weights) == ["k_proj.weight", "o_proj.weight", "q_proj.weight",
                                   "v_proj.weight"]  # shared: stored once


def test_explain_and_show_name_each_branch(capsys) -> None:
    from attndsl.cli import main

    path = "examples/seed_by_length.attn"
    assert main(["explain", path]) == 0
    out = capsys.readouterr().out
    plan = out[out.index("plan for target"):]
    assert "(L <= 2000): mha" in plan and "(L <= 10000): block_sparse" in plan
    assert "(L > 10000): linear" in plan
    assert main(["show", path, "--length", "40"]) == 0
    assert "(by_length: L <= 2000)" in capsys.readouterr().out


def test_torch_module_runs_every_branch() -> None:
    layer = attndsl.loads(SPEC, "switch.attn")["switched"]
    module = layer.to_torch(seed=2)
    weights = {k: v.double().numpy() for k, v in module.state_dict().items()}
    for L in (20, 21, 51):
        x = np.random.default_rng(L).standard_normal((2, L, 64)).astype(np.float32)
        lengths = np.array([L, 3])
        got = module(torch.from_numpy(x), key_lengths=torch.from_numpy(lengths))
        want = layer.reference({"x": x, "key_lengths": lengths}, weights)
        assert np.abs(got.detach().numpy() - want).max() < 1e-5


@pytest.mark.parametrize(("call", "words"), [
    (lambda layer: layer.decoder_bytes(target="portable"), "decoding step"),
    (lambda layer: layer.torch_program_bytes(), "torch.export program")])
def test_what_cannot_take_a_switch_is_refused_at_by_length(call, words) -> None:
    layer = attndsl.loads(SPEC, "switch.attn")["switched"]
    with pytest.raises(SpecError) as err:
        call(layer)
    assert words in str(err.value) and "switch.attn:8:17" in str(err.value)
