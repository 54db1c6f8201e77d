"""Tiny configs for the coverage sweep (tools/coverage.py): each model type's config class with
its size fields shrunk generically (the names below, under each class's own spellings through
its `attribute_map`), then the per-type overrides where the generic shrink does not give a
valid tiny model. Data, mostly: nothing here downloads."""

from __future__ import annotations

import dataclasses
import inspect

import transformers as tf
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

VOCAB = 97

# generic field -> its tiny value; set only where the config class has the field and its
# default is not None (None usually means "off": no sliding window, no q bottleneck), except
# the fields in DERIVED, whose None means "derived from the others"
SIZES = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": VOCAB,
    "max_position_embeddings": 128, "n_positions": 128, "n_ctx": 128,
    "intermediate_size_mlp": 96, "ffn_hidden_size": 96, "n_inner": 96, "d_ff": 96,
    "ffn_dim": 96, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
    "expert_intermediate_size": 32, "num_experts": 4, "num_local_experts": 4,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2,
    "n_shared_experts": 1, "num_shared_experts": 1, "n_group": 2, "topk_group": 1,
    "first_k_dense_replace": 1, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16, "v_head_dim": 16, "qk_head_dim": 24, "sliding_window": 5,
    "attention_chunk_size": 5, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 8, "rotary_dim": 8,
    "num_kv_heads": 2, "multi_query_group_num": 2, "kv_channels": 16,
    "embedding_size": 64, "d_model": 64, "d_kv": 16, "num_layers": 2, "num_heads": 4,
    "decoder_layers": 2, "decoder_attention_heads": 4, "decoder_ffn_dim": 96,
    "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 96,
    "state_size": 16, "ssm_state_size": 16, "mamba_d_state": 16, "mamba_n_heads": 4,
    "mamba_d_head": 32, "mamba_n_groups": 1, "mamba_chunk_size": 16, "chunk_size": 16,
    "conv_kernel": 4, "mamba_d_ssm": 128, "time_step_rank": 8, "n_heads": 4, "dim": 64,
    "index_n_heads": 2, "index_head_dim": 16, "index_topk": 4, "o_groups": 2, "o_lora_rank": 16,
}
DERIVED = {"num_key_value_heads", "head_dim"}

# model type -> fields set after the generic shrink (a value of None removes the field)
OVERRIDES: dict[str, dict] = {
    "deepseek_v2": {"num_experts_per_tok": 2},
    # DeepSeek-V3.2's indexer: with 2 heads a quarter of the keys score exactly 0 (every
    # head's ReLU at 0), and torch.topk orders such ties as it finds them (attndsl: the
    # earlier key first); 8 heads make them rare, as DeepSeek's 64 do
    "deepseek_v32": {"index_n_heads": 8}, "glm_moe_dsa": {"index_n_heads": 8},
    # Gemma 4's per-layer inputs: an embedding of 262,144 rows by default
    "gemma4_text": {"vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 8},
    # Gemma 3n: its last layers reuse earlier layers' keys and values, and transformers wants
    # a producing layer of every kind they use: four layers, the last two sharing
    "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2,
                     "layer_types": ["sliding_attention", "full_attention"] * 2,
                     "vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 8,
                     "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0],
                     "intermediate_size": 96},
    "bert": {"is_decoder": True},  # BertLMHeadModel: a decoder (bidirectional otherwise)
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "mamba2": {"head_dim": 32, "n_groups": 2},
    # Bamba: an attention layer among its Mamba2 layers (transformers' cache cannot count the
    # tokens of a stack of Mamba2 layers alone), B and C in two groups
    "bamba": {"attn_layer_indices": [1], "num_hidden_layers": 3, "mamba_n_groups": 2},
    "granitemoehybrid": {"layer_types": ["mamba", "attention", "mamba"], "num_hidden_layers": 3,
                         "mamba_n_groups": 2, "position_embedding_type": "rope"},
    "reformer": {"is_decoder": True, "axial_pos_embds_dim": [32, 32],
                 "axial_pos_shape": [8, 16]},
    # DBRX's clip_qkv (null by default) is a clamp transformers' forward cannot run without
    "dbrx": {"attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
             "ffn_config": {"ffn_hidden_size": 96, "moe_num_experts": 4, "moe_top_k": 2}},
    "zaya": {"num_experts_per_tok": 1},  # ZAYA's only routing
    "mimo_v2_flash": {"head_dim": 24},  # 0.334 of 16 features would rotate an odd number
    # None by default: no experts
    "dots1": {"n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2},
    # its rotary embedding reads rope_parameters per layer type (the checkpoints': RoPE at
    # 50000 on the sliding layers, none on the full ones); the default has no such entries
    "cohere_compass_text": {"layer_types": ["sliding_attention", "full_attention"],
                            "rope_parameters": {"sliding_attention": {"rope_type": "default",
                                                                      "rope_theta": 50000.0},
                                                "full_attention": None}},
    # its sliding layers' sizes come from swa_* fields the generic shrink does not know (64
    # heads of rank 1024 otherwise), and its shared experts' width is spelled differently
    "dots3_note_text": {"swa_num_attention_heads": 4, "swa_num_key_value_heads": 4,
                        "swa_q_lora_rank": 32, "swa_kv_lora_rank": 16, "swa_head_dim": 32,
                        "swa_qk_nope_head_dim": 24, "swa_v_head_dim": 16,
                        "shared_experts_intermediate_size": 48},
    # its indexed layers' indexer fields default to None (3 blocks of 4, top 2 kept)
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16,
                       "indexer_budget": 8, "indexer_compress_ratio": 4},
    # one shared transformer block tied across its hybrid layers: two of them at least
    "zamba": {"num_hidden_layers": 5,
              "layers_block_type": ["linear_attention", "linear_attention", "hybrid",
                                    "linear_attention", "hybrid"]},
    # four layers: sliding ones and a full NoPE one, a dense MLP before the mixtures
    "beam": {"num_hidden_layers": 4, "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"]},
    # 256 identity experts by default beside the 4 MLP experts the shrink leaves (its RoPE's
    # frequencies are head_dim's, which must be qk_rope_head_dim's 8)
    "longcat_flash": {"zero_expert_num": 3, "head_dim": 8},
    # Lfm2MoeConfig has no default layer_types: transformers builds no model without them
    "lfm2_moe": {"num_hidden_layers": 3, "num_dense_layers": 1,
                 "layer_types": ["conv", "full_attention", "conv"]},
}

