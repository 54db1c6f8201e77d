"""Bamba (`bamba`): Mamba2 layers (`mamba2(...)`, the mixer's in_proj split as z, x, B, C and
dt, its convolution's channels [x | B | C] reordered as attndsl's [C | B | x]) with Llama's
grouped-query softmax attention at attn_layer_indices (RoPE over half of each head, as
BambaConfig sets where rope_parameters gives no factor), pre-norm RMSNorm blocks
(input_layernorm, pre_ff_layernorm, the final norm final_layernorm) and a SwiGLU MLP
(feed_forward)."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .names import ATTN, LM, Names, Split
from .rope import num, rope
from .text import SpecText, mask, period

__all__ = ["FAMILIES", "MAMBA2_COMMENT", "MAMBA2_TYPES", "mamba2_attention", "mamba2_fields",
           "mamba2_names"]

_FLOAT32_MAX = 3.4028234663852886e38


def mamba2_attention(s: SpecText, d: int, heads: int, head_dim: int, state: int, groups: int,
                     conv: int, conv_bias: bool, eps: float, chunk: int,
                     limit: Any, padding: str | None, norm: str = "") -> dict[str, str]:
    """A Mamba2 mixer's attention entries (`norm`: its kernel's norm order, where not Mamba2's
    after_gate); refusals by name where its config's values have no import (a step limit that
    is not a pair of numbers)."""
    extra = f", norm = {norm}" if norm else ""
    if limit is not None:
        if not (isinstance(limit, list | tuple) and len(limit) == 2
                and all(isinstance(x, int | float) and not isinstance(x, bool) for x in limit)
                and 0 <= limit[0] < limit[1]):
            s.refuse("time_step_limit", "a pair of numbers [min, max], 0 <= min < max, is "
                                        "needed")
        else:
            lo, hi = float(limit[0]), float(limit[1])
            if lo > 0:
                extra += f", dt_min = {num(lo)}"
            if hi < _FLOAT32_MAX:  # (past float32's range: no bound the step can reach)
                extra += f", dt_max = {num(hi)}"
    return {"d_model": str(d), "heads": str(heads), "head_dim": str(state),
            "value_dim": str(head_dim), "bias": "false",
            "kernel": (f"mamba2(groups = {groups}, conv = {conv}, chunk = {chunk}, eps = "
                       f"{num(eps)}, conv_bias = {'true' if conv_bias else 'false'}{extra})"),
            "mask": mask(True, padding)}


def _in_proj(part: int) -> Split:
    """z (0), x (1), B (2), C (3) or dt (4) of Mamba2's in_proj rows [z | x | B | C | dt]."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        inner, keys = a.heads * a.value_dim, a.kernel.groups * a.head_dim
        sizes = (inner, inner, keys, keys, a.heads)
        start = sum(sizes[:part])
        return t[start:start + sizes[part]]
    return split


def _conv_order(t: Any, a: Attention, cfg: dict) -> Any:
    """The convolution's channels [x | B | C] (Mamba2's) as attndsl's [C | B | x]."""
    inner, keys = a.heads * a.value_dim, a.kernel.groups * a.head_dim
    return t[[*range(inner + keys, inner + 2 * keys), *range(inner, inner + keys),
              *range(inner)]]


def mamba2_names(mixer: str) -> dict[str, str | tuple]:
    """A Mamba2 layer's tensors, its mixer's under `mixer` (`mamba.`, `mixer.`)."""
    out: dict[str, str | tuple] = {
        f"self_attn.{p}_proj.weight": (f"{mixer}in_proj.weight", _in_proj(i))
        for i, p in enumerate(("z", "x", "B", "C", "dt"))}
    out |= {f"self_attn.conv1d.{w}": (f"{mixer}conv1d.{w}", _conv_order)
            for w in ("weight", "bias")}
    out |= {f"self_attn.{w}": f"{mixer}{w}" for w in ("dt_bias", "A_log", "D", "norm.weight")}
    return out | {"self_attn.o_proj.weight": f"{mixer}out_proj.weight",
                  "self_attn.o_proj.bias": f"{mixer}out_proj.bias"}


