"""Every family `attndsl import` reads, against transformers itself: a tiny random model built
from its config class (nothing downloads) and saved with `save_pretrained`; `attndsl import`,
then the stack and its first attention compiled with `--weights` on the saved folder and run
in ONNX Runtime (CPU), compared with what the HF model computes inside the whole model (hooks
on layer 0 and the model's output), at two shapes, one with padding, within
1e-4 x max(1, max |ref|). Weights are re-drawn so activations are O(1) and attention is far
from uniform."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers as tf

import attndsl
from attndsl.cli import main

SMALL = {"vocab_size": 61}
# the families drawn at HF's own weight scale, 1 / fan_in (`redraw`'s gain 1): Zamba2's shared
# attention and MLP compound in each hybrid layer, and at gain 2 transformers' own float64
# forward grows a 1e-6 change of its input 400-fold over four layers, past the tolerance
GAINS = {"zamba2": 1.0}

MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                  "original_max_position_embeddings": 4, "beta_fast": 32.0, "beta_slow": 1.0,
                  "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5}

QWEN3_5_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                "mrope_section": [2, 1, 1], "mrope_interleaved": True}

# family -> (config, padding side, the path of layer 0, of its attention, of its output linear)
CASES = {
    "llama": (lambda: tf.LlamaConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, attention_bias=True, mlp_bias=True,
        max_position_embeddings=128, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "mistral": (lambda: tf.MistralConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, sliding_window=5, rms_norm_eps=1e-5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # sliding and full layers (layer_types)
    "ministral": (lambda: tf.MinistralConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # YaRN and the query scaling by position (a span of 4 positions, so it steps within the
    # prompt), a window on every layer
    "ministral3": (lambda: tf.Ministral3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=5, max_position_embeddings=64,
        rope_parameters=dict(MINISTRAL3_ROPE), **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "qwen2": (lambda: tf.Qwen2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_parameters={"rope_type": "yarn", "rope_theta": 1e6,
                                                "factor": 4.0,
                                                "original_max_position_embeddings": 8},
        max_position_embeddings=32, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "qwen3": (lambda: tf.Qwen3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "gemma2": (lambda: tf.Gemma2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=5, query_pre_attn_scalar=24,
        attn_logit_softcapping=5.0, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "gemma3": (lambda: tf.Gemma3TextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1e6}}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "phi3": (lambda: tf.Phi3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
        original_max_position_embeddings=8, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
            "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0],
            "original_max_position_embeddings": 8}, pad_token_id=0, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # every other layer NoPE, and those slide
    "smollm3": (lambda: tf.SmolLM3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, no_rope_layer_interval=2, use_sliding_window=True,
        sliding_window=4, pad_token_id=0, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "granite": (lambda: tf.GraniteConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, embedding_multiplier=3.0, attention_multiplier=0.3,
        residual_multiplier=0.4, logits_scaling=2.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # interleaved RoPE, q/k/v biases without an o_proj bias
    "helium": (lambda: tf.HeliumConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, attention_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # q/k/v biases and an o_proj bias, set apart
    "seed_oss": (lambda: tf.SeedOssConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, attention_out_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # full layers 0 and 4, sliding ones between (CwmConfig's pattern), Llama 3 RoPE scaling
    "cwm": (lambda: tf.CwmConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=5, max_position_embeddings=128,
        rope_parameters={"rope_type": "llama3", "rope_theta": 1e6, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # an MLP without a gate, squared ReLU, with biases
    "arcee": (lambda: tf.ArceeConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, mlp_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # LayerNorm1P (gain 1 + w) with biases, a squared-ReLU MLP without a gate, RoPE on half of
    # each head, biases everywhere
    "nemotron": (lambda: tf.NemotronConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attention_bias=True, mlp_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # q, k and v interleaved per head in one projection, each head of q and k LayerNormed with
    # its bias, RoPE on half of each head, a squared-ReLU MLP with biases
    "persimmon": (lambda: tf.PersimmonConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.dense"),
    # without the q/k LayerNorms, RoPE on a quarter of each head (config.json's top-level factor)
    "persimmon_plain": (lambda: tf.PersimmonConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        qk_layernorm=False, partial_rotary_factor=0.25, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.dense"),
    # LayerNorms with biases, a gated MLP, RoPE on a quarter of each head, biases on q, k, v
    "stablelm": (lambda: tf.StableLmConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, use_qkv_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # StableLM 2 12B's q/k LayerNorms: each head its own weight (qk_norm's head_weights)
    "stablelm_qk": (lambda: tf.StableLmConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, qk_layernorm=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # one norm before the parallel attention and MLP
    "stablelm_parallel": (lambda: tf.StableLmConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, use_parallel_residual=True, partial_rotary_factor=0.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # q/k norms per head, an MLP without a gate whose xIELU activation learns alpha_p and
    # alpha_n per layer (set apart from their init, so each layer's count), Llama 3 RoPE
    "apertus": (lambda: tf.ApertusConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128,
        rope_parameters={"rope_type": "llama3", "rope_theta": 12e6, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # BitNet's float form: sub-norms of the merged heads and of the gated squared-ReLU MLP's
    # units, each before its output projection
    "bitnet": (lambda: tf.BitNetConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # LayerNorms with biases, an MLP without a gate (squared ReLU), biases everywhere
    "jais2": (lambda: tf.Jais2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, layer_norm_eps=1e-4, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # biases everywhere, named by InternLM3's aliases (qkv_bias, bias)
    "internlm3": (lambda: tf.InternLM3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, qkv_bias=True, bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # Granite's multipliers, a sink per head, full layers 0 and 4 and sliding ones between,
    # a RoPE base per layer (0: NoPE; two bases among the sliding layers)
    "granite_swa": (lambda: tf.GraniteSWAConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=5, embedding_multiplier=3.0,
        attention_multiplier=0.3, residual_multiplier=0.4, logits_scaling=2.5,
        layer_rope_theta=[10000.0, 0, 500000.0, 10000.0, 0], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "gpt2": (lambda: tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, **SMALL),
             "left", "h.0", "h.0.attn", "h.0.attn.c_proj"),
    # GPT-1: GPT-2's Conv1D layers, post-norm blocks without a final norm, scores' future
    # filled with -1e4
    "openai-gpt": (lambda: tf.OpenAIGPTConfig(n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                              **SMALL),
                   "left", "h.0", "h.0.attn", "h.0.attn.c_proj"),
    # multi-query (one key and value head) and, without it, c_attn per head
    "gpt_bigcode": (lambda: tf.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, n_inner=96,
                                                n_positions=64, **SMALL),
                    "left", "h.0", "h.0.attn", "h.0.attn.c_proj"),
    "gpt_bigcode_mha": (lambda: tf.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, n_inner=96,
                                                    n_positions=64, multi_query=False,
                                                    scale_attn_weights=False, **SMALL),
                        "left", "h.0", "h.0.attn", "h.0.attn.c_proj"),
    # global and local layers (a window of 5), unscaled scores
    "gpt_neo": (lambda: tf.GPTNeoConfig(hidden_size=64, num_layers=2, num_heads=4,
                                        intermediate_size=96, window_size=5,
                                        max_position_embeddings=64,
                                        attention_types=[[["local", "global"], 1]], **SMALL),
                "left", "h.0", "h.0.attn.attention", "h.0.attn.attention.out_proj"),
    # pre-norm (OPT-125m and up), and post-norm without biases (OPT-350m's order)
    "opt": (lambda: tf.OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 ffn_dim=96, max_position_embeddings=64, **SMALL),
            "left", "decoder.layers.0", "decoder.layers.0.self_attn",
            "decoder.layers.0.self_attn.out_proj"),
    "opt_post": (lambda: tf.OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      ffn_dim=96, max_position_embeddings=64,
                                      do_layer_norm_before=False, enable_bias=False, **SMALL),
                 "left", "decoder.layers.0", "decoder.layers.0.self_attn",
                 "decoder.layers.0.self_attn.out_proj"),
    "biogpt": (lambda: tf.BioGptConfig(hidden_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=96,
                                       max_position_embeddings=64, **SMALL),
               "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.out_proj"),
    "xglm": (lambda: tf.XGLMConfig(d_model=64, num_layers=2, attention_heads=4, ffn_dim=96,
                                   **SMALL),
             "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.out_proj"),
    # ALiBi and bias-free LayerNorms; 6 heads: MPT's slopes past a power of two
    # q, k and v clamped (attn_config's clip_qkv), tight enough to clamp
    "mpt": (lambda: tf.MptConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=64,
                                 attn_config={"clip_qkv": 0.3}, **SMALL),
            "left", "blocks.0", "blocks.0.attn", "blocks.0.attn.out_proj"),
    "mpt_6_heads": (lambda: tf.MptConfig(d_model=72, n_heads=6, n_layers=2, max_seq_len=64,
                                         attn_config={"softmax_scale": 0.2}, **SMALL),
                    "left", "blocks.0", "blocks.0.attn", "blocks.0.attn.out_proj"),
    "ctrl": (lambda: tf.CTRLConfig(n_embd=64, n_layer=2, n_head=4, dff=96, n_positions=64,
                                   **SMALL),
             "left", "h.0", "h.0.multi_head_attention", "h.0.multi_head_attention.dense"),
    "phi": (lambda: tf.PhiConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, **SMALL),
            "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.dense"),
    "starcoder2": (lambda: tf.Starcoder2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "olmo2": (lambda: tf.Olmo2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # sliding layers 0-2, a full layer 3 whose RoPE alone is scaled (linear)
    "olmo3": (lambda: tf.Olmo3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=5, rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5}},
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # three sliding layers with RoPE, then a full NoPE one (sliding_window_pattern 4);
    # per-head q/k norms before RoPE, norms after the sublayers
    "exaone4": (lambda: tf.Exaone4Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # three sliding layers with interleaved RoPE, then a NoPE one
    "cohere2": (lambda: tf.Cohere2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=5, logit_scale=0.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "diffllama": (lambda: tf.DiffLlamaConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=4, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "mixtral": (lambda: tf.MixtralConfig(
        hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=6, num_experts_per_tok=2, sliding_window=5,
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # the sparse mixer at threshold 0.2 (softmaxes over several experts), LayerNorms with a
    # bias, q/k/v/o and LM head biases, longrope with its short factors and equal mscales
    "phimoe": (lambda: tf.PhimoeConfig(
        hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=6, sliding_window=5, attention_bias=True,
        lm_head_bias=True, router_jitter_noise=0.1, max_position_embeddings=64,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": [1.0, 1.5, 2.0, 1.2, 3.0, 1.1, 1.7, 2.5],
                         "long_factor": [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
                         "original_max_position_embeddings": 8, "short_mscale": 1.25,
                         "long_mscale": 1.25}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "qwen3_moe": (lambda: tf.Qwen3MoeConfig(
        hidden_size=64, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=3,
        sliding_window=None, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # sliding and full layers, sinks, YaRN, clamped SwiGLU experts with biases, a router bias
    "gpt_oss": (lambda: tf.GptOssConfig(
        hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=6, num_experts_per_tok=2,
        sliding_window=5, swiglu_limit=1.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # q and k RMS-normed across heads, a softmax router's top 3 of 7, renormalised
    "olmoe": (lambda: tf.OlmoeConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_experts=7, num_experts_per_tok=3, norm_topk_prob=True,
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # OLMo 2's norms after the sublayers around an OLMoE-like mixture, not renormalised
    "flex_olmo": (lambda: tf.FlexOlmoConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_experts=5, num_experts_per_tok=2, pad_token_id=0,
        eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # Granite's multipliers around a mixture of fused experts (a softmax of the top 2 logits)
    "granitemoe": (lambda: tf.GraniteMoeConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=5, num_experts_per_tok=2,
        embedding_multiplier=3.0, attention_multiplier=0.3, residual_multiplier=0.4,
        logits_scaling=2.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a mixture of attention heads (each token's top 2 of 5 query and output projections,
    # shared keys and values) and of SwiGLU experts with one bias on their sum
    "jetmoe": (lambda: tf.JetMoeConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_key_value_heads=2,
        kv_channels=16, num_local_experts=5, num_experts_per_tok=2, **SMALL),
        "left", "layers.0", "layers.0.self_attention", "layers.0.self_attention"),
    # and a shared expert beside them
    "granitemoeshared": (lambda: tf.GraniteMoeSharedConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=5, num_experts_per_tok=3,
        shared_intermediate_size=48, attention_multiplier=0.3, residual_multiplier=0.4,
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # granitemoeshared's mixture with granite_swa's sinks, sliding and full layers, RoPE bases
    "granitemoe_swa": (lambda: tf.GraniteMoeSWAConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=5, num_experts_per_tok=3,
        shared_intermediate_size=48, sliding_window=5, embedding_multiplier=3.0,
        attention_multiplier=0.3, residual_multiplier=0.4, logits_scaling=2.5,
        layer_rope_theta=[10000.0, 0, 500000.0, 10000.0, 0], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # Hunyuan's attention, a renormalised top 2 of 5 experts and an ungated shared expert
    "hunyuan_v1_moe": (lambda: tf.HunYuanMoEV1Config(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=5, moe_topk=2, rope_parameters={
            "rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 10000.0},
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a dense first layer (full, with RoPE: prefix_dense_sliding_window_pattern 1), sliding
    # layers with interleaved RoPE and a full NoPE one, a shared expert averaged with the top 2
    "cohere2_moe": (lambda: tf.Cohere2MoeConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=5, num_experts_per_tok=2,
        num_shared_experts=2, sliding_window=5, logit_scale=0.5,
        prefix_dense_intermediate_size=56, layer_types=[
            "full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a sigmoid router renormalised, experts and a shared expert summed, RMSNorm
    "cohere2_moe_sigmoid": (lambda: tf.Cohere2MoeConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=5, num_experts_per_tok=3,
        num_shared_experts=1, shared_expert_combination_strategy="sum",
        expert_selection_fn="sigmoid", rms_norm_eps=1e-5, sliding_window=5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # q/k/v biases (none on o_proj), sigmoid routing by score plus e_score_correction_bias
    # among 2 of 4 groups, renormalised and scaled, a shared expert
    "solar_open": (lambda: tf.SolarOpenConfig(
        hidden_size=64, moe_intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, n_routed_experts=8, num_experts_per_tok=3,
        n_group=4, topk_group=2, n_shared_experts=2, routed_scaling_factor=1.5,
        attention_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # per-head q/k norm, sliding RoPE layers and a full NoPE one, a dense first layer, then
    # sigmoid routing by score plus e_score_correction_bias among 2 of 4 groups, shared experts
    "exaone_moe": (lambda: tf.ExaoneMoeConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=40, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
        num_experts_per_tok=3, n_group=4, topk_group=2, num_shared_experts=2,
        routed_scaling_factor=1.5, sliding_window=5, sliding_window_pattern=4, pad_token_id=0,
        eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # sinks, sliding layers with RoPE and full ones without, per-head q/k norm, a sigmoid
    # router with an ungated shared expert and a dense layer (mlp_only_layers)
    "flint": (lambda: tf.FlintConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=6, num_experts_per_tok=2,
        sliding_window=5, mlp_only_layers=[2], layer_types=[
            "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # q/k norm per head, an output gate of its own projection, NoPE full layers, sandwich
    # norms, biases; a dense layer, then sigmoid routing by score plus expert_bias, scaled,
    # beside a shared expert
    # AFMoE's gated attention with a bias per head on the gate, NoPE full layers with the
    # scalable-softmax query scale, sandwich norms joining the residual depth-scaled, a dense
    # layer and grouped sigmoid routing (2 of 4 groups), the final logit softcap
    "beam": (lambda: tf.BeamConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2, sliding_window=5,
        layer_types=["sliding_attention", "full_attention"] * 2,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # no RoPE: relative logits (the sliding layers' extent their window, with their own head
    # counts and sizes), the full layer's logarithmic scaling, residual convolutions on k, v,
    # the attention's and the feed-forward's outputs, a dense layer (its global_scale folded),
    # then sigmoid routing by score plus the correction bias beside 2 shared experts scored
    # by the router (its global_scale folded too)
    "inkling_text": (lambda: tf.InklingTextConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4,
        swa_num_key_value_heads=1, swa_head_dim=8, d_rel=3, rel_extent=9,
        sliding_window_size=5, log_scaling_n_floor=4, log_scaling_alpha=0.3,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=2, route_scale=2.0,
        local_layer_ids=[0, 1], mlp_layer_types=["dense", "sparse", "sparse"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.attn_sconv"),
    # Cohere 2's parallel blocks with interleaved multimodal RoPE on the sliding layers
    "cohere_compass_text": (lambda: tf.CohereCompassTextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=5, logit_scale=0.5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 50000.0,
                                               "mrope_section": [3, 3, 2]},
                         "full_attention": None}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "afmoe": (lambda: tf.AfmoeConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=6,
        num_experts_per_tok=2, num_shared_experts=1, route_scale=1.5, sliding_window=5,
        global_attn_every_n_layers=2, attention_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # chunked RoPE layers with L2 qk-norm and a NoPE layer with temperature tuning (floor 4,
    # so it changes within the prompt), dense and mixture layers (a sigmoid router scaling
    # the expert's input, a shared expert); right padding: transformers counts chunks from
    # each row's first real token, which a one-pass model with left padding does not
    # (docs/CHECKPOINTS.md; the decoding form does, tests/test_generation.py)
    "llama4_text": (lambda: tf.Llama4TextConfig(
        hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=5,
        num_experts_per_tok=2, interleave_moe_layer_step=2, attention_chunk_size=5,
        floor_scale=4, attn_scale=0.5, **SMALL),
        "right", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a dense layer among the mixtures (mlp_only_layers) and every other layer dense
    "qwen3_moe_dense": (lambda: tf.Qwen3MoeConfig(
        hidden_size=64, moe_intermediate_size=32, intermediate_size=80, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
        num_experts_per_tok=3, sliding_window=None, decoder_sparse_step=2,
        mlp_only_layers=[3], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a shared expert gated per token, q/k/v biases, a dense layer (decoder_sparse_step 2)
    "qwen2_moe": (lambda: tf.Qwen2MoeConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
        decoder_sparse_step=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # multi-head latent attention (q bottleneck, latent, shared rope key, YaRN with DeepSeek's
    # softmax-scale correction), a dense first layer, sigmoid routing by score plus
    # e_score_correction_bias among 2 of 4 groups, a shared expert
    "deepseek_v3": (lambda: tf.DeepseekV3Config(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
        n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=32,
        kv_lora_rank=20, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        max_position_embeddings=64, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 1.0},
        rms_norm_eps=1e-3, **SMALL),  # the latent norms keep their own 1e-6
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # DeepSeek-V3.2: V3's model (its RoPE interleaved), each query's latent attention over the
    # 4 keys its lightning indexer scores highest (8 index heads of 16, RoPE rotate-half on
    # their first 8 features, LayerNorm on the index keys)
    "deepseek_v32": (lambda: tf.DeepseekV32Config(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
        n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=32,
        kv_lora_rank=20, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        index_n_heads=8, index_head_dim=16, index_topk=4, max_position_embeddings=64,
        rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 1.0},
        rms_norm_eps=1e-3, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # GLM-5: V3.2's model, its indexer's RoPE interleaved (8 index heads of 16, top 4 keys)
    "glm_moe_dsa": (lambda: tf.GlmMoeDsaConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=20,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, index_n_heads=8,
        index_head_dim=16, index_topk=4, max_position_embeddings=64, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # two latent-attention and dense-MLP sublayers per layer, a shortcut mixture from the
    # first's feed-forward input to the second's output (softmax over 4 SwiGLU and 3 identity
    # experts, chosen by score plus e_score_correction_bias), LoRA-scaled queries and latents,
    # interleaved YaRN RoPE with DeepSeek's softmax-scale correction
    "longcat_flash": (lambda: tf.LongcatFlashConfig(
        hidden_size=64, ffn_hidden_size=48, expert_ffn_hidden_size=32, num_layers=2,
        num_attention_heads=4, n_routed_experts=4, zero_expert_num=3, moe_topk=2,
        q_lora_rank=32, kv_lora_rank=20, qk_rope_head_dim=8, head_dim=8, qk_nope_head_dim=16,
        v_head_dim=16, routed_scaling_factor=2.5, max_position_embeddings=64,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 16, "mscale": 1.0,
                         "mscale_all_dim": 1.0}, **SMALL),
        "left", "layers.0", "layers.0.self_attn.0", "layers.0.self_attn.0"),
    # query/key heads of 24 features, value heads of 16 scaled by 0.5; sliding layers with
    # twice the kv heads and sinks, a full one without; RoPE per kind on a third of each
    # head; DeepSeek-V3's router (2 groups) without shared experts, a dense layer
    "mimo_v2_flash": (lambda: tf.MiMoV2FlashConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=24, v_head_dim=16,
        attention_value_scale=0.5, n_routed_experts=8, num_experts_per_tok=2, n_group=2,
        topk_group=1, sliding_window=5, mlp_layer_types=["sparse", "dense", "sparse"],
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # DeepSeek-V2-Lite's form: no q bottleneck; group-limited greedy softmax routing
    "deepseek_v2": (lambda: tf.DeepseekV2Config(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
        n_group=4, topk_group=2, topk_method="group_limited_greedy", n_shared_experts=2,
        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=20, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, routed_scaling_factor=1.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # gated delta-rule layers (2 key heads serving 4 value heads, a 4-tap convolution) and
    # a gated softmax layer (unit-offset q/k norm, RoPE on a quarter of each head), a mixture
    # with a gated shared expert and a dense layer; left padding, which the delta rule skips
    # q and k RMS-normed after RoPE (query_layernorm, key_layernorm), RoPE's NTK alpha
    "hunyuan_v1_dense": (lambda: tf.HunYuanDenseV1Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128, rope_parameters={
            "rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 10000.0},
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # Kimi Linear: KDA layers (low-rank gates, a decay per key channel, separate q/k/v
    # convolution taps) and latent attention without positions, DeepSeek-V3's routing in
    # two groups beside a shared expert, one dense layer
    "kimi_linear": (lambda: tf.KimiLinearConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=8, num_experts=6, num_experts_per_token=2,
        num_expert_group=2, topk_group=1, num_shared_experts=1, first_k_dense_replace=1,
        linear_attn_config={"head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 3,
                            "kda_layers": [1, 3], "full_attn_layers": [2]},
        pad_token_id=0, bos_token_id=1, eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # Ling 3: KDA layers (full gates, the bounded forget gate) and latent attention with
    # interleaved RoPE and a sigmoid gate per head
    "bailing_hybrid": (lambda: tf.BailingHybridConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, head_dim=8, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, num_experts=6,
        num_experts_per_tok=2, n_group=2, topk_group=1, layer_group_size=2,
        first_k_dense_replace=1, short_conv_kernel_size=4, rope_theta=10000.0,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # MiniMax-Text-01: lightning attention layers (rates falling with the depth) and GQA
    # softmax layers with RoPE, Mixtral's experts, the normed input as the residual (alpha,
    # beta factors)
    "minimax": (lambda: tf.MiniMaxConfig(
        hidden_size=64, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, block_size=5,
        layer_types=["linear_attention", "full_attention", "linear_attention",
                     "linear_attention"],
        **{f"{k}_{p}_factor": v for k in ("full_attn", "linear_attn", "mlp")
           for p, v in (("alpha", 1.7), ("beta", 0.8))}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.out_proj"),
    "qwen3_next": (lambda: tf.Qwen3NextConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8, num_experts=6, num_experts_per_tok=2,
        mlp_only_layers=[2], **SMALL),
        "left", "layers.0", "layers.0.linear_attn", "layers.0.linear_attn.out_proj"),
    # Qwen3.5: Qwen3-Next's hybrid with unfused delta-rule projections; multimodal RoPE
    # sections (text positions in every stream: 1-D RoPE on half of each head)
    "qwen3_5_text": (lambda: tf.Qwen3_5TextConfig(
        hidden_size=64, intermediate_size=80, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=6,
        linear_key_head_dim=16, linear_value_head_dim=8, rope_parameters=dict(QWEN3_5_ROPE),
        **SMALL),
        "left", "layers.0", "layers.0.linear_attn", "layers.0.linear_attn.out_proj"),
    "qwen3_5_moe_text": (lambda: tf.Qwen3_5MoeTextConfig(
        hidden_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=8,
        linear_value_head_dim=12, num_experts=6, num_experts_per_tok=2,
        rope_parameters=dict(QWEN3_5_ROPE), **SMALL),
        "left", "layers.0", "layers.0.linear_attn", "layers.0.linear_attn.out_proj"),
    # Bamba: Mamba2 layers (groups of B and C, a clamped step) and a GQA layer with RoPE over
    # half of each head
    "bamba": (lambda: tf.BambaConfig(
        hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_indices=[1], mamba_n_heads=6, mamba_d_head=16,
        mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=5, time_step_limit=(0.01, 5.0),
        **SMALL),
        "left", "layers.0", "layers.0.mamba", "layers.0.mamba.out_proj"),
    # Granite 4: Mamba2 layers and a NoPE softmax layer, Granite's multipliers, experts beside
    # a shared expert
    "granitemoehybrid": (lambda: tf.GraniteMoeHybridConfig(
        hidden_size=48, intermediate_size=32, shared_intermediate_size=40, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, layer_types=["mamba", "attention",
                                                                   "mamba"],
        mamba_n_heads=4, mamba_d_head=24, mamba_d_state=8, mamba_n_groups=2,
        mamba_chunk_size=5, num_local_experts=4, num_experts_per_tok=2,
        embedding_multiplier=1.5, residual_multiplier=0.7, attention_multiplier=0.2,
        logits_scaling=2.0, **SMALL),
        "left", "layers.0", "layers.0.mamba", "layers.0.mamba.out_proj"),
    # Nemotron-H: layers of one mixer each, paired as blocks (a Mamba2 layer and the experts
    # after it; a NoPE attention layer alone; a Mamba2 layer and an MLP layer; attention alone)
    "nemotron_h": (lambda: tf.NemotronHConfig(
        hidden_size=48, intermediate_size=64, layers_block_type=[
            "linear_attention", "moe", "full_attention", "linear_attention", "mlp",
            "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, mamba_num_heads=6,
        mamba_head_dim=16, ssm_state_size=8, n_groups=2, chunk_size=5, n_routed_experts=6,
        num_experts_per_tok=2, moe_intermediate_size=24, moe_shared_expert_intermediate_size=40,
        n_group=2, topk_group=1, routed_scaling_factor=1.5, time_step_min=0.01, **SMALL),
        "left", "layers.0", "layers.0.mixer", "layers.0.mixer.out_proj"),
    # Zamba2: Mamba2 layers (groups, dt at least time_step_min), two shared blocks taken in
    # turn beside the hybrid layers 1, 2 and 3 (the third use the first block's again), each
    # use with its adapters on q, k, v and the MLP; RoPE in the shared attention
    "zamba2": (lambda: tf.Zamba2Config(
        hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, layers_block_type=["mamba", "hybrid", "hybrid", "hybrid"],
        n_mamba_heads=4, mamba_d_state=8, mamba_ngroups=2, chunk_size=5, num_mem_blocks=2,
        adapter_rank=4, use_shared_attention_adapter=True, use_mem_rope=True,
        time_step_min=0.01, **SMALL),
        "left", "layers.0", "layers.0.mamba", "layers.0.mamba.out_proj"),
    # Mamba2: its mixers alone (no feed-forward), B and C in groups, a clamped step
    "mamba2": (lambda: tf.Mamba2Config(
        hidden_size=48, num_hidden_layers=2, num_heads=6, head_dim=16, state_size=8,
        n_groups=3, chunk_size=5, time_step_limit=(0.01, 5.0), vocab_size=SMALL["vocab_size"]),
        "left", "layers.0", "layers.0.mixer", "layers.0.mixer.out_proj"),
    # Mamba: its mixers alone (each of 32 channels a head of 6 state features), tied embeddings
    "mamba": (lambda: tf.MambaConfig(
        hidden_size=16, num_hidden_layers=2, state_size=6, expand=2, conv_kernel=4,
        time_step_rank=3, vocab_size=SMALL["vocab_size"]),
        "left", "layers.0", "layers.0.mixer", "layers.0.mixer.out_proj"),
    # Falcon-Mamba: Mamba's, dt's features, B and C RMS-normed without weights
    "falcon_mamba": (lambda: tf.FalconMambaConfig(
        hidden_size=16, num_hidden_layers=2, state_size=6, expand=2, conv_kernel=3,
        time_step_rank=3, mixer_rms_eps=1e-5, vocab_size=SMALL["vocab_size"]),
        "left", "layers.0", "layers.0.mixer", "layers.0.mixer.out_proj"),
    # Jamba: Mamba layers (weighted dt, B, C norms) around a NoPE GQA layer (layer 1 of 3),
    # a softmax mixture of 4 experts (top 2, not renormalised) every second layer
    "jamba": (lambda: tf.JambaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_period=3, attn_layer_offset=1, num_experts=4,
        num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1,
        mamba_d_state=6, mamba_d_conv=3, mamba_expand=2, mamba_dt_rank=3, **SMALL),
        "left", "layers.0", "layers.0.mamba", "layers.0.mamba.out_proj"),
    # OLMo Hybrid: delta-rule layers with negative eigenvalues (pre norms) around an OLMo 3
    # softmax layer (norms after its sublayers, q and k normed over all heads, RoPE)
    "olmo_hybrid": (lambda: tf.OlmoHybridConfig(
        hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, layer_types=["linear_attention", "full_attention",
                                            "linear_attention"],
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=12, rope_parameters={"rope_type": "default", "rope_theta": 1e4},
        pad_token_id=0, **SMALL),
        "left", "layers.0", "layers.0.linear_attn", "layers.0.linear_attn.o_proj"),
    # Falcon-H1: attention and a Mamba2 mixer side by side in each layer (its norm before its
    # gate), its muP multipliers away from 1 (the attention's input and output ones at 1: the
    # attention alone is compared between them; test_generation's config has them too)
    "falcon_h1": (lambda: tf.FalconH1Config(
        hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, mamba_d_ssm=48, mamba_n_heads=4, mamba_d_state=8,
        mamba_n_groups=2, mamba_chunk_size=5, mamba_rms_norm=True, projectors_bias=True,
        key_multiplier=1.3, ssm_in_multiplier=1.2, ssm_out_multiplier=0.6,
        ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.5], mlp_multipliers=[1.4, 0.5],
        time_step_limit=(0.01, 5.0), **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "lfm2": (lambda: tf.Lfm2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, layer_types=["conv", "conv", "full_attention", "conv"],
        conv_L_cache=4, block_ffn_dim_multiplier=1.5, block_multiple_of=16, **SMALL),
        "left", "layers.0", "layers.0.conv", "layers.0.conv.out_proj"),
    # LFM2-MoE: a dense first layer, then experts chosen by sigmoid plus the expert bias
    "lfm2_moe": (lambda: tf.Lfm2MoeConfig(
        hidden_size=48, intermediate_size=72, moe_intermediate_size=24, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, num_experts=6, num_experts_per_tok=2,
        num_dense_layers=1, routed_scaling_factor=1.5, conv_L_cache=3,
        layer_types=["conv", "full_attention", "conv", "full_attention"], **SMALL),
        "left", "layers.0", "layers.0.conv", "layers.0.conv.out_proj"),
    # LFM3: both attention kinds, the full layers' proportional RoPE over a third of each head
    "lfm3": (lambda: tf.Lfm3Config(
        hidden_size=48, intermediate_size=72, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, sliding_window=5, conv_L_cache=4,
        layer_types=["conv", "sliding_attention", "full_attention", "conv", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "proportional", "rope_theta": 1e4,
                                            "partial_rotary_factor": 0.34}},
        pad_token_id=0, bos_token_id=1, eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.conv", "layers.0.conv.out_proj"),
    # LFM3 without its gates (no g_proj: q_proj alone) and with pre-norms only
    "lfm3_ungated": (lambda: tf.Lfm3Config(
        hidden_size=48, intermediate_size=72, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, sliding_window=5, conv_L_cache=4,
        use_attention_gate=False, use_sandwich_norm=False,
        layer_types=["conv", "full_attention", "sliding_attention"],
        pad_token_id=0, bos_token_id=1, eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.conv", "layers.0.conv.out_proj"),
    "gpt_neox": (lambda: tf.GPTNeoXConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        **SMALL),
        "left", "layers.0", "layers.0.attention", "layers.0.attention.dense"),
    # bias-free layers but the last, whose attention adds its dense_bias; half of each head
    # rotated; an MLP int(64 * 3) wide
    "gpt_neox_japanese": (lambda: tf.GPTNeoXJapaneseConfig(
        hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_multiple_size=3,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5}, **SMALL),
        "left", "layers.0", "layers.0.attention", "layers.0.attention.dense"),
    "gptj": (lambda: tf.GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_inner=96,
                                   n_positions=64, **SMALL),
             "left", "h.0", "h.0.attn", "h.0.attn.out_proj"),
    # 8 heads: each of qkv_proj's 4 blocks holds two heads' q, v and k rows
    "codegen": (lambda: tf.CodeGenConfig(n_embd=64, n_layer=2, n_head=8, rotary_dim=4,
                                         n_inner=96, n_positions=64, **SMALL),
                "left", "h.0", "h.0.attn", "h.0.attn.out_proj"),
    "falcon": (lambda: tf.FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2,
        new_decoder_architecture=True, bias=False, ffn_hidden_size=96, **SMALL),
        "left", "h.0", "h.0.self_attention", "h.0.self_attention.dense"),
    "falcon_mqa": (lambda: tf.FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, multi_query=True,
        parallel_attn=True, bias=True, ffn_hidden_size=96, **SMALL),
        "left", "h.0", "h.0.self_attention", "h.0.self_attention.dense"),
    "falcon_rw": (lambda: tf.FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, alibi=True,
        multi_query=False, parallel_attn=False, bias=True, ffn_hidden_size=96, **SMALL),
        "right", "h.0", "h.0.self_attention", "h.0.self_attention.dense"),
    "bloom": (lambda: tf.BloomConfig(hidden_size=72, n_layer=2, n_head=6, **SMALL),
              "left", "h.0", "h.0.self_attention", "h.0.self_attention.dense"),
    "bert": (lambda: tf.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=96, max_position_embeddings=64, **SMALL),
             "right", "encoder.layer.0", "encoder.layer.0.attention.self",
             "encoder.layer.0.attention.output.dense"),
    # BERT as a decoder: transformers masks it causally (and pads)
    "bert_decoder": (lambda: tf.BertConfig(hidden_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, intermediate_size=96,
                                           max_position_embeddings=64, is_decoder=True, **SMALL),
                     "right", "encoder.layer.0", "encoder.layer.0.attention.self",
                     "encoder.layer.0.attention.output.dense"),
    # EmbeddingGemma's form: bidirectional, |q - k| < sliding_window on sliding layers
    "gemma3_bidirectional": (lambda: tf.Gemma3TextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
        use_bidirectional_attention=True,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], **SMALL),
        "right", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # interleaved RoPE over the whole head, biases on every projection and the MLP
    "ernie4_5": (lambda: tf.Ernie4_5Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, use_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # interleaved RoPE on half of each head, q/k/v biases, gate and up fused
    "glm": (lambda: tf.GlmConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, pad_token_id=0, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # GLM's, with a norm on each sublayer's output
    "glm4": (lambda: tf.Glm4Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, pad_token_id=0, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "gemma": (lambda: tf.GemmaConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # Gemma 2 without post-sublayer norms: sliding and full layers, softcapped scores
    "vaultgemma": (lambda: tf.VaultGemmaConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=5, query_pre_attn_scalar=24,
        attn_logit_softcapping=5.0, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # LayerNorms without weight or bias; biases on q, k, v and o
    "olmo": (lambda: tf.OlmoConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attention_bias=True, pad_token_id=0, clip_qkv=0.3, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "iquestcoder": (lambda: tf.IQuestCoderConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, attention_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # DeepSeek-V3's latent attention (q bottleneck, interleaved RoPE), every MLP dense
    "youtu": (lambda: tf.YoutuConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=20, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a parallel block under one bias-free LayerNorm, interleaved RoPE, every bias
    "cohere": (lambda: tf.CohereConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attention_bias=True, logit_scale=0.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # rotate-half RoPE on half of each head (head_dim 18: 9 features, an odd rotary dim, so
    # transformers rotates 10 at frequencies theta^(-2i/9)), per-head q/k RMSNorm, q/k/v
    # biases, DeepSeek-V3's routing (sigmoid, selection bias, 2 of 4 groups, renormalised,
    # scaled), a shared expert and a dense first layer
    "glm4_moe": (lambda: tf.Glm4MoeConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=18, n_routed_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
        first_k_dense_replace=1, routed_scaling_factor=1.5, use_qk_norm=True,
        attention_bias=True, pad_token_id=0, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # ERNIE 4.5's attention; mixtures on layers 1 and 2 (moe_layer_end_index), dense 0 and 3:
    # softmax routing by probability plus the selection bias, a shared expert with biases
    "ernie4_5_moe": (lambda: tf.Ernie4_5_MoeConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, moe_num_experts=6, moe_k=2,
        moe_num_shared_experts=1, moe_layer_start_index=1, moe_layer_end_index=2,
        use_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # q and k RMS-normed over all their heads at once, rotate-half RoPE on rotary_dim = 8 of
    # 16 features, a sigmoid router choosing by score plus its selection bias
    "minimax_m2": (lambda: tf.MiniMaxM2Config(
        hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, rotary_dim=8, num_local_experts=6,
        num_experts_per_tok=2, bos_token_id=1, eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # DeepSeek-V3's latent attention and routing, its dense layers named by mlp_layer_types
    "glm4_moe_lite": (lambda: tf.Glm4MoeLiteConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
        n_group=4, topk_group=2, n_shared_experts=1, q_lora_rank=32, kv_lora_rank=20,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        mlp_layer_types=["sparse", "dense", "sparse"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # latent attention with rotate-half RoPE (YaRN with DeepSeek's softmax-scale correction),
    # latent norms at eps 1e-6 beside rms_norm_eps 1e-3, dense SwiGLUs with biases, biases on
    # the latent projections, each sublayer's output times scale_depth / sqrt(layers)
    "minicpm3": (lambda: tf.MiniCPM3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=20, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, rms_norm_eps=1e-3, attention_bias=True,
        mlp_bias=True, scale_depth=2.0, max_position_embeddings=64, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 1.0},
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # per-head q/k RMSNorm before RoPE, a dense layer and mixtures (mlp_layer_types): sigmoid
    # routing by score plus expert_bias, renormalised, times router_scaling_factor, two
    # shared experts as one SwiGLU; biases on the projections and the dense and shared MLPs
    # dots.llm1: Qwen3's attention (a sliding layer), DeepSeek-V3's grouped sigmoid routing
    # beside a shared expert, a dense first layer
    "dots1": (lambda: tf.Dots1Config(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, n_routed_experts=8,
        num_experts_per_tok=3, n_shared_experts=2, n_group=4, topk_group=2,
        first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=1.5,
        attention_bias=True, sliding_window=5,
        layer_types=["full_attention", "sliding_attention", "full_attention"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "hy_v3": (lambda: tf.HYV3Config(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=7,
        num_experts_per_tok=3, num_shared_experts=2, router_scaling_factor=1.5,
        attention_bias=True, mlp_bias=True, mlp_layer_types=["sparse", "dense", "sparse"],
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # Granite's multipliers (logits times logits_scaling), norms after each sublayer too
    "hyperclovax": (lambda: tf.HyperCLOVAXConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, embedding_multiplier=3.0, attention_multiplier=0.3,
        residual_multiplier=0.4, logits_scaling=2.5, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    "hyperclovax_pre": (lambda: tf.HyperCLOVAXConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, residual_multiplier=0.4, use_post_norm=False, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # sliding and full layers with their own RoPE thetas, per-head q/k RMSNorm, a dense layer
    # (mlp_layer_types) before the mixtures
    "mellum": (lambda: tf.MellumConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=6,
        num_experts_per_tok=2, sliding_window=5, attention_bias=True,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        mlp_layer_types=["dense", "sparse", "sparse"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # weightless RMSNorms (the embeddings, each sublayer's input, q and k after RoPE, the
    # final norm), RoPE turned the other way, a squared-ReLU MLP, q/k/v/o biases
    "nanochat": (lambda: tf.NanoChatConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attention_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # DeepSeek-V3's with the mixture's output RMS-normed (post_mlp_layernorm), a dense first
    # layer (moe_layer_freq 2 makes layer 3 dense too)
    "axk1": (lambda: tf.AXK1Config(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
        n_group=4, topk_group=2, n_shared_experts=1, q_lora_rank=32, kv_lora_rank=20,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, first_k_dense_replace=1,
        moe_layer_freq=2, pad_token_id=0, bos_token_id=1, eos_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # per-head q/k norm before RoPE, sliding RoPE layers and a full NoPE one, four norms per
    # block, a router choosing by logit plus the correction bias, weighing by sigmoid, a
    # shared expert
    "kolibri1": (lambda: tf.Kolibri1Config(
        hidden_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=6, num_experts_per_tok=2, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # full and sliding layers (a window of local_attention // 2 = 3 keys) with their own RoPE
    # bases, layer 0's attention unnormed, an exact-GELU GLU from the fused Wi, LayerNorms and
    # every projection with biases
    "modernbert-decoder": (lambda: tf.ModernBertDecoderConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
        local_attention=6, norm_bias=True, attention_bias=True, mlp_bias=True, norm_eps=1e-3,
        layer_types=["full_attention", "sliding_attention", "sliding_attention",
                     "full_attention"], pad_token_id=0, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2, **SMALL),
        "left", "layers.0", "layers.0.attn", "layers.0.attn.Wo"),
    # a router's top 3 logits softmaxed (the softmax's top 3 renormalised) over SiLU-gated
    # experts stored transposed and fused (fc1 [E, d, 2 n]), beside the shared experts as one
    # MLP twice as wide with mlp_bias's biases, added unweighted
    "aria_text": (lambda: tf.AriaTextConfig(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, moe_num_experts=5, moe_topk=3, moe_num_shared_experts=2,
        mlp_bias=True, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a fused Wqkv with 2 kv heads clamped to [-0.3, 0.3] (tight enough to clamp), bias-free
    # LayerNorms, a softmax router's top 3 divided by their sum (p = 1) over packed experts
    "dbrx": (lambda: tf.DbrxConfig(
        d_model=64, n_heads=4, n_layers=2, max_seq_len=64,
        attn_config={"kv_n_heads": 2, "clip_qkv": 0.3, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": 40, "moe_num_experts": 5, "moe_top_k": 3}, **SMALL),
        "left", "blocks.0", "blocks.0.norm_attn_norm.attn",
        "blocks.0.norm_attn_norm.attn.out_proj"),
    "t5": (lambda: tf.T5Config(d_model=64, d_kv=12, d_ff=96, num_layers=2, num_heads=4,
                               relative_attention_num_buckets=8,
                               relative_attention_max_distance=20,
                               feed_forward_proj="gated-gelu", **SMALL),
           "right", "encoder.block.0", "encoder.block.0.layer.0.SelfAttention",
           "encoder.block.0.layer.0.SelfAttention.o"),
    # a head count per layer (4 attentions: each kind with 4 and with 6 heads), each head's
    # output times softplus of its g_proj row, q/k norm per head, biases, RoPE per kind (the
    # full layers' on half of each head, LagunaConfig's default), a dense first layer, then
    # sigmoid routing by score plus the correction bias, scaled, beside a shared expert
    "laguna": (lambda: tf.LagunaConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=6, num_experts_per_tok=2,
        sliding_window=5, num_attention_heads_per_layer=[4, 6, 6, 4], attention_bias=True,
        moe_routed_scaling_factor=1.5, layer_types=[
            "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
    # a gate per output feature (gating "per-element"), every layer full, scaled RoPE
    "laguna_per_element": (lambda: tf.LagunaConfig(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, num_experts=6, num_experts_per_tok=2,
        gating="per-element", mlp_layer_types=["sparse", "dense"], rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0,
                               "partial_rotary_factor": 0.5}}, **SMALL),
        "left", "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj"),
}


def _model(config) -> torch.nn.Module:
    if isinstance(config, tf.T5Config):
        return tf.T5EncoderModel(config)
    # Falcon's eager path adds ALiBi twice (once to the scores, once inside the mask it built
    # from ALiBi); its SDPA path adds it once, as Falcon-RW was trained
    sdpa = isinstance(config, tf.FalconConfig) and config.alibi
    return tf.AutoModel.from_config(config, attn_implementation="sdpa" if sdpa else "eager")


def redraw(model: torch.nn.Module, seed: int, unit_offset: bool, gain: float = 2.0) -> None:
    """Linear weights N(0, gain^2 / fan_in) (a low-rank adapter's up-projection a tenth of
    that),
    embeddings N(0, 1), norm weights around 1 (around 0 for Gemma's 1 + w), biases around 0,
    a router's selection bias N(0, 0.09): it moves the choice among sigmoid scores."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() > 1:
                embedding = any(k in name for k in ("embed", "wte", "word_embeddings",
                                                    "relative_attention_bias"))
                p.copy_(noise if embedding else noise * gain / math.sqrt(p.shape[-1]))
                if "adapter_list" in name and name.endswith(".1.weight"):  # (a LoRA's B: a
                    p.mul_(0.1)  # small change of the weight it adapts, as trained ones are)
            elif name.endswith("weight"):  # a norm
                p.copy_(0.1 * noise + (0.0 if unit_offset else 1.0))
            else:
                p.copy_(0.1 * noise)
        for name, b in model.named_buffers():  # a router's selection bias (DeepSeek-V3's form)
            if name.endswith(("e_score_correction_bias", "feed_forward.expert_bias")):
                b.copy_(0.3 * torch.randn(b.shape, generator=g))


def _module(model: torch.nn.Module, path: str) -> torch.nn.Module:
    return model.get_submodule(path)


def _first(args: tuple, kwargs: dict) -> torch.Tensor:
    return kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


def run_hf(model, path_layer: str, path_attn: str, path_out: str, ids, mask):
    seen: dict[str, torch.Tensor] = {}

    def keep(key: str, value: torch.Tensor) -> None:
        seen.setdefault(key, value)

    hooks = [
        _module(model, path_layer).register_forward_pre_hook(
            lambda m, a, k: keep("x", _first(a, k)), with_kwargs=True),
        _module(model, path_attn).register_forward_pre_hook(
            lambda m, a, k: keep("attn_in", _first(a, k)), with_kwargs=True),
        _module(model, path_out).register_forward_hook(
            lambda m, a, out: keep("attn_out", out[0] if isinstance(out, tuple) else out)),
    ]
    try:
        with torch.no_grad():
            seen["y"] = model(input_ids=ids, attention_mask=mask).last_hidden_state
    finally:
        for h in hooks:
            h.remove()
    return {k: v.detach().float().numpy() for k, v in seen.items()}


def _ort(model: bytes, feed: dict) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feed.items() if k in names})[0]


