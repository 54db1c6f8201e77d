"""BioGPT: OPT's learned positions (two rows before position 0), token embeddings scaled by
sqrt(hidden_size) (scale_embedding), pre-LayerNorm blocks with biases everywhere, a GELU MLP,
and a head tied to the embedding (`output_projection`)."""

from __future__ import annotations

from .base import Family
from .names import Names, linear, norms
from .opt import past_offset
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    s.attentions["biogpt_attn"] = {"d_model": str(d), "heads": str(heads), "bias": "true",
                                   "mask": mask(True, padding)}
    s.pattern = ["biogpt_attn"]
    # a language model's embedding: scaled, then its positions (a stack of hidden states
    # takes them already added)
    s.head_attention["position"] = f"learned({s.need('max_position_embeddings')})"
    if s.cfg.get("scale_embedding"):
        s.head["embedding_scale"] = f"sqrt({d})"
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{act(s, 'hidden_act', s.need('hidden_act'))}"
                      f"({s.need('intermediate_size')})",
               # nn.LayerNorm's default eps: BioGPT's LayerNorms never read layer_norm_eps
               "norm": "layernorm(pre, eps = 1e-05)"}


_BIOGPT = Names("layers.{i}.", {
    **{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj",
                                               f"self_attn.{p}_proj").items()},
    **linear("self_attn.o_proj", "self_attn.out_proj"),
    **linear("mlp.fc1", "fc1"), **linear("mlp.fc2", "fc2"),
    **norms({"attn_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm"})},
    {**norms({"norm": "layer_norm"}), "embed_tokens.weight": "embed_tokens.weight",
     "position_embeddings.weight": ("embed_positions.weight", past_offset),
     "lm_head.weight": "output_projection.weight"},
    ("biogpt.",))

_DROPOUT = "dropout, which is off at inference"

# transformers' defaults (BioGptConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("biogpt", _read, _BIOGPT, {
        "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
        "intermediate_size": 4096, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
        "scale_embedding": True, "tie_word_embeddings": True},
        inert={"layer_norm_eps": "BioGPT's LayerNorms use nn.LayerNorm's default eps (1e-5): "
                                 "transformers never reads it",
               "layerdrop": "skips layers in training only", "activation_dropout": _DROPOUT},
        lm=True),
]
