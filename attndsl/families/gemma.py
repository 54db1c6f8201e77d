"""Gemma 1 (`gemma`) and VaultGemma, the Gemma decoders read by the llama reader without
sandwich norms. Gemma 1: unit-offset RMSNorm (x · (1 + w)) before each sublayer, a tanh-GELU
GeGLU MLP, scores scaled by head_dim ** -0.5, embeddings times sqrt(hidden_size) and a tied
head. VaultGemma: Gemma 2 (query_pre_attn_scalar, attention and final logit softcaps, sliding
and full layers) without the norms after the sublayers (`input_layernorm` before attention,
`pre_feedforward_layernorm` before the MLP)."""

from __future__ import annotations

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .names import ATTN, GATED, LM, Names
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    if s.cfg.get("model_type") == "gemma" and s.cfg.get("hidden_act") == "gelu":
        s.cfg["hidden_act"] = "gelu_pytorch_tanh"  # as GemmaConfig reads the legacy value
    read_llama(s, padding)
    if s.cfg.get("model_type") == "vaultgemma":  # the head's scale (Gemma's by model type)
        s.head["embedding_scale"] = f"sqrt({s.need('hidden_size')})"


_VAULT = Names("layers.{i}.", {
    **ATTN, **GATED, "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",))

_BIDIRECTIONAL = (bool, "transformers' Gemma applies it in its SDPA path (is_causal) but keeps "
                        "the causal mask in its eager path")
# transformers' defaults (GemmaConfig, VaultGemmaConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("gemma", _read, LLAMA, {
        "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06, "tie_word_embeddings": True,
        "attention_bias": False},
        inert={"hidden_activation": "Gemma 1's MLP reads hidden_act (transformers 5 leaves "
                                    "this older field unread)"},
        refused={"use_bidirectional_attention": _BIDIRECTIONAL}, lm=True),
    Family("vaultgemma", _read, _VAULT, {
        "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06,
        "tie_word_embeddings": True, "attention_bias": False, "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "final_logit_softcapping": 30.0,
        "attn_logit_softcapping": 50.0}, lm=True),
]
