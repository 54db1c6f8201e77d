"""Generation against transformers: tiny random causal LMs built from config classes (nothing
downloads), saved with `save_pretrained`, brought in with `attndsl import` (token embedding and
LM head included) and `compile --export genai --weights`, then decoded greedily three ways:
`attndsl generate` (ONNX Runtime alone), onnxruntime-genai loading the folder as it is, and
transformers' own `generate(do_sample=False)`, for the in-place cache (ort-cpu) and the
growing one (portable). The tokens must be identical. Mistral's window
(6) is passed well before the 19th token; Gemma 2 alternates windows and soft-caps both the
scores and the logits; SmolLM3 has NoPE layers, Granite its multipliers, GPT-2 learned
positions, Phi-2 a parallel block and an LM head bias. The logits of one forward pass match the
model's within 1e-4, and so do those of a left-padded batch of two through the exported
folder's model.

By default each family is exported for one target (the families alternate between the two in
CONFIGS order, so about half run each target), which is where the time goes: one import and
one genai folder per (family, target). The families where a target behaves differently keep
what differs: GROWING ones are exported for both (ort-cpu grows their cache instead of writing
it in place) and ON_ORT_CPU ones for ort-cpu (GroupQueryAttention applies their softcap,
sinks, window or partial rotation itself). The DeepSeek-style checkpoints and MiMo-V2-Flash
are decoded for one target each too. `--deep` runs every family and checkpoint on both
targets."""

from __future__ import annotations

import importlib.util
import json
import weakref
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers as tf

import attndsl
from attndsl.cli import main
from attndsl.decoding import first_past, text_streams

from .conftest import DEEP
from .test_hf_families import MINISTRAL3_ROPE, QWEN3_5_ROPE, redraw

