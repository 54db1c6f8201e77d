"""Against Hugging Face transformers itself (a test-only dependency): tiny modules built from
config classes (nothing downloads), weights re-drawn so outputs are O(1), and attndsl's ONNX
export on ONNX Runtime's CPU provider compared with what the HF module returns, within
1e-4 x max(1, max |ref|)."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

import attndsl

D_MODEL, HEADS, KV_HEADS, HEAD_DIM = 64, 4, 2, 16
ORIGINAL = 16  # original_max_position_embeddings: lengths 5 and 40 fall on either side

# (name, HF rope_parameters beyond rope_theta, max_position_embeddings, attndsl scaling)
SCALINGS = [
    ("default", {"rope_type": "default"}, 64, "none"),
    ("linear", {"rope_type": "linear", "factor": 2.5}, 64, "linear(factor = 2.5)"),
    ("dynamic", {"rope_type": "dynamic", "factor": 3.0}, ORIGINAL,
     f"dynamic(factor = 3, original_max_position = {ORIGINAL})"),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": ORIGINAL}, 128,
     f"llama3(factor = 8, low_freq_factor = 1, high_freq_factor = 4, "
     f"original_max_position = {ORIGINAL})"),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL,
              "beta_fast": 8.0, "beta_slow": 0.5}, 64,
     f"yarn(factor = 4, original_max_position = {ORIGINAL}, beta_fast = 8, beta_slow = 0.5)"),
    ("yarn_mscale", {"rope_type": "yarn", "factor": 4.0, "mscale": 0.707,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": ORIGINAL}, 64,
     f"yarn(factor = 4, original_max_position = {ORIGINAL}, mscale = 0.707, "
     f"mscale_all_dim = 1)"),
    ("longrope", {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0,
                                                            4.0],
                  "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 12.0, 16.0],
                  "original_max_position_embeddings": ORIGINAL}, 128,
     f"longrope(short_factor = [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 4.0], "
     f"long_factor = [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 12.0, 16.0], "
     f"original_max_position = {ORIGINAL}, factor = 128 / {ORIGINAL})"),
]


def redraw(module: torch.nn.Module, seed: int) -> None:
    """Weights N(0, 1 / fan_in) * 2: outputs O(1) and attention far from uniform (HF's default
    init hides errors under the tolerance)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=g) * 2 / math.sqrt(fan_in))


def checkpoint_layer(attn: torch.nn.Module, tmp_path, seed: int, keys: str,
                     then=None):
    """`attn` with its weights redrawn from `seed` (then `then(attn)`, under no_grad) and
    saved, and the attndsl attention with the shared sizes and `keys` that reads them:
    (layer, weights path)."""
    redraw(attn, seed)
    if then is not None:
        with torch.no_grad():
            then(attn)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in attn.state_dict().items()}, str(weights))
    body = "\n".join(f"    {line.strip()}" for line in keys.strip().splitlines())
    layer = attndsl.loads(f"attention a {{\n    d_model = {D_MODEL}\n    heads = {HEADS}\n"
                          f"    kv_heads = {KV_HEADS}\n    head_dim = {HEAD_DIM}\n{body}\n}}")
    return layer["a"], weights


