"""StableLM (StableLM-3B-4E1T, StableLM 2): a LayerNorm decoder (with biases) with a gated SiLU
MLP without biases, RoPE on the first `partial_rotary_factor` of each head (0.25 by default),
biases on q, k and v with `use_qkv_bias` (never on o_proj), and with `use_parallel_residual`
GPT-J's parallel block (one norm feeds attention and the MLP). StableLM 2 12B's q/k LayerNorms
(`qk_layernorm`) give each head its own weight, without a bias: `qk_norm = layernorm(
head_weights = true)`, its [heads, head_dim] weights stacked from `q_layernorm.norms.{h}`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import Attention
from .base import Family
from .names import ATTN, GATED, LM, Names, linear, norms
from .rope import default_partial, num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    default_partial(s, 0.25)  # StableLmConfig's default
    entries = roped_attention(s, padding)
    entries["bias"] = "[q, k, v]" if s.cfg.get("use_qkv_bias") else "false"
    if s.cfg.get("qk_layernorm"):  # (the mask stays last)
        mask = entries.pop("mask")
        eps = num(s.need("layer_norm_eps"))
        entries.update(qk_norm=f"layernorm(eps = {eps}, head_weights = true)", mask=mask)
    s.attentions["stablelm_attn"] = entries
    s.pattern = ["stablelm_attn"]
    gate = act(s, "hidden_act", s.need("hidden_act"), gated=True)
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{'swiglu' if gate == 'silu' else 'geglu'}({s.need('intermediate_size')})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_eps'))})"}
    if s.cfg.get("use_parallel_residual"):  # the MLP reads input_layernorm's output too
        s.stack["residual"] = "parallel(shared_norm = true)"


_STABLELM = Names("layers.{i}.", {
    **{k: v for k, v in ATTN.items() if "_norm." not in k}, **GATED,
    **norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"})},
    {**linear("norm", "norm"), **LM}, ("model.",))


def _rows(t: list[Any], a: Attention, cfg: dict) -> Any:
    """Each head's LayerNorm weight [head_dim], stacked in head order: [heads, head_dim]."""
    return np.stack([np.asarray(x) for x in t])


def _names(cfg: dict) -> Names:
    """With `qk_layernorm`, q_norm's and k_norm's rows from each head's own LayerNorm."""
    if not cfg.get("qk_layernorm"):
        return _STABLELM
    heads = cfg.get("num_attention_heads") or 32  # (StableLmConfig's default)
    kv = cfg.get("num_key_value_heads") or heads
    rows = {f"self_attn.{p}_norm.weight": (
        f"self_attn.{p}_layernorm.norms.0.weight", _rows,
        tuple(f"self_attn.{p}_layernorm.norms.{h}.weight" for h in range(1, n)))
        for p, n in (("q", heads), ("k", kv))}
    return Names(_STABLELM.layer, {**_STABLELM.names, **rows}, _STABLELM.top, _STABLELM.bases)


# transformers' defaults (StableLmConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("stablelm", _read, _STABLELM, {
        "hidden_size": 2560, "intermediate_size": 6912, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
        "layer_norm_eps": 1e-05, "tie_word_embeddings": False, "use_qkv_bias": False,
        "qk_layernorm": False, "use_parallel_residual": False},
        weights_for=_names, lm=True),
]