VOCAB = 97
SIZES = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": VOCAB}
CONFIGS = {
    "llama": lambda: tf.LlamaConfig(num_hidden_layers=2, tie_word_embeddings=False,
                                    rope_parameters={"rope_type": "llama3",
                                                     "rope_theta": 500000.0, "factor": 8.0,
                                                     "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 16},
                                    **SIZES),
    "mistral": lambda: tf.MistralConfig(num_hidden_layers=2, sliding_window=6, **SIZES),
    "ministral": lambda: tf.MinistralConfig(
        num_hidden_layers=3, head_dim=16, sliding_window=6, bos_token_id=1, eos_token_id=2,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], **SIZES),
    # pad_token_id 0: onnxruntime-genai reads a prompt's pad tokens (Ministral 3's 11) as
    # padding
    "ministral3": lambda: tf.Ministral3Config(
        num_hidden_layers=2, head_dim=16, sliding_window=6, max_position_embeddings=64,
        rope_parameters=dict(MINISTRAL3_ROPE), pad_token_id=0, **SIZES),
    "qwen3": lambda: tf.Qwen3Config(num_hidden_layers=2, head_dim=16, tie_word_embeddings=True,
                                    **SIZES),
    "gemma2": lambda: tf.Gemma2Config(num_hidden_layers=3, head_dim=16, sliding_window=5,
                                      query_pre_attn_scalar=16, attn_logit_softcapping=5.0,
                                      final_logit_softcapping=30.0, **SIZES),
    "smollm3": lambda: tf.SmolLM3Config(num_hidden_layers=4, no_rope_layer_interval=2,
                                        use_sliding_window=True, sliding_window=6,
                                        pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                        **SIZES),
    "granite": lambda: tf.GraniteConfig(num_hidden_layers=2, embedding_multiplier=3.0,
                                        attention_multiplier=0.3, residual_multiplier=0.4,
                                        logits_scaling=2.5, **SIZES),
    # a sink per head, sliding layers between full ones, a NoPE layer and two RoPE bases
    "granite_swa": lambda: tf.GraniteSWAConfig(
        num_hidden_layers=4, sliding_window=6, embedding_multiplier=3.0,
        attention_multiplier=0.3, residual_multiplier=0.4, logits_scaling=2.5,
        layer_rope_theta=[10000.0, 0, 500000.0, 10000.0], tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, **SIZES),
    "gpt2": lambda: tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                  vocab_size=VOCAB, bos_token_id=1, eos_token_id=2),
    "phi": lambda: tf.PhiConfig(num_hidden_layers=2, **SIZES),
    "starcoder2": lambda: tf.Starcoder2Config(num_hidden_layers=2, sliding_window=6,
                                              bos_token_id=1, eos_token_id=2, **SIZES),
    "olmo2": lambda: tf.Olmo2Config(num_hidden_layers=2, eos_token_id=2, **SIZES),
    "olmo3": lambda: tf.Olmo3Config(num_hidden_layers=4, sliding_window=6, eos_token_id=2,
                                    pad_token_id=0, **SIZES),
    "exaone4": lambda: tf.Exaone4Config(num_hidden_layers=4, sliding_window=6, bos_token_id=1,
                                        eos_token_id=2, **SIZES),
    "hunyuan_v1_dense": lambda: tf.HunYuanDenseV1Config(
        num_hidden_layers=2, head_dim=16, eos_token_id=2, rope_parameters={
            "rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 10000.0},
        **SIZES),
    # pad_token_id 0: onnxruntime-genai reads a prompt's pad tokens (Helium's 3) as padding
    "helium": lambda: tf.HeliumConfig(num_hidden_layers=2, head_dim=16, attention_bias=True,
                                      pad_token_id=0, **SIZES),
    "seed_oss": lambda: tf.SeedOssConfig(num_hidden_layers=2, head_dim=16, mlp_bias=True,
                                         pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                         **SIZES),
    "cwm": lambda: tf.CwmConfig(num_hidden_layers=3, head_dim=16, sliding_window=6,
                                bos_token_id=1, eos_token_id=2, **SIZES),
    "arcee": lambda: tf.ArceeConfig(num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
                                    **SIZES),
    "jais2": lambda: tf.Jais2Config(num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
                                    **SIZES),
    "nemotron": lambda: tf.NemotronConfig(num_hidden_layers=2, head_dim=16, mlp_bias=True,
                                          bos_token_id=1, eos_token_id=2, **SIZES),
    "persimmon": lambda: tf.PersimmonConfig(
        num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
        **{k: v for k, v in SIZES.items() if k != "num_key_value_heads"}),
    "stablelm": lambda: tf.StableLmConfig(num_hidden_layers=2, use_qkv_bias=True,
                                          use_parallel_residual=True, qk_layernorm=True,
                                          bos_token_id=1, eos_token_id=2, **SIZES),
    "bitnet": lambda: tf.BitNetConfig(num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0, **SIZES),
    "apertus": lambda: tf.ApertusConfig(num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
                                        pad_token_id=0, **SIZES),
    "internlm3": lambda: tf.InternLM3Config(num_hidden_layers=2, head_dim=16, pad_token_id=0,
                                            eos_token_id=2, **SIZES),
    "cohere2": lambda: tf.Cohere2Config(num_hidden_layers=4, sliding_window=6, logit_scale=0.5,
                                        bos_token_id=1, eos_token_id=2, **SIZES),
    "diffllama": lambda: tf.DiffLlamaConfig(num_hidden_layers=3, **SIZES),
    "mixtral": lambda: tf.MixtralConfig(num_hidden_layers=2, num_local_experts=6,
                                        sliding_window=6, **SIZES),
    "qwen3_moe": lambda: tf.Qwen3MoeConfig(num_hidden_layers=2, moe_intermediate_size=32,
                                           num_experts=8, num_experts_per_tok=3,
                                           norm_topk_prob=True, sliding_window=None,
                                           bos_token_id=1, eos_token_id=2, **SIZES),
    "gpt_oss": lambda: tf.GptOssConfig(num_hidden_layers=2, head_dim=16, num_local_experts=6,
                                       num_experts_per_tok=2, sliding_window=6,
                                       swiglu_limit=1.5, bos_token_id=1, eos_token_id=2,
                                       **SIZES),
    "qwen2_moe": lambda: tf.Qwen2MoeConfig(num_hidden_layers=2, moe_intermediate_size=32,
                                           shared_expert_intermediate_size=48, num_experts=6,
                                           num_experts_per_tok=2, bos_token_id=1,
                                           eos_token_id=2, **SIZES),
    "olmoe": lambda: tf.OlmoeConfig(num_hidden_layers=2, num_experts=7, num_experts_per_tok=3,
                                    pad_token_id=0, bos_token_id=1, eos_token_id=2, **SIZES),
    "flex_olmo": lambda: tf.FlexOlmoConfig(num_hidden_layers=2, num_experts=5,
                                           num_experts_per_tok=2, pad_token_id=0,
                                           eos_token_id=2, **SIZES),
    "granitemoe": lambda: tf.GraniteMoeConfig(num_hidden_layers=2, num_local_experts=5,
                                              embedding_multiplier=3.0,
                                              attention_multiplier=0.3,
                                              residual_multiplier=0.4, logits_scaling=2.5,
                                              **SIZES),
    # BERT as a decoder (BertLMHeadModel): learned positions plus the first token type's row,
    # LayerNormed, post-norm blocks, the prediction head before the tied, biased decoder
    "bert": lambda: tf.BertConfig(num_hidden_layers=1, is_decoder=True, pad_token_id=0,
                                  bos_token_id=1, eos_token_id=2, **SIZES),
    # the token embeddings LayerNormed; the prediction head (dense, exact GELU, LayerNorm)
    # with its bias before a biased decoder tied to the embeddings; sliding and full layers
    "modernbert-decoder": lambda: tf.ModernBertDecoderConfig(
        num_hidden_layers=3, local_attention=6, norm_bias=True, classifier_bias=True,
        layer_types=["full_attention", "sliding_attention", "full_attention"],
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
        **SIZES),
    # a mixture of attention heads (top 2 of 5 query and output projections per token) and
    # of SwiGLU experts with a bias on their sum
    "jetmoe": lambda: tf.JetMoeConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=48, num_key_value_heads=2,
        kv_channels=16, num_local_experts=5, num_experts_per_tok=2, vocab_size=VOCAB,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    "granitemoeshared": lambda: tf.GraniteMoeSharedConfig(
        num_hidden_layers=2, num_local_experts=5, num_experts_per_tok=3,
        shared_intermediate_size=48, attention_multiplier=0.3, residual_multiplier=0.4,
        **SIZES),
    # a shared expert, sinks, sliding layers between full ones, a NoPE layer, two RoPE bases
    "granitemoe_swa": lambda: tf.GraniteMoeSWAConfig(
        num_hidden_layers=4, num_local_experts=5, num_experts_per_tok=3,
        shared_intermediate_size=48, sliding_window=6, embedding_multiplier=3.0,
        attention_multiplier=0.3, residual_multiplier=0.4, logits_scaling=2.5,
        layer_rope_theta=[10000.0, 0, 500000.0, 10000.0], **SIZES),
    "hunyuan_v1_moe": lambda: tf.HunYuanMoEV1Config(
        num_hidden_layers=2, head_dim=16, num_experts=5, moe_topk=2, eos_token_id=2,
        rope_parameters={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0,
                         "rope_theta": 10000.0}, **SIZES),
    "cohere2_moe": lambda: tf.Cohere2MoeConfig(
        num_hidden_layers=4, head_dim=16, num_experts=5, num_shared_experts=2,
        sliding_window=6, logit_scale=0.5, layer_types=[
            "full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], bos_token_id=1,
        eos_token_id=2, **SIZES),
    "solar_open": lambda: tf.SolarOpenConfig(
        num_hidden_layers=2, head_dim=16, moe_intermediate_size=40, n_routed_experts=8,
        num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=1.5,
        bos_token_id=1, eos_token_id=2, **SIZES),
    "exaone_moe": lambda: tf.ExaoneMoeConfig(
        num_hidden_layers=4, head_dim=16, moe_intermediate_size=40, num_experts=8,
        num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=1.5,
        sliding_window=6, sliding_window_pattern=4, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, **SIZES),
    "lfm2": lambda: tf.Lfm2Config(num_hidden_layers=3, layer_types=["conv", "full_attention",
                                                                    "conv"],
                                  bos_token_id=1, eos_token_id=2, pad_token_id=0, **SIZES),
    "lfm2_moe": lambda: tf.Lfm2MoeConfig(
        num_hidden_layers=3, moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2,
        num_dense_layers=1, layer_types=["conv", "full_attention", "conv"], bos_token_id=1,
        eos_token_id=2, pad_token_id=0, **SIZES),
    "lfm3": lambda: tf.Lfm3Config(num_hidden_layers=4, head_dim=16, sliding_window=6,
                                  layer_types=["conv", "sliding_attention", "full_attention",
                                               "conv"],
                                  bos_token_id=1, eos_token_id=2, pad_token_id=0, **SIZES),
    # Bamba: Mamba2 layers (their convolution windows and states carried by onnxruntime-genai's
    # RecurrentState) around a GQA layer with RoPE over half of each head
    "bamba": lambda: tf.BambaConfig(
        num_hidden_layers=3, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=32,
        mamba_d_state=16, mamba_n_groups=2, mamba_chunk_size=5, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, **SIZES),
    # Granite 4 without experts (its shared MLP the layer's MLP), RoPE on its softmax layer
    "granitemoehybrid": lambda: tf.GraniteMoeHybridConfig(
        num_hidden_layers=3, layer_types=["mamba", "attention", "mamba"], mamba_n_heads=4,
        mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_chunk_size=5,
        num_local_experts=0, shared_intermediate_size=80, position_embedding_type="rope",
        residual_multiplier=0.8, bos_token_id=1, eos_token_id=2, pad_token_id=0, **SIZES),
    # Nemotron-H: a Mamba2 layer and the experts after it, a NoPE attention layer alone, a
    # Mamba2 layer and a squared-ReLU MLP
    "nemotron_h": lambda: tf.NemotronHConfig(
        layers_block_type=["linear_attention", "moe", "full_attention", "linear_attention",
                           "mlp"], head_dim=16, mamba_num_heads=4, mamba_head_dim=32,
        ssm_state_size=16, n_groups=2, chunk_size=5, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, moe_shared_expert_intermediate_size=48, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, **SIZES),
    # Mamba2: its mixers alone, each a convolution window and a state
    "mamba2": lambda: tf.Mamba2Config(
        num_hidden_layers=2, hidden_size=64, num_heads=4, head_dim=32, state_size=16,
        n_groups=2, chunk_size=5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        vocab_size=VOCAB),
    # Mamba and Falcon-Mamba: Mamba mixers alone (each channel a head of 8 state features),
    # Falcon-Mamba's dt, B and C normed; Jamba: a Mamba layer each side of a NoPE GQA layer,
    # experts after the middle one
    "mamba": lambda: tf.MambaConfig(
        num_hidden_layers=2, hidden_size=32, state_size=8, expand=2, time_step_rank=4,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, vocab_size=VOCAB),
    "falcon_mamba": lambda: tf.FalconMambaConfig(
        num_hidden_layers=2, hidden_size=32, state_size=8, expand=2, time_step_rank=4,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, vocab_size=VOCAB),
    "jamba": lambda: tf.JambaConfig(
        num_hidden_layers=3, attn_layer_period=3, attn_layer_offset=1, num_experts=4,
        num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8,
        mamba_dt_rank=4, bos_token_id=1, eos_token_id=2, pad_token_id=0, **SIZES),
    # OLMo Hybrid: delta-rule layers (negative eigenvalues, pre norms) and a NoPE OLMo 3
    # softmax layer (norms after its sublayers)
    "olmo_hybrid": lambda: tf.OlmoHybridConfig(
        num_hidden_layers=3, layer_types=["linear_attention", "full_attention",
                                          "linear_attention"],
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, bos_token_id=1, eos_token_id=2, pad_token_id=0, **SIZES),
    "flint": lambda: tf.FlintConfig(
        num_hidden_layers=3, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        head_dim=16, num_experts=6, num_experts_per_tok=2, sliding_window=6,
        mlp_only_layers=[1], layer_types=["sliding_attention", "full_attention",
                                          "sliding_attention"],
        bos_token_id=1, eos_token_id=2, **SIZES),
    # the embeddings times sqrt(64) (mup_enabled)
    # a gate bias per head, NoPE full layers with the scalable-softmax query scale, depth-scaled
    # residuals, grouped sigmoid routing, the final logit softcap
    "beam": lambda: tf.BeamConfig(
        num_hidden_layers=4, head_dim=16, moe_intermediate_size=32, num_experts=6,
        num_experts_per_tok=2, n_group=2, topk_group=1, sliding_window=6,
        layer_types=["sliding_attention", "full_attention"] * 2,
        mlp_layer_types=["dense", "sparse", "dense", "sparse"], bos_token_id=1,
        eos_token_id=2, **SIZES),
    # Cohere 2's blocks with multimodal RoPE (text positions: every stream the same)
    "cohere_compass_text": lambda: tf.CohereCompassTextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=5, logit_scale=0.5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 50000.0,
                                               "mrope_section": [3, 3, 2]},
                         "full_attention": None}, vocab_size=VOCAB, bos_token_id=1,
        eos_token_id=2),
    "afmoe": lambda: tf.AfmoeConfig(
        num_hidden_layers=3, head_dim=16, moe_intermediate_size=32, num_experts=6,
        num_experts_per_tok=2, num_shared_experts=1, route_scale=1.5, sliding_window=6,
        global_attn_every_n_layers=2, mup_enabled=True, bos_token_id=1, eos_token_id=2,
        **SIZES),
    # chunks of 4 (so a prompt spans several), a NoPE layer every 2nd layer with its
    # temperature (floor 64: constant over these short rows, see the test of it below), dense
    # and mixture layers
    "llama4_text": lambda: tf.Llama4TextConfig(
        num_hidden_layers=4, head_dim=16, intermediate_size_mlp=80, num_local_experts=5,
        num_experts_per_tok=2, interleave_moe_layer_step=2, attention_chunk_size=4,
        no_rope_layer_interval=2, floor_scale=64, attn_scale=0.5, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, **SIZES),
    # the LM heads of the LayerNorm decoders: GPT-NeoX's untied embed_out, GPT-J's head bias,
    # Falcon's tied head (grouped kv heads, two norms), BLOOM's
    "gpt_neox": lambda: tf.GPTNeoXConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=96, num_attention_heads=4,
        partial_rotary_factor=0.5, vocab_size=VOCAB, bos_token_id=1, eos_token_id=2),
    "gptj": lambda: tf.GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_inner=96,
                                  n_positions=64, vocab_size=VOCAB, bos_token_id=1,
                                  eos_token_id=2),
    "falcon": lambda: tf.FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2,
        new_decoder_architecture=True, ffn_hidden_size=96, vocab_size=VOCAB, bos_token_id=1,
        eos_token_id=2),
    # ALiBi (6 heads: Press's slopes past a power of two), the embedding LayerNorm, a tied head
    "bloom": lambda: tf.BloomConfig(hidden_size=72, n_layer=2, n_head=6, vocab_size=VOCAB,
                                    bos_token_id=1, eos_token_id=2),
    "gpt_bigcode": lambda: tf.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, n_inner=96,
                                               n_positions=64, vocab_size=VOCAB,
                                               bos_token_id=1, eos_token_id=2),
    "gpt_neo": lambda: tf.GPTNeoConfig(hidden_size=64, num_layers=2, num_heads=4,
                                       intermediate_size=96, window_size=6,
                                       max_position_embeddings=64, vocab_size=VOCAB,
                                       attention_types=[[["global", "local"], 1]],
                                       bos_token_id=1, eos_token_id=2),
    "codegen": lambda: tf.CodeGenConfig(n_embd=64, n_layer=2, n_head=8, rotary_dim=4,
                                        n_inner=96, n_positions=64, vocab_size=VOCAB,
                                        bos_token_id=1, eos_token_id=2),
    # learned positions two rows into their table
    "opt": lambda: tf.OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                ffn_dim=96, max_position_embeddings=64, vocab_size=VOCAB,
                                pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "opt_post": lambda: tf.OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     ffn_dim=96, max_position_embeddings=64, vocab_size=VOCAB,
                                     do_layer_norm_before=False, pad_token_id=0,
                                     bos_token_id=1, eos_token_id=2),
    # OPT's offset positions, embeddings scaled by sqrt(64)
    "biogpt": lambda: tf.BioGptConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=96, max_position_embeddings=64,
                                      vocab_size=VOCAB, pad_token_id=0, bos_token_id=1,
                                      eos_token_id=2),
    # fairseq's sinusoidal positions (halves, offset 2, tensor2tensor's frequencies)
    "xglm": lambda: tf.XGLMConfig(d_model=64, num_layers=2, attention_heads=4, ffn_dim=96,
                                  vocab_size=VOCAB, pad_token_id=0, bos_token_id=1,
                                  eos_token_id=2),
    "mpt": lambda: tf.MptConfig(d_model=72, n_heads=6, n_layers=2, max_seq_len=64,
                                attn_config={"clip_qkv": 4.0}, vocab_size=VOCAB, pad_token_id=0,
                                bos_token_id=1, eos_token_id=2),
    # sinusoidal positions (every sine, then every cosine), a tied head with a bias
    "ctrl": lambda: tf.CTRLConfig(n_embd=64, n_layer=2, n_head=4, dff=96, n_positions=64,
                                  vocab_size=VOCAB, pad_token_id=0, bos_token_id=1,
                                  eos_token_id=2),
    "ernie4_5": lambda: tf.Ernie4_5Config(num_hidden_layers=2, head_dim=16, use_bias=True,
                                          bos_token_id=1, eos_token_id=2, **SIZES),
    # head_dim 32: RoPE on 16 features, which GroupQueryAttention rotates itself (do_rotary)
    "glm": lambda: tf.GlmConfig(num_hidden_layers=2, head_dim=32, bos_token_id=1,
                                eos_token_id=2, pad_token_id=0, **SIZES),
    "glm4": lambda: tf.Glm4Config(num_hidden_layers=2, head_dim=16, bos_token_id=1,
                                  eos_token_id=2, pad_token_id=0, **SIZES),
    "gemma": lambda: tf.GemmaConfig(num_hidden_layers=2, head_dim=16, bos_token_id=1,
                                    eos_token_id=2, pad_token_id=0, **SIZES),
    "vaultgemma": lambda: tf.VaultGemmaConfig(num_hidden_layers=3, head_dim=16, sliding_window=5,
                                              query_pre_attn_scalar=16,
                                              attn_logit_softcapping=5.0,
                                              final_logit_softcapping=30.0, bos_token_id=1,
                                              eos_token_id=2, pad_token_id=0, **SIZES),
    "olmo": lambda: tf.OlmoConfig(num_hidden_layers=2, attention_bias=True, pad_token_id=0,
                                  clip_qkv=0.3, bos_token_id=1, eos_token_id=2, **SIZES),
    "iquestcoder": lambda: tf.IQuestCoderConfig(num_hidden_layers=2, head_dim=16,
                                                bos_token_id=1, eos_token_id=2, **SIZES),
    "cohere": lambda: tf.CohereConfig(num_hidden_layers=2, logit_scale=0.5, attention_bias=True,
                                      bos_token_id=1, eos_token_id=2, **SIZES),
    # head_dim 32: RoPE on 16 features (rotate-half), in GroupQueryAttention's do_rotary
    "glm4_moe": lambda: tf.Glm4MoeConfig(
        num_hidden_layers=2, head_dim=32, moe_intermediate_size=32, n_routed_experts=6,
        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
        use_qk_norm=True, attention_bias=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        **SIZES),
    "ernie4_5_moe": lambda: tf.Ernie4_5_MoeConfig(
        num_hidden_layers=2, head_dim=16, moe_intermediate_size=32, moe_num_experts=6, moe_k=2,
        moe_num_shared_experts=1, use_bias=True, bos_token_id=1, eos_token_id=2, **SIZES),
    "minimax_m2": lambda: tf.MiniMaxM2Config(
        num_hidden_layers=2, head_dim=32, rotary_dim=16, num_local_experts=6,
        num_experts_per_tok=2, bos_token_id=1, eos_token_id=2,
        **(SIZES | {"intermediate_size": 32})),
    "hyperclovax": lambda: tf.HyperCLOVAXConfig(
        num_hidden_layers=2, embedding_multiplier=3.0, attention_multiplier=0.3,
        residual_multiplier=0.4, logits_scaling=2.5, bos_token_id=1, eos_token_id=2, **SIZES),
    # Qwen3.5: delta-rule layers (unfused projections) and a gated softmax layer, multimodal
    # RoPE sections read as text positions; its mixture of experts in every layer
    "qwen3_5_text": lambda: tf.Qwen3_5TextConfig(
        num_hidden_layers=4, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8, rope_parameters=dict(QWEN3_5_ROPE),
        bos_token_id=1, eos_token_id=2, **SIZES),
    "qwen3_5_moe_text": lambda: tf.Qwen3_5MoeTextConfig(
        num_hidden_layers=4, head_dim=16, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8, num_experts=6, num_experts_per_tok=2,
        rope_parameters=dict(QWEN3_5_ROPE), bos_token_id=1, eos_token_id=2,
        **{k: v for k, v in SIZES.items() if k != "intermediate_size"}),
    "mellum": lambda: tf.MellumConfig(
        num_hidden_layers=2, head_dim=16, moe_intermediate_size=32, num_experts=6,
        num_experts_per_tok=2, sliding_window=6, layer_types=["sliding_attention",
                                                              "full_attention"],
        mlp_layer_types=["dense", "sparse"], bos_token_id=1, eos_token_id=2, **SIZES),
    "phimoe": lambda: tf.PhimoeConfig(num_hidden_layers=2, num_local_experts=6,
                                      sliding_window=6, attention_bias=True, lm_head_bias=True,
                                      router_jitter_noise=0.1, **SIZES),
    # the last layer's attention output bias (dense_bias), half of each head rotated
    "gpt_neox_japanese": lambda: tf.GPTNeoXJapaneseConfig(
        hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_multiple_size=3,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5}, vocab_size=VOCAB, bos_token_id=1,
        eos_token_id=2),
    # post-norm blocks, no final norm, learned positions, a tied head
    "openai-gpt": lambda: tf.OpenAIGPTConfig(n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                             vocab_size=VOCAB, bos_token_id=1, eos_token_id=2),
    # q/k norms, a dense first layer (HYV3Config's default mlp_layer_types), then sigmoid
    # routing by score plus the selection bias, scaled, beside a shared expert
    "hy_v3": lambda: tf.HYV3Config(
        num_hidden_layers=3, head_dim=16, moe_intermediate_size=32, num_experts=6,
        num_experts_per_tok=2, router_scaling_factor=1.5, bos_token_id=1, eos_token_id=2,
        **SIZES),
    # weightless RMSNorms (embeddings, sublayers, q and k after RoPE), RoPE turned the other
    # way, a squared-ReLU MLP, the final logit softcap (15)
    "nanochat": lambda: tf.NanoChatConfig(num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
                                          pad_token_id=0, **SIZES),
    # sliding RoPE layers and a full NoPE one, four norms per block, a router choosing by
    # logit plus the correction bias, weighing by sigmoid, renormalised, a shared expert
    "kolibri1": lambda: tf.Kolibri1Config(
        num_hidden_layers=3, head_dim=16, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_experts=6, num_experts_per_tok=2,
        norm_topk_prob=True, sliding_window=6, layer_types=[
            "sliding_attention", "full_attention", "sliding_attention"], bos_token_id=1,
        eos_token_id=2, **{k: v for k, v in SIZES.items() if k != "intermediate_size"}),
    # DeepSeek-V3's grouped sigmoid routing under Qwen3's attention, a dense first layer
    "dots1": lambda: tf.Dots1Config(
        num_hidden_layers=3, head_dim=16, moe_intermediate_size=32, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
        first_k_dense_replace=1, norm_topk_prob=True, bos_token_id=1, eos_token_id=2,
        **SIZES),
    # a softmax over the router's top 3 logits, SiLU-gated experts stored transposed, the
    # shared experts added unweighted (pad_token_id 0: AriaTextConfig's 2 is the prompt's eos)
    "aria_text": lambda: tf.AriaTextConfig(
        num_hidden_layers=2, moe_num_experts=5, moe_topk=3, moe_num_shared_experts=2,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
        **{k: v for k, v in SIZES.items() if k != "intermediate_size"}, intermediate_size=40),
    # q, k and v clamped (clip_qkv), bias-free LayerNorms, a softmax router's top 2
    # renormalised (p = 1) over packed experts
    "dbrx": lambda: tf.DbrxConfig(
        d_model=64, n_heads=4, n_layers=2, max_seq_len=64,
        attn_config={"kv_n_heads": 2, "clip_qkv": 0.5, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": 40, "moe_num_experts": 5, "moe_top_k": 2},
        vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    # each head's output times softplus of its g_proj row, RoPE per layer kind (the full
    # layer's on half of each head), a dense first layer, then sigmoid routing by score plus
    # the correction bias, scaled, beside a shared expert (one head count in every layer:
    # onnxruntime-genai keeps one; the test of Laguna below varies it)
    "laguna": lambda: tf.LagunaConfig(
        num_hidden_layers=3, head_dim=16, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_experts=6, num_experts_per_tok=2,
        moe_routed_scaling_factor=1.5, sliding_window=6, layer_types=[
            "sliding_attention", "full_attention", "sliding_attention"], bos_token_id=1,
        eos_token_id=2, **SIZES),
}
# the families whose genai folder grows its cache on ort-cpu too (the test below says why)
GROWING = ("diffllama", "llama4_text", "bloom", "lfm2", "lfm2_moe", "lfm3", "mpt", "qwen3_5_text",
           "qwen3_5_moe_text", "bamba", "granitemoehybrid", "nemotron_h", "mamba2",
           "olmo_hybrid", "mamba", "falcon_mamba", "jamba")
# the families whose ort-cpu folder has GroupQueryAttention apply what few others ask of it:
# softcap (Gemma 2, VaultGemma), learned sinks as head_sink (gpt-oss, the Granite SWA pair), a
# local window (Mistral, alternating in Gemma 2 and Cohere 2), RoPE on part of each head in
# the kernel (do_rotary: GLM, GLM-4 MoE, MiniMax-M2)
ON_ORT_CPU = ("gemma2", "vaultgemma", "gpt_oss", "granite_swa", "granitemoe_swa", "mistral",
              "cohere2", "glm", "glm4_moe", "minimax_m2")
PROMPTS = [[5, 7, 9, 11, 2, 3, 4], [8, 1, 3]]
# ort-cpu: GroupQueryAttention writes one cache buffer in place (right-padded batches);
# portable: standard ops and a growing cache (left-padded batches)
TARGETS = ("ort-cpu", "portable")
NEW = 12


def family_targets(deep: bool) -> dict[str, tuple[str, ...]]:
    """The targets each family is exported for: both with --deep (or for GROWING); else
    ort-cpu for ON_ORT_CPU and, for the others, the two targets in turn in CONFIGS order,
    each family the target its predecessor (among the others) did not get."""
    out, others = {}, 0
    for family in CONFIGS:
        if deep or family in GROWING:
            out[family] = TARGETS
        elif family in ON_ORT_CPU:
            out[family] = ("ort-cpu",)
        else:
            out[family] = (TARGETS[others % 2],)
            others += 1
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`exported`: a (family, target) pair per family_targets, each pair's tests on one
    xdist worker (the pair's folder is built once, not on both)."""
    if "exported" in metafunc.fixturenames:
        pairs = [(f, t) for f, targets in family_targets(metafunc.config.getoption("--deep"))
                 .items() for t in targets]
        metafunc.parametrize("exported", [
            pytest.param(p, id=f"{p[0]}-{p[1]}",
                         marks=pytest.mark.xdist_group(f"generation:{p[0]}-{p[1]}"))
            for p in pairs], indirect=True, scope="module")


@pytest.fixture(scope="module")
def exported(request, tmp_path_factory):
    family, target = request.param
    root = tmp_path_factory.mktemp(family)
    model = tf.AutoModelForCausalLM.from_config(CONFIGS[family](),
                                                attn_implementation="eager").eval()
    redraw(model, 11, unit_offset="gemma" in family)
    # a large embedding and a tied head would echo the last token (Gemma, BioGPT, XGLM scale
    # it by 8)
    if family in ("gemma2", "gpt2", "biogpt", "xglm", "gemma", "vaultgemma"):
        with torch.no_grad():
            model.get_input_embeddings().weight.mul_(0.05)
    folder = root / "hf"
    model.save_pretrained(folder)
    spec = root / f"{family}.attn"
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    assert main(["compile", str(spec), "--export", "genai", "--weights", str(folder),
                 "-o", str(root / "out"), "--target", target]) == 0
    # (a variant's key names its case; a hyphen is no name in the language)
    stack = model.config.model_type.replace("_text", "").replace("-", "_")
    return family, model, folder, spec, root / "out" / stack, target


def family_target(exported) -> str:
    return exported[5]


_TOKENS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _family_tokens(model) -> list[list[int]]:
    """`_transformers_tokens` of an `exported` family's model (never changed after the
    fixture), generated once for the two tests that compare with it."""
    if model not in _TOKENS:
        _TOKENS[model] = _transformers_tokens(model)
    return _TOKENS[model]


def _transformers_tokens(model) -> list[list[int]]:
    n = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (n - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in PROMPTS])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW,
                             do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[:, n:].tolist()


def test_attndsl_generate_gives_the_tokens_of_transformers(exported, capsys) -> None:
    _, model, _, _, folder, _ = exported
    want = _family_tokens(model)
    assert len({t for row in want for t in row}) >= 4, "a degenerate model proves little"
    argv = ["generate", str(folder), "--max-new", str(NEW), "--eos", "96", "--json"]
    for p in PROMPTS:
        argv += ["--prompt-ids", ",".join(map(str, p))]
    capsys.readouterr()
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["tokens"] == [row[: row.index(96) + 1] if 96 in row else row for row in want]


def test_onnxruntime_genai_runs_the_folder_as_it_is(exported) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    family, model, _, _, folder, _ = exported
    want = _family_tokens(model)
    config = json.loads((Path(folder) / "genai_config.json").read_text())
    assert sorted(p.name for p in Path(folder).iterdir()) == ["genai_config.json",
                                                               "model.onnx"]
    in_place = config["search"]["past_present_share_buffer"]
    # differential attention pairs each kv head's cached values with another's after the
    # cache, Llama 4's chunks are no window GroupQueryAttention knows, ALiBi's score biases
    # have no place in its kernel, and LFM2's convolution windows (and Qwen3.5's delta-rule
    # states) are no keys: these grow their cache instead of the in-place buffer
    assert in_place is (family_target(exported) == "ort-cpu"
                        and family not in GROWING)
    genai_generates(og, Path(folder), want)


def genai_generates(og, folder: Path, want: list[list[int]]) -> None:
    """onnxruntime-genai's greedy tokens from the folder for each of PROMPTS are `want`'s,
    up to and with the folder's eos."""
    config = json.loads((folder / "genai_config.json").read_text())
    eos = config["model"]["eos_token_id"]
    eos = set(eos) if isinstance(eos, list) else {eos}
    m = og.Model(str(folder))
    for prompt, expected in zip(PROMPTS, want, strict=True):
        tokens = genai_tokens(og, m, prompt, NEW)
        cut = next((i + 1 for i, t in enumerate(expected) if t in eos), len(expected))
        assert tokens == expected[:cut], folder


def genai_tokens(og, model, prompt: list[int], new: int) -> list[int]:
    """onnxruntime-genai's greedy new tokens (at most `new`) of `model` for one prompt."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens([prompt])
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens


def test_the_language_model_gives_the_logits_of_transformers(exported, request) -> None:
    """The language model (no cache) built for ort-cpu, once per family: on the family's
    ort-cpu pair, or its portable one when it has no other."""
    family, model, folder, spec, _, target = exported
    if target == "portable" and "ort-cpu" in family_targets(
            request.config.getoption("--deep"))[family]:
        pytest.skip("the same ort-cpu model as this family's ort-cpu pair checks")
    program = attndsl.load(spec)
    name = next(n for n in program if getattr(program[n].spec, "vocab", None))
    data = program[name].onnx_bytes(target="ort-cpu", weights=folder)
    ids = np.array([[5, 7, 9, 11, 2, 3, 4, 60, 61, 1, 0, 33]], dtype=np.int64)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids}
    if "position_ids" in {i.name for i in session.get_inputs()}:  # multimodal RoPE's streams
        feed["position_ids"] = text_streams(np.arange(ids.shape[1])[None], 3)
    got = session.run(None, feed)[0]
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    err = float(np.abs(got - want).max())
    assert err <= 1e-4 * max(1.0, float(np.abs(want).max())), (family, err)


def test_left_padded_prompts_give_the_logits_of_transformers(exported) -> None:
    """B = 2, the shorter prompt padded on the left: the exported folder's model (the
    growing cache, empty) against transformers' forward pass with the same attention_mask and
    position ids (as generate passes them), at every real token, within 1e-4."""
    family, model, _, _, folder, target = exported
    if target != "portable":
        pytest.skip("the in-place cache takes right-padded batches (the test above)")
    ids, mask, positions, got = _left_padded_logits(Path(folder) / "model.onnx")
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     position_ids=torch.from_numpy(positions)).logits.numpy()
    real = mask.astype(bool)
    if got.shape[-1] == want.shape[-1] + 1:  # a checkpoint without eos: the stop column
        assert (got[..., -1] == np.finfo(np.float32).min).all()
        got = got[..., :-1]
    err = float(np.abs(got[real] - want[real]).max())
    assert err <= 1e-4 * max(1.0, float(np.abs(want[real]).max())), (family, err)


def _left_padded_logits(model: Path):
    """PROMPTS left-padded into one batch: (input_ids, attention_mask, position_ids) and the
    logits of one call of the decoding model with an empty cache."""
    n = max(len(p) for p in PROMPTS)
    ids = np.array([[0] * (n - len(p)) + p for p in PROMPTS], dtype=np.int64)
    mask = (np.arange(n)[None] >= (n - np.array([len(p) for p in PROMPTS]))[:, None])
    mask = mask.astype(np.int64)
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rank = len(next(i for i in session.get_inputs() if i.name == "position_ids").shape)
    feed = {"input_ids": ids, "attention_mask": mask,
            "position_ids": text_streams(positions, rank)}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):  # empty; a fixed-size state: zeros
            feed[i.name] = np.zeros(first_past(2, i.shape), dtype=np.float32)
    return ids, mask, positions, session.run(["logits"], feed)[0]


def test_bench_decode_prints_a_side_by_side_table(tmp_path: Path, capsys, monkeypatch) -> None:
    """`bench --decode` on a checkpoint folder from benchmarks/make_llama.py: attndsl's model,
    onnxruntime-genai's builder model and transformers, each timed (no speed is asserted:
    BENCHMARKS.md records the measured table)."""
    import functools
    import runpy
    import sys

    from attndsl import bench_decode

    # the second run reuses the first's bandwidths (each reads 512 MiB): its table is checked
    monkeypatch.setattr(bench_decode, "measure_bandwidth",
                        functools.cache(bench_decode.measure_bandwidth))

    root = Path(__file__).parent.parent
    folder = tmp_path / "llama"
    # the script as its command line runs it, in this process (which has torch and
    # transformers loaded: a new one takes seconds to import them); its seed left unchanged
    script = root / "benchmarks" / "make_llama.py"
    with monkeypatch.context() as m, torch.random.fork_rng():
        m.setattr(sys, "argv", [str(script), str(folder), "--hidden", "64", "--layers", "2",
                                "--heads", "4", "--kv-heads", "2", "--intermediate", "96",
                                "--vocab", "97", "--context", "256"])
        runpy.run_path(str(script), run_name="__main__")
    assert "LlamaForCausalLM" in capsys.readouterr().out
    assert main(["bench", str(folder), "--decode", "--prompts", "5,9", "--new", "3",
                 "--repeat", "1", "--json", "--precisions", "fp32,int4"]) == 0
    report = json.loads(capsys.readouterr().out)
    backends = {r["backend"] for r in report["rows"]}
    assert {"attndsl (ort-cpu, fp32)", "attndsl (ort-cpu, int4)",
            "transformers generate"} <= backends
    timed = [r for r in report["rows"] if not r["note"]]
    assert {r["prompt"] for r in timed} == {5, 9}
    if importlib.util.find_spec("onnxruntime_genai"):  # attndsl's folder made and timed
        assert {f"attndsl folder in onnxruntime-genai ({p})" for p in ("fp32", "int4")} <= \
            {r["backend"] for r in timed}
    assert all(r["first_token_ms"] > 0 and r["ms_per_token"] > 0 for r in timed)
    assert report["facts"]["bandwidth_gb_s"] > 0
    # a model this small sits in the CPU's cache: its floor is the cache's bandwidth at its
    # size, not DRAM's (which the ONNX backends beat, 0.7x, when the floor was DRAM's)
    from attndsl.bench_decode import last_level_cache

    if last_level_cache():
        assert report["facts"]["in_cache"]
        assert all(r["ms_per_token"] >= 0.5 * r["floor_ms"] for r in timed)
    assert main(["bench", str(folder), "--decode", "--prompts", "5", "--new", "3",
                 "--repeat", "1", "--baselines", "transformers"]) == 0
    table = capsys.readouterr().out
    assert "first token ms" in table and "attndsl (ort-cpu, fp32)" in table
    assert ("no DRAM floor applies" in table) == bool(last_level_cache())
    assert main(["bench", str(tmp_path), "--decode"]) == 2  # no checkpoint there


def test_past_original_max_position_phi3s_generate_reencodes_and_attndsl_does_not(
        tmp_path: Path) -> None:
    """docs/LANGUAGE.md (Decoding): with longrope, attndsl's decoding model rotates each call's
    keys with the factors of its own length and keeps the cached ones, so its logits equal one
    pass up to m = original_max_position keys and differ after; transformers' Phi-3 `generate`
    re-encodes the sequence when it reaches m + 1 tokens, so its tokens are one pass's."""
    m = 8
    config = tf.Phi3Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                           max_position_embeddings=64, original_max_position_embeddings=m,
                           rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                            "short_factor": [1.0] * 8,
                                            "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0,
                                                            64.0, 128.0],
                                            "original_max_position_embeddings": m},
                           pad_token_id=0, tie_word_embeddings=False)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 3, unit_offset=False)
    model.save_pretrained(tmp_path / "hf")
    prompt, new = [5, 7, 9, 11, 2], 9  # crosses m = 8 at the fourth new token
    with torch.no_grad():
        tokens = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                                min_new_tokens=new, pad_token_id=0)[0].tolist()
        # one pass over the first n tokens: longrope's factors follow n
        one_pass = {n: model(torch.tensor([tokens[:n]])).logits[0, -1].numpy()
                    for n in range(len(prompt), len(tokens) + 1)}
    assert tokens[len(prompt):] == [int(one_pass[n].argmax())
                                    for n in range(len(prompt), len(tokens))]

    spec = tmp_path / "phi3.attn"
    assert main(["import", str(tmp_path / "hf"), "-o", str(spec)]) == 0
    layer = attndsl.load(spec)["phi3"]
    session = ort.InferenceSession(layer.decoder_bytes(target="portable",
                                                       weights=tmp_path / "hf"))
    past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
            for i in session.get_inputs() if i.name.startswith("past_key_values.")}
    presents = [o.name for o in session.get_outputs()][1:]
    step = np.array([prompt])
    for n in range(len(prompt), len(tokens) + 1):
        logits, *kv = session.run(None, {"input_ids": step,
                                         "attention_mask": np.ones((1, n), np.int64),
                                         "position_ids": np.arange(n - step.shape[1], n)[None],
                                         **past})
        past = {p.replace("present.", "past_key_values."): v for p, v in zip(presents, kv,
                                                                              strict=True)}
        err = float(np.abs(logits[0, -1] - one_pass[n]).max())
        if n <= m:
            assert err < 1e-3, (n, err)
        else:  # the keys cached before m keep their short rotation
            assert err > 1e-2, (n, err)
        if n < len(tokens):
            step = np.array([[tokens[n]]])


