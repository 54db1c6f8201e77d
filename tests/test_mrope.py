"""Multimodal RoPE (`rope(..., mrope = [t, h, w], mrope_interleaved = ...)`): three position
streams, each frequency turned by one of them. The oracle's reading against transformers'
own rotary embeddings (Qwen2.5-VL's sections, Qwen3.5's interleaving), the checker's
diagnostics, random specs on every backend and target, decoding with three streams, Qwen3.5
imported and run with explicit 3-D position ids against transformers, and generation through
onnxruntime-genai."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import attndsl
from attndsl.backends import reference
from attndsl.backends.torch import seeded_module
from attndsl.cli import main
from attndsl.decoding import first_past
from attndsl.errors import SpecError
from attndsl.ir import Node, Op, build
from attndsl.planner.rewrites import explained
from attndsl.shapes import T
from attndsl.targets import has_kernel

from .test_decoding import _check_decoding
from .test_generation import genai_tokens
from .test_random_specs import check_random_spec

tf = pytest.importorskip("transformers")

SPEC = """
attention vl_attn {
    d_model  = 96
    heads    = 4
    kv_heads = 2
    position = rope(theta = 1000000, mrope = [4, 4, 4])
    mask     = causal
}
transformer vl {
    attention = vl_attn
    layers    = 2
    vocab     = 300
    ffn       = swiglu(160)
    norm      = rmsnorm(pre, eps = 1e-6)
}
"""


def _oracle_rope(x: np.ndarray, pos: np.ndarray, dim: int, sections, interleaved_streams: bool,
                 theta: float = 10000.0) -> np.ndarray:
    """The oracle's rope node over x (B, h, n, d) at position_ids pos (3, B, n)."""
    node = Node(Op.ROPE, "y", ("x", "position_ids"),
                (("theta", theta), ("dim", dim), ("interleaved", False), ("scaling", None),
                 ("mrope", tuple(sections)), ("mrope_interleaved", interleaved_streams)),
                T(*x.shape))
    return reference._IMPL[Op.ROPE](node, {"x": x, "position_ids": pos}, {})


def _rotate_half(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = q.shape[-1] // 2
    return q * cos + torch.cat([-q[..., half:], q[..., :half]], dim=-1) * sin


@pytest.mark.parametrize("sections", [(2, 3, 3), (0, 8, 0), (5, 0, 3)])
def test_sectioned_streams_are_qwen2_5_vls(sections) -> None:
    """`mrope = [t, h, w]`: frequencies 0 .. t-1 turn by the time stream, the next h by the
    height stream, the rest by the width stream, as Qwen2.5-VL's rotary embedding."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding

    config = tf.Qwen2_5_VLTextConfig(hidden_size=64, num_attention_heads=4, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": list(sections)})
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 40, size=(3, 2, 9))
    q = rng.standard_normal((2, 4, 9, 16))
    cos, sin = Qwen2_5_VLRotaryEmbedding(config)(torch.zeros(1, dtype=torch.float64),
                                                 torch.from_numpy(pos))
    want = _rotate_half(torch.from_numpy(q), cos[:, None].double(), sin[:, None].double())
    got = _oracle_rope(q, pos, 16, sections, False)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    assert not np.allclose(got, _oracle_rope(q, pos[[1, 2, 0]], 16, sections, False))


@pytest.mark.parametrize(("sections", "dim"), [((3, 2, 2), 16), ((11, 11, 10), 8),
                                               ((1, 0, 4), 16)])
def test_interleaved_streams_are_qwen3_5s(sections, dim) -> None:
    """`mrope_interleaved = true`: frequency i turns by the height stream if i = 1 (mod 3) and
    i < 3h, by the width stream if i = 2 (mod 3) and i < 3w, else by time, as Qwen3.5's
    rotary embedding (sections larger than dim / 2 cut, as transformers cuts them)."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    config = tf.Qwen3_5TextConfig(hidden_size=64, num_attention_heads=4, head_dim=16,
                                  rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                   "partial_rotary_factor": dim / 16,
                                                   "mrope_section": list(sections)})
    rng = np.random.default_rng(1)
    pos = rng.integers(0, 40, size=(3, 2, 9))
    q = rng.standard_normal((2, 4, 9, 16))
    cos, sin = Qwen3_5TextRotaryEmbedding(config)(torch.zeros(1, dtype=torch.float64),
                                                  torch.from_numpy(pos))
    rot = _rotate_half(torch.from_numpy(q[..., :dim]), cos[:, None].double(),
                       sin[:, None].double())
    got = _oracle_rope(q, pos, dim, sections, True)
    np.testing.assert_allclose(got[..., :dim], rot.numpy(), atol=1e-5)
    np.testing.assert_array_equal(got[..., dim:], q[..., dim:])


