"""Decoding (docs/LANGUAGE.md, Decoding): for every layer of every example that can decode, a
prefill then one-token steps, and a chunked prefill, give what the NumPy reference computes
in one forward pass over the whole sequence, in torch and in every target's ONNX model; with
a left-padded batch, each row as the reference computes that row alone, without its padding.
Layers that cannot decode are refused at their mask."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import attndsl
from attndsl.backends import reference
from attndsl.decoding import check_decodable, first_past, padded, positions_of, text_streams
from attndsl.errors import SpecError
from attndsl.ir import Op, build
from attndsl.limits import length_limits
from attndsl.masks import Full, Padding, Prefix, Random, kept_keys, lookahead, primitives
from attndsl.mechanisms import KERNELS
from attndsl.mechanisms.linear import LinearKernel
from attndsl.mechanisms.lsh import LshKernel
from attndsl.planner import cores, in_place_obstacle
from attndsl.spec import (
    Alibi,
    RelativeBias,
    Rope,
    Transformer,
    is_lm,
    memory_reader,
    reads_streams,
)

from .conftest import EXAMPLES

LAYERS = [(path, name) for path in EXAMPLES for name in attndsl.load(path)]
TARGETS = ("portable", "ort-cpu", "ort-cuda")


def _decodable(layer) -> bool:
    try:
        check_decodable(layer.spec)
    except SpecError:
        return False
    return True


def _attentions(spec):
    return spec.attentions if isinstance(spec, Transformer) else (spec,)


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_decoding_is_refused_exactly_where_a_query_could_see_a_later_key(path, name) -> None:
    layer = attndsl.load(path)[name]
    if not getattr(layer.spec, "head", True):  # a text encoder: no logits to decode from
        with pytest.raises(SpecError, match="has no LM head"):
            check_decodable(layer.spec)
        return
    blocked = [a for a in _attentions(layer.spec) if (_cross_refused(a) if a.kind == "cross"
               else isinstance(a.kernel, LshKernel)
               or any(isinstance(m, Random) for m in primitives(a.mask))
               or "segment_ids" in a.runtime_inputs or lookahead(a.mask) is not None)]
    if not blocked:
        check_decodable(layer.spec)
        return
    with pytest.raises(SpecError) as err:
        layer.decoder_bytes(target="portable")
    assert f"`{blocked[0].name}`" in str(err.value) and "-->" in str(err.value)
    if blocked[0].kind == "self" and lookahead(blocked[0].mask) is not None:
        # the pair it names is visible in one pass
        q, k = lookahead(blocked[0].mask)
        assert k > q


def _cross_refused(a) -> bool:
    """Cross attention decodes when its mask reads the key's index alone and no positions
    relate queries to memory rows (docs/LANGUAGE.md, Decoding)."""
    key_only = all(isinstance(m, (Full, Prefix, Padding)) for m in primitives(a.mask))
    return not key_only or isinstance(a.position, (Rope, Alibi, RelativeBias)) or \
        isinstance(a.kernel, LinearKernel)


def _sequences(layer, rng, lengths):
    """One unpadded input per row (token ids, or hidden states)."""
    spec = layer.spec
    if is_lm(spec):
        return [rng.integers(0, spec.vocab, size=n).astype(np.int64) for n in lengths]
    d = spec.d_model
    return [rng.standard_normal((n, d)).astype(np.float32) for n in lengths]


def _padded(rows, total):
    """Rows aligned right in one batch; padding slots hold token 0 or zeros."""
    first = rows[0]
    batch = np.zeros((len(rows), total, *first.shape[1:]), dtype=first.dtype)
    for i, r in enumerate(rows):
        batch[i, total - len(r):] = r
    return batch


class _Torch:
    def __init__(self, layer, seed, bounded=False):
        from attndsl.backends.torch import seeded_module

        self.m = seeded_module(layer.spec, seed, decode=True, bounded=bounded)

    def __call__(self, feed):
        with torch.no_grad():
            out = self.m(**{k: torch.from_numpy(v) for k, v in feed.items()})
        return [o.numpy() for o in out]


class _Onnx:
    def __init__(self, layer, seed, target, bounded=False):
        self.s = ort.InferenceSession(layer.decoder_bytes(target=target, seed=seed,
                                                          bounded=bounded),
                                      providers=["CPUExecutionProvider"])
        meta = self.s.get_modelmeta().custom_metadata_map
        self.in_place = meta["attndsl.kv_cache"] == "in_place"

    def __call__(self, feed):
        return self.s.run(None, feed)


def _decode(run, spec, batch, mask, chunks, memory=None):
    """Feed `batch` (B, S, ...) in chunks of the given sizes against a growing cache; the
    outputs of every chunk, concatenated along the sequence. Cross attention takes `memory`
    (and key_lengths) with the first chunk, and no memory rows after."""
    first = "input_ids" if is_lm(spec) else "x"
    graph = build(spec, decode=True)
    past = {}
    for name in graph.inputs:
        if name.startswith("past_key_values."):  # float[B, h, P, d]: empty; a state: zeros
            shape = graph.nodes[graph.inputs.index(name)].shape
            past[name] = np.zeros(first_past(batch.shape[0], shape.dims), np.float32)
    positions = positions_of(mask)
    outs, start = [], 0
    for n in chunks:
        end = start + n
        feed = {first: batch[:, start:end], "attention_mask": mask[:, :end],
                "position_ids": text_streams(positions[:, start:end],
                                             3 if reads_streams(spec) else 2), **past}
        if memory is not None:
            feed |= {k: v if start == 0 or k != "memory" else v[:, :0]
                     for k, v in memory.items()}
        result = run(feed)
        outs.append(result[0])
        past = {k.replace("present.", "past_key_values."): v
                for k, v in zip(graph.presents, result[1:], strict=True)}
        start = end
    return np.concatenate(outs, axis=1)


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_prefill_and_steps_equal_one_forward_pass(path, name) -> None:
    layer = attndsl.load(path)[name]
    if not _decodable(layer):
        pytest.skip("cannot decode (see the refusal test)")
    _check_decoding(layer)


CROSS = """
attention whisper_cross {   # memory padded on the right, its first 2 rows always visible
    d_model = 64
    heads = 4
    kv_heads = 2
    kind = cross
    memory_dim = 48
    bias = [q, v, o]
    mask = padding(side = right) | prefix(2)
}
attention cross_positions {  # sinusoidal positions on the decoder's tokens only
    d_model = 64
    heads = 4
    kind = cross
    position = sinusoidal
    mask = padding(side = left) & prefix(20)
}
attention decoder_self {
    d_model = 64
    heads = 4
    position = sinusoidal
    mask = causal & padding
}
transformer decoder_pre {   # a decoder: self, cross over the memory, feed-forward
    attention = decoder_self
    cross = whisper_cross
    layers = 2
    ffn = gelu(96)
    norm = layernorm(pre)
    vocab = 50
}
attention cross_temperature {  # its queries scaled at their own positions
    d_model = 64
    heads = 4
    kind = cross
    memory_dim = 48
    temperature = log(floor = 8, scale = 0.1)
    mask = padding
}
transformer decoder_temperature {
    attention = decoder_self
    cross = cross_temperature
    layers = 2
    ffn = gelu(96)
    norm = layernorm(pre)
}
transformer decoder_post {  # T5's and BART's order: the norms after each sum
    attention = decoder_self
    cross = whisper_cross
    layers = 2
    ffn = relu(96)
    norm = rmsnorm(post)
}
"""


@pytest.mark.parametrize("name", ["whisper_cross", "cross_positions", "decoder_pre",
                                  "decoder_post", "decoder_temperature"])
def test_cross_attention_decodes_against_the_memory_cached_once(name) -> None:
    _check_decoding(attndsl.loads(CROSS)[name])


def test_partial_rotary_decodes_in_place() -> None:
    """RoPE on 8 of 16 features: GroupQueryAttention's own rotary takes cos/sin caches of a
    multiple of 8 columns (dim / 2), so these rotate before the kernel (found by the random
    decodable specs: the kernel refused the model at run time)."""
    layer = attndsl.loads("""
