"""Mamba2 (`mamba2`, Mamba2ForCausalLM): a stack of Mamba2 mixers alone (`mamba2(...)`, Bamba's
tensors under `mixer.`), each behind a pre-norm RMSNorm (`norm`, the final `norm_f`), with no
feed-forward (`ffn = none`)."""

from __future__ import annotations

from .bamba import MAMBA2_COMMENT, mamba2_attention, mamba2_names
from .base import Family
from .names import LM, Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    d, eps = s.need("hidden_size"), s.need("layer_norm_epsilon")
    heads, head = s.need("num_heads"), s.need("head_dim")
    inner = int(s.need("expand") * d)
    if heads * head != inner:
        s.refuse("head_dim", f"num_heads x head_dim must be expand x hidden_size ({inner})")
        return
    for key, want in (("hidden_act", "silu"), ("use_bias", False)):
        if s.get(key, default=want) != want:
            s.refuse(key, "Mamba2's convolution is imported with silu, and its projections "
                          "without biases (a padding slot's would reach the convolution)")
    groups = s.need("n_groups")
    if groups and heads % groups:
        s.refuse("n_groups", f"each group of B and C serves num_heads / n_groups heads: it "
                             f"must divide {heads}")
        return
    s.attentions[f"{s.name}_mixer"] = mamba2_attention(
        s, d, heads, head, s.need("state_size"), groups, s.need("conv_kernel"),
        bool(s.need("use_conv_bias")), eps, s.need("chunk_size"), s.get("time_step_limit"),
        padding)
    s.comments[f"{s.name}_mixer"] = MAMBA2_COMMENT
    s.pattern = [f"{s.name}_mixer"]
    s.stack = {"layers": str(s.need("num_hidden_layers")), "ffn": "none",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


_MAMBA2 = Names("layers.{i}.", {"attn_norm.weight": "norm.weight"},
                {"embed_tokens.weight": "embeddings.weight", "norm.weight": "norm_f.weight",
                 "lm_head.weight": LM["lm_head.weight"]}, ("backbone.",),
                by_kernel={"Mamba2": mamba2_names("mixer.")})

# transformers' defaults (Mamba2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("mamba2", _read, _MAMBA2, {
        "hidden_size": 4096, "num_heads": 128, "head_dim": 64, "state_size": 128,
        "num_hidden_layers": 64, "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4,
        "n_groups": 8, "use_bias": False, "use_conv_bias": True, "hidden_act": "silu",
        "chunk_size": 256, "tie_word_embeddings": False, "time_step_min": 0.001},
        inert={"residual_in_fp32": "the residual's storage type; attndsl computes in "
                                   "`compile --dtype`",
               "time_step_rank": "unused by transformers' Mamba2 (dt comes from in_proj)",
               "time_step_min": "the initial dt's range (training)",
               "time_step_max": "the initial dt's range (training)",
               "time_step_floor": "the initial dt's floor (training)",
               "rescale_prenorm_residual": "how untrained weights are drawn"},
        lm=True, types={**dict.fromkeys(("num_heads", "state_size", "n_groups", "conv_kernel",
                                         "chunk_size"), ("int", 1)),
                        "expand": ("num", 0), "use_conv_bias": ("bool", None)}),
]