def _close(ours: np.ndarray, ref: np.ndarray, rows: np.ndarray, what: str) -> None:
    ours, ref = ours[rows], ref[rows]
    err = float(np.abs(ours - ref).max())
    bound = 1e-4 * max(1.0, float(np.abs(ref).max()))
    assert err <= bound, f"{what}: max error {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("family", list(CASES))
def test_import_and_checkpoint_match_transformers(tmp_path: Path, family: str) -> None:
    make, side, path_layer, path_attn, path_out = CASES[family]
    config = make()
    model = _model(config).eval()
    redraw(model, 7, unit_offset="gemma" in family, gain=GAINS.get(family, 2.0))
    folder = tmp_path / family
    model.save_pretrained(folder)
    spec = tmp_path / f"{family}.attn"
    assert main(["import", str(folder), "-o", str(spec), "--padding", side, "--head", "none"]) == 0
    program = attndsl.load(spec)
    stack = next(n for n in program if hasattr(program[n].spec, "layers"))
    first_attention = program[stack].spec.attention.name
    stack_onnx = program[stack].onnx_bytes(target="ort-cpu", weights=folder)
    attn_onnx = program[first_attention].onnx_bytes(target="ort-cpu", weights=folder)
    rng = np.random.default_rng(3)
    for B, L in ((1, 7), (3, 12)):
        ids = torch.tensor(rng.integers(1, SMALL["vocab_size"], size=(B, L)))
        lengths = np.full(B, L)
        if B > 1:
            lengths[1:] = rng.integers(2, L, size=B - 1)
        mask = torch.ones(B, L, dtype=torch.long)
        for b, n in enumerate(lengths):
            if side == "left":
                mask[b, : L - n] = 0
            else:
                mask[b, n:] = 0
        ref = run_hf(model, path_layer, path_attn, path_out, ids, mask)
        rows = mask.bool().numpy()  # compare the real positions (padded queries are free)
        # (transformers' positions without position_ids: 0 .. L-1, every stream of
        # multimodal RoPE the same)
        feed = {"key_lengths": lengths.astype(np.int64),
                "position_ids": np.broadcast_to(np.arange(L), (3, B, L)).astype(np.int64)}
        ours = _ort(stack_onnx, {"x": ref["x"], **feed})
        _close(ours, ref["y"], rows, f"{family} stack B={B} L={L}")
        ours = _ort(attn_onnx, {"x": ref["attn_in"], **feed})
        _close(ours, ref["attn_out"], rows, f"{family} attention B={B} L={L}")


