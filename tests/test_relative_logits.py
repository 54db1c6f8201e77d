"""Inkling's attention: relative logits (`position = relative_logits(d_rel, extent)`: each
query token's relative states mix a learned bank of bias-by-distance profiles into its score
bias), the logarithmic logit scaling of its full layers (`temperature = log_ratio(...)`, which
scales the relative states as it scales the queries) and residual short convolutions
(`residual_conv`, the stack's `ffn_conv`: u + conv(u), with their last inputs carried when
decoding). Against transformers' InklingAttention, on random specs of their own generator
streams, in decoding, and refused where they cannot apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import attndsl
from attndsl.backends.reference_mechanisms import READINGS

from .conftest import refused_at
from .specgen import random_spec
from .test_random_specs import check_stream
from .test_transformers import D_MODEL, HEAD_DIM, HEADS, KV_HEADS, close, redraw, run_onnx

D_REL, EXTENT, WINDOW, FLOOR, ALPHA = 3, 7, 5, 4, 0.3


@pytest.mark.parametrize("sliding", [False, True], ids=["full_log_scaled", "sliding"])
def test_relative_logits_match_inkling_attention(tmp_path, sliding: bool) -> None:
    """InklingAttention with its short convolutions zeroed (each then adds nothing to its
    residual): per-head RMSNorm of q and k, scores scaled by 1 / head_dim, the relative logits
    of r_proj and the bank (the sliding layer's extent is its window), and on the full layer
    the logarithmic scaling 1 + alpha ln(max((p + 1) / n_floor, 1)) of q and of the bias;
    lengths on either side of the extent and the floor."""
    from transformers.models.inkling.configuration_inkling import InklingTextConfig
    from transformers.models.inkling.modeling_inkling import InklingAttention

    config = InklingTextConfig(
        hidden_size=D_MODEL, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, swa_num_attention_heads=HEADS, swa_num_key_value_heads=KV_HEADS,
        swa_head_dim=HEAD_DIM, d_rel=D_REL, rel_extent=EXTENT, sliding_window_size=WINDOW,
        log_scaling_n_floor=FLOOR, log_scaling_alpha=ALPHA, num_hidden_layers=2,
        local_layer_ids=[1], vocab_size=11, n_routed_experts=2, num_experts_per_tok=1,
        n_shared_experts=1)
    config._attn_implementation = "eager"
    attn = InklingAttention(config, layer_idx=1 if sliding else 0).eval()
    redraw(attn, 6)
    state = {k: v.contiguous() for k, v in attn.state_dict().items() if "sconv" not in k}
    with torch.no_grad():
        for conv in (attn.k_sconv, attn.v_sconv):
            conv.conv1d.weight.zero_()
    weights = tmp_path / "w.safetensors"
    save_file(state, str(weights))
    keys = (f"mask = causal & window(left = {WINDOW - 1}, right = 0)\n"
            f"position = relative_logits(d_rel = {D_REL}, extent = {WINDOW})" if sliding else
            f"mask = causal\nposition = relative_logits(d_rel = {D_REL}, extent = {EXTENT})\n"
            f"temperature = log_ratio(floor = {FLOOR}, scale = {ALPHA})")
    _matches(attn, weights, keys, (1, 6, 19), WINDOW if sliding else None)


def _matches(attn, weights, keys: str, lengths: tuple[int, ...], window: int | None) -> None:
    """The attention of Inkling's sizes, its RMS-normed q and k and 1 / head_dim scale, with
    `keys`, read from `weights`: its torch module and ort-cpu and portable models give
    transformers' `attn` at each length, causal (within `window` keys where given)."""
    body = "\n".join(f"    {line}" for line in keys.splitlines())
    layer = attndsl.loads(
        f"attention a {{\n    d_model = {D_MODEL}\n    heads = {HEADS}\n    kv_heads = "
        f"{KV_HEADS}\n    head_dim = {HEAD_DIM}\n    bias = false\n    scale = "
        f"{1 / HEAD_DIM}\n    qk_norm = rmsnorm(eps = 1e-6)\n{body}\n}}")["a"]
    module = layer.to_torch(weights=weights)
    models = [layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")]
    for L in lengths:
        x = torch.randn(2, L, D_MODEL, generator=torch.Generator().manual_seed(L))
        q, k = torch.arange(L)[:, None], torch.arange(L)[None, :]
        seen = (k <= q) & ((q - k < window) if window else True)
        additive = torch.zeros(L, L).masked_fill(~seen, float("-inf"))[None, None]
        with torch.no_grad():
            ref = attn(x, additive)[0].numpy()
            close(module(x).numpy(), ref)
        for model in models:
            close(run_onnx(model, x.numpy()), ref)


def test_residual_convolutions_match_inkling_attention(tmp_path) -> None:
    """InklingAttention whole, its k_sconv and v_sconv drawn at random: each of k_proj's and
    v_proj's outputs u becomes u + conv(u) over the last 4 tokens before the heads (the
    attention's `out` part is the decoder layer's attn_sconv, held by the import test)."""
    from transformers.models.inkling.configuration_inkling import InklingTextConfig
    from transformers.models.inkling.modeling_inkling import InklingAttention

    config = InklingTextConfig(
        hidden_size=D_MODEL, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, d_rel=D_REL, rel_extent=EXTENT, num_hidden_layers=1,
        local_layer_ids=[], vocab_size=11, n_routed_experts=2, num_experts_per_tok=1,
        n_shared_experts=1)
    config._attn_implementation = "eager"
    attn = InklingAttention(config, layer_idx=0).eval()
    redraw(attn, 7)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in attn.state_dict().items()}, str(weights))
    _matches(attn, weights, f"residual_conv = conv(width = 4, on = [k, v])\nposition = "
             f"relative_logits(d_rel = {D_REL}, extent = {EXTENT})\nmask = causal", (1, 3, 11),
             None)


