"""Falcon-H1 (`falcon_h1`): every layer runs Llama's attention (RoPE) and a Mamba2 mixer side
by side on one normed input (`parallel`: the mixer's norm after or before its gate, or none,
as mamba_rms_norm and mamba_norm_before_gate say), their outputs summed, then a SwiGLU MLP.
Its muP multipliers are folded into the weights they scale, as transformers applies them:
the attention's input (attention_in_multiplier) into q, k and v, key_multiplier into k,
attention_out_multiplier into o_proj; the mixer's input (ssm_in_multiplier) and the five
sections of its in_proj output (ssm_multipliers: z, x, B, C, dt) into in_proj's rows,
ssm_out_multiplier into out_proj; mlp_multipliers into gate_proj and down_proj. The
embeddings' and the head's (embedding_multiplier, lm_head_multiplier) are the stack's
`embedding_scale` and `logit_scale`."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .bamba import MAMBA2_COMMENT, _conv_order, _in_proj, mamba2_attention
from .base import Family
from .names import LM, Names, Split
from .rope import num, rope
from .text import SpecText, mask

__all__ = ["FAMILIES"]

# the scalar multipliers folded into the weights (1 where config.json gives none)
_MULTIPLIERS = ("attention_in_multiplier", "key_multiplier", "attention_out_multiplier",
                "ssm_in_multiplier", "ssm_out_multiplier")


def _factor(cfg: dict, *keys: str) -> float:
    out = 1.0
    for key in keys:
        value = cfg.get(key)
        out *= 1.0 if value is None else float(value)
    return out


def _scaled(*keys: str) -> Split:
    """The tensor times the product of the config's multipliers `keys`."""
    def scale(t: Any, a: Attention, cfg: dict) -> Any:
        return t * _factor(cfg, *keys)
    return scale


def _mlp(which: int) -> Split:
    """gate_proj's (0) or down_proj's (1) rows times mlp_multipliers[which]."""
    def scale(t: Any, a: Attention, cfg: dict) -> Any:
        m = cfg.get("mlp_multipliers") or [1.0, 1.0]
        return t * float(m[which])
    return scale


def _in_rows(part: int, bias: bool = False) -> Split:
    """in_proj's z (0), x (1), B (2), C (3) or dt (4) rows times ssm_multipliers[part] (and,
    for the weight, ssm_in_multiplier: it scales the mixer's input)."""
    rows = _in_proj(part)

    def scale(t: Any, a: Attention, cfg: dict) -> Any:
        m = cfg.get("ssm_multipliers") or [1.0] * 5
        factor = float(m[part]) * (1.0 if bias else _factor(cfg, "ssm_in_multiplier"))
        return rows(t, a, cfg) * factor
    return scale


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    eps, layers = s.need("rms_norm_eps"), s.need("num_hidden_layers")
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "Falcon-H1's MLP is imported as SwiGLU and its convolution's "
                               "activation as silu")
    if s.get("mamba_proj_bias"):
        s.refuse("mamba_proj_bias", "Mamba2's input projection has no bias here (a padding "
                                    "slot's would reach the convolution)")
    for key in _MULTIPLIERS:  # (folded into the weights they scale, as `compile --weights` reads)
        if not isinstance(s.get(key, default=1.0), int | float) or isinstance(s.get(key), bool):
            s.refuse(key, "a number is needed")
            return
    for key, count in (("mlp_multipliers", 2), ("ssm_multipliers", 5)):
        value = s.get(key)
        if value is not None and not (isinstance(value, list) and len(value) == count and all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in value)):
            s.refuse(key, f"a list of {count} numbers is needed")
            return
    expand = s.need("mamba_expand")
    inner = s.get("mamba_d_ssm") or int(expand * d)
    mamba_heads = s.need("mamba_n_heads")
    head = s.get("mamba_d_head", default="auto")
    head = inner // max(mamba_heads, 1) if head == "auto" else head
    if not isinstance(head, int) or isinstance(head, bool) or head * mamba_heads != inner:
        s.refuse("mamba_d_head", f"mamba_n_heads x mamba_d_head must be the mixer's width "
                                 f"({inner}: mamba_d_ssm, else mamba_expand x hidden_size)")
        return
    groups = s.need("mamba_n_groups")
    if groups and mamba_heads % groups:
        s.refuse("mamba_n_groups", f"each group of B and C serves mamba_n_heads / "
                                   f"mamba_n_groups heads: it must divide {mamba_heads}")
        return
    norm, before = "none", s.get("mamba_norm_before_gate", default=True)
    if s.get("mamba_rms_norm"):
        norm = "before_gate" if before else ""
    mixer = mamba2_attention(
        s, d, mamba_heads, head, s.need("mamba_d_state"), groups, s.need("mamba_d_conv"),
        bool(s.need("mamba_conv_bias")), eps, s.need("mamba_chunk_size"),
        s.get("time_step_limit"), padding, norm)
    if s.get("projectors_bias"):
        mixer["bias"] = "[o]"
    s.attentions["falcon_h1_mamba"] = mixer
    s.comments["falcon_h1_mamba"] = MAMBA2_COMMENT + "; beside each block's attention"
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    s.attentions["falcon_h1_attn"] = {
        "d_model": str(d), "heads": str(heads),
        "kv_heads": str(s.get("num_key_value_heads", default=heads)),
        "head_dim": str(head_dim), "bias": "true" if s.get("attention_bias") else "false",
        "position": rope(s, cfg.get("rope_parameters"), head_dim), "mask": mask(True, padding)}
    s.pattern = ["falcon_h1_attn"]
    bias = ", bias = true" if s.get("mlp_bias") else ""
    s.stack = {"layers": str(layers), "parallel": "falcon_h1_mamba",
               "ffn": f"swiglu({s.need('intermediate_size')}{bias})",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}
    scale, logits = s.get("embedding_multiplier"), s.get("lm_head_multiplier")
    if scale not in (None, 1, 1.0):
        s.head["embedding_scale"] = num(float(scale))
    if logits not in (None, 1, 1.0):
        s.head["logit_scale"] = num(float(logits))


