"""Kimi Linear (`kimi_linear`) and Ling 3 (`bailing_hybrid`) imported as language models and
generating: Kimi delta attention layers (their state and convolution window carried when
decoding) and latent attention layers (one latent row cached per token; Ling 3's with RoPE and
a sigmoid gate per head), DeepSeek-V3's mixture with a dense first layer. Their stacks are held
to transformers in tests/test_hf_families.py; here the decoding model and `attndsl generate`.
onnxruntime-genai keeps a key and a value cache per layer: the genai export refuses latent
attention by name."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest
import transformers as tf

from .test_generation import VOCAB, generates_as, refused_by_genai_then_decoding
from .test_hf_families import redraw

SIZES = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
             kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
             vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _kimi():
    return tf.KimiLinearConfig(
        num_experts=6, num_experts_per_token=2, num_expert_group=2, topk_group=1,
        num_shared_experts=1, first_k_dense_replace=1,
        linear_attn_config={"head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 3,
                            "kda_layers": [1, 3], "full_attn_layers": [2]}, **SIZES)


def _ling():
    return tf.BailingHybridConfig(
        head_dim=8, num_experts=6, num_experts_per_tok=2, n_group=2, topk_group=1,
        layer_group_size=2, first_k_dense_replace=1, short_conv_kernel_size=4,
        rope_theta=10000.0, **SIZES)


@pytest.mark.parametrize(("make", "target"), [(_kimi, "ort-cpu"), (_kimi, "portable"),
                                              (_ling, "ort-cpu")],
                         ids=["kimi_linear-ort-cpu", "kimi_linear-portable",
                              "bailing_hybrid-ort-cpu"])
def test_kda_hybrids_generate_as_transformers(tmp_path: Path, make, target: str,
                                              capsys) -> None:
    """`attndsl generate` gives transformers' greedy tokens for a left-padded batch, and one
    call of the decoding model its logits; a KDA layer caches its state (heads x d_k x d_v)
    and convolution window, a latent layer one latent row per token."""
    model = tf.AutoModelForCausalLM.from_config(make(), attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    out = refused_by_genai_then_decoding(model, tmp_path, target, capsys,
                                         why="caches one latent row per token")
    decoder = next(out.glob("*.decode.onnx"))
    caches = {i.name: i.shape for i in ort.InferenceSession(str(decoder)).get_inputs()
              if i.name.startswith("past_key_values.")}
    assert caches["past_key_values.0.state"] == ["batch", 4, 8, 8]
    assert caches["past_key_values.0.conv"][2] == 3 * 4 * 8
    assert caches["past_key_values.1.key"] == ["batch", 1, "past_length", 16 + 4]
    generates_as(model, decoder, capsys)