# model types transformers builds only through another class, or that are out of scope
# before anything is built (the reason the table gives)
_ENCODER = "an encoder (bidirectional; causal only as a BERT-style `is_decoder`)"
_SPEECH = "speech or music: a decoder of audio codes or transcripts"
OUT_OF_SCOPE: dict[str, str] = {
    **dict.fromkeys(["bert-generation", "big_bird", "camembert", "data2vec-text", "electra",
                     "ernie", "megatron-bert", "rembert", "roberta", "roberta-prelayernorm",
                     "roc_bert", "roformer", "xlm-roberta", "xlm-roberta-xl", "xmod"], _ENCODER),
    "xlm": "an encoder (masked language model; causal only with `causal`)",
    **dict.fromkeys(["whisper", "musicgen", "musicgen_melody", "moshi",
                     "moss_transcribe_diarize"], _SPEECH),
    "trocr": "the text decoder of a vision encoder-decoder (cross-attention to image features)",
    "gemma3": "multimodal wrapper (a vision tower; its language model: gemma3_text)",
    "fuyu": "multimodal: image patches projected into the language model's input",
    "gemma4": "multimodal wrapper (vision and audio towers; its language model: gemma4_text)",
    "gemma4_unified": "multimodal wrapper (vision and audio towers; its language model: "
                      "gemma4_unified_text)",
    **dict.fromkeys(["gemma4_assistant", "gemma4_unified_assistant"],
                    "a drafter for assisted decoding: its forward takes the target model's "
                    "hidden states and shared keys and values, not token ids"),
}


def config_class(model_type: str) -> type:
    return getattr(tf, CONFIG_MAPPING_NAMES[model_type])


def _params(cls: type) -> dict[str, object]:
    """The config class's own fields with their defaults (dataclass fields or __init__'s)."""
    if dataclasses.is_dataclass(cls):
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = None
        return out
    return {name: (None if p.default is inspect.Parameter.empty else p.default)
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name not in ("self", "kwargs", "args")}


def _default(cls: type, fixed: dict):
    """The class's default config; with the overrides where it refuses its own defaults."""
    try:
        return cls()
    except Exception:
        return cls(**fixed)


def _read(config, field: str, fallback):
    """config.field, or `fallback` where the config refuses to give one value for it (Gemma
    4's per-layer attributes read globally raise)."""
    try:
        return getattr(config, field, fallback)
    except RuntimeError:
        return fallback


def _shrunk(cls: type, layers: int, fixed: dict) -> dict[str, object]:
    """The generic shrink of `cls`'s fields, at `layers` layers (`fixed`: the overrides,
    which its default config takes too)."""
    params = _params(cls)
    default = _default(cls, fixed)
    alias = getattr(cls, "attribute_map", {}) or {}
    kwargs: dict[str, object] = {}
    for name, value in SIZES.items():
        field = alias.get(name, name)
        if field not in params or field in kwargs:
            continue
        current = _read(default, field, params[field])
        if current is None and name not in DERIVED:
            continue
        if isinstance(current, list) and current and all(type(v) is int for v in current):
            kwargs[field] = [value] * layers  # a size per layer
            continue
        if isinstance(current, bool) or (current is not None and not isinstance(current, int)):
            continue  # a flag, a list or a string spelled like a size: not a size here
        kwargs[field] = layers if name in ("num_hidden_layers", "num_layers", "n_layer",
                                           "decoder_layers", "encoder_layers") else value
    if "kv_lora_rank" in params and "num_key_value_heads" in kwargs:  # latent attention
        kwargs["num_key_value_heads"] = kwargs.get("num_attention_heads", 4)  # expands to all
    depth = getattr(default, "num_hidden_layers", None)
    for field in params:  # per-layer lists at the default depth: cut to ours
        value = _read(default, field, None)
        if isinstance(value, list) and depth and len(value) == depth and field != "layer_types":
            kwargs[field] = value[:layers]
    for field in params:  # token ids past the tiny vocabulary
        value = _read(default, field, None)
        if field.endswith("_token_id") and isinstance(value, int) and value >= VOCAB:
            kwargs[field] = {"bos_token_id": 1, "eos_token_id": 2}.get(field, 0)
        elif field.endswith("_token_id") and isinstance(value, list):
            kwargs[field] = [v if v < VOCAB else 2 for v in value]
    return kwargs


def tiny_config(model_type: str):
    """A tiny config of `model_type`: the generic shrink with its overrides, at the fewest
    layers (2 to 8) whose `layer_types` has every kind the default config's has."""
    cls = config_class(model_type)
    fixed = OVERRIDES.get(model_type, {})
    kinds = set(getattr(_default(cls, fixed), "layer_types", None) or ())
    config = None
    for layers in range(2, 9):
        kwargs = {**_shrunk(cls, layers, fixed), **fixed}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        config = cls(**kwargs)
        if set(getattr(config, "layer_types", None) or ()) >= kinds:
            break
    return config