def test_text_positions_are_one_dimensional_rope() -> None:
    """Three equal streams (a text token's) turn every frequency by its position: the
    one-dimensional RoPE of the same spec without mrope."""
    rng = np.random.default_rng(2)
    pos = rng.integers(0, 30, size=(1, 2, 7))
    q = rng.standard_normal((2, 3, 7, 12))
    plain = Node(Op.ROPE, "y", ("x", "position_ids"),
                 (("theta", 1e4), ("dim", 12), ("interleaved", False), ("scaling", None)),
                 T(*q.shape))
    want = reference._IMPL[Op.ROPE](plain, {"x": q, "position_ids": pos[0]}, {})
    for sections, interleaved in (((2, 2, 2), False), ((2, 2, 2), True)):
        np.testing.assert_allclose(_oracle_rope(q, np.repeat(pos, 3, 0), 12, sections,
                                                interleaved), want, atol=1e-12)


BAD = [
    ("rope(mrope = [4, 4])", "mrope takes three frequency counts", "[4, 4]"),
    ("rope(mrope = [4, -1, 13])", "non-negative integer", "-1"),
    ("rope(mrope_interleaved = true)", "mrope_interleaved needs `mrope", "true"),
    ("rope(mrope = [4, 4, 4])", "covers 12 frequencies; rope dim 16 has 8", "[4, 4, 4]"),
]


