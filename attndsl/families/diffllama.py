"""DiffLlama: a Llama decoder with differential attention (the Differential Transformer): query
heads i and i + heads/2 make two softmax maps, subtracted with the learned lambda
(lambda_q1, lambda_k1, lambda_q2, lambda_k2 and lambda_init = 0.8 - 0.6 exp(-0.3 l) at layer
l); each difference is RMS-normed (eps = rms_norm_eps) and scaled by 1 - lambda_init."""

from __future__ import annotations

from ..mechanisms.differential import LAMBDAS
from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .names import Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    for entries in s.attentions.values():
        entries["differential"] = f"lambda(init = depth, eps = {num(s.need('rms_norm_eps'))})"


_DIFFLLAMA = Names(LLAMA.layer, {**LLAMA.names, **{f"self_attn.{w}": f"self_attn.{w}"
                                                   for w in LAMBDAS}}, LLAMA.top, LLAMA.bases)

# transformers' defaults (DiffLlamaConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("diffllama", _read, _DIFFLLAMA, {
        **{k: v for k, v in LLAMA_DEFAULTS.items() if k != "mlp_bias"}, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "rms_norm_eps": 1e-5},
        inert={"lambda_std_dev": "how the untrained lambda vectors are drawn; a checkpoint "
                                 "brings its own",
               "mlp_bias": "DiffLlama's MLP has no biases whatever it says"}, lm=True),
]
