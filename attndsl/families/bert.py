"""BERT: a post-norm encoder (a decoder with is_decoder). As a language model (BertLMHeadModel,
with is_decoder; or any BERT with `--head lm`, whose logits are then BertForMaskedLM's): the
word embeddings plus the learned positions plus the first token type's row (every token's type
is 0 without token_type_ids), LayerNormed (`embedding_norm`, after the positions), and the
prediction head (dense, hidden_act, LayerNorm: `head_transform`) before the decoder, tied to
the word embeddings, with its bias. The token type's row is folded into the position table as
the checkpoint is read: position_embeddings + token_type_embeddings[0]."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .base import Family
from .names import Names, linear, norms
from .rope import num
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        s.refuse("position_embedding_type", "relative_key positions have no attndsl form")
    s.attentions["bert_attn"] = {"d_model": str(d), "heads": str(heads), "bias": "true",
                                 "mask": mask(bool(cfg.get("is_decoder")), padding)}
    s.comments["bert_attn"] = ("a stack alone: positions and token types are added by the "
                               "embeddings, outside it; a language model: learned positions, "
                               "the first token type's row added to them")
    s.pattern = ["bert_attn"]
    ffn_act = act(s, "hidden_act", s.need("hidden_act"))
    eps = num(s.need("layer_norm_eps"))
    # a language model: learned positions, the embeddings' and prediction head's LayerNorms
    s.head_attention["position"] = f"learned(max_len = {s.need('max_position_embeddings')})"
    s.head["embedding_norm"] = f"layernorm(eps = {eps})"
    if ffn_act == "relu2":
        s.refuse("hidden_act", "BERT's prediction head's activation is gelu, a tanh GELU, "
                               "relu or silu")
    s.head["head_transform"] = f"dense(norm = layernorm(eps = {eps}), activation = {ffn_act})"
    s.head["head_bias"] = "true"
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{ffn_act}({s.need('intermediate_size')})",
               "norm": f"layernorm(post, eps = {eps})"}


def _typed(tensors: list, a: Any, cfg: dict) -> Any:
    """The position table plus the first token type's row: what BertEmbeddings adds to each
    word embedding when no token_type_ids are given."""
    positions, types = tensors
    return positions + types[0]


_BERT = Names("encoder.layer.{i}.", {
    **linear("self_attn.q_proj", "attention.self.query"),
    **linear("self_attn.k_proj", "attention.self.key"),
    **linear("self_attn.v_proj", "attention.self.value"),
    **linear("self_attn.o_proj", "attention.output.dense"),
    **norms({"attn_norm": "attention.output.LayerNorm", "ffn_norm": "output.LayerNorm"}),
    **linear("mlp.fc1", "intermediate.dense"), **linear("mlp.fc2", "output.dense")},
    {"embed_tokens.weight": "embeddings.word_embeddings.weight",
     "position_embeddings.weight": ("embeddings.position_embeddings.weight", _typed,
                                    ("embeddings.token_type_embeddings.weight",)),
     **linear("embedding_norm", "embeddings.LayerNorm"),
     **linear("head_transform.dense", "cls.predictions.transform.dense"),
     **linear("head_transform.norm", "cls.predictions.transform.LayerNorm"),
     "lm_head.weight": "cls.predictions.decoder.weight", "lm_head.bias": "cls.predictions.bias"},
    ("bert.",), outside=(  # a stack's: the embeddings; the token types (read joined)
        r"embeddings\.(word|position|token_type)_embeddings\.weight",
        r"embeddings\.LayerNorm\.(weight|bias)"))

# untied (tie_word_embeddings false): transformers leaves the decoder's own bias, which its
# forward adds, apart from cls.predictions.bias (tied to it otherwise, and saved alone)
_BERT_UNTIED = replace(_BERT, top={**_BERT.top, "lm_head.bias": "cls.predictions.decoder.bias"},
                       outside=(*_BERT.outside, r"cls\.predictions\.bias"))


def _names(cfg: dict) -> Names:
    return _BERT if cfg.get("tie_word_embeddings", True) else _BERT_UNTIED


FAMILIES = [
    Family("bert", _read, _BERT, {  # transformers' defaults (BertConfig, 5.23)
        "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
        "is_decoder": False, "add_cross_attention": False, "tie_word_embeddings": True},
        refused={"add_cross_attention": (
            bool, "BERT's decoder cross attention layers are not imported")},
        encoder=True, lm=lambda cfg: bool(cfg.get("is_decoder")), weights_for=_names),
]