@pytest.mark.parametrize(("position", "words", "caret"), BAD)
def test_bad_sections_are_located(tmp_path: Path, capsys, position, words, caret) -> None:
    spec = tmp_path / "bad.attn"
    spec.write_text(f"attention a {{\n    d_model = 64\n    heads = 4\n"
                    f"    position = {position}\n    mask = causal\n}}\n")
    assert main(["check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert words in err and "bad.attn:4:" in err, err
    line = next(i for i, t in enumerate(err.splitlines()) if t.startswith("4 |"))
    marks = err.splitlines()[line + 1]
    col = err.splitlines()[line].index(caret)
    assert marks.index("^") == col and marks.count("^") == len(caret), err


@pytest.mark.parametrize(("extra", "words"), [
    ("kind = cross\n    memory_dim = 32", "needs self attention"),
    ("temperature = log(floor = 8, scale = 0.1)", "`temperature` reads one position"),
])
def test_mrope_refuses_what_reads_one_position(extra, words) -> None:
    with pytest.raises(SpecError, match=words):
        attndsl.loads(f"attention a {{\n    d_model = 64\n    heads = 4\n    {extra}\n"
                      "    position = rope(mrope = [2, 3, 3])\n    mask = causal\n}\n")


def test_a_stack_with_multimodal_rope_refuses_a_layer_reading_one_position() -> None:
    text = SPEC.replace("attention = vl_attn", "attention = [vl_attn, nope]") + (
        "attention nope {\n    d_model = 96\n    heads = 4\n    temperature = log(floor = 8, "
        "scale = 0.1)\n    mask = causal\n}\n")
    with pytest.raises(SpecError, match="`temperature` reads one position per token"):
        attndsl.loads(text)


def test_a_bad_mrope_section_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    import json

    config = tf.Qwen3_5TextConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, vocab_size=61,
                                  layer_types=["full_attention"]).to_dict()
    config["rope_parameters"] = {**config["rope_parameters"], "mrope_section": [2, 2]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["import", str(tmp_path), "-o", str(tmp_path / "q.attn")]) == 2
    err = capsys.readouterr().err
    assert "`mrope_section` must be three integers" in err and "Traceback" not in err


def test_a_stack_reads_one_shape_of_positions() -> None:
    text = SPEC.replace("attention = vl_attn", "attention = [vl_attn, plain]") + (
        "attention plain {\n    d_model = 96\n    heads = 4\n    position = rope\n"
        "    mask = causal\n}\n")
    with pytest.raises(SpecError, match=r"position_ids \[3, B, L\]") as err:
        attndsl.loads(text)
    assert "give every attention of the stack positions of one shape" in str(err.value)


def test_random_specs_with_multimodal_rope_match_the_reference() -> None:
    """Drawn from its own generator stream: sectioned over YaRN (46), interleaved with cut
    sections (95), a sectioned stack (172); random streams as position_ids."""
    for seed, words in ((46, "mrope = [0, 2, 3])"), (95, "mrope_interleaved = true"),
                        (172, "mrope = [2, 3, 0])")):
        from .specgen import random_spec

        assert words in random_spec(seed)
        check_random_spec(seed, portable=seed == 95)


@pytest.mark.parametrize("seed", [65, 258])
def test_random_decodable_specs_with_multimodal_rope_decode_as_one_pass(seed) -> None:
    """Interleaved under a window (65), a sectioned stack (258): text positions in every
    stream, prefill, steps and chunks on every backend and target."""
    from .specgen import random_spec

    text = random_spec(seed, decoding=True)
    assert "mrope" in text
    program = attndsl.loads(text, f"random-{seed}.attn")
    _check_decoding(program[list(program)[-1]])


def test_three_streams_decode_as_one_pass() -> None:
    """Streams that differ (an image's height and width positions among text): prefill and
    steps fed the slices of one position_ids [3, B, S] give the one pass's logits, on the
    oracle, torch and every target (an in-place cache's with batch 1, as it takes chunks)."""
    layer = attndsl.loads(SPEC)["vl"]
    rng = np.random.default_rng(4)
    B, S = 2, 23
    ids = rng.integers(0, 300, size=(B, S)).astype(np.int64)
    pos = np.broadcast_to(np.arange(S), (3, B, S)).copy()
    pos[1, :, 3:9] = np.array([0, 0, 1, 1, 2, 2]) + 3  # a 3 x 2 image's rows and columns
    pos[2, :, 3:9] = np.array([0, 1, 0, 1, 0, 1]) + 3
    pos[:, :, 9:] -= 3
    weights = {k: v.detach().double().numpy()
               for k, v in layer.to_torch(seed=3).state_dict().items()}
    want = reference.run(layer.graph(), {"input_ids": ids, "position_ids": pos}, weights)
    graph = build(layer.spec, decode=True)
    shapes = {n.out: n.shape for n in graph.nodes}
    step_module = seeded_module(layer.spec, 3, decode=True)
    runs = {"reference": (False, lambda feed: [reference.run_all(graph, feed, weights)[n]
                                               for n in (graph.output, *graph.presents)]),
            "torch": (False, lambda feed: [t.numpy() for t in step_module(
                **{k: torch.from_numpy(v) for k, v in feed.items()})])}
    for target in ("portable", "ort-cpu", "ort-cuda"):
        session = ort.InferenceSession(layer.decoder_bytes(target=target, seed=3),
                                       providers=["CPUExecutionProvider"])
        in_place = session.get_modelmeta().custom_metadata_map["attndsl.kv_cache"] == "in_place"
        runs[target] = (in_place, (lambda s: lambda feed: s.run(None, feed))(session))
    assert runs["ort-cpu"][0]  # GroupQueryAttention's cache, the rotation before it
    for name, (in_place, run) in runs.items():
        rows = 1 if in_place else B
        past = {}
        for p in graph.presents:
            h, d = shapes[p.replace("present.", "past_key_values.")].dims[1::2]
            past[p.replace("present.", "past_key_values.")] = np.zeros(
                (rows, h, S if in_place else 0, d), np.float32)
        outs, start = [], 0
        for n in (5, 1, 1, 9, S - 16):
            end = start + n
            with torch.no_grad():
                result = run({"input_ids": ids[:rows, start:end],
                              "attention_mask": np.ones((rows, end), np.int64),
                              "position_ids": pos[:, :rows, start:end], **past})
            outs.append(result[0])
            past = {p.replace("present.", "past_key_values."): np.asarray(v, np.float32)
                    for p, v in zip(graph.presents, result[1:], strict=True)}
            start = end
        got = np.concatenate(outs, axis=1)
        err = np.abs(got - want[:rows]).max()
        assert err <= 1e-4 * max(1.0, np.abs(want).max()), (name, err)


def test_the_planned_cpu_export_runs_onnx_runtimes_mrotary_kernel() -> None:
    """ort-cpu (whose 1.31 has MRotaryEmbedding) rotates with it, `explain` saying so; a
    provider whose table lacks the kernel for the dtype rotates in standard ops."""
    layer = attndsl.loads(SPEC)["vl"]
    for target, provider in (("ort-cpu", "cpu"), ("ort-cuda", "cuda")):
        model = onnx.load_from_string(layer.onnx_bytes(target=target))
        ops = {n.op_type for n in model.graph.node}
        fused = has_kernel("MRotaryEmbedding", "float32", provider)
        assert ("MRotaryEmbedding" in ops) == fused, target
        lines = explained(layer.plan(target)[0], target)
        assert any(line.startswith("mrotary: ") for line in lines) == fused
        assert [i.name for i in model.graph.input] == ["input_ids", "position_ids"]
        assert model.graph.input[1].type.tensor_type.shape.dim[0].dim_value == 3
    assert has_kernel("MRotaryEmbedding", "float32", "cpu")


def _qwen3_5(tmp_path: Path, moe: bool = False):
    common = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
                  linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
                  vocab_size=61, bos_token_id=1, eos_token_id=2,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                   "partial_rotary_factor": 0.5, "mrope_section": [3, 2, 2]})
    if moe:
        config = tf.Qwen3_5MoeTextConfig(moe_intermediate_size=32,
                                         shared_expert_intermediate_size=48, num_experts=6,
                                         num_experts_per_tok=2, **common)
    else:
        config = tf.Qwen3_5TextConfig(intermediate_size=80, **common)
    torch.manual_seed(0)
    model = (tf.Qwen3_5MoeForCausalLM if moe else tf.Qwen3_5ForCausalLM)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and name.endswith("norm.weight"):
                p.normal_(0.0, 0.1)  # around 0 (1 + w)
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    spec = tmp_path / "qwen3_5.attn"
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    assert "mrope = [3, 2, 2], mrope_interleaved = true" in spec.read_text()
    program = attndsl.load(spec)
    return model, folder, program[next(n for n in program
                                       if getattr(program[n].spec, "vocab", None))]