def _attn(proj: str, *keys: str) -> dict[str, str | tuple]:
    """A projection's weight times the multipliers `keys`, its bias times those but the first
    (the attention's input multiplier scales x, not the bias)."""
    name = f"self_attn.{proj}."
    return {f"{name}weight": (f"{name}weight", _scaled(*keys)),
            f"{name}bias": (f"{name}bias", _scaled(*keys[1:])) if keys[1:] else f"{name}bias"}


_M = "mamba."
_IN = "attention_in_multiplier"
_ATTN: dict[str, str | tuple] = {
    **_attn("q_proj", _IN), **_attn("k_proj", _IN, "key_multiplier"), **_attn("v_proj", _IN),
    **{f"self_attn.o_proj.{w}": (f"self_attn.o_proj.{w}", _scaled("attention_out_multiplier"))
       for w in ("weight", "bias")}}
_MIXER: dict[str, str | tuple] = {
    **{f"parallel_attn.{p}_proj.weight": (f"{_M}in_proj.weight", _in_rows(i))
       for i, p in enumerate(("z", "x", "B", "C", "dt"))},
    **{f"parallel_attn.conv1d.{w}": (f"{_M}conv1d.{w}", _conv_order)
       for w in ("weight", "bias")},
    **{f"parallel_attn.{w}": f"{_M}{w}" for w in ("dt_bias", "A_log", "D", "norm.weight")},
    **{f"parallel_attn.o_proj.{w}": (f"{_M}out_proj.{w}", _scaled("ssm_out_multiplier"))
       for w in ("weight", "bias")}}
_MLP: dict[str, str | tuple] = {
    **{f"mlp.{p}_proj.{w}": (f"feed_forward.{p}_proj.{w}", _mlp(0)) for p in ("gate",)
       for w in ("weight", "bias")},
    **{f"mlp.up_proj.{w}": f"feed_forward.up_proj.{w}" for w in ("weight", "bias")},
    **{f"mlp.down_proj.{w}": (f"feed_forward.down_proj.{w}", _mlp(1))
       for w in ("weight", "bias")}}
_FALCON_H1 = Names("layers.{i}.", {
    **_ATTN, **_MIXER, **_MLP, "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "pre_ff_layernorm.weight"},
    {"norm.weight": "final_layernorm.weight", **LM}, ("model.",))

# transformers' defaults (FalconH1Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("falcon_h1", _read, _FALCON_H1, {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "mamba_d_ssm": 1024,
        "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
        "mamba_expand": 2, "mamba_chunk_size": 256, "mamba_conv_bias": True,
        "mamba_proj_bias": False, "mamba_norm_before_gate": True, "mamba_rms_norm": False,
        "projectors_bias": False, "lm_head_multiplier": 1.0, "embedding_multiplier": 1.0,
        "key_multiplier": 1.0, "attention_out_multiplier": 1.0,
        "attention_in_multiplier": 1.0, "ssm_in_multiplier": 1.0, "ssm_out_multiplier": 1.0,
        "attention_bias": False, "mlp_bias": False},
        inert={"num_logits_to_keep": "how many positions' logits generation computes"},
        lm=True, types={
            **dict.fromkeys(("mamba_d_ssm",), ("int", 1)),
            **dict.fromkeys(("mamba_norm_before_gate", "mamba_rms_norm", "projectors_bias"),
                            ("bool", None)),
            **dict.fromkeys(("lm_head_multiplier", "key_multiplier",
                             "attention_out_multiplier", "attention_in_multiplier",
                             "ssm_in_multiplier", "ssm_out_multiplier"), ("num", None)),
            "mlp_multipliers": ("list", None), "ssm_multipliers": ("list", None)}),
]