def test_a_token_id_outside_the_vocabulary_is_refused_before_writing(tmp_path: Path,
                                                                     capsys) -> None:
    """onnxruntime-genai refuses a folder whose eos_token_id is not a token of the model (as
    SmolLM3Config's default, 128001, in a tiny vocabulary): the export says so and writes
    nothing; --eos overrides the config's."""
    config = tf.LlamaConfig(num_hidden_layers=1, eos_token_id=128001, **SIZES)
    tf.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "hf")
    spec = tmp_path / "m.attn"
    assert main(["import", str(tmp_path / "hf"), "-o", str(spec)]) == 0
    out = tmp_path / "out"
    argv = ["compile", str(spec), "--export", "genai", "--weights", str(tmp_path / "hf"),
            "-o", str(out)]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "eos_token_id in config.json: token 128001 is not in the vocabulary" in err, err
    assert "pass --eos" in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())
    assert main([*argv, "--eos", "96"]) == 0
    folder = next(out.iterdir())
    assert json.loads((folder / "genai_config.json").read_text())["model"]["eos_token_id"] == 96


def test_llama4_temperature_reads_the_real_positions_of_a_left_padded_row(tmp_path: Path) -> None:
    """Llama 4's NoPE layers scale each query by 1 + a ln(1 + floor((p + 1) / f)): with f = 2
    it changes every other token. transformers' left-padded batch reads p as the slot, padding
    included, and so differs from its own run of the row alone; attndsl's decoding form reads
    the row's positions and gives that unpadded run (docs/CHECKPOINTS.md)."""
    config = tf.Llama4TextConfig(
        num_hidden_layers=2, head_dim=16, intermediate_size_mlp=80, num_local_experts=3,
        num_experts_per_tok=1, attention_chunk_size=4, no_rope_layer_interval=2,
        floor_scale=2, attn_scale=0.5, bos_token_id=1, eos_token_id=2, pad_token_id=0, **SIZES)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    model.save_pretrained(tmp_path / "hf")
    spec = tmp_path / "l4.attn"
    assert main(["import", str(tmp_path / "hf"), "-o", str(spec)]) == 0
    assert main(["compile", str(spec), "--export", "genai", "--weights", str(tmp_path / "hf"),
                 "-o", str(tmp_path / "out"), "--target", "portable"]) == 0
    ids, mask, positions, got = _left_padded_logits(tmp_path / "out" / "llama4" / "model.onnx")
    short = PROMPTS[1]
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([short])).logits[0].numpy()
        batched = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        position_ids=torch.from_numpy(positions)).logits[1, -len(short):]
    bound = 1e-4 * max(1.0, float(np.abs(alone).max()))
    assert float(np.abs(got[1, -len(short):] - alone).max()) <= bound
    assert float(np.abs(batched.numpy() - alone).max()) > 100 * bound, \
        "transformers now reads real positions: the quirk documented is gone"


