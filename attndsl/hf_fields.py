"""Every config.json field, as `attndsl import` takes it: read (the import looks at it and the
spec says what it means), inert (it does not change what the imported stack computes: the
reason is in INERT), or refused (set to a value attndsl has no form for: REFUSED names the
field and why). `Recorded` is the config as a dict that notes what the import read, so a field
that is none of these is reported rather than silently dropped."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .check.stacks import MAX_LAYERS
from .errors import Diagnostic, SpecError, UsageError
from .families import FAMILIES, Family, Refusal
from .hf_lacks import LACKS
from .mechanisms import MECHANISMS

__all__ = ["INERT", "REFUSED", "TRANSFORMERS_LAYER_TYPES", "TYPES", "Recorded", "inert_fields",
           "non_finite", "read_config", "read_json", "refusals", "type_problems",
           "unimported_kinds", "unknown_family"]

_DROPOUT = "dropout, which is off at inference"
_TOKENS = "a token id for generation and tokenization (genai_config.json takes eos, bos and pad)"
_INIT = "how untrained weights are drawn; a checkpoint brings its own"
_OUTPUTS = "what transformers returns, not what it computes"
_HEADS = "task heads (classification), outside the stack"

# field -> why it does not change what the imported stack computes, for every family
INERT: dict[str, str] = {
    "_name_or_path": "where the config was loaded from",
    "architectures": "the classes transformers builds around the stack; the import takes the "
                     "stack (and a language model's embedding and head) itself",
    "auto_map": "where transformers finds custom code; the import reads the config alone",
    "dtype": "the checkpoint's storage type; attndsl computes in `compile --dtype`",
    "torch_dtype": "the checkpoint's storage type; attndsl computes in `compile --dtype`",
    "transformers_version": "the version that wrote the file",
    "model_type": "the family, which chooses the import (read first)",
    "id2label": _HEADS, "label2id": _HEADS, "num_labels": _HEADS, "problem_type": _HEADS,
    "classifier_dropout": _DROPOUT,
    "output_attentions": _OUTPUTS, "output_hidden_states": _OUTPUTS, "return_dict": _OUTPUTS,
    "use_return_dict": _OUTPUTS,
    "use_cache": "whether transformers keeps a KV cache; attndsl's decoding form always does",
    "cache_implementation": "how transformers stores its KV cache: the same values",
    "attn_implementation": "which attention kernel transformers runs: the same values",
    "_attn_implementation": "which attention kernel transformers runs: the same values",
    "_attn_implementation_autoset": "which attention kernel transformers runs: the same values",
    "chunk_size_feed_forward": "computes the FFN in chunks of tokens: the same values",
    "initializer_range": _INIT, "initializer_factor": _INIT,
    "bos_token_id": _TOKENS, "eos_token_id": _TOKENS, "pad_token_id": _TOKENS,
    "sep_token_id": _TOKENS, "decoder_start_token_id": _TOKENS,
    "attention_dropout": _DROPOUT, "hidden_dropout": _DROPOUT, "attn_pdrop": _DROPOUT,
    "embd_pdrop": _DROPOUT, "resid_pdrop": _DROPOUT, "dropout_rate": _DROPOUT,
    "embedding_dropout": _DROPOUT, "residual_dropout": _DROPOUT,
    "hidden_dropout_prob": _DROPOUT, "attention_probs_dropout_prob": _DROPOUT,
    "max_position_embeddings": "the longest sequence trained on: RoPE is computed at any "
                               "position (dynamic, yarn and longrope scalings read it)",
    "n_positions": "the size of GPT-J's RoPE table: RoPE is computed at any position",
    "is_encoder_decoder": "an encoder-decoder: the import writes its encoder and decoder",
    "pretraining_tp": "slices of the projections used during tensor-parallel pretraining: the "
                      "same values",
    "slow_but_exact": "BLOOM's sliced matmul under pretraining_tp: the same values up to "
                      "rounding",
    "type_vocab_size": "BERT's token-type embeddings, added before the stack",
    "vocab_size": "the token embedding and LM head (read for a language model's head)",
    "tie_word_embeddings": "the LM head (read for a language model's head)",
    "num_decoder_layers": "T5's decoder: the import takes the encoder stack",
    "scale_decoder_outputs": "T5's decoder: the import takes the encoder stack",
    "is_gated_act": "derived by T5Config from feed_forward_proj, which the import reads",
    "dense_act_fn": "derived by T5Config from feed_forward_proj, which the import reads",
    "_sliding_window_pattern": "derived by Gemma3TextConfig into layer_types, which the import "
                               "reads",
    # each mechanism module's own (`Mechanism.hf_inert`)
    **{field: why for m in MECHANISMS.values() for field, why in m.hf_inert.items()},
}

# field -> (when it is refused, why), for every family (a family's own: `Family.refused`)
REFUSED: dict[str, Refusal] = {
    "quantization_config": (lambda v: v is not None,
                            "quantized checkpoints are not imported yet: dequantize first"),
    "pruned_heads": (bool, "pruned heads leave layers with different head counts"),
}


def inert_fields(family: Family) -> dict[str, str]:
    """Every field that does not change what `family`'s imported stack computes, and why."""
    return {**INERT, **family.inert}