@pytest.mark.parametrize("family", list(CASES))
def test_renamed_tensors_get_the_right_hint_or_none(tmp_path: Path, family: str) -> None:
    """Rename each tensor of the checkpoint in turn: a tensor the spec reads is reported
    missing, and a hint, when there is one, names exactly the renamed tensor and its right
    name (following it restores the checkpoint, which the test above shows is correct); a
    tensor the spec does not read changes nothing."""
    from attndsl.checkpoints import Checkpoint, gather, open_checkpoint
    from attndsl.errors import SpecError

    make, side, *_ = CASES[family]
    folder = tmp_path / family
    _model(make()).save_pretrained(folder)
    spec = tmp_path / "spec.attn"
    assert main(["import", str(folder), "-o", str(spec), "--padding", side, "--head", "none"]) == 0
    program = attndsl.load(spec)
    layer = program[next(n for n in program if hasattr(program[n].spec, "layers"))]
    wanted = {k: tuple(v.shape) for k, v in layer.to_torch().state_dict().items()}
    ckpt = open_checkpoint(folder)
    tensors = {name: ckpt.tensor(name) for name in ckpt.files}
    baseline = gather(ckpt, layer.spec, wanted)
    hinted = 0
    for name in tensors:
        moved = {(f"{name}_renamed" if k == name else k): v for k, v in tensors.items()}
        memory = Path("in-memory")
        fake = Checkpoint(folder, ckpt.config, dict.fromkeys(moved, memory), {memory: moved})
        try:
            left_out: list[str] = []
            got = gather(fake, layer.spec, wanted, allow_unused=True, warn=left_out.append)
        except SpecError as exc:
            text = "\n".join(d.message for d in exc.diagnostics)
            assert "missing" in text, text
            hints = [d.hint for d in exc.diagnostics if d.hint and "is unused" in d.hint]
            for hint in hints:
                assert f"`{name}_renamed`" in hint and f"name it `{name}`" in hint, hint
            hinted += bool(hints)
        else:  # not a tensor of the described layers: left out when allowed, else refused
            assert any(f"`{name}_renamed`" in line for line in left_out), left_out  # said
            assert got.keys() == baseline.keys()
            assert all(np.array_equal(got[k], baseline[k]) for k in got)
            with pytest.raises(SpecError, match=f"`{name}_renamed` .* is not used by the spec"):
                gather(fake, layer.spec, wanted)
    assert hinted > 0


