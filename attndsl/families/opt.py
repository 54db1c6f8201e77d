"""OPT: learned absolute positions whose table keeps two rows before position 0 (row p + 2
serves position p), LayerNorm blocks before (do_layer_norm_before) or after their sublayers
(OPT-350m's post-norm), biases (enable_bias), a ReLU MLP and a tied head."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .names import Names, linear, norms
from .text import SpecText, act, mask

__all__ = ["FAMILIES", "past_offset"]

_OFFSET = 2  # OPTLearnedPositionalEmbedding's offset: rows 0 and 1 serve no position


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    bias = "true" if cfg.get("enable_bias") else "false"
    s.attentions["opt_attn"] = {"d_model": str(d), "heads": str(heads), "bias": bias,
                                "mask": mask(True, padding)}
    s.pattern = ["opt_attn"]
    # the token embedding of a language model comes with its positions (a stack of hidden
    # states takes them already added, as the decoder's layers do)
    s.head_attention["position"] = f"learned({s.need('max_position_embeddings')})"
    if s.get("word_embed_proj_dim", default=d) != d:
        s.refuse("word_embed_proj_dim", "OPT's project_in and project_out (embeddings narrower "
                                        "than the layers) have no attndsl form")
    if not cfg.get("layer_norm_elementwise_affine"):
        s.refuse("layer_norm_elementwise_affine", "a LayerNorm without weight and bias has no "
                                                  "tensors for attndsl's layernorm to read")
    pre, removed = bool(cfg.get("do_layer_norm_before")), cfg.get("_remove_final_layer_norm")
    if pre and removed:
        s.refuse("_remove_final_layer_norm", "a pre-norm stack without its final norm has no "
                                             "attndsl form")
    ffn_bias = "" if cfg.get("enable_bias") else ", bias = false"
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{act(s, 'activation_function', s.need('activation_function'))}"
                      f"({s.need('ffn_dim')}{ffn_bias})",
               # nn.LayerNorm's default eps: OPT's config gives none
               "norm": f"layernorm({'pre' if pre else 'post'}, eps = 1e-05)"}


def past_offset(t: Any, a: Attention, cfg: dict) -> Any:
    """The position table without its first two rows: row p then serves position p."""
    return t[_OFFSET:]


_OPT = Names("layers.{i}.", {
    **{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj",
                                               f"self_attn.{p}_proj").items()},
    **linear("self_attn.o_proj", "self_attn.out_proj"),
    **linear("mlp.fc1", "fc1"), **linear("mlp.fc2", "fc2"),
    **norms({"attn_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm"})},
    {**norms({"norm": "final_layer_norm"}), "embed_tokens.weight": "embed_tokens.weight",
     "position_embeddings.weight": ("embed_positions.weight", past_offset),
     "lm_head.weight": "lm_head.weight"},
    ("model.decoder.", "decoder."))

_DROPOUT = "dropout, which is off at inference"

# transformers' defaults (OPTConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("opt", _read, _OPT, {
        "hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072,
        "do_layer_norm_before": True, "_remove_final_layer_norm": False,
        "num_attention_heads": 12, "activation_function": "relu", "enable_bias": True,
        "layer_norm_elementwise_affine": True, "tie_word_embeddings": True},
        inert={"dropout": _DROPOUT, "layerdrop": "skips layers in training only",
               "init_std": "how untrained weights are drawn; a checkpoint brings its own"},
        lm=True),
]