@pytest.mark.parametrize("moe", [False, True], ids=["qwen3_5_text", "qwen3_5_moe_text"])
def test_qwen3_5_with_explicit_3d_position_ids_gives_transformers_logits(tmp_path: Path,
                                                                         moe: bool) -> None:
    """Qwen3.5's text model imported from a tiny checkpoint, fed position_ids [3, B, L] that
    differ per stream (B = 2, the second row left-padded): its logits at every real token, in
    the one-pass model on each target and in torch and in the decoding model's prefill, within
    1e-4 of Qwen3_5ForCausalLM's (Qwen3_5MoeForCausalLM's) given the same position ids."""
    model, folder, layer = _qwen3_5(tmp_path, moe)
    matches_with_streams(model, layer, folder, 6, ("ort-cpu", "ort-cuda", "portable"), "ort-cpu")


def matches_with_streams(model, layer, folder: Path, seed: int, targets: tuple[str, ...],
                         decoding: str) -> None:
    """`layer` (imported from `folder`, transformers' `model`) fed position_ids [3, B, L] that
    differ per stream (B = 2): its logits within 1e-4 of the model's given the same streams,
    one pass on each of `targets` and in torch; and with the second row left-padded, the
    `decoding` target's decoding model's prefill at every real token."""
    rng = np.random.default_rng(seed)
    B, L = 2, 11
    ids = rng.integers(3, 61, size=(B, L)).astype(np.int64)
    pos = rng.integers(0, 25, size=(3, B, L)).astype(np.int64)
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids),
                     position_ids=torch.from_numpy(pos)).logits.numpy()
    bound = 1e-4 * max(1.0, float(np.abs(want).max()))
    for target in targets:
        session = ort.InferenceSession(layer.onnx_bytes(target=target, weights=folder),
                                       providers=["CPUExecutionProvider"])
        got = session.run(None, {"input_ids": ids, "position_ids": pos})[0]
        assert np.abs(got - want).max() <= bound, target
    module = layer.to_torch(weights=folder)
    with torch.no_grad():
        got = module(input_ids=torch.from_numpy(ids), position_ids=torch.from_numpy(pos))
    assert np.abs(got.numpy() - want).max() <= bound, "torch"
    # left padding: the decoding model's prefill against transformers with its attention_mask
    mask = np.ones((B, L), np.int64)
    mask[1, :4] = 0
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     position_ids=torch.from_numpy(pos)).logits.numpy()
    got = prefill(layer.decoder_bytes(target=decoding, weights=folder),
                  {"input_ids": ids, "attention_mask": mask, "position_ids": pos})
    real = mask.astype(bool)
    assert np.abs(got[real] - want[real]).max() <= 1e-4 * max(1.0, np.abs(want[real]).max())


