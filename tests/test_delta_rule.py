"""The gated delta rule (docs/LANGUAGE.md, Kernels: `delta_rule`) against transformers'
Qwen3NextGatedDeltaNet, built from its config class (nothing downloads): the torch module
and both ONNX targets, at lengths that are not multiples of the chunk, one token, and several
chunks; and the chunked form (torch, ONNX) against the plain recurrence (the reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import attndsl

from .test_transformers import close, redraw, run_onnx

D_MODEL, HEADS, KEY_HEADS, KEY_DIM, VALUE_DIM, CONV = 48, 4, 2, 16, 8, 4


def split_qwen3_next(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Qwen3NextGatedDeltaNet's tensors under attndsl's names: in_proj_qkvz holds, per key
    head g, rows [q_g, k_g, v of value heads g r .. g r + r - 1, their z] (r = heads /
    key_heads), in_proj_ba per key head [b of those r heads, their a]."""
    r = HEADS // KEY_HEADS
    qkvz = state["in_proj_qkvz.weight"].reshape(KEY_HEADS, -1, D_MODEL)
    q, k, v, z = qkvz.split([KEY_DIM, KEY_DIM, r * VALUE_DIM, r * VALUE_DIM], dim=1)
    b, a = state["in_proj_ba.weight"].reshape(KEY_HEADS, 2 * r, D_MODEL).split([r, r], dim=1)
    out = {f"{n}_proj.weight": t.reshape(-1, D_MODEL) for n, t in
           (("q", q), ("k", k), ("v", v), ("z", z), ("b", b), ("a", a))}
    out |= {"conv1d.weight": state["conv1d.weight"], "dt_bias": state["dt_bias"],
            "A_log": state["A_log"], "norm.weight": state["norm.weight"],
            "o_proj.weight": state["out_proj.weight"]}
    return {k: v.contiguous() for k, v in out.items()}


def _gated_deltanet(seed: int):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    config = Qwen3NextConfig(hidden_size=D_MODEL, linear_num_key_heads=KEY_HEADS,
                             linear_num_value_heads=HEADS, linear_key_head_dim=KEY_DIM,
                             linear_value_head_dim=VALUE_DIM, linear_conv_kernel_dim=CONV,
                             rms_norm_eps=1e-6, hidden_act="silu", num_hidden_layers=1,
                             layer_types=["linear_attention"])
    net = Qwen3NextGatedDeltaNet(config, layer_idx=0).eval()
    redraw(net, seed)
    with torch.no_grad():  # decays of every strength, from exp(-0.01) to exp(-20) per token
        net.A_log.copy_(torch.linspace(-3.0, 1.5, HEADS))
    return net


SPEC = f"""
attention gdn {{
    d_model   = {D_MODEL}
    heads     = {HEADS}
    head_dim  = {KEY_DIM}
    value_dim = {VALUE_DIM}
    bias      = false
    kernel    = delta_rule(key_heads = {KEY_HEADS}, conv = {CONV}, chunk = CHUNK)
    mask      = causal
}}
"""


