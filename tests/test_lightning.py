"""Lightning attention (docs/LANGUAGE.md, Kernels: `lightning`) against transformers'
MiniMaxLightningAttention, built from its config class (nothing downloads): the torch module
and both ONNX targets (ort-cpu's LinearAttention, portable's chunked Scan) at lengths that are
not multiples of the chunk, one token and several chunks; its rates at every depth; the random
specs that draw it, in one pass and decoding, against the oracle; and its diagnostics."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import attndsl
from attndsl.mechanisms.lightning import slopes

from .test_delta_rule import agree
from .test_transformers import redraw

D_MODEL, HEADS, HEAD_DIM, LAYERS = 40, 4, 8, 5


def _config():
    from transformers import MiniMaxConfig

    return MiniMaxConfig(hidden_size=D_MODEL, num_attention_heads=HEADS, head_dim=HEAD_DIM,
                         num_hidden_layers=LAYERS, block_size=16,
                         layer_types=["linear_attention"] * LAYERS)


def renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """MiniMaxLightningAttention's tensors under attndsl's names: qkv_proj per head [q, k, v]
    rows, output_gate attndsl's g_proj, out_proj its o_proj."""
    qkv = state["qkv_proj.weight"].reshape(HEADS, 3, HEAD_DIM, D_MODEL)
    out = {f"{p}_proj.weight": qkv[:, i].reshape(-1, D_MODEL) for i, p in enumerate("qkv")}
    out |= {"g_proj.weight": state["output_gate.weight"], "norm.weight": state["norm.weight"],
            "o_proj.weight": state["out_proj.weight"]}
    return {k: v.contiguous() for k, v in out.items()}


@pytest.mark.parametrize("chunk", [5, 64])
def test_lightning_matches_minimax_lightning_attention(tmp_path, chunk: int) -> None:
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention

    net = MiniMaxLightningAttention(_config(), layer_idx=0).eval()
    redraw(net, 5)
    weights = tmp_path / "w.safetensors"
    save_file(renamed(net.state_dict()), str(weights))
    layer = attndsl.loads(f"""
attention a {{
    d_model  = {D_MODEL}
    heads    = {HEADS}
    head_dim = {HEAD_DIM}
    bias     = false
    kernel   = lightning(layers = {LAYERS}, chunk = {chunk})
    mask     = causal
}}
""")["a"]
    models = [layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")]

    class Net(torch.nn.Module):  # transformers' layer takes position embeddings and a mask
        def forward(self, x):
            return net(x, None, None)[0]

    agree(Net(), layer.to_torch(weights=weights), models, (1, 5, 40, 131), D_MODEL)


def test_the_rates_are_minimaxs_at_every_depth() -> None:
    """Head h's rate at block l of n is MiniMax's get_slope_rate (float32 there)."""
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention

    for block in range(LAYERS):
        net = MiniMaxLightningAttention(_config(), layer_idx=block)
        want = net.slope_rate.flatten().tolist()
        assert slopes(HEADS, block, LAYERS) == pytest.approx(want, rel=1e-6)


def test_random_lightning_specs_match_the_reference_and_decode_as_one_pass() -> None:
    """Lightning attention drawn from its own stream: a stack of rates falling with the depth
    (48), a stack with left padding (736), left padding without the depth (191); 33 decoding
    as one pass."""
    from .test_random_specs import check_stream

    check_stream(((48, ("lightning(layers = 4", "transformer")),
                  (736, ("lightning(", "transformer", "padding")),
                  (191, ("lightning(layers = none", "padding"))),
                 portable=48, decoding=(33, "lightning("))


@pytest.mark.parametrize(("entries", "words"), [
    ("kernel = lightning()\n    scale = 0.5", "does not scale its queries"),
    ("kv_heads = 1\n    kernel = lightning()", "as many key and value heads"),
    ("kernel = lightning(layers = 0)", "layers"),
    ("kernel = lightning()\n    position = rope", "no positions"),
])
def test_lightning_diagnostics(entries: str, words: str) -> None:
    text = (f"attention a {{\n    d_model = 16\n    heads = 2\n    {entries}\n"
            "    mask = causal\n}\n")
    with pytest.raises(attndsl.SpecError) as caught:
        attndsl.loads(text, "lightning.attn")
    assert words in str(caught.value), str(caught.value)


def test_a_stack_deeper_than_the_rates_layers_is_refused() -> None:
    text = ("attention a {\n    d_model = 16\n    heads = 2\n    kernel = lightning(layers = 2)\n"
            "    mask = causal\n}\ntransformer t {\n    attention = a\n    layers = 3\n"
            "    ffn = swiglu(8)\n    norm = rmsnorm(pre)\n}\n")
    with pytest.raises(attndsl.SpecError) as caught:
        attndsl.loads(text, "lightning.attn")
    assert "lightning(layers = 3)" in str(caught.value) and ":9:" in str(caught.value), str(
        caught.value)


def test_random_stacks_with_a_normed_residual_match_the_reference() -> None:
    """MiniMax's blocks (`residual = normed(alpha)`: each sublayer's residual its normed input,
    times alpha), drawn from their own stream: a language model of experts (252); 119
    decoding as one pass."""
    from .test_random_specs import check_stream

    check_stream(((252, ("residual = normed(", "vocab")),), portable=252,
                 decoding=(119, "residual = normed("))


def test_a_normed_residual_needs_pre_norms() -> None:
    text = ("attention a {\n    d_model = 16\n    heads = 2\n    mask = causal\n}\n"
            "transformer t {\n    attention = a\n    layers = 2\n    ffn = swiglu(8)\n"
            "    norm = rmsnorm(post)\n    residual = normed(alpha = 2)\n}\n")
    with pytest.raises(attndsl.SpecError) as caught:
        attndsl.loads(text, "normed.attn")
    assert "a normed residual needs `norm = rmsnorm(pre, ...)`" in str(caught.value)


def test_a_normed_residual_alpha_out_of_range_is_diagnosed() -> None:
    text = ("attention a {\n    d_model = 16\n    heads = 2\n    mask = causal\n}\n"
            "transformer t {\n    attention = a\n    layers = 2\n    ffn = swiglu(8)\n"
            "    norm = rmsnorm(pre)\n    residual = normed(alpha = 0)\n}\n")
    with pytest.raises(attndsl.SpecError) as caught:
        attndsl.loads(text, "normed.attn")
    assert "alpha must be a number > 0" in str(caught.value) and "3.5566" in str(caught.value)
