"""Planned rewrites (issue 40, item 5): packed projections, skip norms and contrib norms are
decided by the planner (`planner.rewrites`), printed by `explain` with their reasons, and the
lowering carries out exactly those: no rewrite happens that the plan does not name."""

from __future__ import annotations

from collections import Counter

import onnx
import pytest

import attndsl
from attndsl.backends.finalize import finalize
from attndsl.backends.lower import build_model
from attndsl.cli import main
from attndsl.planner.rewrites import Rewrites, rewrites
from attndsl.strategies import LOWERINGS

from .conftest import ROOT

LM = str(ROOT / "examples" / "llama_lm.attn")


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
