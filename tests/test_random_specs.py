"""The property test over the whole language: random valid specs (tests/specgen.py), each run
on the NumPy reference, the torch module and every target's export on ONNX Runtime, at lengths
that are not multiples of any block size, L = 1, L != S for cross attention, and batches with
rows that see no key. A fixed-seed slice runs by default; `pytest --deep` runs 2,000 specs
(`--deep-count N` for another number)."""

from __future__ import annotations

import math

import numpy as np
import torch

import attndsl
from attndsl.backends import reference, runtime
from attndsl.patches import image_shape
from attndsl.spec import memory_reader, reads_streams
from attndsl.verify import tolerance

from .specgen import random_spec

SHAPES = ((2, 1, 7), (3, 37, 53), (2, 23, 283), (3, 131, 101))  # (batch, L, S if cross): primes
# torch.onnx.export takes seconds: the portable target on every 8th spec, and on one spec of
# each stream the tests below draw from
PORTABLE_EVERY = 8


def _inputs(spec, batch: int, L: int, S: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    attn = spec.attention if hasattr(spec, "layers") else spec
    reader = memory_reader(spec)  # a cross attention, or a decoder stack's
    S = S if reader is not None else L
    if getattr(spec, "vocab", None):  # a language model: token ids
        feed = {"input_ids": rng.integers(0, spec.vocab, size=(batch, L)).astype(np.int64)}
    elif getattr(spec, "patches", None):  # a vision stack: an image of L patches
        image = (batch, spec.patches.channels, *image_shape(spec.patches, L))
        feed = {"pixel_values": rng.standard_normal(image).astype(np.float32)}
    else:
        feed = {"x": rng.standard_normal((batch, L, attn.d_model)).astype(np.float32)}
    if reader is not None:
        feed["memory"] = rng.standard_normal((batch, S, reader.memory_dim)).astype(np.float32)
    for name in ("key_lengths", "memory_lengths"):  # (a stack's key_lengths: its tokens')
        if name not in spec.runtime_inputs:
            continue
        n = L if name == "key_lengths" and hasattr(spec, "layers") else S
        lengths = rng.integers(0, n + 1, size=batch)
        lengths[0], lengths[-1] = n, 0  # a full row and rows with no visible key
        if batch > 2:
            lengths[1] = n + 2**32  # beyond 32 bits: still every key
        feed[name] = lengths.astype(np.int64)
    if "segment_ids" in spec.runtime_inputs:
        feed["segment_ids"] = np.sort(rng.integers(0, 3, size=(batch, L)), axis=1).astype(
            np.int64)
    if "memory_segment_ids" in spec.runtime_inputs:  # rows of the same documents
        feed["memory_segment_ids"] = np.sort(rng.integers(0, 3, size=(batch, S)),
                                             axis=1).astype(np.int64)
    if reads_streams(spec) and "pixel_values" not in feed:  # multimodal RoPE's three
        # streams, axial RoPE's two (a vision stack's: its image's grid), each its own
        n = reads_streams(spec)  # (rows and columns: a grid's, about sqrt(L) a side)
        top = 2 * L + 3 if n == 3 else math.isqrt(L) + 3
        feed["position_ids"] = rng.integers(0, top, size=(n, batch, L)).astype(np.int64)
    return feed


def check_random_spec(seed: int, *, portable: bool) -> None:
    text = random_spec(seed)
    program = attndsl.loads(text, f"random-{seed}.attn")
    top = program[list(program)[-1]]  # the stack when there is one
    for layer in (top, *([top.encoder()] if getattr(top.spec, "encoder", None) else [])):
        _check_layer(layer, seed, text, portable)


def _check_layer(layer, seed: int, text: str, portable: bool) -> None:
    """One layer (or an encoder-decoder's encoder) on every backend and target."""
    module = layer.to_torch(seed=seed)
    state = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
    targets = ("ort-cpu", "ort-cuda") + (("portable",) if portable else ())
    sessions = {t: runtime.make_session(layer.onnx_bytes(target=t, seed=seed), "cpu")
                for t in targets}
    graph = layer.graph()
    rng = np.random.default_rng(seed)
    for batch, L, S in SHAPES:
        feed = _inputs(layer.spec, batch, L, S, rng)
        ref = reference.run(graph, feed, state)
        tol = tolerance(ref)
        with torch.no_grad():
            got = {"torch": module(**{k: torch.from_numpy(v) for k, v in feed.items()}).numpy()}
        for target, session in sessions.items():
            got[target] = runtime.run(session, feed)
        for name, y in got.items():
            err = float(np.abs(y.astype(np.float64) - ref).max())
            plan = "" if name in ("torch", "portable") else \
                f" ({layer.plan(name)[1][0].strategy})"
            assert np.isfinite(y).all() and err <= tol, (
                f"seed {seed}: {name}{plan} differs from the reference by {err:.3g} "
                f"(tolerance {tol:.3g}) at B={batch} L={L} shapes "
                f"{ {k: v.shape for k, v in feed.items()} }\n{text}")


def test_random_spec_matches_reference_everywhere(spec_seed: int) -> None:
    check_random_spec(spec_seed, portable=spec_seed % PORTABLE_EVERY == 0)


def test_random_specs_with_a_squared_relu_match_the_reference() -> None:
    """relu2 (Arcee's MLP) is drawn from its own stream, past the seeds the test above runs."""
    for seed in (26, 78):
        assert "relu2(" in random_spec(seed)  # a stack's MLP (26) and experts (78)
        check_random_spec(seed, portable=seed == 78)  # (the quicker export: 2 s, 26's 5 s)


def test_random_specs_with_unit_offset_and_biased_qk_layernorms_match_the_reference() -> None:
    """A stack's LayerNorm with gain 1 + w (Nemotron's LayerNorm1P) and q/k LayerNorms with
    their bias (Persimmon's) are drawn from their own streams, among the default seeds."""
    for seed, drawn in ((7, "unit_offset = true)"), (17, "bias = true)")):
        text = random_spec(seed)
        assert any(drawn in line and "layernorm(" in line for line in text.splitlines())
        check_random_spec(seed, portable=True)  # the default run exports every 8th seed only


def test_random_specs_with_a_weight_per_head_in_qk_layernorms_match_the_reference() -> None:
    """q/k LayerNorms with each head's own weight (StableLM 2's `head_weights`), with and
    without a bias, are drawn from their own stream, past the seeds the tests above run."""
    for seed, drawn in ((98, "head_weights = true)"), (84, "bias = true)")):
        text = random_spec(seed)
        assert any(drawn in line and "head_weights" in line for line in text.splitlines())


def test_random_specs_with_an_xielu_mlp_match_the_reference() -> None:
    """xielu (Apertus's MLP) is drawn from its own stream: a biased one in the seeds the test
    above runs (7), its constants changed (37, a language model) and its defaults (141)."""
    for seed in (7, 37, 141):
        assert "ffn = xielu(" in random_spec(seed)
        if seed != 7:  # the default run and the unit-offset test above check seed 7
            check_random_spec(seed, portable=seed == 37)


def test_random_specs_with_sub_norms_match_the_reference() -> None:
    """BitNet's sub-norms are drawn from their own streams: both with a gated squared-ReLU MLP
    over an LSH kernel (58), both as layernorms around a biased SwiGLU (111), the MLP's alone
    around an MLP without a gate (232)."""
    for seed, words in ((58, ("sub_norm = layernorm", "ffn = sub_norm(relu2_glu(")),
                        (111, ("sub_norm = layernorm", "ffn = sub_norm(swiglu(")),
                        (232, ("ffn = sub_norm(gelu_tanh(",))):
        assert all(w in random_spec(seed) for w in words)
        check_random_spec(seed, portable=seed == 111)


def test_random_specs_with_a_sparse_mixer_match_the_reference() -> None:
    """PhiMoE's sparse mixer (`router = sparsemixer`) is drawn from its own stream, past the
    seeds the test above runs: experts with a gelu and a swiglu unit, thresholds that keep few
    and every expert."""
    for seed in (54, 99):
        assert "router = sparsemixer" in random_spec(seed)
        check_random_spec(seed, portable=seed == 54)


def test_random_specs_with_weightless_rmsnorms_and_kolibri_and_axk1_mixtures_match() -> None:
    """RMSNorms without a weight (NanoChat's: a stack's, 52; the embeddings', 1160), a router
    choosing by its logits plus the selection bias (Kolibri's `select_by = logits`, 1607) and
    a mixture's output norm (A.X-K1's `output_norm`: a layernorm, 225; a weightless RMSNorm,
    22), drawn from their own streams past the seeds the default run takes."""
    for seed, words in ((52, ("rmsnorm(sandwich", "affine = false)")),
                        (1160, ("embedding_norm = rmsnorm(eps = 1e-6, affine = false)",)),
                        (1607, ("selection_bias = true, select_by = logits",)),
                        (225, ("output_norm = layernorm(eps = 1e-5)",)),
                        (22, ("output_norm = rmsnorm(affine = false)",))):
        text = random_spec(seed)
        assert all(w in text for w in words), (seed, words)
        check_random_spec(seed, portable=seed == 1607)


def test_random_specs_with_modernbert_blocks_match_the_reference() -> None:
    """ModernBERT's unnormed first attention (`first_attn_norm = false`, 197) and its exact-GELU
    gate (`gelu_glu`, 15) are drawn from their own streams, past the seeds the test above runs."""
    for seed, word in ((197, "first_attn_norm = false"), (15, "gelu_glu(")):
        assert word in random_spec(seed)
        check_random_spec(seed, portable=seed == 15)


def check_stream(cases: tuple, portable: int, decoding: tuple[int, str] | None = None) -> None:
    """A generator stream's specs: each (seed, words) holds its words and matches the
    reference on every backend and target (the portable export for seed `portable`);
    `decoding` (seed, word): that seed's decodable spec holds the word and decodes as one
    pass on every backend and target."""
    from .test_decoding import _check_decoding

    for seed, words in cases:
        text = random_spec(seed)
        assert all(w in text for w in words), (seed, words)
        check_random_spec(seed, portable=seed == portable)
    if decoding is not None:
        seed, word = decoding
        text = random_spec(seed, decoding=True)
        assert word in text, (seed, word)
        program = attndsl.loads(text, f"random-{seed}.attn")
        _check_decoding(program[list(program)[-1]])


def test_random_specs_with_a_prediction_head_match_the_reference() -> None:
    """BERT's and ModernBERT's prediction head before the LM head (`head_transform`: its own
    stream; 140 after an embedding norm, 628 with an RMSNorm, 466 with learned positions under
    the embedding norm, which norms them too), and one decoding as one pass (175)."""
    check_stream(((140, ("head_transform = dense(", "embedding_norm")),
                  (628, ("head_transform = dense(norm = rmsnorm",)),
                  (466, ("head_transform = dense(", "embedding_norm", "learned("))),
                 portable=466, decoding=(175, "head_transform"))  # (466: the quickest export)


def test_random_specs_with_a_power_temperature_match_the_reference() -> None:
    """Beam's scalable-softmax query scale (`temperature = power(...)`), drawn from its own
    stream: base 64 (6), in a stack (22), base 4, where it grows fastest (162); 16 decoding
    as one pass, at the positions a decoding call reads."""
    check_stream(((6, ("temperature = power(base = 64",)), (22, ("power(", "transformer")),
                  (162, ("power(base = 4,",))), portable=6, decoding=(16, "temperature = power"))


def test_random_specs_with_depth_scaled_residuals_match_the_reference() -> None:
    """Beam's depth-scaled residual (`residual_scale = depth`), drawn from its own stream: a
    language model (54) and a stack of output norms (42); 42 decoding as one pass."""
    check_stream(((54, ("residual_scale = depth", "vocab")), (42, ("residual_scale = depth",
                                                                   "(output"))),
                 # 42's export: 54's, a language model, is exported by the sparse mixer's test
                 portable=42, decoding=(42, "residual_scale = depth"))


def test_random_specs_with_a_shortcut_match_the_reference() -> None:
    """LongCat-Flash's shortcut feed-forward (block 2p's normed feed-forward input, joined to
    block 2p + 1's output), drawn from its own stream: a mixture with identity experts (217 a
    language model, 626 a stack of hidden states), a SwiGLU (194) and a GELU MLP (395); 407
    decoding as one pass."""
    check_stream(((217, ("shortcut = moe(", "vocab")), (626, ("shortcut = moe(",)),
                  (194, ("shortcut = swiglu(",)), (395, ("shortcut = gelu(",))),
                 portable=217, decoding=(407, "shortcut"))


def test_random_specs_with_identity_experts_match_the_reference() -> None:
    """LongCat-Flash's zero-computation experts (`zero_experts`), drawn from their own stream:
    209 with the gate on the expert's input, 530 with a selection bias; 78 decoding as one
    pass."""
    check_stream(((209, ("zero_experts", "gate = input")),
                  (530, ("zero_experts", "selection_bias = true"))),
                 portable=530, decoding=(78, "zero_experts"))  # (530: the quicker export)