# by default each latent-attention checkpoint is decoded for one target (two each; portable
# takes the two quicker to export), and MiMo-V2-Flash for ort-cpu; both with --deep
LATENT_TARGETS = {"v3": ("ort-cpu",), "v32": ("portable",), "glm_moe_dsa": ("ort-cpu",),
                  "v2": ("portable",), "youtu": ("portable",),
                  "glm4_moe_lite": ("ort-cpu",), "minicpm3": ("portable",),
                  "axk1": ("ort-cpu",), "longcat_flash": ("portable",)}


@pytest.mark.parametrize(("target", "version"), [(t, v) for v, ts in LATENT_TARGETS.items()
                                                 for t in (TARGETS if DEEP[0] else ts)])
def test_deepseek_generates_as_transformers(tmp_path: Path, target: str, version: str,
                                            capsys) -> None:
    """DeepSeek-V3 (latent attention, group-limited sigmoid routing, a dense first layer),
    V3.2 (V3's, over the keys its lightning indexer picks, caching its index keys too),
    V2-Lite's form (no q bottleneck, greedy softmax routing), LongCat-Flash (two sublayers
    a layer and a shortcut mixture with identity experts), Youtu-LLM (V3's attention,
    every MLP dense), GLM-4.7-Flash (V3's, its dense layer named by mlp_layer_types) and
    MiniCPM3 (V2's attention with rotate-half RoPE, dense MLPs, muP's embedding, residual and
    logit scales) and A.X-K1 (V3's, the mixture's output RMS-normed):
    `compile --export onnx --decode` and `attndsl generate` give transformers' greedy tokens
    for a left-padded batch, and the decoding model its logits, caching the latent alone
    (20 + 8 values per token). onnxruntime-genai keeps a key and a value cache per layer:
    the genai export refuses it with that reason (docs/CHECKPOINTS.md)."""
    attention = dict(num_hidden_layers=2, kv_lora_rank=20, qk_rope_head_dim=8,
                     qk_nope_head_dim=16, v_head_dim=16, bos_token_id=1, eos_token_id=2,
                     **(SIZES | {"num_key_value_heads": 4}))
    common = dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                  n_shared_experts=1, **attention)
    config = {
        "v3": lambda: tf.DeepseekV3Config(n_group=4, topk_group=2, q_lora_rank=32,
                                          first_k_dense_replace=1, **common),
        # V3.2: each query's latent attention over the 3 keys its indexer scores highest
        "v32": lambda: tf.DeepseekV32Config(n_group=4, topk_group=2, q_lora_rank=32,
                                            first_k_dense_replace=1, index_n_heads=8,
                                            index_head_dim=16, index_topk=3, **common),
        # GLM-5: V3.2's, its indexer's RoPE interleaved (decoded by `gather` on ort-cpu)
        "glm_moe_dsa": lambda: tf.GlmMoeDsaConfig(
            q_lora_rank=32, first_k_dense_replace=1, index_n_heads=8, index_head_dim=16,
            index_topk=3, **common),
        "v2": lambda: tf.DeepseekV2Config(q_lora_rank=None, first_k_dense_replace=1, **common),
        "youtu": lambda: tf.YoutuConfig(q_lora_rank=32, **attention),
        "glm4_moe_lite": lambda: tf.Glm4MoeLiteConfig(
            q_lora_rank=32, n_group=2, topk_group=1, mlp_layer_types=["sparse", "dense"],
            **common),
        # scale_emb 1.5 (not 12): a large embedding with a tied head echoes the last token
        "minicpm3": lambda: tf.MiniCPM3Config(q_lora_rank=32, scale_emb=1.5, dim_model_base=32,
                                              **attention),
        "axk1": lambda: tf.AXK1Config(q_lora_rank=32, n_group=4, topk_group=2,
                                      first_k_dense_replace=1, **common),
        # one layer of two sublayers (two blocks, two caches), the shortcut mixture's
        # softmax over 4 SwiGLU and 2 identity experts
        "longcat_flash": lambda: tf.LongcatFlashConfig(
            num_layers=1, hidden_size=64, ffn_hidden_size=96, expert_ffn_hidden_size=32,
            num_attention_heads=4, n_routed_experts=4, zero_expert_num=2, moe_topk=2,
            q_lora_rank=32, kv_lora_rank=20, qk_rope_head_dim=8, head_dim=8,
            qk_nope_head_dim=16, v_head_dim=16, vocab_size=VOCAB, bos_token_id=1,
            eos_token_id=2)}[version]()
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    out = refused_by_genai_then_decoding(model, tmp_path, target, capsys,
                                         "caches one latent row")
    name = version if version in ("youtu", "glm4_moe_lite", "minicpm3", "axk1",
                                  "longcat_flash", "glm_moe_dsa") else \
        f"deepseek_{version}"
    decoder = out / f"{name}.decode.onnx"
    caches = {i.name: i.shape for i in ort.InferenceSession(str(decoder)).get_inputs()
              if i.name.startswith("past_key_values.")}
    index = {f"past_key_values.{i}.index_key": ["batch", 1, "past_length", 16]
             for i in range(2)} if version in ("v32", "glm_moe_dsa") else {}  # the indexer's
    assert caches == {f"past_key_values.{i}.key": ["batch", 1, "past_length", 20 + 8]
                      for i in range(2)} | index  # the latent and the RoPE key alone
    generates_as(model, decoder, capsys)