@pytest.mark.parametrize("chunk", [8, 64])
def test_delta_rule_matches_qwen3_next_gated_deltanet(tmp_path, chunk: int) -> None:
    net = _gated_deltanet(7)
    weights = tmp_path / "w.safetensors"
    save_file(split_qwen3_next(net.state_dict()), str(weights))
    layer = attndsl.loads(SPEC.replace("CHUNK", str(chunk)))["gdn"]
    module = layer.to_torch(weights=weights)
    models = {t: layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")}
    agree(net, module, models.values(), (1, 5, 40, 131), D_MODEL)


def agree(net, module, models, lengths, d_model: int) -> None:
    """transformers' layer `net`, attndsl's torch module and its ONNX models on one x
    (2, L, d_model) at each length L."""
    for L in lengths:
        x = torch.randn(2, L, d_model, generator=torch.Generator().manual_seed(L))
        with torch.no_grad():
            ref = net(x).numpy()
            close(module(x).numpy(), ref)
        for model in models:
            close(run_onnx(model, x.numpy()), ref)


def test_the_chunked_form_is_the_recurrence_at_any_chunk() -> None:
    """Chunks of 1 (the recurrence itself), 3, 16 and 64 give the reference's token-by-token
    recurrence at lengths around each chunk's multiples."""
    from attndsl.backends import reference
    from attndsl.ir import build

    for chunk in (1, 3, 16, 64):
        layer = attndsl.loads(SPEC.replace("CHUNK", str(chunk)))["gdn"]
        weights = {k: v.detach().double().numpy()
                   for k, v in layer.to_torch(seed=3).state_dict().items()}
        module = layer.to_torch(seed=3)
        model = layer.onnx_bytes(target="ort-cpu", seed=3)
        for L in sorted({1, chunk, chunk + 1, 2 * chunk + 1, 67}):
            x = np.random.default_rng(L).standard_normal((2, L, D_MODEL)).astype(np.float32)
            want = reference.run(build(layer.spec), {"x": x}, weights)
            with torch.no_grad():
                close(module(torch.from_numpy(x)).numpy(), want)
            close(run_onnx(model, x), want)


def tiny_qwen3_next(folder):
    """A tiny Qwen3-Next (three delta-rule layers, a gated softmax layer, experts with a gated
    shared expert), its weights redrawn from seed 11, saved to `folder`; the model."""
    import transformers as tf

    from .test_generation import SIZES
    from .test_hf_families import redraw as redraw_model

    config = tf.Qwen3NextConfig(
        num_hidden_layers=4, head_dim=16, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8, num_experts=6, num_experts_per_tok=2,
        mlp_only_layers=[1], bos_token_id=1, eos_token_id=2, **SIZES)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw_model(model, 11, unit_offset=True)
    model.save_pretrained(folder)
    return model


@pytest.mark.parametrize("target", ["ort-cpu", "portable"])
def test_qwen3_next_generates_as_transformers(tmp_path, target: str, capsys) -> None:
    """Qwen3-Next (delta-rule layers, a gated softmax layer, experts with a gated shared
    expert) from a checkpoint folder: `compile --export onnx --decode` caches each delta-rule
    layer's state and convolution window, `attndsl generate` gives transformers' greedy tokens
    for a left-padded batch, and the decoding model its logits (the genai folder of the same
    model: tests/test_genai_round2.py)."""
    from attndsl.cli import main

    from .test_generation import generates_as

    folder, spec, out = tmp_path / "hf", tmp_path / "q.attn", tmp_path / "out"
    model = tiny_qwen3_next(folder)
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    assert main(["compile", str(spec), "--export", "onnx", "--decode", "--weights",
                 str(folder), "-o", str(out), "--target", target]) == 0
    decoder = out / "qwen3_next.decode.onnx"
    import onnxruntime as ort

    caches = {i.name: i.shape for i in ort.InferenceSession(str(decoder)).get_inputs()
              if i.name.startswith("past_key_values.")}
    assert caches["past_key_values.0.state"] == ["batch", 4, 16, 8]  # heads x dk x dv
    assert caches["past_key_values.0.conv"] == ["batch", 3, 2 * 2 * 16 + 4 * 8]
    assert caches["past_key_values.3.key"] == ["batch", 2, "past_length", 16]
    generates_as(model, decoder, capsys)


def test_random_specs_with_negative_eigenvalues_match_the_reference() -> None:
    """Stream 48: the delta rule with beta = 2 sigmoid(b) (OLMo Hybrid's negative
    eigenvalues, 15), on every backend and target, and decoded as one pass."""
    from .test_random_specs import check_stream

    check_stream(((15, ("negative_eigenvalues = true",)),), portable=15,
                 decoding=(15, "negative_eigenvalues = true"))
