"""A decoder stack (`cross = a`, docs/LANGUAGE.md, Transformer): every block's self attention,
then its cross attention over the memory rows, then its feed-forward; the memory's padding
its own input (memory_lengths) beside the tokens' (key_lengths)."""

from __future__ import annotations

import numpy as np

import attndsl
from attndsl.backends import reference
from attndsl.weight_table import seeded_weights, weight_table

from .test_random_specs import check_stream

SPEC = """
attention dec_self {
    d_model = 32
    heads = 4
    mask = causal & padding
}
attention dec_cross {
    d_model = 32
    heads = 4
    kv_heads = 2
    kind = cross
    memory_dim = 24
    mask = padding
}
transformer decoder {
    attention = dec_self
    cross = dec_cross
    layers = 2
    ffn = gelu(40)
    norm = layernorm({placement})
}
"""


def test_random_specs_with_a_decoder_stack_match_the_reference() -> None:
    """Stream 56: a decoder's cross attention in every block of a pre- or post-norm stack
    (48: a language model), on every backend and target (the portable export for 229); 115
    decoding as one pass, the memory's keys and values cached once beside the tokens'."""
    check_stream(((48, ("cross = c", "vocab")), (229, ("cross = c",)), (340, ("cross = c",))),
                 portable=229, decoding=(115, "cross = c"))


def test_random_encoder_decoder_models_match_the_reference() -> None:
    """Stream 56's encoder-decoder models (`encoder = e`): the decoder and the encoder as
    the model runs it (source ids through the shared embedding), on every backend and target
    (674, 834; the portable export for 834); 430's decoder decoding as one pass."""
    check_stream(((674, ("encoder = e",)), (834, ("encoder = e",))), portable=834,
                 decoding=(430, "encoder = e"))


def _block(x, memory, key_lengths, memory_lengths, w, i, placement):
    """Block i as docs/LANGUAGE.md writes it, in NumPy from the weights: pre, h = x +
    self(norm1(x)); h' = h + cross(norm_c(h), memory); y = h' + ffn(norm2(h')); post, the
    norms after each sum."""
    def norm(v, name):
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + 1e-5) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def attend(q_in, kv_in, p, heads, kv_heads, seen):
        def proj(v, n):
            return v @ w[f"{p}{n}_proj.weight"].T + w[f"{p}{n}_proj.bias"]

        B, L, _ = q_in.shape
        q = proj(q_in, "q").reshape(B, L, heads, -1).transpose(0, 2, 1, 3)
        S = kv_in.shape[1]
        k = proj(kv_in, "k").reshape(B, S, kv_heads, -1).transpose(0, 2, 1, 3)
        v = proj(kv_in, "v").reshape(B, S, kv_heads, -1).transpose(0, 2, 1, 3)
        k, v = np.repeat(k, heads // kv_heads, 1), np.repeat(v, heads // kv_heads, 1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
        s = np.where(seen[:, None], s, -np.inf)
        m = np.where(seen[:, None].any(-1, keepdims=True), s.max(-1, keepdims=True), 0)
        e = np.where(seen[:, None], np.exp(s - m), 0)
        d = e.sum(-1, keepdims=True)
        a = np.where(d > 0, e / np.where(d > 0, d, 1), 0) @ v
        return proj(a.transpose(0, 2, 1, 3).reshape(B, L, -1), "o")

    B, L, _ = x.shape
    S = memory.shape[1]
    t = np.arange(L)
    own = (t[None, :, None] >= t[None, None, :]) & (t[None, None, :] < key_lengths[:, None, None])
    mem = np.broadcast_to(np.arange(S)[None, None, :] < memory_lengths[:, None, None], (B, L, S))
    p = f"layers.{i}."

    def mlp(v):
        h = v @ w[f"{p}mlp.fc1.weight"].T + w[f"{p}mlp.fc1.bias"]
        from math import erf
        h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
        return h @ w[f"{p}mlp.fc2.weight"].T + w[f"{p}mlp.fc2.bias"]

    def self_(v):
        return attend(v, v, f"{p}self_attn.", 4, 4, own)

    def cross(v):
        return attend(v, memory, f"{p}cross_attn.", 4, 2, mem)

    if placement == "pre":
        h = x + self_(norm(x, f"{p}attn_norm"))
        h = h + cross(norm(h, f"{p}cross_attn_norm"))
        return h + mlp(norm(h, f"{p}ffn_norm"))
    h = norm(x + self_(x), f"{p}attn_norm")
    h = norm(h + cross(h), f"{p}cross_attn_norm")
    return norm(h + mlp(h), f"{p}ffn_norm")


def test_the_oracle_reads_a_decoder_block_as_the_formulas_say() -> None:
    """The reference's output equals the block formulas written out here (pre and post), with
    the tokens' and the memory's padding apart: a row with no real memory row (its cross
    attention adds zeros) and one with every row."""
    rng = np.random.default_rng(3)
    x, memory = rng.standard_normal((3, 6, 32)), rng.standard_normal((3, 5, 24))
    key_lengths, memory_lengths = np.array([6, 4, 1]), np.array([5, 0, 2])
    for placement in ("pre", "post"):
        layer = attndsl.loads(SPEC.replace("{placement}", placement))["decoder"]
        w = seeded_weights(weight_table(layer.spec), 9)
        got = reference.run(layer.graph(), {"x": x, "memory": memory, "key_lengths": key_lengths,
                                            "memory_lengths": memory_lengths}, w)
        h = x
        for i in range(2):
            h = _block(h, memory, key_lengths, memory_lengths, w, i, placement)
        if placement == "pre":  # the final norm of a pre-norm stack
            mu = h.mean(-1, keepdims=True)
            h = (h - mu) / np.sqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5) \
                * w["norm.weight"] + w["norm.bias"]
        np.testing.assert_allclose(got, h, rtol=0, atol=1e-9)
