"""GPT-1 (`openai-gpt`): GPT-2's Conv1D layers and names within a layer, but post-LayerNorm
blocks (ln_1 after the attention's residual add, ln_2 after the MLP's) and no final norm; learned
absolute positions (`positions_embed`, counted from slot 0 unless position_ids are passed, as
`generate` does), the MLP 4 n_embd wide with `afn`, and a head tied to `tokens_embed`. Its
causal mask fills future scores with -1e4 rather than -inf, which is the same softmax for every
real query (exp(-1e4 - max) is 0 in float32 and float64); padded keys get the dtype's minimum."""

from __future__ import annotations

from .base import Family
from .gpt2 import GPT2
from .names import Names
from .rope import num
from .text import SpecText, mask

__all__ = ["FAMILIES"]

# transformers' ACT_FNS of modeling_openai: its `gelu` is gelu_new, the tanh approximation
_ACTS = {"gelu": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"}


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("n_embd"), s.need("n_head")
    # every Block is built with scale=True: the scores are divided by sqrt(head_dim), the
    # language's default scale
    s.attentions["openai_gpt_attn"] = {"d_model": str(d), "heads": str(heads), "bias": "true",
                                       "mask": mask(True, padding)}
    s.pattern = ["openai_gpt_attn"]
    # the token embedding of a language model comes with its positions (a stack of hidden
    # states takes them already added, as GPT-1's blocks do)
    s.head_attention["position"] = f"learned({s.need('n_positions')})"
    afn = s.need("afn")
    if afn not in _ACTS:
        s.refuse("afn", "GPT-1's MLP takes gelu (the tanh approximation), relu, silu or swish")
    s.stack = {"layers": str(s.need("n_layer")),
               "ffn": f"{_ACTS.get(afn, 'gelu_tanh')}({4 * d})",
               "norm": f"layernorm(post, eps = {num(s.need('layer_norm_epsilon'))})"}


_OPENAI_GPT = Names(GPT2.layer, GPT2.names, {
    "embed_tokens.weight": "tokens_embed.weight",
    "position_embeddings.weight": "positions_embed.weight", "lm_head.weight": "lm_head.weight"},
    GPT2.bases)

_SUMMARY = "the double-heads model's multiple-choice head, outside the language model"

# transformers' defaults (OpenAIGPTConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("openai-gpt", _read, _OPENAI_GPT, {
        "n_positions": 512, "n_embd": 768, "n_layer": 12, "n_head": 12, "afn": "gelu",
        "layer_norm_epsilon": 1e-05, "tie_word_embeddings": True},
        inert={"summary_type": _SUMMARY, "summary_use_proj": _SUMMARY,
               "summary_activation": _SUMMARY, "summary_proj_to_labels": _SUMMARY,
               "summary_first_dropout": _SUMMARY},
        lm=True),
]
