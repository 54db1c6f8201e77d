"""Reformer's LSH attention (docs/LANGUAGE.md, Kernels): against Hugging Face's own
LSHSelfAttention (tiny modules from a config, the rotations it draws replaced by attndsl's
documented draw), against standard attention where the kernel reduces to it, and every backend
and target against the reference at lengths around the chunk size."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformers import ReformerConfig
from transformers.models.reformer.modeling_reformer import LSHSelfAttention

import attndsl
from attndsl.backends.torch import TorchArrays
from attndsl.cli import main
from attndsl.mechanisms import lsh

HEADS, HEAD_DIM, D_MODEL = 4, 16, 64


def _layer(buckets: int, rounds: int, chunk: int, seed: int, mask: str) -> attndsl.Layer:
    return attndsl.loads(f"""
        attention a {{
            d_model = {D_MODEL}
            heads = {HEADS}
            bias = false
            out_proj = false
            kernel = lsh(buckets = {buckets}, rounds = {rounds}, chunk = {chunk}, seed = {seed})
            mask = {mask}
        }}""")["a"]


def _documented_normals(seed: int, n: int) -> list[float]:
    """The draw as the language reference writes it, in plain Python."""
    P, M = 2147483647, 48271
    state, out = seed % (P - 1) + 1, []
    while len(out) < n:
        state = state * M % P
        u1 = state / P
        state = state * M % P
        u2 = state / P
        r = math.sqrt(-2 * math.log(u1))
        out += [r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)]
    return out[:n]


def test_rotations_follow_the_documented_draw() -> None:
    got = lsh.rotations(seed=12345, heads=2, dim=3, rounds=2, buckets=6)
    assert got.shape == (2, 3, 6)  # [heads, head_dim, rounds * buckets / 2]
    want = np.array(_documented_normals(12345, got.size), np.float32)
    np.testing.assert_array_equal(got.reshape(-1), want)
    assert abs(want.mean()) < 0.5 and 0.5 < want.std() < 1.5  # standard normals


@pytest.mark.parametrize(("causal", "rounds", "buckets", "chunk"),
                         [(True, 1, 4, 8), (False, 1, 6, 5), (False, 3, 4, 8), (True, 2, 8, 4)])
def test_matches_transformers_lsh_self_attention(causal: bool, rounds: int, buckets: int,
                                                 chunk: int) -> None:
    """HF's LSHSelfAttention with the same weights and rotations, its input padded to a
    multiple of the chunk with masked tokens (as ReformerModel pads), right padding by its
    attention_mask. Exact (float32 rounding) except where HF itself rounds: a token alone
    with copies of itself (position 0 under causal with several rounds), whose float32
    log-sum-exp near -1e5 holds only 2^-7 and scales HF's row by up to 0.5 %; attndsl gives
    that row v_i exactly (checked)."""
    seed = 3
    layer = _layer(buckets, rounds, chunk, seed, "causal & padding" if causal else "padding")
    module = layer.to_torch(seed=2).eval()
    config = ReformerConfig(
        hidden_size=D_MODEL, num_attention_heads=HEADS, attention_head_size=HEAD_DIM,
        num_buckets=buckets, num_hashes=rounds, lsh_attn_chunk_length=chunk,
        lsh_num_chunks_before=1, lsh_num_chunks_after=0, is_decoder=causal,
        attn_layers=["lsh"], lsh_attention_probs_dropout_prob=0.0, max_position_embeddings=512)
    hf = LSHSelfAttention(config).eval()
    state = module.state_dict()
    hf.query_key.weight.data = state["q_proj.weight"].clone()
    hf.value.weight.data = state["v_proj.weight"].clone()
    rotations = torch.tensor(lsh.rotations(seed, HEADS, HEAD_DIM, rounds, buckets)
                             ).reshape(HEADS, HEAD_DIM, rounds, buckets // 2)
    for L in (1, chunk - 1, chunk, chunk + 1, 3 * chunk + 2, 8 * chunk):
        Lp = -(-L // chunk) * chunk
        x = torch.randn(2, L, D_MODEL, generator=torch.Generator().manual_seed(L))
        lengths = torch.tensor([L, max(L - 3, 1)])
        with torch.no_grad():
            ours = module(x=x, key_lengths=lengths)
            padded = torch.cat([x, torch.zeros(2, Lp - L, D_MODEL)], 1)
            shown = (torch.arange(Lp)[None] < lengths[:, None]).long()
            with mock.patch("torch.randn", lambda *a, **k: rotations.clone()):
                theirs = hf(padded, attention_mask=shown).hidden_states[:, :L]
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (HEADS, HEAD_DIM))  # (B, L, H, d)

        own = x @ state["v_proj.weight"].T  # each token's value: what a lone token gets
        alone = (heads(ours) - heads(own)).abs().amax(-1, keepdim=True) < 1e-6  # per head
        if causal:
            assert alone[:, 0].all()  # position 0 has no other key
        close = torch.where(alone, 2e-2, 2e-5)
        gap = (heads(ours) - heads(theirs)).abs()
        assert (gap <= close).all(), gap.amax()
        if not (causal and rounds > 1):  # HF exact too: at most one copy of a lone token
            torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=0)


def _softmax_without_self(x: np.ndarray, w: dict[str, np.ndarray], causal: bool,
                          lengths: np.ndarray) -> np.ndarray:
    """Standard attention over the queries' normalised selves as keys, a token seeing itself
    only when nothing else is visible: what LSH is when L <= chunk (one chunk per round)."""
    B, L, _ = x.shape
    out = np.zeros((B, L, HEADS * HEAD_DIM))
    for b in range(B):
        q = (x[b] @ w["q_proj.weight"].T).reshape(L, HEADS, HEAD_DIM)
        v = (x[b] @ w["v_proj.weight"].T).reshape(L, HEADS, HEAD_DIM)
        for h in range(HEADS):
            k = q[:, h] / np.sqrt((q[:, h] ** 2).mean(-1, keepdims=True) + 1e-6)
            for i in range(L):
                others = [j for j in range(L) if j != i and j < lengths[b]
                          and not (causal and j > i)]
                keys = others or [i]
                s = np.array([q[i, h] @ k[j] / math.sqrt(HEAD_DIM) for j in keys])
                p = np.exp(s - s.max())
                out[b, i, h * HEAD_DIM:(h + 1) * HEAD_DIM] = (p / p.sum()) @ v[keys, h]
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_one_chunk_is_standard_attention_without_self_in_every_target(causal: bool) -> None:
    layer = _layer(6, 3, 16, 9, "causal & padding" if causal else "padding")
    module = layer.to_torch(seed=4).eval()
    w = {k: v.double().numpy() for k, v in module.state_dict().items()}
    x = np.random.default_rng(5).standard_normal((3, 13, D_MODEL))
    lengths = np.array([13, 6, 0])  # the last: every key hidden, each token sees itself
    want = _softmax_without_self(x, w, causal, lengths)
    inputs = {"x": x, "key_lengths": lengths}
    np.testing.assert_allclose(layer.reference(inputs, w), want, atol=1e-10)
    with torch.no_grad():
        got = module(x=torch.tensor(x, dtype=torch.float32), key_lengths=torch.tensor(lengths))
    np.testing.assert_allclose(got.numpy(), want, atol=2e-5)
    feed = {"x": x.astype(np.float32), "key_lengths": lengths}
    for target in ("portable", "ort-cpu"):
        session = ort.InferenceSession(layer.onnx_bytes(target=target, seed=4),
                                       providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(None, feed)[0], want, atol=2e-5)


def test_every_target_matches_the_reference_around_the_chunk() -> None:
    """L = 1, chunk - 1, chunk, chunk + 1 and lengths that are not multiples of it; batches of
    1 and 3 with key padding (a row of the batch keeps only its first keys)."""
    layer = attndsl.loads("""
        attention a {
            d_model = 48
            heads = 3
            value_dim = 8
            kernel = lsh(buckets = 4, rounds = 2, chunk = 7, seed = 5)
            mask = causal & padding(side = left)
        }""")["a"]
    report = layer.verify(lengths=(1, 6, 7, 8, 23, 50), batches=(1, 3), seed=2)
    assert report.passed, report.text()
    assert {c.backend for c in report.comparisons} == {
        "torch", "portable on cpu", "ort-cpu on cpu", "ort-cuda on cpu"}


def test_a_hashed_neighbour_is_attended_and_a_far_one_is_not() -> None:
    """The point of hashing: with one round, a query mixes only the values of the tokens in its
    chunk and the one before, in (bucket, position) order. Changing one token's value changes
    exactly the outputs of the queries whose window holds it (torch backend's formula)."""
    L, buckets, chunk = 32, 8, 4
    g = torch.Generator().manual_seed(0)
    q, v = torch.randn(1, 1, L, HEAD_DIM, generator=g), torch.randn(1, 1, L, HEAD_DIM, generator=g)
    R = lsh.rotations(1, 1, HEAD_DIM, 1, buckets)

    def run(values: torch.Tensor) -> torch.Tensor:
        return lsh.attend(TorchArrays(torch.device("cpu")), q, values, None, False,
                                      R, buckets, 1, chunk, 0.25)[0, 0]

    rotated = q[0, 0].numpy() @ R[0]  # the documented steps: buckets, order, chunks
    bucket = np.argmax(np.concatenate([rotated, -rotated], -1), -1)
    order = sorted(range(L), key=lambda i: (bucket[i], i))
    chunk_of = {t: at // chunk for at, t in enumerate(order)}
    for target in (order[0], order[13]):  # the first chunk's previous is the last (cyclic)
        last = L // chunk - 1
        after = chunk_of[target] + 1 if chunk_of[target] < last else 0
        sees = {i for i in range(L) if chunk_of[i] in (chunk_of[target], after)}
        moved = v.clone()
        moved[0, 0, target] += 5.0
        diff = (run(moved) - run(v)).abs().amax(-1)
        for i in range(L):
            if i == target:  # a token sees itself only when alone
                continue
            if i in sees:
                assert diff[i] > 1e-6, f"token {i} shares a window with {target}"
            else:
                assert diff[i] == 0, f"token {i} does not share a window with {target}"


def test_torch_export_program_serves_every_length(tmp_path) -> None:
    """`--export torch`: one program for lengths within one chunk and beyond it (the chunk
    count is part of the shapes, so the export must not specialise on it)."""
    assert main(["compile", "examples/reformer.attn", "--name", "reformer_shared", "--export",
                 "torch", "-o", str(tmp_path)]) == 0
    program = torch.export.load(str(tmp_path / "reformer_shared.pt2")).module()
    module = attndsl.load("examples/reformer.attn")["reformer_shared"].to_torch().eval()
    for L in (1, 31, 32, 33, 70):
        x = torch.randn(2, L, 256, generator=torch.Generator().manual_seed(L))
        with torch.no_grad():
            torch.testing.assert_close(program(x), module(x=x), atol=1e-6, rtol=0)


def test_lsh_layers_refuse_what_they_cannot_do(tmp_path, capsys) -> None:
    path = tmp_path / "lsh.attn"
    path.write_text("""attention a {
    d_model = 32
    heads = 4
    kernel = lsh(buckets = 4, chunk = 8)
    mask = causal
}

transformer lm {
    attention = a
    layers = 1
    ffn = gelu(64)
    norm = layernorm(pre)
    vocab = 50
}
""")
    assert main(["compile", str(path), "--name", "lm", "--export", "genai", "-o",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "cannot say which a new token would share a chunk with" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