def test_the_log_ratio_temperature_is_inklings_logit_scaling() -> None:
    """docs/LANGUAGE.md: `log_ratio(floor = n, scale = a, offset = o)` is
    1 + a ln(max((p + o) / n, 1)): 1 up to p + o = n, then logarithmic (Inkling's tau)."""
    positions = np.arange(5000)
    got = READINGS["temperature"](np.ones((1, 1, len(positions), 1)),
                                  {"floor": 64, "scale": 0.1, "offset": 1, "kind": "log_ratio"},
                                  {})[0, 0, :, 0]
    n = torch.from_numpy(positions + 1).float()
    want = (1.0 + 0.1 * torch.log((n / 64).clamp(min=1.0))).double().numpy()
    assert np.allclose(got, want, rtol=1e-6)
    assert got[63] == 1.0 and got[64] > 1.0


def test_random_specs_with_relative_logits_match_the_reference() -> None:
    """Their own generator stream: a sliding mask with a core by length (30), the log_ratio
    temperature on the query and the relative states (266), an extent of 40 keys, below the
    longest (460); 95 decoding as one pass."""
    check_stream(((30, ("relative_logits", "by_length")),
                  (266, ("relative_logits", "log_ratio")),
                  (460, ("relative_logits(d_rel", "extent = 40)"))),
                 portable=266, decoding=(95, "log_ratio"))
    assert "relative_logits" in random_spec(41, decoding=True)


def test_random_specs_with_residual_convolutions_match_the_reference() -> None:
    """Their own generator streams: k, v and out convolved (29; 345, in a stack), the stack's
    feed-forward convolution (22); 41 decoding as one pass, the attention's convolutions and
    the stack's continued from their carried inputs."""
    check_stream(((29, ("on = [k, v, out]",)), (345, ("on = [k, v, out]", "transformer")),
                  (22, ("ffn_conv = conv(",))), portable=29, decoding=(41, "ffn_conv"))
    assert "residual_conv" in random_spec(41, decoding=True)


@pytest.mark.parametrize("entries, words", [
    ("kind = cross\n    position = relative_logits", "cross attention"),
    ("kernel = linear(feature = elu)\n    position = relative_logits", "score biases"),
    ("position = relative_logits(d_rel = 0)", "d_rel"),
    ("position = relative_logits(extent = 0)", "extent"),
    ("kind = cross\n    residual_conv = conv", "cross attention"),
    ("values = keys\n    residual_conv = conv(on = [k])", "`values` replaces"),
    ("kernel = linear(feature = elu)\n    residual_conv = conv", "softmax attention"),
    ("residual_conv = conv(width = 1)", "at least 2"),
    ("residual_conv = conv(on = [q])", "convolved part"),
])
def test_relative_logits_are_refused_where_they_cannot_apply(entries: str, words: str) -> None:
    text = f"attention a {{\n    d_model = 64\n    heads = 4\n    {entries}\n}}\n"
    assert refused_at(text, words) in (4, 5)