@pytest.mark.parametrize("target", TARGETS if DEEP[0] else ("ort-cpu",))
def test_mimo_v2_flash_generates_as_transformers(tmp_path: Path, target: str, capsys) -> None:
    """MiMo-V2-Flash (value heads narrower than its query/key heads, values scaled, sliding
    layers with twice the kv heads and sinks beside a full layer without):
    `compile --export onnx --decode` and `attndsl generate` give transformers' greedy tokens
    for a left-padded batch, and the decoding model its logits. onnxruntime-genai keeps one
    head size and count for every layer's key and value caches: the genai export refuses it
    with that reason (docs/CHECKPOINTS.md)."""
    config = tf.MiMoV2FlashConfig(
        num_hidden_layers=3, head_dim=24, v_head_dim=16, moe_intermediate_size=32,
        attention_value_scale=0.5, n_routed_experts=6,
        num_experts_per_tok=2, sliding_window=6, bos_token_id=1, eos_token_id=2,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        **(SIZES | {"num_key_value_heads": 1}))
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    out = refused_by_genai_then_decoding(model, tmp_path, target, capsys)
    decoder = out / "mimo_v2_flash.decode.onnx"
    caches = {i.name: i.shape[1::2] for i in ort.InferenceSession(str(decoder)).get_inputs()
              if i.name.startswith("past_key_values.")}
    assert caches == {"past_key_values.0.key": [2, 24], "past_key_values.0.value": [2, 16],
                      "past_key_values.1.key": [1, 24], "past_key_values.1.value": [1, 16],
                      "past_key_values.2.key": [2, 24], "past_key_values.2.value": [2, 16]}
    generates_as(model, decoder, capsys)