attention a {
    d_model = 128
    heads = 8
    kv_heads = 4
    head_dim = 16
    position = rope(theta = 500000, dim = 8)
    mask = causal
}
transformer t {
    attention = a
    layers = 2
    ffn = gelu(8)
    norm = rmsnorm(pre)
    vocab = 5
}
""")["t"]
    assert layer.decoder_layout(target="ort-cpu") == "in_place"
    _check_decoding(layer)


def _check_decoding(layer) -> None:
    """Prefill and steps, and chunked prefill, of a left-padded batch on every backend and
    target (and bounded caches where a mask reaches back a bounded number of keys) equal the
    reference's one pass over each row alone."""
    spec = layer.spec
    rng = np.random.default_rng(5)
    # past every example's window (gemma_local's 128 keys); left padding 0, 91 and 130 slots;
    # up to a layer's longest (`limits.length_limits`: CLIP's 77 learned positions)
    S = min(131, length_limits(spec).get("length", (131, ""))[0])
    lengths = [S, 40, 1]
    rows = _sequences(layer, rng, lengths)
    batch = _padded(rows, S)
    _, mask = padded([[1] * n for n in lengths])
    weights = {k: v.detach().double().numpy() for k, v in layer.to_torch(seed=2).state_dict()
               .items()}
    graph = build(spec)
    first = "input_ids" if is_lm(spec) else "x"
    memory, own = {}, {}
    reader = memory_reader(spec)  # a cross attention, or a decoder stack's
    if reader is not None:  # 29 memory rows, some padding
        memory["memory"] = rng.standard_normal((len(rows), 29, reader.memory_dim)) \
            .astype(np.float32)
        padding = "memory_lengths" if isinstance(spec, Transformer) else "key_lengths"
        if padding in graph.inputs:
            memory[padding] = np.array([29, 11, 1][:len(rows)], np.int64)
    if "key_lengths" in graph.inputs and "key_lengths" not in memory:  # self attention's
        own["key_lengths"] = np.array([len(r) for r in rows], np.int64)  # every key real

    def alone(i: int) -> dict[str, np.ndarray]:  # row i's one-pass inputs
        streams = {"position_ids": text_streams(np.arange(len(rows[i]))[None], 3)} \
            if "position_ids" in graph.inputs else {}  # multimodal RoPE: a text token's
        return {first: rows[i][None]} | {k: v[i:i + 1] for k, v in (memory | own).items()} \
            | streams

    expected = [reference.run(graph, alone(i), weights)[0] for i in range(len(rows))]
    memory = memory or None  # (decoding, a self attention's real keys: attention_mask)
    runners = {"torch": _Torch(layer, 2)} | {t: _Onnx(layer, 2, t) for t in TARGETS}
    if any(kept_keys(a.mask) is not None for a in _attentions(spec)):  # windows, chunks, sinks
        runners |= {"torch bounded": _Torch(layer, 2, bounded=True),
                    "portable bounded": _Onnx(layer, 2, "portable", bounded=True),
                    "ort-cpu bounded": _Onnx(layer, 2, "ort-cpu", bounded=True)}
    first = min(100, S - 1)
    schedules = {f"prefill 1, then 64 and {S - 65}": [1, 64, S - 65],
                 f"prefill {first} + steps": [first] + [1] * (S - first),
                 "chunks of 37": [37] * (S // 37) + ([S % 37] if S % 37 else [])}
    for backend, run in runners.items():
        for label, chunks in schedules.items():
            if getattr(run, "in_place", False):
                rows_out = _decode_in_place(run, spec, rows, chunks)
            else:
                got = _decode(run, spec, batch, mask, chunks, memory)
                rows_out = [got[i, S - n:] for i, n in enumerate(lengths)]
            for i, (mine, want) in enumerate(zip(rows_out, expected, strict=True)):
                err = float(np.abs(mine - want).max())
                bound = 1e-4 * max(1.0, float(np.abs(want).max()))
                assert err <= bound, f"{backend}, {label}, row {i}: {err:.3g} > {bound:.3g}"
    in_place = [t for t in TARGETS if runners[t].in_place]
    assert not any(getattr(r, "in_place", False) for n, r in runners.items() if "bounded" in n)
    decoder = build(spec, decode=True)
    states = any((n.op is Op.KERNEL and KERNELS[n.attr("kernel")].states)
                 or n.op is Op.CAUSAL_CONV  # a residual convolution's
                 for n in decoder.nodes)  # a state (the delta rule's, a convolution's): growing
    if not states and all(in_place_obstacle(c, "ort-cpu") is None for c in cores(decoder)):
        assert "ort-cpu" in in_place


def _decode_in_place(run, spec, rows, chunks):
    """An in-place model (GroupQueryAttention writing max_length buffers): the batch's prompts
    (each row's first `chunks[0]` tokens) right-padded in one call, then one token per row per
    call, rows that are done fed padding; row 0 alone is also fed in the chunks given (chunked
    prefill). Each row's outputs at its real tokens, in order."""
    first = "input_ids" if is_lm(spec) else "x"
    graph = build(spec, decode=True)
    total = max(len(r) for r in rows)
    shapes = {n.out: n.shape for n in graph.nodes}

    def buffers(batch):
        out = {}
        for name in graph.inputs:
            if name.startswith("past_key_values."):
                h, d = shapes[name].dims[1::2]
                out[name] = np.zeros((batch, h, total, d), dtype=np.float32)
        return out

    def call(feed, past):
        result = run({**feed, **past})
        return result[0], {k.replace("present.", "past_key_values."): v
                           for k, v in zip(graph.presents, result[1:], strict=True)}

    # the batch: right-padded prompts, then steps
    prompt = [min(len(r), chunks[0]) for r in rows]
    n = max(prompt)
    x = np.stack([np.concatenate([r[:p], np.zeros((n - p, *r.shape[1:]), r.dtype)])
                  for r, p in zip(rows, prompt, strict=True)])
    mask = (np.arange(n)[None] < np.array(prompt)[:, None]).astype(np.int64)
    positions = np.broadcast_to(np.arange(n), mask.shape).astype(np.int64)
    rank = 3 if reads_streams(spec) else 2  # multimodal RoPE: a text token's three streams
    y, past = call({first: x, "attention_mask": mask,
                    "position_ids": text_streams(positions, rank)}, buffers(len(rows)))
    outs = [[y[b, :p]] for b, p in enumerate(prompt)]
    done = np.array(prompt)
    while (done < [len(r) for r in rows]).any():
        x = np.stack([r[d: d + 1] if d < len(r) else np.zeros_like(r[:1])
                      for r, d in zip(rows, done, strict=True)])
        mask = np.concatenate([mask, np.ones((len(rows), 1), np.int64)], axis=1)
        y, past = call({first: x, "attention_mask": mask,
                        "position_ids": text_streams(done[:, None], rank)}, past)
        for b, r in enumerate(rows):
            if done[b] < len(r):
                outs[b].append(y[b])
        done = done + 1
    got = [np.concatenate(o) for o in outs]
    # row 0 alone, in chunks
    past, start, pieces = buffers(1), 0, []
    for c in chunks:
        end = start + c
        y, past = call({first: rows[0][None, start:end],
                        "attention_mask": np.ones((1, end), np.int64),
                        "position_ids": text_streams(np.arange(start, end)[None], rank)},
                       past)
        pieces.append(y[0])
        start = end
    chunked = np.concatenate(pieces)
    want0 = got[0]
    assert np.abs(chunked - want0).max() <= 1e-4 * max(1.0, float(np.abs(want0).max()))
    return got


def test_a_decoding_model_is_reproducible_and_named_for_onnxruntime_genai() -> None:
    layer = attndsl.load(EXAMPLES[0].parent / "llama_lm.attn")["llama_lm"]
    a = layer.decoder_bytes(target="ort-cpu", seed=3)
    assert a == layer.decoder_bytes(target="ort-cpu", seed=3)
    s = ort.InferenceSession(a, providers=["CPUExecutionProvider"])
    assert [i.name for i in s.get_inputs()] == [
        "input_ids", "attention_mask", "position_ids", "past_key_values.0.key",
        "past_key_values.0.value", "past_key_values.1.key", "past_key_values.1.value"]
    assert [o.name for o in s.get_outputs()] == [
        "logits", "present.0.key", "present.0.value", "present.1.key", "present.1.value"]
    assert s.get_inputs()[3].shape == ["batch", 2, "max_length", 32]  # in place on ort-cpu
    assert s.get_outputs()[1].shape == ["batch", 2, "max_length", 32]
    assert s.get_outputs()[0].shape == ["batch", "length", 1000]
    assert s.get_modelmeta().custom_metadata_map["attndsl.kv_cache"] == "in_place"
    nodes = onnx.load_from_string(a).graph.node
    readers = {n.op_type for n in nodes for i in n.input if i.startswith("past_key_values.")}
    assert readers == {"GroupQueryAttention"}  # nothing copies the cache
    growing = ort.InferenceSession(layer.decoder_bytes(target="portable", seed=3),
                                   providers=["CPUExecutionProvider"])
    assert growing.get_inputs()[3].shape == ["batch", 2, "past_length", 32]
    assert growing.get_outputs()[1].shape == ["batch", 2, "total_length", 32]
    assert growing.get_modelmeta().custom_metadata_map["attndsl.kv_cache"] == "growing"


def test_a_bounded_cache_stops_growing_at_the_window() -> None:
    """mistral_local (window 64: each query sees 63 earlier keys): with a bounded cache the
    present holds the last 63 keys whatever the prompt, so a 400-token prompt and 50 steps
    need the cache memory of a 64-token prompt; without, it grows with every token."""
    layer = attndsl.load(EXAMPLES[0].parent / "mistral_local.attn")["mistral_local"]
    rng = np.random.default_rng(0)

    def cache_bytes(bounded: bool, prompt: int, steps: int) -> list[int]:
        s = ort.InferenceSession(layer.decoder_bytes(target="ort-cpu", bounded=bounded),
                                 providers=["CPUExecutionProvider"])
        past = {n: np.zeros((1, 2, 0, 32), np.float32)
                for n in ("past_key_values.0.key", "past_key_values.0.value")}
        sizes, n, T = [], 0, prompt
        for _ in range(steps + 1):
            n += T
            out = s.run(None, {"x": rng.standard_normal((1, T, 256)).astype(np.float32),
                               "attention_mask": np.ones((1, n), np.int64),
                               "position_ids": np.arange(n - T, n)[None], **past})
            past = dict(zip(past, out[1:], strict=True))
            sizes.append(sum(v.nbytes for v in past.values()))
            T = 1
        return sizes

    small = cache_bytes(True, 64, 0)[0]
    long = cache_bytes(True, 400, 50)
    assert max(long) == small == 2 * 63 * 2 * 32 * 4
    assert cache_bytes(False, 400, 1)[-1] == 2 * 401 * 2 * 32 * 4


@pytest.mark.parametrize("target", ["ort-cpu", "portable"])
def test_a_bounded_cache_keeps_the_sink_tokens_beside_the_window(target) -> None:
    """streaming_llm (4 sink tokens, window 24): the bounded present holds 4 + 23 keys however
    long the stream, and those are the keys of each row's first 4 real tokens (a row left-
    padded by 30 slots keeps its own, not padding) and of the last 23 slots: the growing
    cache's keys at those slots, for every row and step."""
    layer = attndsl.load(EXAMPLES[0].parent / "streaming_llm.attn")["streaming"]
    rng = np.random.default_rng(1)
    runs = {bounded: ort.InferenceSession(layer.decoder_bytes(target=target, bounded=bounded),
                                          providers=["CPUExecutionProvider"])
            for bounded in (True, False)}
    past = {bounded: {n: np.zeros((2, 2, 0, 16), np.float32) for n in (
        "past_key_values.0.key", "past_key_values.0.value")} for bounded in runs}
    mask, T = np.zeros((2, 0), np.int64), 40
    for step in range(30):
        new = np.ones((2, T), np.int64)
        new[1, : 30 if step == 0 else 0] = 0
        mask = np.concatenate([mask, new], 1)
        feed = {"x": rng.standard_normal((2, T, 128)).astype(np.float32),
                "attention_mask": mask, "position_ids": np.maximum(np.cumsum(mask, 1) - 1,
                                                                   0)[:, -T:]}
        outs = {b: s.run(None, feed | past[b]) for b, s in runs.items()}
        np.testing.assert_allclose(outs[True][0], outs[False][0], atol=1e-4)
        kept, full = outs[True][1], outs[False][1]
        assert kept.shape[2] == min(full.shape[2], 4 + 23)
        if full.shape[2] > 27:
            for row in range(2):
                first = np.flatnonzero(mask[row])[:4]  # the row's first real tokens' slots
                np.testing.assert_array_equal(kept[row, :, :4], full[row][:, first])
                np.testing.assert_array_equal(kept[row, :, 4:], full[row, :, -23:])
        past = {b: dict(zip(past[b], outs[b][1:], strict=True)) for b in runs}
        T = 1


@pytest.mark.parametrize("target", ["ort-cpu", "portable"])
def test_run_and_generate_take_decoding_models(tmp_path, target, capsys) -> None:
    """`attndsl run` feeds a decoding model a consistent prompt (empty cache or in-place
    buffers, all-ones mask, positions); `generate` decodes it; a model without logits is
    refused with a message."""
    from attndsl.cli import main

    out = tmp_path / "out"
    assert main(["compile", str(EXAMPLES[0].parent / "llama_lm.attn"), "--export", "onnx",
                 "--decode", "--target", target, "-o", str(out)]) == 0
    assert main(["run", str(out / "llama_lm.decode.onnx"), "--batch", "2", "--length", "5"]) == 0
    assert "logits" in capsys.readouterr().out
    assert main(["generate", str(out / "llama_lm.decode.onnx"), "--prompt-ids", "1,2,3",
                 "--prompt-ids", "4", "--max-new", "3", "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["tokens"]
    assert [len(t) for t in tokens] == [3, 3]
    assert main(["compile", str(EXAMPLES[0].parent / "mistral_local.attn"), "--export",
                 "onnx", "--decode", "--target", target, "-o", str(out)]) == 0
    assert main(["run", str(out / "mistral_local.decode.onnx")]) == 0
    capsys.readouterr()
    assert main(["generate", str(out / "mistral_local.decode.onnx"), "--prompt-ids", "1"]) == 2
    assert "decoding language model" in capsys.readouterr().err


CROSS_REFUSED = """
attention monotonic {
    d_model = 32
    heads = 2
    kind = cross
    mask = causal
}
attention rotary {
    d_model = 32
    heads = 2
    kind = cross
    position = rope(theta = 10000.0)
}
attention linear_cross {
    d_model = 32
    heads = 2
    kind = cross
    kernel = linear(feature = elu)
}
"""


@pytest.mark.parametrize(("name", "line", "words"), [
    ("monotonic", "mask = causal", "reads the query's index"),
    ("rotary", "position = rope", "positions relating queries to memory rows"),
    ("linear_cross", "kernel = linear", "linear kernel")])
def test_cross_attention_that_cannot_decode_is_refused_at_its_entry(name, line, words) -> None:
    layer = attndsl.loads(CROSS_REFUSED, "cross.attn")[name]
    layer.onnx_bytes(target="ort-cpu")  # the one-pass model is fine
    with pytest.raises(SpecError) as err:
        layer.decoder_bytes(target="portable")
    text = str(err.value)
    assert words in text and "cross.attn:" in text
    assert line in text.splitlines()[text.splitlines().index(next(
        t for t in text.splitlines() if t.lstrip().startswith("-->"))) + 2]


def test_random_decodable_spec_decodes_as_one_pass(spec_seed: int) -> None:
    """Random decodable specs from the property generator (tests/specgen.py): prefill, steps
    and chunks on every backend and target equal the reference's one pass."""
    from .specgen import random_spec

    program = attndsl.loads(random_spec(spec_seed, decoding=True), f"random-{spec_seed}.attn")
    layer = program[list(program)[-1]]
    check_decodable(layer.spec)
    _check_decoding(layer)