def refusals(cfg: dict, family: Family) -> list[str]:
    """The problems of the refused fields that `cfg` sets, one line each."""
    out = []
    for key, (refused, why) in {**REFUSED, **family.refused}.items():
        if key in cfg and refused(cfg[key]):
            out.append(f"`{key}` = {_json(cfg[key])}: {why}")
    return out


def _json(value: Any) -> str:
    import json

    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Recorded(dict):
    """A config whose reads are recorded in `read` (get, [], in)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)
        return super().__contains__(key)

    def unread(self, family: Family) -> list[str]:
        """Fields the import neither read nor knows to be inert, in file order."""
        inert = inert_fields(family)
        return [k for k in self if k not in self.read and k not in inert]


# The declared type of every field the import reads: (kind, lower bound); kinds `int` (a JSON
# integer), `num` (an integer or a float), `bool`, `str`, `list`, `dict`, each also allowing
# null; the bound, where given, is exclusive for `num` and inclusive for `int`.
_POSITIVE_INTS = (
    "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
    "intermediate_size", "vocab_size", "n_embd", "n_head", "n_layer", "n_inner", "rotary_dim",
    "num_kv_heads", "ffn_hidden_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads",
    "relative_attention_num_buckets", "relative_attention_max_distance",
    "max_position_embeddings", "original_max_position_embeddings",
    "_sliding_window_pattern", "num_ln_in_parallel_attn", "n_positions",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "decoder_sparse_step", "intermediate_size_mlp", "attention_chunk_size", "floor_scale",
    "interleave_moe_layer_step", "no_rope_layer_interval", "shared_expert_intermediate_size",
    "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts",
    "n_group", "topk_group", "linear_conv_kernel_dim", "linear_key_head_dim",
    "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "full_attention_interval", "window_size", "ffn_dim", "word_embed_proj_dim", "moe_topk",
    "prefix_dense_sliding_window_pattern", "prefix_dense_intermediate_size", "attention_heads",
    "n_heads", "expansion_ratio", "dff", "moe_k", "moe_num_experts", "moe_layer_interval",
    "kv_channels")
_POSITIVE_NUMS = (
    "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta", "rotary_emb_base",
    "partial_rotary_factor", "rotary_pct", "rope_local_base_freq", "query_pre_attn_scalar",
    "factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale",
    "mscale_all_dim", "attention_factor", "embedding_multiplier", "logits_scaling",
    "residual_multiplier", "attention_multiplier", "norm_epsilon", "norm_eps", "logit_scale",
    "swiglu_alpha", "swiglu_limit", "intermediate_multiple_size", "global_rope_theta",
    "local_rope_theta")
_BOOLS = (
    "attention_bias", "mlp_bias", "use_sliding_window", "tie_word_embeddings",
    "use_parallel_residual", "new_decoder_architecture", "multi_query", "alibi",
    "parallel_attn", "bias", "apply_residual_connection_post_layernorm", "is_decoder",
    "add_cross_attention", "truncate", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "qk_layernorm", "use_bias", "norm_topk_prob",
    "use_qk_norm", "attn_temperature_tuning", "qkv_bias", "rope_interleave",
    "attention_out_bias", "do_layer_norm_before", "_remove_final_layer_norm", "enable_bias",
    "layer_norm_elementwise_affine", "scale_embedding", "no_bias", "use_post_norm",
    "use_qkv_bias", "lm_head_bias", "norm_bias", "decoder_bias", "classifier_bias")
_STRS = ("model_type", "topk_method", "expert_selection_fn",
         "shared_expert_combination_strategy", "hidden_act", "hidden_activation",
         "activation_function", "activation", "afn", "feed_forward_proj",
         "position_embedding_type", "rope_type", "type", "classifier_activation")
TYPES: dict[str, tuple[str, float | None]] = {
    **dict.fromkeys(_POSITIVE_INTS, ("int", 1)), **dict.fromkeys(_POSITIVE_NUMS, ("num", 0)),
    **dict.fromkeys(_BOOLS, ("bool", None)), **dict.fromkeys(_STRS, ("str", None)),
    "max_window_layers": ("int", 0), "layer_types": ("list", None),
    # an integer (Gemma 3, EXAONE 4: 0 without a window) or EXAONE 4's string of L (local) and
    # G (global)
    "sliding_window_pattern": ("pattern", None),
    # 0: none (Qwen2MoeConfig writes 0 without use_sliding_window); sliding layers refuse it
    "sliding_window": ("int", 0),
    "no_rope_layers": ("list", None), "mlp_only_layers": ("list", None),
    "attention_types": ("list", None), "attn_config": ("dict", None),
    "ffn_config": ("dict", None),
    "moe_layers": ("list", None), "attn_scale": ("num", None),
    "q_lora_rank": ("int", 1), "n_shared_experts": ("int", 0),
    "first_k_dense_replace": ("int", 0), "routed_scaling_factor": ("num", 0),
    "shared_intermediate_size": ("int", 0),  # GraniteMoeShared: 0 is no shared expert
    "num_shared_experts": ("int", 0), "mlp_layer_types": ("list", None),
    "moe_num_shared_experts": ("int", 0), "moe_layer_start_index": ("int", 0),
    "moe_layer_end_index": ("int", -1), "moe_norm_min": ("num", 0),
    "layer_rope_theta": ("list", None), "attention_value_scale": ("num", 0),
    "global_attn_every_n_layers": ("int", 1), "num_dense_layers": ("int", 0),
    "route_scale": ("num", 0), "mup_enabled": ("bool", None),
    "scale_emb": ("num", 0), "scale_depth": ("num", 0), "dim_model_base": ("int", 1),
    "router_scaling_factor": ("num", 0),
    "local_attention": ("int", 0),  # ModernBERT's: null or < 2 refused where layers slide
    # Laguna's (`gating`, true or a string, is read where it is used; its router's logit cap,
    # where it is not 0, is refused by the family)
    "num_attention_heads_per_layer": ("list", None), "moe_routed_scaling_factor": ("num", 0),
    "moe_apply_router_weight_on_input": ("bool", None),
    # true or false (Gemma 3), or Gemma 4's "all" / "vision"
    "use_bidirectional_attention": ("flag", None),
    # Gemma 4's: layers sharing keys, per-layer inputs (0: none), its flags
    "num_kv_shared_layers": ("int", 0), "hidden_size_per_layer_input": ("int", 0),
    "vocab_size_per_layer_input": ("int", 1), "attention_k_eq_v": ("bool", None),
    "enable_moe_block": ("bool", None), "use_double_wide_mlp": ("bool", None),
    "global_head_dim": ("int", 1), "num_global_key_value_heads": ("int", 1),
    "per_layer_config": ("dict", None), "mrope_section": ("list", None),
    # LongCat-Flash's shortcut mixture: its experts' width, its identity experts (0: none)
    "expert_ffn_hidden_size": ("int", 1), "zero_expert_num": ("int", 0),
    "router_bias": ("bool", None),
    # LFM2's and LFM3's own fields (families/lfm2.py reads them where they are used)
    "conv_bias": ("bool", None), "conv_L_cache": ("int", 1), "block_multiple_of": ("int", 1),
    "block_ffn_dim_multiplier": ("num", 0), "block_auto_adjust_ff_dim": ("bool", None),
    "use_sandwich_norm": ("bool", None), "use_attention_gate": ("bool", None),
    # Inkling's own fields (families/inkling.py reads them where they are used)
    **dict.fromkeys(("swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim",
                     "sliding_window_size", "d_rel", "rel_extent", "log_scaling_n_floor",
                     "unpadded_vocab_size"), ("int", 1)),
    "conv_kernel_size": ("int", 2), "sconv_kernel_size": ("int", 2),
    "log_scaling_alpha": ("num", None), "logits_mup_width_multiplier": ("num", 0),
    "dense_mlp_idx": ("int", 0), "dense_intermediate_size": ("int", 1),
    # Kimi Linear's and Ling 3's (families/kimi_linear.py reads them where they are used)
    **dict.fromkeys(("linear_head_dim", "linear_num_heads", "short_conv_kernel_size",
                     "layer_group_size"), ("int", 1)),
    "kda_safe_gate": ("bool", None), "kda_lower_bound": ("num", None),
    # their configs' own names of DeepSeek-V3's routing fields (attribute_map)
    "num_experts_per_token": ("int", 1), "num_expert_group": ("int", 1),
    "moe_renormalize": ("bool", None),
    "linear_attn_config": ("dict", None),
    # MiniMax's (families/minimax_text.py): its lightning layers' block, its residual factors
    "block_size": ("int", 1),
    **dict.fromkeys((f"{kind}_{part}_factor" for kind in ("full_attn", "linear_attn", "mlp")
                     for part in ("alpha", "beta")), ("num", 0)),
    # each family module's own (`Family.types`)
    **{field: kind for f in FAMILIES.values() for field, kind in f.types.items()},
    # a stack's blocks: at most the checker's MAX_LAYERS, refused before any list is built
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers"), ("layers", 1)),
    "rope_parameters": ("dict", None), "rope_scaling": ("dict", None),
    "short_factor": ("list", None), "long_factor": ("list", None),
    # each mechanism module's own (`Mechanism.hf_types`)
    **{field: kind for m in MECHANISMS.values() for field, kind in m.hf_types.items()},
}
_LAYER_TYPES = ("sliding_attention", "chunked_attention", "full_attention", "linear_attention",
                "conv")
# every layer kind transformers 5.23 accepts in layer_types: configuration_utils'
# ALLOWED_LAYER_TYPES, and the legacy names its _LEGACY_LAYER_TYPE_REMAP renames (mamba,
# attention, deepseek_sparse_attention, qwen_sparse_attention); a test holds both. A kind
# attndsl does not import yet is said to be that, not a field to fix
TRANSFORMERS_LAYER_TYPES = (
    *_LAYER_TYPES, "window_attention", "indexed_attention", "compressed_sparse_attention",
    "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe", "hybrid",
    "hybrid_sliding", "reference_sliding_attention", "sparse", "dense", "mamba", "attention",
    "deepseek_sparse_attention", "qwen_sparse_attention")
# lists of layer indices (moe_layers, mlp_only_layers) or 0/1 flags (no_rope_layers)
_INDEX_LISTS = ("moe_layers", "mlp_only_layers", "no_rope_layers")
# (model type, field) whose 0 is a value of its own (Granite 4 without experts: its shared MLP
# alone), beside TYPES' bound; fields whose infinity is one (no upper bound)
_ZERO_MEANS_NONE, _UNBOUNDED = {("granitemoehybrid", "num_local_experts")}, ("time_step_limit[1]",)
_WHAT = {"layers": f"an integer <= {MAX_LAYERS} and", "int": "an integer", "num": "a number",
         "bool": "true or false", "str": "a string", "flag": "true, false or a string",
         "pattern": "an integer >= 0 or a string of L and G",
         "list": "a list", "dict": "an object"}


def type_problems(cfg: dict, where: str = "") -> list[str]:
    """Each field of `cfg` (and of its rope parameters) whose JSON value is not of its declared
    type and range, as `field` = value: expected ..."""
    out = []
    for key, value in cfg.items():
        if key not in TYPES or value is None:
            continue
        kind, low = TYPES[key]
        if (cfg.get("model_type"), key) in _ZERO_MEANS_NONE:
            low = 0
        ok = {"int": isinstance(value, int) and not isinstance(value, bool),
              "layers": isinstance(value, int) and not isinstance(value, bool)
              and value <= MAX_LAYERS,
              "num": isinstance(value, int | float) and not isinstance(value, bool),
              "bool": isinstance(value, bool), "str": isinstance(value, str),
              "flag": isinstance(value, bool | str),
              "pattern": (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
              or (isinstance(value, str) and bool(value) and set(value) <= {"L", "G"}),
              "list": isinstance(value, list), "dict": isinstance(value, dict)}[kind]
        if ok and low is not None and (value <= low if kind == "num" else value < low):
            ok = False
        if not ok:
            bound = "" if low is None else (f" > {low}" if kind == "num" else f" >= {low}")
            out.append(f"`{where}{key}` = {_json(value)}: expected {_WHAT[kind]}{bound}")
        elif kind == "list" and key in ("short_factor", "long_factor") and not all(
                isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in value):
            out.append(f"`{where}{key}` = {_json(value)}: expected a list of numbers > 0")
        elif key == "layer_types" and not all(v in TRANSFORMERS_LAYER_TYPES for v in value):
            out.append(f"`{key}` = {_json(value)}: expected a list of layer kinds (\""
                       + "\", \"".join(_LAYER_TYPES) + "\", or another that transformers "
                       "knows)")
        elif key in _INDEX_LISTS and not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            out.append(f"`{where}{key}` = {_json(value)}: expected a list of integers >= 0")
        elif kind == "dict" and key in ("rope_parameters", "rope_scaling"):
            nested = all(isinstance(v, dict | None) for v in value.values()) and value
            for name, inner in (value.items() if nested else [("", value)]):
                out += type_problems(inner or {}, f"{key}.{name + '.' if name else ''}")
    return out


def read_json(file: Path, what: str) -> Any:
    """The JSON value in `file`, or a UsageError saying it is not a readable `what` (also for
    a file nested too deeply for Python's parser)."""
    try:
        return json.loads(file.read_text(), object_hook=_floats)
    except RecursionError:
        raise UsageError(f"{file}: not a readable {what} (nested too deeply)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{file}: not a readable {what} ({exc})") from None


def _floats(value: dict) -> Any:
    """transformers' {"__float__": "Infinity"} (a non-finite float) as the bare literal's."""
    text = value.get("__float__") if len(value) == 1 else None
    return float(text) if text in ("Infinity", "-Infinity", "NaN") else value


def non_finite(value: Any, where: str = "") -> list[str]:
    """Each NaN or infinite number in a JSON value (Python's json reads the bare literals NaN,
    Infinity and -Infinity, which JSON has not), as `field` = value: expected ...; but for
    the upper bounds that mean "none" (Mamba2's `time_step_limit[1]`)."""
    if where in _UNBOUNDED and value == math.inf:
        return []
    if isinstance(value, float) and not math.isfinite(value):
        return [f"`{where}` = {json.dumps(value)}: expected a finite number"]
    if isinstance(value, dict):
        return [p for k, v in value.items()
                for p in non_finite(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{where}[{i}]")]
    return []


def unimported_kinds(cfg: dict) -> list[str]:
    """The layer kinds of `layer_types` that transformers knows and attndsl does not import."""
    types = cfg.get("layer_types")
    if not isinstance(types, list):
        return []
    return [k for k in dict.fromkeys(t for t in types if isinstance(t, str))
            if k in TRANSFORMERS_LAYER_TYPES and k not in _LAYER_TYPES]


def unknown_family(cfg: dict) -> str:
    """Why a config's model type is not imported: none given, or not one attndsl knows (with
    the mechanism it lacks for it, from hf_lacks.LACKS, and the layer kinds the config names
    that attndsl does not import yet)."""
    model_type = cfg.get("model_type")
    if model_type is None:
        return "config.json has no `model_type`, which names the family attndsl imports"
    text = cfg.get("text_config")  # a multimodal wrapper's language model
    kinds = unimported_kinds(cfg) or unimported_kinds(text if isinstance(text, dict) else {})
    lacks = LACKS.get(model_type) if isinstance(model_type, str) else None
    return f"model_type `{model_type}` is not one attndsl imports" + (
        f": it needs {lacks}, which attndsl cannot express yet" if lacks else "") + (
        f" (it has layers of kind {', '.join(f'`{k}`' for k in kinds)}, which attndsl does "
        "not import yet)" if kinds else "")


def read_config(path: Path) -> tuple[dict, Path]:
    """The config.json of a checkpoint folder (or the file itself), every field the import
    reads of its declared type and range (`TYPES`) and every number finite, else a SpecError
    naming each; a layer kind attndsl does not import is said to be that. Gemma 3's
    multimodal wrapper is read as its text_config, a CLIP or SigLIP model as its vision tower's
    (vision_config). A model type attndsl does not import is
    refused as that, whatever its fields (valid for transformers, perhaps not for attndsl)."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"{path}: no config.json")
    cfg = read_json(file, "config.json")
    if not isinstance(cfg, dict):
        raise UsageError(f"{file}: not a config.json object")
    problems = non_finite(cfg)
    if cfg.get("model_type") == "gemma3" and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "model_type": "gemma3"}  # the multimodal wrapper
    if cfg.get("model_type") in ("clip", "siglip") and isinstance(cfg.get("vision_config"), dict):
        cfg = {**cfg["vision_config"], "model_type": f"{cfg['model_type']}_vision_model"}
    if not isinstance(cfg.get("model_type"), str) or cfg["model_type"] not in FAMILIES:
        raise SpecError([Diagnostic(f"{file}: {p}", hint="fix the field in config.json")
                         for p in problems] + [Diagnostic(
            f"{file}: {unknown_family(cfg)}", hint=f"supported: {', '.join(sorted(FAMILIES))}")])
    problems += type_problems(cfg)
    diagnostics = [Diagnostic(f"{file}: {p}", hint="fix the field in config.json")
                   for p in problems]
    diagnostics += [Diagnostic(
        f"{file}: attndsl does not import layer kind `{k}` yet (`layer_types` = "
        f"{_json(cfg['layer_types'])})", hint=f"attndsl imports {', '.join(_LAYER_TYPES)} "
        "layers (each family those it has: docs/CHECKPOINTS.md)")
        for k in unimported_kinds(cfg) if k not in FAMILIES[cfg["model_type"]].kinds]
    if diagnostics:
        raise SpecError(diagnostics)
    return cfg, file
