"""The attention core as one typed node: `ir.build` writes each softmax core as one unplanned
`attention` node, and its decomposition (`ir.decompose`) is the primitive ops the builder
wrote before the core was a node, exactly: same ops, value names, attributes, types and order
(frozen below from that builder), so the dense paths run what they ran."""
# ruff: noqa: E501  (the frozen node texts, one line each)

from __future__ import annotations

from dataclasses import replace

import pytest

import attndsl
from attndsl import ir
from attndsl.ir import Op
from attndsl.ir.decompose import decompose, decomposed, is_core
from attndsl.ir.text import parse

from .conftest import ROOT

# (example, layer, decoding) -> the primitive nodes its core was written as
FROZEN = {
    ("gemma_softcap", "gemma_local", False): """
%k_rep = repeat_kv %k_rope groups=2 : [B, 8, L, 64]
%v_rep = repeat_kv %v_heads groups=2 : [B, 8, L, 64]
%scores = scores %q_rope, %k_rep scale=0.0625 : [B, 8, L, L]
%capped = apply %scores mechanism=softcap softcap=50.0 : [B, 8, L, L]
%mask = mask expr=And(left=Causal(), right=Window(left=127, right=0)) sparsity=Sparsity(mode=auto) memory=None : bool[L, L]
%probs = masked_softmax %capped, %mask dropout=0.0 sinks=None : [B, 8, L, L]
%attn = attend %probs, %v_rep : [B, 8, L, 64]
%merged = merge_heads %attn : [B, L, 512]""",
    ("bloom_alibi", "bloom_attn", False): """
%scores = scores %q_heads, %k_heads scale=0.17677669529663687 : [B, 12, L, L]
%biased = score_bias %scores kind=alibi slopes=press max_bias=8.0 factor=1.0 rounding=float32 : [B, 12, L, L]
%mask = mask expr=Causal() sparsity=Sparsity(mode=auto) memory=None : bool[L, L]
%probs = masked_softmax %biased, %mask dropout=0.0 sinks=None : [B, 12, L, L]
%attn = attend %probs, %v_heads : [B, 12, L, 32]
%merged = merge_heads %attn : [B, L, 384]""",
    ("attention_sinks", "sliding_sinks", False): """
%k_rep = repeat_kv %k_rope groups=4 : [B, 8, L, 16]
%v_rep = repeat_kv %v_heads groups=4 : [B, 8, L, 16]
%scores = scores %q_rope, %k_rep scale=0.25 : [B, 8, L, L]
%mask = mask expr=And(left=Causal(), right=Window(left=15, right=0)) sparsity=Sparsity(mode=auto) memory=None : bool[L, L]
%probs = masked_softmax %scores, %mask dropout=0.0 sinks=sinks : [B, 8, L, L]
%attn = attend %probs, %v_rep : [B, 8, L, 16]
%merged = merge_heads %attn : [B, L, 128]""",
    ("t5_relative", "t5_cross", True): """
%scores = scores %q_heads, %present.0.key scale=1.0 : [B, 4, L, M + S]
%mask = mask %present.0.key, %key_lengths expr=Padding() sparsity=Sparsity(mode=auto) memory=True : bool[B, L, M + S]
%probs = masked_softmax %scores, %mask dropout=0.0 sinks=None : [B, 4, L, M + S]
%attn = attend %probs, %present.0.value : [B, 4, L, 64]
%merged = merge_heads %attn : [B, L, 256]""",
    ("t5_relative", "t5_decoder_self", True): """
%scores = scores %q_heads, %present.0.key scale=1.0 : [B, 4, L, P + L]
%biased = score_bias %scores kind=relative_bias buckets=32 max_distance=128 bidirectional=False weight=relative_attention_bias.weight : [B, 4, L, P + L]
%mask = mask %attention_mask, %present.0.key expr=Causal() sparsity=Sparsity(mode=auto) memory=None : bool[B, L, P + L]
%probs = masked_softmax %biased, %mask dropout=0.0 sinks=None : [B, 4, L, P + L]
%attn = attend %probs, %present.0.value : [B, 4, L, 64]
%merged = merge_heads %attn : [B, L, 256]""",
    ("llama_gqa", "llama_attn", True): """
%k_rep = repeat_kv %present.0.key groups=4 : [B, 8, P + L, 64]
%v_rep = repeat_kv %present.0.value groups=4 : [B, 8, P + L, 64]
%scores = scores %q_rope, %k_rep scale=0.125 : [B, 8, L, P + L]
%mask = mask %attention_mask, %present.0.key expr=Causal() sparsity=Sparsity(mode=auto) memory=None : bool[B, L, P + L]
%probs = masked_softmax %scores, %mask dropout=0.0 sinks=None : [B, 8, L, P + L]
%attn = attend %probs, %v_rep : [B, 8, L, 64]
%merged = merge_heads %attn : [B, L, 512]""",
    ("linformer", "linformer_shared", False): """
%scores = scores %q_heads, %k_rows scale=0.125 : [B, 4, L, 64]
%probs = masked_softmax %scores dropout=0.0 sinks=None : [B, 4, L, 64]
%attn = attend %probs, %v_rows : [B, 4, L, 64]
%merged = merge_heads %attn : [B, L, 256]""",
}


def _graph(example: str, layer: str, decode: bool):
    return ir.build(attndsl.load(ROOT / "examples" / f"{example}.attn")[layer].spec,
                    decode=decode)


@pytest.mark.parametrize("case", FROZEN, ids=lambda c: f"{c[1]}{'-decode' * c[2]}")
def test_the_core_decomposes_into_the_primitive_ops_it_was(case) -> None:
    graph = _graph(*case)
    cores = [n for n in graph.nodes if is_core(n)]
    assert len(cores) == 1 and not any(n.op in (Op.SCORES, Op.MASK, Op.SOFTMAX, Op.ATTEND)
                                       for n in graph.nodes)
    types = {n.out: n.shape for n in graph.nodes}
    assert "\n".join(n.text() for n in decompose(cores[0], types)) == FROZEN[case].strip()


@pytest.mark.parametrize("case", FROZEN, ids=lambda c: f"{c[1]}{'-decode' * c[2]}")
def test_the_core_node_reads_back_from_its_text(case) -> None:
    graph = _graph(*case)
    assert parse(graph.text()) == graph
    flat = replace(graph, nodes=tuple(decomposed(graph.nodes)))
    assert parse(flat.text()) == flat


def test_a_by_length_switch_decomposes_every_branch() -> None:
    graph = _graph("seed_by_length", "choose_by_length", False)
    switch = next(n for n in graph.nodes if n.op is Op.SWITCH)
    before = [sum(is_core(n) for n in b) for b in switch.attr("branches")]
    flat = next(n for n in decomposed(graph.nodes) if n.op is Op.SWITCH)
    assert sum(before) >= 2  # softmax branches (the linear kernel's keeps its own node)
    assert not any(is_core(n) for b in flat.attr("branches") for n in b)
    assert [sum(n.op is Op.MERGE_HEADS for n in b) for b in flat.attr("branches")] == [1] * len(
        before)
