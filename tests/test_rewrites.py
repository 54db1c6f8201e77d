"""Planned rewrites (issue 40, item 5): packed projections, skip norms, contrib norms, the
quantized weights' forms, and an in-place attention's packed q, k, v and in-kernel RoPE (its
tables folded or not) are decided by the planner (`planner.rewrites`), printed by `explain`
with their reasons, and the lowering carries out exactly those: no rewrite happens that the
plan does not name."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import onnx
import pytest
from onnx import numpy_helper

import attndsl
from attndsl.backends.finalize import finalize
from attndsl.backends.lower import build_model
from attndsl.cli import main
from attndsl.ir import build
from attndsl.planner import plan
from attndsl.planner.rewrites import Rewrites, rewrites
from attndsl.quantize import Quantization
from attndsl.strategies import LOWERINGS

from .conftest import ROOT

LM = str(ROOT / "examples" / "llama_lm.attn")
MOE = str(ROOT / "examples" / "mixtral_moe.attn")


def _ops(layer, target: str, planned: Rewrites | None = None) -> Counter:
    graph, _ = layer.plan(target)
    chosen = rewrites(graph, target) if planned is None else planned
    model = build_model(graph, layer._weights(0, None, "float32"), "float32",
                        strategies=LOWERINGS, rewrites=chosen)
    return Counter(n.op_type for n in model.graph.node)


def test_explain_names_every_rewrite_the_lowering_carries_out(capsys) -> None:
    layer = attndsl.load(LM)["llama_lm"]
    assert main(["explain", LM, "--name", "llama_lm", "--target", "ort-cpu"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    skips = [line for line in lines if line.startswith("skip_norm:")]
    packed = [line for line in lines if line.startswith("packed_projections:")]
    layers = layer.spec.layers
    # per block: the attention's q, k, v and the MLP's gate and up; every residual add feeds
    # a norm (the next block's, or the final one)
    assert len(packed) == 2 * layers and len(skips) == 2 * layers
    assert sum("self_attn.q, " in line and "self_attn.k, " in line for line in packed) == layers
    ops = _ops(layer, "ort-cpu")
    assert ops["SkipSimplifiedLayerNormalization"] == len(skips)
    assert ops["Split"] >= len(packed)


def test_the_lowering_rewrites_nothing_the_plan_leaves_out() -> None:
    layer = attndsl.load(LM)["llama_lm"]
    planned, bare = _ops(layer, "ort-cpu"), _ops(layer, "ort-cpu", Rewrites())
    assert planned["SkipSimplifiedLayerNormalization"] > 0
    assert bare["SkipSimplifiedLayerNormalization"] == 0 and bare["RMSNormalization"] == 0
    # unpacked: one MatMul per projection
    linears = sum(1 for w in layer.graph().weights if w.name.endswith("proj.weight")
                  or w.name == "lm_head.weight")
    assert bare["MatMul"] >= linears > planned["MatMul"] - bare["Split"]


@pytest.mark.parametrize(("target", "shown"), [("ort-cpu", True), ("portable", False)])
def test_explain_shows_rewrites_only_where_attndsl_lowers(target: str, shown: bool,
                                                           capsys) -> None:
    assert main(["explain", LM, "--target", target]) == 0
    assert ("rewrites:" in capsys.readouterr().out) is shown


def test_planned_and_streamed_exports_are_one_model() -> None:
    """api.onnx_bytes goes through the same plan: its bytes equal a model built from it."""
    layer = attndsl.load(LM)["llama_lm"]
    graph, _ = layer.plan("ort-cpu")
    deferred: dict = {}
    model = build_model(graph, layer._weights(0, None, "float32"), "float32",
                        deferred=deferred, strategies=LOWERINGS,
                        rewrites=rewrites(graph, "ort-cpu"))
    ours = finalize(model, layer._provenance(0, "ort-cpu", "float32", None), deferred).bytes()
    assert ours == layer.onnx_bytes(target="ort-cpu")
    assert onnx.load_from_string(ours).graph.node


def _explained(capsys, *argv: str) -> list[str]:
    assert main(["explain", *argv]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    return lines[lines.index("rewrites:") + 1:]


def _decoder(path: str, name: str, target: str = "ort-cpu", **options) -> tuple:
    """A decoding graph planned for `target`, its weights and its planned rewrites."""
    layer = attndsl.load(path)[name]
    graph, _ = plan(build(layer.spec, decode=True), target, "float32")
    return graph, layer._weights(0, None, "float32"), rewrites(graph, target, **options)


def _model(graph, weights, planned: Rewrites) -> onnx.ModelProto:
    return build_model(graph, weights, "float32", strategies=LOWERINGS, rewrites=planned)


def _rotated(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "GroupQueryAttention"
            and any(a.name == "do_rotary" and a.i == 1 for a in n.attribute)]


def test_explain_names_the_quantized_weights_and_those_left_float(capsys) -> None:
    lines = _explained(capsys, LM, "--name", "llama_lm", "--quantize", "int4")
    nbits = [line for line in lines if line.startswith("quantized:") and "MatMulNBits" in line]
    assert len(nbits) == 1 and "(int4, block 32, symmetric, accuracy_level 4)" in nbits[0]
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert f"layers.*.{'mlp' if proj[0] in 'gud' else 'self_attn'}.{proj}.weight" in nbits[0]
    assert "lm_head.weight" in nbits[0]
    assert any(line.startswith("quantized: embed_tokens.weight as com.microsoft."
                               "GatherBlockQuantized") for line in lines)
    # without --quantize, no such line
    assert not any("quantized" in line for line in _explained(capsys, LM, "--name", "llama_lm"))
    # a mixture's router stays float, its experts as QMoE on the CPU (int4)
    lines = _explained(capsys, MOE, "--name", "mixtral_lm", "--quantize", "int4")
    assert any(line.startswith("unquantized: layers.*.mlp.router.weight: the router reads it")
               for line in lines)
    assert any(line.startswith("quantized: layers.*.mlp.experts.*.down_proj.weight")
               and "com.microsoft.QMoE" in line for line in lines)


def test_explain_names_the_rotary_rewrites_and_their_tables(capsys) -> None:
    argv = (LM, "--name", "llama_lm", "--decode")
    layers = attndsl.load(LM)["llama_lm"].spec.layers
    folded = _explained(capsys, *argv, "--context-length", "128")
    rotary = [line for line in folded if line.startswith("rotary:")]
    assert len(rotary) == layers and all("do_rotary" in line and "of 128 positions" in line
                                         for line in rotary)
    assert sum(line.startswith("packed_qkv:") for line in folded) == layers
    each_call = [line for line in _explained(capsys, *argv) if line.startswith("rotary:")]
    assert len(each_call) == layers and all("computed in each call" in line
                                            for line in each_call)
    graph, weights, planned = _decoder(LM, "llama_lm", max_length=128)
    assert len(_rotated(_model(graph, weights, planned))) == layers


def test_explain_refuses_what_it_cannot_plan(capsys) -> None:
    assert main(["explain", LM, "--context-length", "64"]) == 2
    assert "--context-length goes with --decode" in capsys.readouterr().err
    assert main(["explain", LM, "--target", "torch", "--quantize", "int4"]) == 2
    assert "--quantize writes ONNX Runtime's MatMulNBits" in capsys.readouterr().err
    assert main(["explain", LM, "--target", "portable", "--quantize", "int4"]) == 2


def test_the_lowering_leaves_out_the_rotary_and_quantized_rewrites_the_plan_leaves_out() -> None:
    graph, weights, planned = _decoder(LM, "llama_lm", quantization=Quantization(4))
    ops = Counter(n.op_type for n in _model(graph, weights, planned).graph.node)
    assert ops["MatMulNBits"] > 0 and ops["GatherBlockQuantized"] == 1
    assert planned.rotary
    bare = _model(graph, weights, replace(planned, rotary={}, quantized={}))
    ops = Counter(n.op_type for n in bare.graph.node)
    assert ops["MatMulNBits"] == ops["GatherBlockQuantized"] == 0
    attention = [n for n in bare.graph.node if n.op_type == "GroupQueryAttention"]
    assert attention and not _rotated(bare)
    assert all(n.input[1] and n.input[2] for n in attention)  # k and v apart, not packed


def test_the_lowering_folds_the_rotary_tables_the_plan_folds() -> None:
    """The lowering reads the tables' length from the plan (no longest call was given)."""
    graph, weights, planned = _decoder(LM, "llama_lm")

    def constants(model: onnx.ModelProto) -> set:
        return {int(numpy_helper.to_array(a.t)) for n in model.graph.node
                if n.op_type == "Constant" for a in n.attribute
                if a.t.data_type == onnx.TensorProto.INT64 and not a.t.dims}

    folded = {k: replace(r, rows=77) for k, r in planned.rotary.items()}
    assert 77 not in constants(_model(graph, weights, planned))
    assert 77 in constants(_model(graph, weights, replace(planned, rotary=folded)))


def test_the_lowering_runs_a_mixture_as_qmoe_only_where_planned() -> None:
    graph, weights, planned = _decoder(MOE, "mixtral_lm", quantization=Quantization(4))
    assert planned.quantized_kernels
    ops = Counter(n.op_type for n in _model(graph, weights, planned).graph.node)
    assert ops["QMoE"] == len(planned.quantized_kernels) and ops["MoE"] == 0
    unplanned = replace(planned, quantized_kernels=frozenset())
    ops = Counter(n.op_type for n in _model(graph, weights, unplanned).graph.node)
    assert ops["QMoE"] == 0 and ops["MoE"] == len(planned.quantized_kernels)