def test_checkpoint_name_tables_are_documented() -> None:
    """docs/CHECKPOINTS.md lists every mapping of every family's table, as the loader has it."""
    from attndsl.families import FAMILIES

    doc = (Path(__file__).parent.parent / "docs" / "CHECKPOINTS.md").read_text()
    for family in FAMILIES.values():
        tables = [family.weights.names, *family.weights.by_kernel.values()]
        for ours, theirs in (pair for table in tables for pair in table.items()):
            name = theirs[0] if isinstance(theirs, tuple) else theirs
            assert f"| `{ours}` | `{name}`" in doc, (ours, name)
        for ours in family.weights.top:
            theirs = family.weights.top_name(ours)
            assert f"| `{ours}` (top) | `{theirs}`" in doc, (ours, theirs)


def test_import_names_what_it_cannot_express(tmp_path: Path, capsys) -> None:
    import json

    cases = {
        "unknown": ({"model_type": "rwkv"}, "model_type `rwkv` is not one attndsl imports"),
        "residual": ({**tf.BloomConfig(hidden_size=64, n_head=4).to_dict(),
                      "apply_residual_connection_post_layernorm": True},
                     "`apply_residual_connection_post_layernorm` = true"),
        "rope": ({**tf.LlamaConfig(hidden_size=64, num_attention_heads=4).to_dict(),
                  "rope_parameters": {"rope_type": "axial", "rope_theta": 1e4}},
                 "`rope_type` = \"axial\""),
        "act": ({**tf.LlamaConfig(hidden_size=64, num_attention_heads=4).to_dict(),
                 "hidden_act": "relu6"}, "`hidden_act` = \"relu6\""),
    }
    for name, (config, message) in cases.items():
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        out = tmp_path / f"{name}.attn"
        assert main(["import", str(path.parent), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        assert not out.exists()
    assert main(["import", str(tmp_path / "nowhere")]) == 2
    assert "no config.json" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["shards", "bin", "file", "config"])
def test_checkpoint_layouts(tmp_path: Path, how: str) -> None:
    """A sharded index, pytorch_model.bin, a model.safetensors named directly and the
    folder's config.json all load the same tensors as the single-file folder."""
    make, side, *_ = CASES["qwen2"]
    model = _model(make()).eval()
    redraw(model, 5, unit_offset=False)
    plain, other = tmp_path / "plain", tmp_path / how
    model.save_pretrained(plain)
    if how == "shards":
        model.save_pretrained(other, max_shard_size="40KB")
        assert (other / "model.safetensors.index.json").is_file()
    elif how == "bin":  # as older transformers saved them (5.x writes safetensors only)
        other.mkdir()
        (other / "config.json").write_text((plain / "config.json").read_text())
        torch.save(model.state_dict(), other / "pytorch_model.bin")
    else:
        other = plain / ("model.safetensors" if how == "file" else "config.json")
    spec = tmp_path / "spec.attn"
    assert main(["import", str(plain), "-o", str(spec), "--padding", side, "--head", "none"]) == 0
    layer = attndsl.load(spec)["qwen2"]
    want = layer.to_torch(weights=plain).state_dict()
    got = layer.to_torch(weights=other).state_dict()
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_import_reads_older_config_spellings(tmp_path: Path) -> None:
    """Checkpoints saved before transformers 5: rope_theta + rope_scaling ("type", Phi-3's
    "su"), GPT-NeoX's (and GPT-NeoX-Japanese's) rotary_pct and rotary_emb_base, MiniMax-M2's
    rotary_dim, Persimmon's top-level partial_rotary_factor and Nemotron's default one."""
    import json

    from attndsl.hf_import import import_config
    from attndsl.spec import Llama3Scaling, LongRopeScaling

    common = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "intermediate_size": 96}
    cases = {
        "gpt_neox": {"rotary_pct": 0.25, "rotary_emb_base": 20000},
        # GPTNeoXJapaneseConfig reads its own names, never a top-level rope_theta
        "gpt_neox_japanese": {"rotary_pct": 0.5, "rotary_emb_base": 20000, "rope_theta": 5000.0},
        "phi3": {"rope_theta": 10000.0, "max_position_embeddings": 131072,
                 "original_max_position_embeddings": 4096,
                 "rope_scaling": {"type": "su", "short_factor": [1.0] * 8,
                                  "long_factor": [2.0] * 8}},
        "llama": {"rope_theta": 500000.0, "num_key_value_heads": 2,
                  "rope_scaling": {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192}},
        "minimax_m2": {"rope_theta": 5e6, "head_dim": 16, "rotary_dim": 8,
                       "num_key_value_heads": 2, "num_local_experts": 4,
                       "num_experts_per_tok": 2},
        # partial_rotary_factor beside rope_theta, or absent: the config class's default (0.5)
        "persimmon": {"rope_theta": 25000.0, "partial_rotary_factor": 0.25},
        "nemotron": {"rope_theta": 10000.0, "num_key_value_heads": 2},
    }
    positions = {}
    for model_type, extra in cases.items():
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type, **common,
                                                        **extra}))
        program = attndsl.loads(import_config(folder))
        positions[model_type] = program[model_type].spec.attention.position
    assert (positions["gpt_neox"].theta, positions["gpt_neox"].dim) == (20000, 4)
    assert (positions["gpt_neox_japanese"].theta, positions["gpt_neox_japanese"].dim) == (20000, 8)
    longrope = positions["phi3"].scaling
    assert isinstance(longrope, LongRopeScaling) and longrope.long_factor == (2.0,) * 8
    assert longrope.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) /
                                                                math.log(4096)))
    assert positions["llama"].scaling == Llama3Scaling(32.0, 1.0, 4.0, 8192)
    assert (positions["minimax_m2"].theta, positions["minimax_m2"].dim) == (5e6, 8)
    assert (positions["persimmon"].theta, positions["persimmon"].dim) == (25000, 4)
    assert (positions["nemotron"].theta, positions["nemotron"].dim) == (10000, 8)


