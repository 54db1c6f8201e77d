"""Every config.json field, as `attndsl import` takes it: read (the import looks at it and the
spec says what it means), inert (it does not change what the imported stack computes: the
reason is in INERT), or refused (set to a value attndsl has no form for: REFUSED names the
field and why). `Recorded` is the config as a dict that notes what the import read, so a field
that is none of these is reported rather than silently dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["INERT", "REFUSED", "Recorded", "inert_fields", "refusals"]

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
    "hidden_dropout_prob": _DROPOUT, "attention_probs_dropout_prob": _DROPOUT,
    "max_position_embeddings": "the longest sequence trained on: RoPE is computed at any "
                               "position (dynamic, yarn and longrope scalings read it)",
    "n_positions": "the size of GPT-J's RoPE table: RoPE is computed at any position",
    "is_encoder_decoder": "T5's encoder-decoder model: the import takes the encoder stack",
    "pretraining_tp": "slices of the projections used during tensor-parallel pretraining: the "
                      "same values",
    "slow_but_exact": "BLOOM's sliced matmul under pretraining_tp: the same values up to "
                      "rounding",
    "type_vocab_size": "BERT's token-type embeddings, added before the stack",
    "vocab_size": "the token embedding and LM head (read for a language model's head)",
    "tie_word_embeddings": "the LM head (read for a language model's head)",
    "final_logit_softcapping": "the LM head's softcap (read for a language model's head)",
    "num_decoder_layers": "T5's decoder: the import takes the encoder stack",
    "scale_decoder_outputs": "T5's decoder: the import takes the encoder stack",
    "is_gated_act": "derived by T5Config from feed_forward_proj, which the import reads",
    "dense_act_fn": "derived by T5Config from feed_forward_proj, which the import reads",
    "_sliding_window_pattern": "derived by Gemma3TextConfig into layer_types, which the import "
                               "reads",
}

# family -> field -> why, where a field is inert for that family alone
_FAMILY_INERT: dict[str, dict[str, str]] = {
    "gpt_neox": {"is_decoder": "GPT-NeoX is causal whatever is_decoder says (the model never "
                               "reads it)"},
    "t5": {"is_decoder": "T5EncoderModel builds its encoder with is_decoder = False"},
    "falcon": {"num_kv_heads": "read with new_decoder_architecture; otherwise every head is a "
                               "kv head (one with multi_query)",
               "num_ln_in_parallel_attn": "read with new_decoder_architecture; the older "
                                          "architecture has one norm",
               "multi_query": "read unless new_decoder_architecture, which names its kv heads",
               "rope_parameters": "read unless alibi, which has no rotary positions"},
    "qwen2": {"max_window_layers": "read into layer_types by Qwen2Config; the import reads "
                                   "it only when layer_types is absent"},
    "qwen3": {"max_window_layers": "read into layer_types by Qwen3Config; the import reads "
                                   "it only when layer_types is absent"},
}

# field -> (when it is refused, for which families (None: all), why)
REFUSED: dict[str, tuple[Callable[[Any], bool], tuple[str, ...] | None, str]] = {
    "quantization_config": (lambda v: v is not None, None,
                            "quantized checkpoints are not imported yet: dequantize first"),
    "pruned_heads": (lambda v: bool(v), None,
                     "pruned heads leave layers with different head counts"),
    "add_cross_attention": (lambda v: bool(v), ("bert",),
                            "BERT's decoder cross attention layers are not imported"),
    "use_bidirectional_attention": (lambda v: bool(v), ("gemma2",),
                                    "transformers' Gemma 2 applies it in its SDPA path but "
                                    "keeps the causal mask in its eager path"),
}


def inert_fields(family: str) -> dict[str, str]:
    """Every field that does not change what `family`'s imported stack computes, and why."""
    return {**INERT, **_FAMILY_INERT.get(family, {})}


def refusals(cfg: dict, family: str) -> list[str]:
    """The problems of the refused fields that `cfg` sets, one line each."""
    out = []
    for key, (refused, families, why) in REFUSED.items():
        if key in cfg and (families is None or family in families) and refused(cfg[key]):
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

    def unread(self, family: str) -> list[str]:
        """Fields the import neither read nor knows to be inert, in file order."""
        inert = inert_fields(family)
        return [k for k in self if k not in self.read and k not in inert]
