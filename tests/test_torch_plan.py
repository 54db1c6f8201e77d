"""The torch plan decides how a block_sparse attention runs (issue 40): its planned node
carries the rule (`flex`, `sdpa_side`), explain prints it, and the module runs the function that
rule picks, whatever the module's own `path` or constants say."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import attndsl
from attndsl.backends import torch_attention
from attndsl.cli import main
from attndsl.ir import Op
from attndsl.planner import torch_paths
from attndsl.planner.torch_paths import block_sparse_kernel, block_sparse_rule

from .conftest import ROOT

DROP = """
attention drop {
    d_model = 32
    heads   = 2
    dropout = 0.5
    mask    = causal & window(left = 4, right = 0)
}"""


def _layer(example: str, name: str):
    return attndsl.load(ROOT / f"examples/{example}.attn")[name]


def _node(graph):
    """The graph's one attention node."""
    (node,) = (n for n in graph.nodes if n.op is Op.ATTENTION)
    return node


def _runs(monkeypatch, module, length: int) -> list[str]:
    """Which of torch_attention's functions ran the module's attention at `length` (FlexAttention
    observed, not compiled: its stand-in returns the gathered blocks' output)."""
    ran: list[str] = []
    blocks, sdpa = torch_attention._blocks, torch_attention._sdpa

    def spy(name, fn):
        def call(*args):
            ran.append(name)
            return fn(*args)
        return call

    monkeypatch.setattr(torch_attention, "_blocks", spy("blocks", blocks))
    monkeypatch.setattr(torch_attention, "_sdpa", spy("sdpa", sdpa))
    monkeypatch.setattr(torch_attention, "_flex", spy("flex", blocks))
    with torch.no_grad():
        module(torch.randn(1, length, module.graph.weights[0].shape[-1]))
    return ran


def _with(module, **attrs):
    """The module with its attention node's planned attributes changed."""
    node = _node(module.graph)
    changed = replace(node, attrs=tuple((k, attrs.get(k, v)) for k, v in node.attrs))
    module.graph = replace(module.graph, nodes=tuple(changed if n is node else n
                                                     for n in module.graph.nodes))
    return module


def test_the_module_runs_the_planned_kernel(monkeypatch) -> None:
    layer = _layer("mistral_local", "mistral_local")
    module = layer.to_torch(seed=1)
    assert dict(_node(module.graph).attrs)["flex"] == "cuda"
    assert dict(_node(module.graph).attrs)["sdpa_side"] == 1536
    assert _runs(monkeypatch, module, 20) == ["sdpa"]  # planned: SDPA at small shapes on the CPU
    # the node's own values rule, not the module's path or torch_attention's constants
    assert _runs(monkeypatch, _with(module, sdpa_side=4), 20) == ["blocks"]
    assert _runs(monkeypatch, module, 3) == ["sdpa"]  # 9 pairs <= 4 x 4
    assert _runs(monkeypatch, _with(module, flex="always"), 20) == ["flex"]
    assert module.attention_path == "auto"
    assert _runs(monkeypatch, _with(module, flex="never", sdpa_side=0), 3) == ["blocks"]
    # planned with SDPA_SIDE = 0: the blocks at every shape
    monkeypatch.setattr(torch_paths, "SDPA_SIDE", 0)
    planned = layer.to_torch(seed=1)
    assert dict(_node(planned.graph).attrs)["sdpa_side"] == 0
    assert _runs(monkeypatch, planned, 20) == ["blocks"]


def test_the_rule_reads_the_device_lengths_and_training() -> None:
    """What only the call knows, against the planned values: FlexAttention on CUDA for a
    plain window; never with sink logits (nor SDPA); path = 'flex' on the CPU too, except in
    training with dropout."""
    plain = dict(_node(_layer("mistral_local", "mistral_local").plan("torch")[0]).attrs)
    assert block_sparse_kernel(plain, "cuda", 20 * 20, True) == "flex"
    assert block_sparse_kernel(plain, "cpu", 1536 * 1536, True) == "sdpa"
    assert block_sparse_kernel(plain, "cpu", 1536 * 1536 + 1, False) == "blocks"
    sinks = dict(_node(_layer("attention_sinks", "sliding_sinks").plan("torch")[0]).attrs)
    assert (sinks["flex"], sinks["sdpa_side"]) == ("never", 0)
    assert block_sparse_kernel(sinks, "cuda", 20 * 20, False) == "blocks"
    module = attndsl.loads(DROP)["drop"].to_torch(path="flex")
    drop = dict(_node(module.graph).attrs)
    assert block_sparse_kernel(drop, "cpu", 400, False) == "flex"
    assert block_sparse_kernel(drop, "cpu", 400, True) == "sdpa"
    assert block_sparse_rule(drop) == (
        "FlexAttention on every device (not in training: dropout 0.5); in training SDPA with "
        "the mask up to 1536 x 1536 query-key pairs, the gathered blocks beyond")


def test_explain_prints_the_planned_rule(capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        ("mistral_local", "mistral_local", "FlexAttention on CUDA; otherwise SDPA with the mask "
         "up to 1536 x 1536 query-key pairs, the gathered blocks beyond"),
        ("gemma_softcap", "gemma_local", "FlexAttention on CUDA; otherwise the gathered blocks"),
        ("attention_sinks", "sliding_sinks", "the gathered blocks, on every device"),
    ]
    for example, name, rule in cases:
        assert main(["explain", str(ROOT / f"examples/{example}.attn"), "--name", name,
                     "--target", "torch"]) == 0
        text = capsys.readouterr().out
        planned = dict(_node(_layer(example, name).plan("torch")[0]).attrs)
        assert block_sparse_rule(planned) == rule
        assert f"      - runs: {rule}\n" in text, text
    assert main(["explain", str(ROOT / "examples/gemma_softcap.attn"), "--name",
                 "gemma_local", "--target", "torch"]) == 0
    assert "not SDPA with the mask: a softcap" in capsys.readouterr().out


def test_what_each_torch_kernel_takes_is_data(monkeypatch) -> None:
    """FlexAttention takes the score modifiers (its score_mod) but no `softmax` hook's logit,
    SDPA neither (`FLEX_TAKES`, `SDPA_TAKES`): learned sinks keep a block-sparse attention off
    both, named by their module; were FlexAttention to take them, the plan would offer it. The
    sdpa path and bench's SDPA baseline read the same data."""
    from attndsl import bench
    from attndsl.mechanisms import SOFTMAX

    layer = _layer("attention_sinks", "sliding_sinks")
    [choice] = layer.plan("torch")[1]
    assert f"not FlexAttention: {SOFTMAX['sinks'].described}" in " ".join(choice.reasons)
    monkeypatch.setattr(torch_paths, "FLEX_TAKES", torch_paths.FLEX_TAKES | {"sinks"})
    planned = dict(_node(layer.plan("torch")[0]).attrs)
    assert (planned["flex"], planned["sdpa_side"]) == ("cuda", 0)
    assert dict((p.name, p.takes) for p in torch_paths.TORCH_PATHS)["sdpa"] == set()
    full = _layer("attention_sinks", "full_sinks").to_torch()
    assert bench._with_sdpa(full) is None
    monkeypatch.setattr(bench, "SDPA_TAKES", frozenset({"sinks"}))
    assert bench._with_sdpa(full) is not None