def test_qwen_hybrids_without_rope_parameters_rotate_a_quarter_of_each_head(
        tmp_path: Path) -> None:
    """A Qwen3-Next or Qwen3.5 config.json with rope_theta and no rope_parameters: its config
    class fills partial_rotary_factor 0.25 (not RoPE's usual 1), and the import reads it so."""
    import json

    from attndsl.hf_import import import_config

    common = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "num_hidden_layers": 1, "intermediate_size": 96,
              "rope_theta": 5e5, "layer_types": ["full_attention"]}
    for model_type, make in (("qwen3_next", tf.Qwen3NextConfig),
                             ("qwen3_5_text", tf.Qwen3_5TextConfig),
                             ("qwen3_5_moe_text", tf.Qwen3_5MoeTextConfig)):
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type, **common}))
        program = attndsl.loads(import_config(folder))
        position = program[model_type.replace("_text", "")].spec.attention.position
        want = make.from_dict({"model_type": model_type, **common}).rope_parameters
        assert (position.theta, position.dim) == (
            want["rope_theta"], int(16 * want["partial_rotary_factor"])), model_type


def test_falcon_rw_alibi_is_the_trained_bfloat16_arithmetic(tmp_path: Path) -> None:
    """Falcon-RW's ALiBi as transformers computes it (build_alibi_tensor: slope and position
    in bfloat16, and their product), at lengths where bfloat16 rounds them (float32 ALiBi is
    about 2% apart at L = 300); 12 heads make slopes that are not powers of two."""
    config = tf.FalconConfig(hidden_size=96, num_hidden_layers=2, num_attention_heads=12,
                             alibi=True, multi_query=False, parallel_attn=False, bias=True,
                             ffn_hidden_size=96, **SMALL)
    model = _model(config).eval()
    redraw(model, 7, unit_offset=False)
    model.save_pretrained(tmp_path / "hf")
    spec = tmp_path / "falcon.attn"
    assert main(["import", str(tmp_path / "hf"), "-o", str(spec), "--head", "none"]) == 0
    assert "rounding = bfloat16" in spec.read_text()
    program = attndsl.load(spec)
    stack = program["falcon"]
    ids = torch.tensor(np.random.default_rng(5).integers(1, SMALL["vocab_size"], (1, 300)))
    ref = run_hf(model, *CASES["falcon_rw"][2:], ids, torch.ones_like(ids))
    for target in ("ort-cpu", "portable"):
        ours = _ort(stack.onnx_bytes(target=target, weights=tmp_path / "hf"), {"x": ref["x"]})
        _close(ours, ref["y"], np.ones((1, 300), bool), f"falcon-rw stack on {target}")
    module = stack.to_torch(weights=tmp_path / "hf")
    with torch.no_grad():
        _close(module(x=torch.from_numpy(ref["x"])).numpy(), ref["y"], np.ones((1, 300), bool),
               "falcon-rw stack in torch")