def run_onnx(model: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def compare_everywhere(layer, weights, reference) -> None:
    """The torch module and both ONNX targets against `reference(x, L)` (no grad) for x of
    lengths 1, 5 and 40."""
    module = layer.to_torch(weights=weights)
    for target in ("ort-cpu", "portable"):
        model = layer.onnx_bytes(target=target, weights=weights)
        for L in (1, 5, 40):
            x = torch.randn(2, L, D_MODEL, generator=torch.Generator().manual_seed(L))
            with torch.no_grad():
                ref = reference(x, L)
                close(module(x).numpy(), ref)
            close(run_onnx(model, x.numpy()), ref)


def close(ours: np.ndarray, ref: np.ndarray) -> None:
    err = float(np.abs(ours - ref).max())
    assert err <= 1e-4 * max(1.0, float(np.abs(ref).max())), err


@pytest.mark.parametrize(("name", "params", "max_pos", "scaling"), SCALINGS,
                         ids=[s[0] for s in SCALINGS])
def test_rope_scaling_matches_llama_attention(tmp_path, name, params, max_pos, scaling) -> None:
    theta = 50000.0
    config = LlamaConfig(hidden_size=D_MODEL, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                         max_position_embeddings=max_pos, attention_bias=False,
                         rope_parameters={"rope_theta": theta, **params})
    config._attn_implementation = "eager"
    attn = LlamaAttention(config, layer_idx=0).eval()
    layer, weights = checkpoint_layer(attn, tmp_path, 1, f"""
        bias = false
        position = rope(theta = {theta}, scaling = {scaling})
        mask = causal
    """)
    model = layer.onnx_bytes(target="ort-cpu", weights=weights)
    for L in (5, 40):
        x = torch.randn(2, L, D_MODEL, generator=torch.Generator().manual_seed(L))
        rotary = LlamaRotaryEmbedding(config)  # fresh: dynamic scaling keeps state per call
        cos, sin = rotary(x, torch.arange(L)[None])
        causal = torch.full((L, L), float("-inf")).triu(1)[None, None]
        with torch.no_grad():
            ref = attn(x, (cos, sin), causal)[0].numpy()
        close(run_onnx(model, x.numpy()), ref)


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 8, 12, 16, 20])
def test_alibi_press_slopes_match_bloom(heads: int) -> None:
    """BLOOM's build_alibi_tensor is slope_h * k for key position k (a row constant away from
    -slope_h * |q - k| under causal masking, where softmax cannot tell them apart)."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    from attndsl.positions import alibi_slopes

    S = 7
    table = build_alibi_tensor(torch.ones(1, S), heads, torch.float32)  # (H, 1, S)
    ours = torch.tensor(alibi_slopes(heads))[:, None] * torch.arange(S)[None, :]
    assert torch.allclose(table[:, 0, :], ours.float(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("sliding", [True, False], ids=["sliding", "full"])
def test_learned_sinks_match_gpt_oss_attention(tmp_path, sliding: bool) -> None:
    """gpt-oss: a learned logit per head joins the softmax's denominator and is dropped after
    (GptOssAttention's eager path), here with YaRN, biases, GQA and the sliding window of its
    sliding layers; every target, the dense form and GroupQueryAttention's head_sink input
    (ort-cuda's plan on the CPU provider) alike."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import (
        GptOssAttention,
        GptOssRotaryEmbedding,
    )

    window, theta = 6, 150000.0
    config = GptOssConfig(hidden_size=D_MODEL, num_attention_heads=HEADS,
                          num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, sliding_window=window,
                          num_hidden_layers=2, max_position_embeddings=64,
                          layer_types=["sliding_attention", "full_attention"],
                          rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                           "beta_fast": 32.0, "beta_slow": 1.0,
                                           "truncate": False, "rope_theta": theta,
                                           "original_max_position_embeddings": ORIGINAL})
    config._attn_implementation = "eager"
    attn = GptOssAttention(config, layer_idx=0 if sliding else 1).eval()
    mask = f"causal & window(left = {window - 1}, right = 0)" if sliding else "causal"
    layer, weights = checkpoint_layer(attn, tmp_path, 2, f"""
        position = rope(theta = {theta}, scaling = yarn(factor = 4, original_max_position =
            {ORIGINAL}, beta_fast = 32, beta_slow = 1, truncate = false))
        mask = {mask}
        sinks = learned
    """, then=lambda a: a.sinks.copy_(torch.tensor([3.0, -1.0, 0.5, 6.0])))  # rows mostly sink
    def reference(x: torch.Tensor) -> np.ndarray:
        L = x.shape[1]
        cos, sin = GptOssRotaryEmbedding(config)(x, torch.arange(L)[None])
        q, k = torch.arange(L)[:, None], torch.arange(L)[None, :]
        seen = (k <= q) & ((q - k < window) if sliding else True)
        with torch.no_grad():
            return attn(x, (cos, sin), torch.zeros(L, L).masked_fill(
                ~seen, float("-inf"))[None, None])[0].numpy()

    for target, dtype in (("ort-cpu", "float32"), ("ort-cuda", "float32"), ("portable", "float32")):
        model = layer.onnx_bytes(target=target, dtype=dtype, weights=weights)
        for L in (1, 5, 40):
            x = torch.randn(2, L, D_MODEL, generator=torch.Generator().manual_seed(L))
            close(run_onnx(model, x.numpy()), reference(x))
    # GroupQueryAttention with head_sink: ort-cuda's float16 plan, on the CPU provider
    model = layer.onnx_bytes(target="ort-cuda", dtype="float16", weights=weights)
    assert b"GroupQueryAttention" in model
    for L in (1, 5, 40):
        x = torch.randn(2, L, D_MODEL, generator=torch.Generator().manual_seed(L)).half().float()
        ref = reference(x)
        got = run_onnx(model, x.numpy().astype(np.float16)).astype(np.float32)
        assert np.abs(got - ref).max() <= 2e-2 * max(1.0, float(np.abs(ref).max()))
    x = torch.randn(2, 9, D_MODEL, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        close(layer.to_torch(weights=weights)(x).numpy(), reference(x))


def test_gqa_head_sink_is_planned_for_sinks() -> None:
    """ort-cuda in float16 runs learned sinks inside GroupQueryAttention (its head_sink input);
    MultiHeadAttention, which has none, is never chosen for them."""
    from attndsl.ir import build
    from attndsl.planner import plan

    layer = attndsl.loads("""
        attention a {
            d_model = 64
            heads = 4
            kv_heads = 2
            mask = causal
            sinks = learned
        }
        attention b {
            d_model = 64
            heads = 4
            mask = full
            sinks = learned
        }""")
    (choice,) = plan(build(layer["a"].spec), "ort-cuda", "float16")[1]
    assert choice.strategy == "gqa" and any("head_sink" in r for r in choice.reasons)
    (choice,) = plan(build(layer["b"].spec), "ort-cuda", "float16")[1]
    assert choice.strategy != "mha" and any("cannot apply learned sink logits" in r
                                         for r in choice.reasons)
    model = onnx_model_of(layer["a"].onnx_bytes(target="ort-cuda", dtype="float16"))
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    assert len(gqa.input) == 12 and gqa.input[11] == "sinks"


def onnx_model_of(data: bytes):
    import onnx

    return onnx.load_from_string(data)


def test_output_gate_matches_qwen3_next_attention(tmp_path) -> None:
    """Qwen3-Next's gated attention: q_proj writes each head's queries then its gate, and
    sigmoid(gate) multiplies the head's output before o_proj; with its unit-offset q/k
    RMSNorm and partial rotary, on every target and the torch module."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import (
        Qwen3NextAttention,
        Qwen3NextRotaryEmbedding,
    )

    config = Qwen3NextConfig(hidden_size=D_MODEL, num_attention_heads=HEADS,
                             num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                             partial_rotary_factor=0.25, rms_norm_eps=1e-6,
                             max_position_embeddings=64, num_hidden_layers=1,
                             layer_types=["full_attention"],
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config._attn_implementation = "eager"
    attn = Qwen3NextAttention(config, layer_idx=0).eval()
    layer, weights = checkpoint_layer(attn, tmp_path, 3, f"""
        bias = false
        qk_norm = rmsnorm(eps = 1e-6, unit_offset = true)
        position = rope(theta = 10000, dim = {HEAD_DIM // 4})
        mask = causal
        output_gate = sigmoid
    """)
    module = layer.to_torch(weights=weights)
    for target in ("ort-cpu", "portable"):
        model = layer.onnx_bytes(target=target, weights=weights)
        for L in (1, 5, 40):
            x = torch.randn(2, L, D_MODEL, generator=torch.Generator().manual_seed(L))
            cos, sin = Qwen3NextRotaryEmbedding(config)(x, torch.arange(L)[None])
            causal = torch.full((L, L), float("-inf")).triu(1)[None, None]
            with torch.no_grad():
                ref = attn(x, (cos, sin), causal)[0].numpy()
                close(module(x).numpy(), ref)
            close(run_onnx(model, x.numpy()), ref)


@pytest.mark.parametrize("rope", [True, False], ids=["rope_chunked", "nope_temperature"])
def test_l2_norm_chunks_and_temperature_match_llama4_attention(tmp_path, rope: bool) -> None:
    """Llama 4's text attention: RoPE layers (interleaved pairs) with the weightless L2 q/k norm
    under chunked local attention; NoPE layers with full causal attention and the attention
    temperature tuning 1 + attn_scale * ln(1 + floor((p + 1) / floor_scale)) on the queries."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import (
        Llama4TextAttention,
        Llama4TextRotaryEmbedding,
    )

    chunk, floor, theta = 8, 4, 500000.0
    config = Llama4TextConfig(hidden_size=D_MODEL, num_attention_heads=HEADS,
                              num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, rms_norm_eps=1e-5,
                              num_hidden_layers=2, no_rope_layers=[1, 0], use_qk_norm=True,
                              attn_temperature_tuning=True, floor_scale=floor, attn_scale=0.1,
                              attention_chunk_size=chunk, max_position_embeddings=64,
                              rope_parameters={"rope_type": "default", "rope_theta": theta})
    config._attn_implementation = "eager"
    attn = Llama4TextAttention(config, layer_idx=0 if rope else 1).eval()
    keys = (f"qk_norm = l2norm(eps = 1e-5)\n position = rope(theta = {theta}, interleaved = "
            f"true)\n mask = causal & chunked({chunk})" if rope else
            f"mask = causal\n temperature = log(floor = {floor}, scale = 0.1)")
    layer, weights = checkpoint_layer(attn, tmp_path, 4, f"bias = false\n{keys}")

    def reference(x: torch.Tensor, L: int) -> np.ndarray:
        freqs = Llama4TextRotaryEmbedding(config)(x, torch.arange(L)[None])
        q, k = torch.arange(L)[:, None], torch.arange(L)[None, :]
        seen = (k <= q) & ((q // chunk == k // chunk) if rope else True)
        additive = torch.zeros(L, L).masked_fill(~seen, float("-inf"))[None, None]
        return attn(x, freqs, additive)[0].numpy()

    compare_everywhere(layer, weights, reference)


@pytest.mark.parametrize("version", ["v3", "v2"])
def test_group_limited_routing_matches_deepseek_routers(version: str) -> None:
    """DeepSeek-V3's router (the sigmoid of each logit, chosen by it plus
    e_score_correction_bias among the 2 of 4 groups whose best two sum highest, renormalised,
    times 2.5) and DeepSeek-V2's group-limited greedy one (softmax, groups ranked by their best
    expert): the gates of the language's formula, in the reference and in the arithmetic the
    torch module and the ONNX lowering share, against transformers' router modules."""
    from transformers import DeepseekV2Config, DeepseekV3Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    from attndsl.backends import reference_experts
    from attndsl.backends.torch_arrays import TorchArrays
    from attndsl.mechanisms.moe import route

    common = dict(hidden_size=32, n_routed_experts=8, num_experts_per_tok=3, n_group=4,
                  topk_group=2, routed_scaling_factor=2.5)
    g = torch.Generator().manual_seed(5)
    if version == "v3":
        router = DeepseekV3TopkRouter(DeepseekV3Config(norm_topk_prob=True, **common))
        with torch.no_grad():
            router.e_score_correction_bias.copy_(0.3 * torch.randn(8, generator=g))
        form = dict(router="sigmoid", normalize=True, group_score="top2")
        selection = router.e_score_correction_bias.numpy().astype(np.float64)
    else:
        router = DeepseekV2TopkRouter(DeepseekV2Config(topk_method="group_limited_greedy",
                                                       **common))
        form = dict(router="softmax", normalize=False, group_score="max")
        selection = None
    with torch.no_grad():
        router.weight.copy_(torch.randn(8, 32, generator=g) / 2)
    x = torch.randn(40, 32, generator=g)
    with torch.no_grad():
        _, weights, indices = router(x)
    want = np.zeros((40, 8))
    np.put_along_axis(want, indices.numpy(), weights.double().numpy(), -1)
    ref = reference_experts.route(x.double().numpy(), router.weight.detach().double().numpy(),
                                  None, 3, scale=2.5, selection=selection, groups=4,
                                  top_groups=2, **form)
    np.testing.assert_allclose(ref, want, atol=1e-6)
    logits = x @ router.weight.detach().T
    ours = route(TorchArrays(x.device), logits, 3, form["router"], form["normalize"],
                 2.5, None if selection is None else torch.from_numpy(selection).float(),
                 4, 2, form["group_score"])
    np.testing.assert_allclose(ours.numpy(), want, atol=1e-5)
    assert (want > 0).sum(-1).tolist() == [3] * 40


@pytest.mark.parametrize(("q_rank", "interleave"), [(32, True), (None, False)],
                         ids=["q_lora_interleaved", "q_proj_rotate_half"])
def test_latent_attention_matches_deepseek_v3_attention(tmp_path, q_rank, interleave) -> None:
    """DeepSeek-V3's multi-head latent attention: queries through the rank-32 bottleneck and
    its RMSNorm (or one projection), keys and values from the RMS-normed rank-20 latent, the
    shared rope key of 8 features beside each head's 16 latent ones, values of 16, RoPE in
    DeepSeek-V3's interleaved layout or rotate-half; the torch module and both ONNX targets
    against DeepseekV3Attention."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    theta = 10000.0
    config = DeepseekV3Config(hidden_size=D_MODEL, num_attention_heads=HEADS,
                              num_key_value_heads=HEADS, q_lora_rank=q_rank, kv_lora_rank=20,
                              qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                              rope_interleave=interleave, rms_norm_eps=1e-6,
                              max_position_embeddings=64, attention_bias=False,
                              rope_parameters={"rope_type": "default", "rope_theta": theta})
    config._attn_implementation = "eager"
    attn = DeepseekV3Attention(config, layer_idx=0).eval()
    redraw(attn, 6)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in attn.state_dict().items()}, str(weights))
    rank = "none" if q_rank is None else q_rank
    layer = attndsl.loads(f"""
attention a {{
    d_model   = {D_MODEL}
    heads     = {HEADS}
    head_dim  = 24
    value_dim = 16
    bias      = false
    latent    = mla(q_rank = {rank}, kv_rank = 20, rope_dim = 8, eps = 1e-6)
    position  = rope(theta = {theta}, interleaved = {str(interleave).lower()})
    mask      = causal
}}""")["a"]

    def reference(x: torch.Tensor, L: int) -> np.ndarray:
        cos_sin = DeepseekV3RotaryEmbedding(config)(x, torch.arange(L)[None])
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        additive = torch.zeros(L, L).masked_fill(~causal, float("-inf"))[None, None]
        return attn(x, cos_sin, additive)[0].numpy()

    compare_everywhere(layer, weights, reference)
