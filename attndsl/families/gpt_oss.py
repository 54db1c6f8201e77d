"""gpt-oss: a Llama-like decoder alternating sliding and full layers (layer_types), with
learned attention sinks, biases on every projection, YaRN RoPE, and a mixture of experts
whose router has a bias and whose experts are gpt-oss's clamped SwiGLU with biases, stored
fused: `gate_up_proj` [experts, d, 2 n] with each expert's gate and up columns interleaved,
`down_proj` [experts, n, d]."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .moe import ROUTER_INERT, expanded
from .names import Names, Split
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    for entries in s.attentions.values():
        entries["sinks"] = "learned"
    expert = (f"clamped_swiglu({s.need('intermediate_size')}, bias = true, alpha = "
              f"{num(s.need('swiglu_alpha'))}, limit = {num(s.need('swiglu_limit'))})")
    s.stack["ffn"] = (f"moe(experts = {s.need('num_local_experts')}, top_k = "
                      f"{s.need('num_experts_per_tok')}, expert = {expert}, router_bias = true)")


def _columns(start: int, weight: bool):
    """Expert e's gate (start 0) or up (start 1) of the interleaved gate_up_proj [experts, d,
    2 n] (transposed to [n, d]), or of its bias [experts, 2 n]."""
    def make(e: int) -> Split:
        def split(t: Any, a: Attention, cfg: dict) -> Any:
            return t[e][:, start::2].T if weight else t[e][start::2]
        return split
    return make


def _expert(weight: bool):
    """Expert e's down_proj [n, d] (transposed to [d, n]), or its bias [d]."""
    def make(e: int) -> Split:
        def split(t: Any, a: Attention, cfg: dict) -> Any:
            return t[e].T if weight else t[e]
        return split
    return make


_E = "mlp.experts.{e}."
_GPT_OSS = Names("layers.{i}.", {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    "self_attn.sinks": "self_attn.sinks",
    "mlp.router.weight": "mlp.router.weight", "mlp.router.bias": "mlp.router.bias",
    f"{_E}gate_proj.weight": ("mlp.experts.gate_up_proj", _columns(0, True)),
    f"{_E}gate_proj.bias": ("mlp.experts.gate_up_proj_bias", _columns(0, False)),
    f"{_E}up_proj.weight": ("mlp.experts.gate_up_proj", _columns(1, True)),
    f"{_E}up_proj.bias": ("mlp.experts.gate_up_proj_bias", _columns(1, False)),
    f"{_E}down_proj.weight": ("mlp.experts.down_proj", _expert(True)),
    f"{_E}down_proj.bias": ("mlp.experts.down_proj_bias", _expert(False))},
    LLAMA.top, LLAMA.bases)

# transformers' defaults (GptOssConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("gpt_oss", _read, _GPT_OSS, {
        "num_hidden_layers": 36, "num_local_experts": 128, "hidden_size": 2880,
        "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64,
        "num_key_value_heads": 8, "sliding_window": 128, "tie_word_embeddings": False,
        "hidden_act": "silu", "rms_norm_eps": 1e-05, "num_experts_per_tok": 4,
        "swiglu_alpha": 1.702, "swiglu_limit": 7.0, "attention_bias": True},
        inert={**ROUTER_INERT,
               "hidden_act": "the experts' unit is gpt-oss's clamped SwiGLU whatever it says"},
        lm=True, weights_for=expanded(_GPT_OSS),
        rope={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
              "truncate": False, "original_max_position_embeddings": 4096,
              "rope_theta": 150000.0}),
]