def test_a_joined_tensor_is_read_from_both_and_missing_names_the_absent_one(
        tmp_path: Path, capsys) -> None:
    """AFMoE's query projection is joined from q_proj and gate_proj (docs/CHECKPOINTS.md): a
    checkpoint without the layer's gate_proj is refused naming it, and none of the tensors
    read is called unused."""
    from safetensors.numpy import load_file, save_file

    make, *_ = CASES["afmoe"]
    model = _model(make()).eval()
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    spec = tmp_path / "afmoe.attn"
    assert main(["import", str(folder), "-o", str(spec), "--head", "none"]) == 0
    program = attndsl.load(spec)
    stack = next(n for n in program if hasattr(program[n].spec, "layers"))
    program[stack].onnx_bytes(target="ort-cpu", weights=folder)  # every tensor read, none left
    file = folder / "model.safetensors"
    tensors = load_file(file)
    del tensors["layers.1.self_attn.gate_proj.weight"]
    save_file(tensors, file, metadata={"format": "pt"})
    capsys.readouterr()
    assert main(["compile", str(spec), "--export", "onnx", "--weights", str(folder), "-o",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "missing `layers.1.self_attn.gate_proj.weight`" in err, err
    assert "not used by the spec" not in err, err


def test_a_longcat_stack_of_fewer_blocks_names_the_checkpoint_layers_it_leaves(
        tmp_path: Path) -> None:
    """LongCat-Flash's checkpoint layers hold two blocks each: a stack of the first 2 blocks of
    a 4-block checkpoint reads layer 0 alone, and layer 1's tensors are reported unused (block
    j reads layer j // 2, so a layer is read whole or not at all)."""
    import re

    from attndsl.errors import SpecError

    make, *_ = CASES["longcat_flash"]
    folder, spec = tmp_path / "hf", tmp_path / "longcat.attn"
    _model(make()).save_pretrained(folder)
    assert main(["import", str(folder), "-o", str(spec), "--head", "none"]) == 0
    text = re.sub(r"layers(\s*)= 4\n", r"layers\1= 2\n", spec.read_text())
    stack = attndsl.loads(text)["longcat_flash"]
    with pytest.raises(SpecError, match=r"tensors of layers past the spec's 2 blocks \(from "
                                        r"`(model\.)?layers\.1\."):
        stack.onnx_bytes(target="ort-cpu", weights=folder)