def mamba2_fields(s: SpecText, d: int, eps: float, padding: str | None) -> dict | None:
    """The Mamba2 attention of a config with Bamba's field names (`mamba_n_heads`,
    `mamba_d_head`, ...: Bamba's, GraniteMoeHybrid's), or None where refused."""
    if s.get("mamba_proj_bias"):
        s.refuse("mamba_proj_bias", "Mamba2's input projection has no bias here (a padding "
                                    "slot's would reach the convolution)")
    mamba_heads, inner = s.need("mamba_n_heads"), s.need("mamba_expand") * d
    head = s.get("mamba_d_head", default="auto")
    head = inner // max(mamba_heads, 1) if head == "auto" else head
    if not isinstance(head, int) or isinstance(head, bool) or head * mamba_heads != inner:
        s.refuse("mamba_d_head", f"mamba_n_heads x mamba_d_head must be mamba_expand x "
                                 f"hidden_size ({inner})")
        return None
    groups = s.need("mamba_n_groups")
    if groups and mamba_heads % groups:
        s.refuse("mamba_n_groups", f"each group of B and C serves mamba_n_heads / "
                                   f"mamba_n_groups heads: it must divide {mamba_heads}")
        return None
    return mamba2_attention(
        s, d, mamba_heads, head, s.need("mamba_d_state"), groups,
        s.need("mamba_d_conv"), bool(s.need("mamba_conv_bias")), eps,
        s.need("mamba_chunk_size"), s.get("time_step_limit"), padding)


MAMBA2_COMMENT = "Mamba2: a state per head decaying by exp(dt A) per token; padding slots skipped"
# the Mamba2 fields' types (Bamba's names, GraniteMoeHybrid's): `mamba_d_head` is "auto" or an
# integer, the step limit a pair, read where they are used
MAMBA2_TYPES = {
    **dict.fromkeys(("mamba_n_heads", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                     "mamba_expand", "mamba_chunk_size"), ("int", 1)),
    "mamba_conv_bias": ("bool", None), "mamba_proj_bias": ("bool", None)}


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv = s.get("num_key_value_heads", default=heads)
    layers, eps = s.need("num_hidden_layers"), s.need("rms_norm_eps")
    full = s.get("attn_layer_indices") or []
    if not isinstance(full, list) or not all(isinstance(i, int) for i in full):
        s.refuse("attn_layer_indices", "a list of layer indices is needed")
        return
    types = ["full_attention" if i in full else "mamba" for i in range(layers)]
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "Bamba's MLP is imported as SwiGLU and its convolution's "
                               "activation as silu")
    mamba = mamba2_fields(s, d, eps, padding)
    if mamba is None:
        return
    s.attentions["bamba_mamba"] = mamba
    s.comments["bamba_mamba"] = MAMBA2_COMMENT
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    params = dict(cfg.get("rope_parameters") or {"rope_type": "default",
                                                   "rope_theta": cfg.get("rope_theta", 1e4)})
    params.setdefault("partial_rotary_factor", 0.5)  # (BambaConfig's where none is given)
    s.attentions["bamba_attn"] = {
        "d_model": str(d), "heads": str(heads), "kv_heads": str(kv), "head_dim": str(head_dim),
        "bias": "true" if s.get("attention_bias") else "false",
        "position": rope(s, params, head_dim), "mask": mask(True, padding)}
    names = {"mamba": "bamba_mamba", "full_attention": "bamba_attn"}
    s.pattern = [names[t] for t in period(types)]
    for kind in set(names) - set(types):
        del s.attentions[names[kind]]
    bias = ", bias = true" if s.get("mlp_bias") else ""
    s.stack = {"layers": str(layers), "ffn": f"swiglu({s.need('intermediate_size')}{bias})",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


_BAMBA = Names("layers.{i}.", {
    **ATTN,
    **{f"mlp.{p}_proj.{w}": f"feed_forward.{p}_proj.{w}" for p in ("gate", "up", "down")
       for w in ("weight", "bias")},
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "pre_ff_layernorm.weight"},
    {"norm.weight": "final_layernorm.weight", **LM}, ("model.",),
    by_kernel={"Mamba2": mamba2_names("mamba.")})

# transformers' defaults (BambaConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("bamba", _read, _BAMBA, {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "mamba_n_heads": 128,
        "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2,
        "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False,
        "attention_bias": False, "mlp_bias": False},
        inert={"num_logits_to_keep": "how many positions' logits generation computes",
               "z_loss_coefficient": "a training loss term",
               "time_step_min": "the initial dt's range (training)",
               "time_step_max": "the initial dt's range (training)",
               "time_step_floor": "the initial dt's floor (training)"}, lm=True,
        types={**MAMBA2_TYPES, "attn_layer_indices": ("list", None)}),
]
