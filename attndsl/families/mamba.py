"""Mamba (`mamba`, MambaForCausalLM) and Falcon-Mamba (`falcon_mamba`): a stack of Mamba mixers
alone (`mamba(...)`: each of the expand x hidden_size channels a head of key dim state_size and
value dim 1), each behind a pre-norm RMSNorm (`norm`, the final `norm_f`), with no feed-forward
(`ffn = none`). Falcon-Mamba RMS-norms dt's features, B and C without weights
(`norm = weightless`, eps mixer_rms_eps)."""

from __future__ import annotations

import math

from .base import Family
from .names import LM, Names
from .rope import num
from .text import SpecText, mask

__all__ = ["FAMILIES", "MAMBA_COMMENT", "dt_rank", "mamba_names"]

MAMBA_COMMENT = ("Mamba: a state per channel decaying by exp(dt A) per token and state "
                 "feature; padding slots skipped")


def _read(s: SpecText, padding: str | None) -> None:
    d, eps = s.need("hidden_size"), s.need("layer_norm_epsilon")
    inner = int(s.need("expand") * d)
    for key, want in (("hidden_act", "silu"), ("use_bias", False)):
        if s.get(key, default=want) != want:
            s.refuse(key, "Mamba's convolution is imported with silu, and its projections "
                          "without biases (a padding slot's would reach the convolution)")
    rank = dt_rank(s, "time_step_rank", d)
    if rank is None:
        return
    norm = (f", norm = weightless, eps = {num(s.need('mixer_rms_eps'))}"
            if s.cfg.get("model_type") == "falcon_mamba" else "")
    s.attentions[f"{s.name}_mixer"] = {
        "d_model": str(d), "heads": str(inner), "head_dim": str(s.need("state_size")),
        "value_dim": "1", "bias": "false",
        "kernel": (f"mamba(rank = {rank}, conv = {s.need('conv_kernel')}, conv_bias = "
                   f"{'true' if s.need('use_conv_bias') else 'false'}{norm})"),
        "mask": mask(True, padding)}
    s.comments[f"{s.name}_mixer"] = MAMBA_COMMENT
    s.pattern = [f"{s.name}_mixer"]
    s.stack = {"layers": str(s.need("num_hidden_layers")), "ffn": "none",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


def dt_rank(s: SpecText, field: str, d: int) -> int | None:
    """The dt features' rank `field` says: ceil(d / 16) where `auto`; None (refused by name)
    where it is neither `auto` nor an integer >= 1."""
    rank = s.get(field, default="auto")
    rank = math.ceil(d / 16) if rank == "auto" else rank
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        s.refuse(field, "`auto` or an integer >= 1 is needed")
        return None
    return rank


def mamba_names(mixer: str) -> dict[str, str]:
    """A Mamba layer's tensors, its mixer's under `mixer` (`mixer.`, `mamba.`)."""
    out = {f"self_attn.{w}": f"{mixer}{w}" for w in (
        "in_proj.weight", "conv1d.weight", "conv1d.bias", "x_proj.weight", "dt_proj.weight",
        "dt_proj.bias", "A_log", "D", "dt_layernorm.weight", "b_layernorm.weight",
        "c_layernorm.weight")}
    return out | {"self_attn.o_proj.weight": f"{mixer}out_proj.weight",
                  "self_attn.o_proj.bias": f"{mixer}out_proj.bias"}


_MAMBA = Names("layers.{i}.", {"attn_norm.weight": "norm.weight"},
               {"embed_tokens.weight": "embeddings.weight", "norm.weight": "norm_f.weight",
                "lm_head.weight": LM["lm_head.weight"]}, ("backbone.",),
               by_kernel={"Mamba": mamba_names("mixer.")})

_INERT = {"residual_in_fp32": "the residual's storage type; attndsl computes in "
                              "`compile --dtype`",
          "intermediate_size": "derived: expand x hidden_size, as the config recomputes it",
          "time_step_scale": "the initial dt's scale (training)",
          "time_step_min": "the initial dt's range (training)",
          "time_step_max": "the initial dt's range (training)",
          "time_step_init_scheme": "how the initial dt is drawn (training)",
          "time_step_floor": "the initial dt's floor (training)",
          "rescale_prenorm_residual": "how untrained weights are drawn",
          "use_mambapy": "which implementation of the scan transformers runs",
          "use_associative_scan": "which implementation of the scan transformers runs"}
_TYPES = {**dict.fromkeys(("state_size", "conv_kernel"), ("int", 1)), "expand": ("num", 0),
          "use_conv_bias": ("bool", None), "mixer_rms_eps": ("num", 0)}
_DEFAULTS = {"hidden_size": 768, "state_size": 16, "num_hidden_layers": 32,
             "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4, "use_bias": False,
             "use_conv_bias": True, "hidden_act": "silu", "tie_word_embeddings": True,
             "time_step_min": 0.001}

# transformers' defaults (MambaConfig, FalconMambaConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("mamba", _read, _MAMBA, _DEFAULTS, inert=_INERT, lm=True, types=_TYPES),
    Family("falcon_mamba", _read, _MAMBA, {**_DEFAULTS, "mixer_rms_eps": 1e-6}, inert=_INERT,
           lm=True, types=_TYPES),
]