def test_laguna_with_a_head_count_per_layer_generates_as_transformers(tmp_path: Path,
                                                                    capsys) -> None:
    """Laguna with 4 and 6 query heads in its layers (num_attention_heads_per_layer):
    `compile --export onnx --decode` and `attndsl generate` give transformers' greedy tokens
    for a left-padded batch, and the decoding model its logits. onnxruntime-genai keeps one
    head count for every layer: the genai export refuses it with that reason
    (docs/CHECKPOINTS.md)."""
    config = tf.LagunaConfig(
        num_hidden_layers=3, head_dim=16, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_experts=6, num_experts_per_tok=2,
        num_attention_heads_per_layer=[4, 6, 4], sliding_window=6, layer_types=[
            "sliding_attention", "full_attention", "full_attention"], bos_token_id=1,
        eos_token_id=2, **SIZES)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    out = refused_by_genai_then_decoding(model, tmp_path, "portable", capsys)  # left padding
    generates_as(model, out / "laguna.decode.onnx", capsys)


def refused_by_genai_then_decoding(model, tmp_path: Path, target: str, capsys,
                                    why: str = "one head size and head count in every "
                                               "layer") -> Path:
    """`model`'s checkpoint imported: the genai export refuses it saying `why` (its per-layer
    head sizes or counts), leaving nothing; `compile --export onnx --decode` for `target`
    writes the decoding model into the folder returned."""
    folder, spec, out = tmp_path / "hf", tmp_path / "model.attn", tmp_path / "out"
    model.save_pretrained(folder)
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    capsys.readouterr()
    assert main(["compile", str(spec), "--export", "genai", "--weights", str(folder),
                 "-o", str(out)]) == 2
    assert why in capsys.readouterr().err
    assert not out.exists()
    assert main(["compile", str(spec), "--export", "onnx", "--decode", "--weights",
                 str(folder), "-o", str(out), "--target", target]) == 0
    return out


def generates_as(model, decoder: Path, capsys) -> None:
    """`attndsl generate` with the decoding model `decoder` gives transformers' greedy tokens
    of `model` for PROMPTS (a left-padded batch), and one call its logits at every real
    token within 1e-4 x max(1, max |ref|)."""
    want = _transformers_tokens(model)
    assert len({t for row in want for t in row}) >= 4, "a degenerate model proves little"
    argv = ["generate", str(decoder), "--max-new", str(NEW), "--json"]
    for p in PROMPTS:
        argv += ["--prompt-ids", ",".join(map(str, p))]
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == want
    ids, mask, positions, got = _left_padded_logits(decoder)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    position_ids=torch.from_numpy(positions)).logits.numpy()
    real = mask.astype(bool)
    err = float(np.abs(got[real] - ref[real]).max())
    assert err <= 1e-4 * max(1.0, float(np.abs(ref[real]).max())), err
