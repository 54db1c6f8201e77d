"""RoPE variants against transformers' own rotary code: proportional RoPE (Gemma 4's and LFM3's
`proportional` rope_type, `scaling = proportional(rotated = r)`), on the torch module and both
ONNX targets, and on random specs from its own stream."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
import torch
from safetensors.torch import save_file

import attndsl

from .specgen import random_spec
from .test_random_specs import check_random_spec


@pytest.mark.parametrize(("factor", "fraction"), [(0.5, 1.0), (0.25, 2.0)])
def test_proportional_rope_matches_transformers(tmp_path, factor: float, fraction: float) -> None:
    """LlamaAttention with rope_type "proportional": the first partial_rotary_factor * head_dim
    / 2 pairs turn at theta^(-2i/head_dim) / factor (rotate-half over the whole head), the
    others do not; read by the import's rope() as attndsl writes it."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    from attndsl.families.rope import rope

    d, heads, kv, dim = 48, 4, 2, 16
    params = {"rope_type": "proportional", "rope_theta": 1000.0,
              "partial_rotary_factor": factor, "factor": fraction}
    config = LlamaConfig(hidden_size=d, num_attention_heads=heads, num_key_value_heads=kv,
                         head_dim=dim, num_hidden_layers=1, max_position_embeddings=64,
                         rope_parameters=params)
    config._attn_implementation = "eager"
    attn = LlamaAttention(config, layer_idx=0).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 2 / p.shape[-1] ** 0.5)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in attn.state_dict().items()}, str(weights))

    # the import's spec under construction, as families.rope reads it
    spec = SimpleNamespace(cfg={"max_position_embeddings": 64}, problems=[])
    position = rope(spec, params, dim)
    assert f"proportional(rotated = {int(factor * dim // 2)}" in position and not spec.problems
    layer = attndsl.loads(f"attention a {{\n    d_model = {d}\n    heads = {heads}\n"
                          f"    kv_heads = {kv}\n    head_dim = {dim}\n    bias = false\n"
                          f"    position = {position}\n    mask = causal\n}}")["a"]
    module = layer.to_torch(weights=weights)
    sessions = [ort.InferenceSession(layer.onnx_bytes(target=t, weights=weights),
                                     providers=["CPUExecutionProvider"])
                for t in ("ort-cpu", "portable")]
    for L in (1, 6, 37):
        x = torch.randn(2, L, d, generator=torch.Generator().manual_seed(L))
        rotary = LlamaRotaryEmbedding(config)(x, torch.arange(L)[None])
        causal = torch.full((L, L), float("-inf")).triu(1)[None, None]
        with torch.no_grad():
            ref = attn(x, rotary, causal)[0].numpy()
            outs = [module(x).numpy(), *(s.run(None, {"x": x.numpy()})[0] for s in sessions)]
        for out in outs:
            err = float(np.abs(out - ref).max())
            assert err <= 1e-4 * max(1.0, float(np.abs(ref).max())), err


@pytest.mark.parametrize("seed", [57, 66])
def test_random_specs_with_proportional_rope_match_the_reference(seed: int) -> None:
    assert "scaling = proportional(rotated = " in random_spec(seed)
    check_random_spec(seed, portable=seed == 57)
