"""The oracle's reading of decoding graphs (docs/LANGUAGE.md, Decoding): `cache`, `tail` (a
window's bounded cache, with and without sink tokens), `head_linear` (latent attention's
absorbed form) and `rows` (the delta rule's packed outputs and state). A prefill then steps,
each call's presents fed back as the next call's pasts, give what the oracle computes in one
pass over the whole sequence (each left-padded row as that row alone, without its padding),
to 1e-9 in float64; and one step of the oracle equals the torch module's decoding step, an
implementation that shares none of the oracle's code."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attndsl
from attndsl.backends import reference
from attndsl.backends.torch import seeded_module
from attndsl.decoding import first_past, positions_of
from attndsl.ir import Op, build
from attndsl.spec import is_lm
from attndsl.weight_table import seeded_weights, weight_table

from .conftest import ROOT

SEED = 3

LATENT_WINDOW = """
attention mla_window {
    d_model   = 64
    heads     = 2
    head_dim  = 16 + 8
    value_dim = 16
    bias      = false
    latent    = mla(q_rank = 32, kv_rank = 24, rope_dim = 8)
    position  = rope(theta = 10000, interleaved = true)
    mask      = causal & window(left = 5, right = 0)
}
"""


def _layer(where: str, name: str):
    if where.endswith(".attn"):
        return attndsl.load(ROOT / "examples" / where)[name]
    return attndsl.loads(where)[name]


def _rows(spec, rng, lengths):
    """One unpadded input per row: token ids, or hidden states."""
    if is_lm(spec):
        return [rng.integers(0, spec.vocab, size=n) for n in lengths]
    return [rng.standard_normal((n, spec.d_model)) for n in lengths]


def _batch(rows, S):
    """Rows aligned right (left padding: token 0 or zeros) and their attention_mask."""
    batch = np.zeros((len(rows), S, *rows[0].shape[1:]), rows[0].dtype)
    mask = np.zeros((len(rows), S), np.int64)
    for i, r in enumerate(rows):
        batch[i, S - len(r):], mask[i, S - len(r):] = r, 1
    return batch, mask


def _feed(graph, batch, mask, start, end, past):
    first = "input_ids" if "input_ids" in graph.inputs else "x"
    return {first: batch[:, start:end], "attention_mask": mask[:, :end],
            "position_ids": positions_of(mask)[:, start:end], **past}


def _empty_past(graph, B):
    """A first call's pasts: no cached keys, the delta rule's states zeros."""
    return {n.out: np.zeros(first_past(B, n.shape.dims)) for n in graph.nodes
            if n.op is Op.INPUT and n.out.startswith("past_key_values.")}


def _next_past(out):
    return {k.replace("present.", "past_key_values."): v for k, v in out.items()
            if k.startswith("present.")}


def _decode(graph, weights, batch, mask, chunks):
    """The oracle over `batch` in calls of `chunks` tokens: every call's outputs, joined
    along the sequence, and the presents of each call."""
    past, outs, presents, start = _empty_past(graph, len(batch)), [], [], 0
    for n in chunks:
        out = reference.run_all(graph, _feed(graph, batch, mask, start, start + n, past),
                                weights)
        outs.append(out[graph.output_name])
        presents.append(out)
        past, start = _next_past(out), start + n
    return np.concatenate(outs, axis=1), presents


CASES = {  # (example, layer, bounded, row lengths, schedules of call lengths)
    "causal cache": ("llama_gqa.attn", "llama_attn", False, [13, 6],
                     [[1] * 13, [1, 5, 2, 1, 1, 3], [7, 6]]),
    "learned positions": ("gpt2.attn", "gpt2_stack", False, [10, 3],
                          [[1] * 10, [1, 2, 7]]),
    "window, bounded": ("mistral_local.attn", "mistral_local", True, [71, 9],
                        [[1] * 71, [1, 62, 1, 3, 1, 1, 1, 1], [40, 29, 2]]),
    "window and learned sinks, bounded": ("attention_sinks.attn", "sinks_lm", True, [23, 17],
                                          [[1] * 23, [1, 14, 1, 2, 5]]),
    "sink tokens, bounded": ("streaming_llm.attn", "streaming_lm", True, [33, 30, 2],
                             [[1] * 33, [1, 26, 1, 1, 4], [29, 1, 3]]),
    "latent cache": ("deepseek_mla.attn", "deepseek_lm", False, [11, 4],
                     [[1] * 11, [1, 3, 1, 6], [5, 2, 1, 1, 1, 1]]),
    "latent cache, bounded": (LATENT_WINDOW, "mla_window", True, [13, 8],
                              [[1] * 13, [1, 6, 1, 5], [9, 1, 3]]),
    "delta rule": ("qwen3_next_hybrid.attn", "qwen3_next_lm", False, [11, 5],
                   [[1] * 11, [1, 4, 1, 1, 4], [6, 5]]),
    # positions in a decoding call: ALiBi's and T5's distances, the query temperature
    "ALiBi": ("bloom_alibi.attn", "bloom_attn", False, [12, 5],
              [[1] * 12, [1, 3, 1, 7], [5, 7]]),
    "T5 relative bias": ("t5_relative.attn", "t5_decoder_self", False, [14, 6],
                         [[1] * 14, [1, 2, 9, 1, 1]]),
    "temperature": ("llama4_chunked.attn", "global_nope", False, [20, 7],
                    [[1] * 20, [1, 12, 1, 6]]),
}


@pytest.mark.parametrize("case", CASES)
def test_prefill_and_steps_equal_one_pass(case) -> None:
    where, name, bounded, lengths, schedules = CASES[case]
    layer = _layer(where, name)
    spec = layer.spec
    weights = seeded_weights(weight_table(spec), SEED)
    rows = _rows(spec, np.random.default_rng(0), lengths)
    S = max(lengths)
    batch, mask = _batch(rows, S)
    first = "input_ids" if is_lm(spec) else "x"
    one_pass = build(spec)
    want = [reference.run(one_pass, {first: r[None]}, weights)[0] for r in rows]
    graph = build(spec, decode=True, bounded=bounded)
    ops = {n.op for n in graph.nodes}
    assert Op.CACHE in ops or Op.ROWS in ops
    tails = [n for n in graph.nodes if n.op is Op.TAIL]
    assert bool(tails) == bounded
    for chunks in schedules:
        assert sum(chunks) == S
        got, presents = _decode(graph, weights, batch, mask, chunks)
        for i, n in enumerate(lengths):
            err = float(np.abs(got[i, S - n:] - want[i]).max())
            assert err <= 1e-9 * max(1.0, float(np.abs(want[i]).max())), (chunks, i, err)
        for t in tails:  # the present stops growing at the keys the mask can reach
            kept, held = t.attr("first") + t.attr("keep"), 0
            for n, out in zip(chunks, presents, strict=True):
                held = min(held + n, kept)
                assert out[t.out].shape[2] == held, (t.out, chunks)


def test_the_sink_keys_are_each_rows_first_real_tokens() -> None:
    """streaming_llm's bounded present, once the keys outnumber 4 + 23: the keys of each
    row's first 4 real tokens (a row left-padded by 31 slots keeps its own), then those of
    the last 23 slots, as the growing cache holds them."""
    layer = _layer("streaming_llm.attn", "streaming")
    weights = seeded_weights(weight_table(layer.spec), SEED)
    rows = _rows(layer.spec, np.random.default_rng(1), [45, 14])
    batch, mask = _batch(rows, 45)
    chunks = [1, 30, 1, 1, 1, 5, 1, 5]
    bounded = _decode(build(layer.spec, decode=True, bounded=True), weights, batch, mask,
                      chunks)[1]
    growing = _decode(build(layer.spec, decode=True), weights, batch, mask, chunks)[1]
    for end, kept, full in zip(np.cumsum(chunks), bounded, growing, strict=True):
        for name in ("present.0.key", "present.0.value"):
            k, f = kept[name], full[name]
            if f.shape[2] <= 27:
                np.testing.assert_array_equal(k, f)
                continue
            for row in range(2):
                first = np.flatnonzero(mask[row, :end])[:4]
                if len(first) < 4:  # not yet come: a slot no query sees (zeros)
                    assert not k[row, :, len(first):4].any()
                np.testing.assert_array_equal(k[row, :, :len(first)], f[row][:, first])
                np.testing.assert_array_equal(k[row, :, 4:], f[row, :, -23:])


CROSS = """
attention cross {   # memory padded on the right, its first 2 rows always visible
    d_model = 32
    heads = 4
    kind = cross
    memory_dim = 24
    position = sinusoidal
    mask = padding(side = right) | prefix(2)
}
"""


def test_cross_attention_decodes_against_the_memory_cached_once() -> None:
    """The memory's keys and values cached by the first call (present = past then its rows),
    then steps with no memory rows: each token as in one pass (`padding` reading key_lengths
    over the cached rows, sinusoidal positions at position_ids)."""
    spec = attndsl.loads(CROSS)["cross"].spec
    weights = seeded_weights(weight_table(spec), SEED)
    rng = np.random.default_rng(4)
    x, memory = rng.standard_normal((2, 7, 32)), rng.standard_normal((2, 5, 24))
    lengths = np.array([5, 1])
    want = reference.run(build(spec), {"x": x, "memory": memory, "key_lengths": lengths},
                         weights)
    graph = build(spec, decode=True)
    mask = np.ones((2, 7), np.int64)
    past, got, start = _empty_past(graph, 2), [], 0
    for n in (1, 3, 1, 2):
        feed = _feed(graph, x, mask, start, start + n, past)
        feed |= {"memory": memory if start == 0 else memory[:, :0], "key_lengths": lengths}
        out = reference.run_all(graph, feed, weights)
        assert out["present.0.key"].shape[2] == 5
        got.append(out["y"])
        past, start = _next_past(out), start + n
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=0, atol=1e-9)


DECODER = CROSS + """
attention self_causal {
    d_model = 32
    heads = 2
    position = sinusoidal
    mask = causal
}
transformer decoder {
    attention = self_causal
    cross = cross_none
    layers = 2
    ffn = gelu(40)
    norm = layernorm(post)
}
attention cross_none {   # a decoder's cross attention takes no positions
    d_model = 32
    heads = 4
    kv_heads = 2
    kind = cross
    memory_dim = 24
    mask = padding(side = right) | prefix(2)
}
"""


def test_a_decoder_stack_caches_its_memory_once_beside_its_tokens() -> None:
    """Each block's cross attention caches the memory's keys and values on the first call
    (present.{i}.cross_key, M = 5 rows, then kept as they are), its self attention the
    tokens' (present.{i}.key grows); the cross padding reads memory_lengths: each token as in
    one pass."""
    spec = attndsl.loads(DECODER)["decoder"].spec
    weights = seeded_weights(weight_table(spec), SEED)
    rng = np.random.default_rng(6)
    x, memory = rng.standard_normal((2, 7, 32)), rng.standard_normal((2, 5, 24))
    lengths = np.array([5, 0])  # (row 1: only the 2 prefix rows)
    want = reference.run(build(spec), {"x": x, "memory": memory, "memory_lengths": lengths},
                         weights)
    graph = build(spec, decode=True)
    mask = np.ones((2, 7), np.int64)
    past, got, start = _empty_past(graph, 2), [], 0
    for n in (2, 1, 4):
        feed = _feed(graph, x, mask, start, start + n, past)
        feed |= {"memory": memory if start == 0 else memory[:, :0], "memory_lengths": lengths}
        out = reference.run_all(graph, feed, weights)
        assert out["present.1.cross_key"].shape[2] == 5
        assert out["present.1.key"].shape[2] == start + n
        got.append(out["y"])
        past, start = _next_past(out), start + n
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=0, atol=1e-9)


STEPS = {  # one step checked against torch after a prefill (layer, bounded, lengths, prefill)
    "window, bounded": ("mistral_local.attn", "mistral_local", True, [70, 66], 69),
    "sink tokens, bounded": ("streaming_llm.attn", "streaming_lm", True, [33, 29], 32),
    "latent cache": ("deepseek_mla.attn", "deepseek_lm", False, [9, 5], 8),
    "latent cache, bounded": (LATENT_WINDOW, "mla_window", True, [12, 12], 11),
    "delta rule": ("qwen3_next_hybrid.attn", "qwen3_next_lm", False, [9, 4], 8),
}


@pytest.mark.parametrize("case", STEPS)
def test_a_step_equals_the_torch_modules(case) -> None:
    """After the oracle's prefill (its presents in float32), the oracle's step and the torch
    module's (same weights, its own `cache`, `tail`, `head_linear`, `rows`) give the same
    output and presents to float32 rounding."""
    where, name, bounded, lengths, prefill = STEPS[case]
    layer = _layer(where, name)
    spec = layer.spec
    weights = seeded_weights(weight_table(spec), SEED)
    graph = build(spec, decode=True, bounded=bounded)
    rows = _rows(spec, np.random.default_rng(2), lengths)
    S = max(lengths)
    batch, mask = _batch(rows, S)
    if not is_lm(spec):
        batch = batch.astype(np.float32).astype(np.float64)
    past = _decode(graph, weights, batch, mask, [prefill])[1][0]
    past = {k: v.astype(np.float32).astype(np.float64) for k, v in _next_past(past).items()}
    feed = _feed(graph, batch, mask, prefill, S, past)
    mine = reference.run_all(graph, feed, weights)
    module = seeded_module(spec, SEED, decode=True, bounded=bounded)
    with torch.no_grad():
        theirs = module(**{k: torch.from_numpy(v.astype(np.float32) if v.dtype.kind == "f"
                                               else v) for k, v in feed.items()})
    names = [graph.output_name, *graph.presents]
    assert len(theirs) == len(names)
    for n, t in zip(names, theirs, strict=True):
        t = t.double().numpy()
        assert t.shape == mine[n].shape, n
        err = float(np.abs(t - mine[n]).max())
        assert err <= 1e-4 * max(1.0, float(np.abs(mine[n]).max())), (n, err)