def test_cohere_compass_with_explicit_3d_position_ids_gives_transformers_logits(
        tmp_path: Path) -> None:
    """Cohere Compass's text model (Cohere 2's parallel blocks, sliding layers rotated by
    interleaved multimodal RoPE in the rotate-half layout, a NoPE full layer, logit_scale)
    imported from a tiny checkpoint and fed position_ids [3, B, L] that differ per stream: its
    logits within 1e-4 of CohereCompassForCausalLM's given the same streams, on each target
    and in torch; and the growing decoding model's prefill of a left-padded row (the in-place
    one takes right-padded rows: docs/LANGUAGE.md, Decoding)."""
    import transformers as tf

    config = tf.CohereCompassTextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=61, sliding_window=5, logit_scale=0.5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 50000.0,
                                               "mrope_section": [3, 3, 2]},
                         "full_attention": None}, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    folder, spec = tmp_path / "hf", tmp_path / "compass.attn"
    model.save_pretrained(folder)
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    assert "mrope = [3, 3, 2], mrope_interleaved = true" in spec.read_text()
    program = attndsl.load(spec)
    layer = program[next(n for n in program if getattr(program[n].spec, "vocab", None))]
    matches_with_streams(model, layer, folder, 7, ("ort-cpu", "portable"), "portable")


def prefill(model: bytes, feed: dict[str, np.ndarray]) -> np.ndarray:
    """A decoding model's logits for a prompt `feed` (input_ids, attention_mask,
    position_ids), its caches empty (a fixed-size state: zeros)."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    batch = feed["input_ids"].shape[0]
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            feed = {**feed, i.name: np.zeros(first_past(batch, i.shape), np.float32)}
    return session.run(["logits"], feed)[0]


def test_genai_generates_a_multimodal_rope_model_as_attndsl(tmp_path: Path, capsys) -> None:
    """An attention-only model with multimodal RoPE through onnxruntime-genai (its
    qwen2_5_vl_text type, which passes position_ids [3, B, S], a text token's three streams
    its position): greedy tokens equal `attndsl generate`'s, a prompt with token 0 (the
    image token's default id) included."""
    og = pytest.importorskip("onnxruntime_genai")
    import json

    spec = tmp_path / "vl.attn"
    spec.write_text(SPEC)
    out = tmp_path / "genai"
    assert main(["compile", str(spec), "--export", "genai", "-o", str(out), "-q"]) == 0
    folder = out / "vl"
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    assert config["type"] == "qwen2_5_vl_text" and config["image_token_id"] == 300
    m = og.Model(str(folder))
    for prompt in ([5, 9, 11], [0, 0, 7, 1]):
        capsys.readouterr()
        assert main(["generate", str(folder), "--prompt-ids", ",".join(map(str, prompt)),
                     "--max-new", "6", "-q"]) == 0
        ours = [int(t) for t in capsys.readouterr().out.splitlines()[0].split(",")]
        assert genai_tokens(og, m, prompt, 6) == ours, prompt
