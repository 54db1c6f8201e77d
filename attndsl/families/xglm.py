"""XGLM: fairseq's sinusoidal positions (every sine, then every cosine, at tensor2tensor's
frequencies 10000^(-i / (d/2 - 1)), position p reading row p + 2 of the table), token
embeddings scaled by sqrt(d_model), pre-LayerNorm blocks with biases everywhere, a GELU MLP
and a tied head."""

from __future__ import annotations

from .base import Family
from .names import Names, linear, norms
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("d_model"), s.need("attention_heads")
    s.attentions["xglm_attn"] = {"d_model": str(d), "heads": str(heads), "bias": "true",
                                 "mask": mask(True, padding)}
    s.pattern = ["xglm_attn"]
    # a language model's embedding: scaled, then its positions (a stack of hidden states
    # takes them already added); XGLMSinusoidalPositionalEmbedding's table
    s.head_attention["position"] = ("sinusoidal(layout = halves, offset = 2, "
                                    "frequencies = tensor2tensor)")
    if s.cfg.get("scale_embedding"):
        s.head["embedding_scale"] = f"sqrt({d})"
    s.stack = {"layers": str(s.need("num_layers")),
               "ffn": f"{act(s, 'activation_function', s.need('activation_function'))}"
                      f"({s.need('ffn_dim')})",
               "norm": "layernorm(pre, eps = 1e-05)"}  # nn.LayerNorm's default eps


_XGLM = Names("layers.{i}.", {
    **{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj",
                                               f"self_attn.{p}_proj").items()},
    **linear("self_attn.o_proj", "self_attn.out_proj"),
    **linear("mlp.fc1", "fc1"), **linear("mlp.fc2", "fc2"),
    **norms({"attn_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm"})},
    {**norms({"norm": "layer_norm"}), "embed_tokens.weight": "embed_tokens.weight",
     "lm_head.weight": "lm_head.weight"},
    ("model.",))

_DROPOUT = "dropout, which is off at inference"

# transformers' defaults (XGLMConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("xglm", _read, _XGLM, {
        "d_model": 1024, "ffn_dim": 4096, "num_layers": 24, "attention_heads": 16,
        "activation_function": "gelu", "scale_embedding": True, "add_cross_attention": False,
        "tie_word_embeddings": True},
        inert={"dropout": _DROPOUT, "activation_dropout": _DROPOUT,
               "layerdrop": "skips layers in training only",
               "init_std": "how untrained weights are drawn; a checkpoint brings its own",
               "max_position_embeddings": "the size XGLM's sinusoidal table starts at: it grows "
                                          "to any position"},
        refused={"add_cross_attention": (
            bool, "XGLM's cross attention layers (for an encoder-decoder) are not imported")},
        lm=True),
]
