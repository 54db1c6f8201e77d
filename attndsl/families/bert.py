"""BERT: a post-norm encoder (a decoder with is_decoder); positions and token types are added
by the embeddings, outside the stack."""

from __future__ import annotations

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
    s.comments["bert_attn"] = ("positions and token types are added by the embeddings, "
                               "outside the stack")
    s.pattern = ["bert_attn"]
    ffn_act = act(s, "hidden_act", s.need("hidden_act"))
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{ffn_act}({s.need('intermediate_size')})",
               "norm": f"layernorm(post, eps = {num(s.need('layer_norm_eps'))})"}


_BERT = Names("encoder.layer.{i}.", {
    **linear("self_attn.q_proj", "attention.self.query"),
    **linear("self_attn.k_proj", "attention.self.key"),
    **linear("self_attn.v_proj", "attention.self.value"),
    **linear("self_attn.o_proj", "attention.output.dense"),
    **norms({"attn_norm": "attention.output.LayerNorm", "ffn_norm": "output.LayerNorm"}),
    **linear("mlp.fc1", "intermediate.dense"), **linear("mlp.fc2", "output.dense")},
    {}, ("bert.",), outside=(  # the embeddings (word, position, token type) and their norm
        r"embeddings\.(word|position|token_type)_embeddings\.weight",
        r"embeddings\.LayerNorm\.(weight|bias)"))

FAMILIES = [
    Family("bert", _read, _BERT, {  # transformers' defaults (BertConfig, 5.23)
        "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
        "is_decoder": False, "add_cross_attention": False, "tie_word_embeddings": True},
        refused={"add_cross_attention": (
            bool, "BERT's decoder cross attention layers are not imported")},
        encoder=True),
]
