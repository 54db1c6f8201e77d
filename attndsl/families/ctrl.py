"""CTRL: a sinusoidal table with every sine before every cosine, token embeddings scaled by
sqrt(n_embd), pre-LayerNorm blocks (eps 1e-6) with biases everywhere, a ReLU MLP (`dff`) and
a head tied to the embedding with a bias of its own."""

from __future__ import annotations

from .base import Family
from .names import Names, linear, norms
from .rope import num
from .text import SpecText, mask

__all__ = ["FAMILIES"]

_BLOCK_EPS = 1e-06  # the blocks' LayerNorms: fixed; the final one reads layer_norm_epsilon


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("n_embd"), s.need("n_head")
    s.attentions["ctrl_attn"] = {"d_model": str(d), "heads": str(heads), "bias": "true",
                                 "mask": mask(True, padding)}
    s.pattern = ["ctrl_attn"]
    # a language model's embedding: scaled, then its positions (a stack of hidden states
    # takes them already added); CTRL's positional_encoding
    s.head_attention["position"] = "sinusoidal(layout = halves)"
    s.head["embedding_scale"] = f"sqrt({d})"
    s.head["head_bias"] = "true"
    if s.need("layer_norm_epsilon") != _BLOCK_EPS:
        s.refuse("layer_norm_epsilon", f"CTRL's blocks norm with eps {_BLOCK_EPS} whatever "
                                       "it says, and attndsl's stack has one eps for every norm")
    s.stack = {"layers": str(s.need("n_layer")), "ffn": f"relu({s.need('dff')})",
               "norm": f"layernorm(pre, eps = {num(_BLOCK_EPS)})"}


_CTRL = Names("h.{i}.", {
    **{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj",
                                               f"multi_head_attention.W{p}").items()},
    **linear("self_attn.o_proj", "multi_head_attention.dense"),
    **linear("mlp.fc1", "ffn.0"), **linear("mlp.fc2", "ffn.2"),
    **norms({"attn_norm": "layernorm1", "ffn_norm": "layernorm2"})},
    {**norms({"norm": "layernorm"}), "embed_tokens.weight": "w.weight",
     "lm_head.weight": "lm_head.weight", "lm_head.bias": "lm_head.bias"}, ("transformer.",))

# transformers' defaults (CTRLConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("ctrl", _read, _CTRL, {
        "n_positions": 256, "n_embd": 1280, "dff": 8192, "n_layer": 48, "n_head": 16,
        "layer_norm_epsilon": 1e-06, "tie_word_embeddings": True},
        inert={"n_positions": "the size of CTRL's sinusoidal table: attndsl computes it at any "
                              "position"},
        lm=True),
]
