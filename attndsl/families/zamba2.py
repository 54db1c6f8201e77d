"""Zamba2 (`zamba2`): Mamba2 layers (`mamba2(...)`, Bamba's tensors; the convolution always
with a bias, the gated norm's epsilon 1e-5, dt at least time_step_min) and a shared
transformer block beside the hybrid layers (`side`): over [x ; e] (the layer's input and the
token embeddings, 2 hidden_size wide) RMSNorm, an attention of attention_head_dim-wide heads
(scaled by (attention_head_dim / 2)^-1/2, RoPE where use_mem_rope) writing hidden_size, RMSNorm,
a gated MLP and the layer's own `linear`, added to the Mamba2 layer's input before its norm.
The hybrid layers take the num_mem_blocks shared blocks in turn (hybrid layer k block
k mod num_mem_blocks, kept under the first hybrid layer that uses it), each use with its own
low-rank adapters (adapter slot k: on q, k and v where use_shared_attention_adapter, on the
MLP's gate_up_proj always), which the import adds to the weights it reads, W + B A, per
hybrid layer (attndsl's blocks keep their side tensors apart: `layers.{i}.side_*`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import Attention
from .bamba import MAMBA2_COMMENT, mamba2_attention, mamba2_names
from .base import Family
from .names import LM, Names, Split
from .rope import num, rope
from .text import SpecText, mask

__all__ = ["FAMILIES"]

# transformers' Zamba2RMSNormGated's epsilon (it ignores rms_norm_eps)
_GATED_EPS = 1e-5
_KINDS = {"mamba": "mamba", "linear_attention": "mamba", "hybrid": "hybrid"}
_SHARED = "shared_transformer."
# the shared MLP's activation -> attndsl's gated MLP
_GATED = {"gelu": "gelu_glu", "silu": "swiglu", "swish": "swiglu", "gelu_new": "geglu",
          "gelu_pytorch_tanh": "geglu"}


def _types(s: SpecText) -> list[str] | None:
    """Each layer's kind, mamba or hybrid (layers_block_type, or its alias layer_types), or
    None where refused."""
    types = s.get("layers_block_type", "layer_types")
    if not isinstance(types, list) or len(types) != s.need("num_hidden_layers") \
            or any(t not in _KINDS for t in types):
        s.refuse("layers_block_type", "a list of `mamba` (or `linear_attention`) and `hybrid`, "
                                      "one per layer, is needed")
        return None
    types = [_KINDS[t] for t in types]
    hybrid = [i for i, t in enumerate(types) if t == "hybrid"]
    if s.get("hybrid_layer_ids", default=hybrid) != hybrid:
        s.refuse("hybrid_layer_ids", f"the hybrid layers of layers_block_type ({hybrid}) "
                                     "are needed")
        return None
    return types


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv = s.get("num_key_value_heads", default=heads)
    eps = s.need("rms_norm_eps")
    types = _types(s)
    if types is None:
        return
    if s.get("add_bias_linear"):
        s.refuse("add_bias_linear", "Mamba2's input projection has no bias here (a padding "
                                    "slot's would reach the convolution)")
    inner, mamba_heads = int(s.need("mamba_expand") * d), s.need("n_mamba_heads")
    head = s.get("mamba_headdim", default=inner // max(mamba_heads, 1))
    groups = s.need("mamba_ngroups")
    if head * mamba_heads != inner or (groups and mamba_heads % groups):
        s.refuse("mamba_headdim", f"n_mamba_heads x mamba_headdim must be mamba_expand x "
                                  f"hidden_size ({inner}), and mamba_ngroups divide "
                                  "n_mamba_heads")
        return
    dt_min = s.get("time_step_min", default=0.0)
    s.attentions["zamba2_mamba"] = mamba2_attention(
        s, d, mamba_heads, head, s.need("mamba_d_state"), groups, s.need("mamba_d_conv"),
        True, _GATED_EPS, s.need("chunk_size"), [dt_min, float("inf")], padding)
    s.comments["zamba2_mamba"] = MAMBA2_COMMENT
    width = s.get("attention_hidden_size", default=2 * d)
    head_dim = s.get("attention_head_dim", "head_dim", default=width // max(heads, 1))
    if width != 2 * d:
        s.refuse("attention_hidden_size", f"the shared block reads [x ; e], 2 x hidden_size "
                                          f"= {2 * d} wide")
    if s.get("use_shared_attention_adapter") and (kv != heads or heads * head_dim != width):
        s.refuse("use_shared_attention_adapter", "the q, k and v adapters write "
                                                 "attention_hidden_size each: kv heads must be "
                                                 "the heads, and heads x attention_head_dim "
                                                 "must be attention_hidden_size (transformers "
                                                 "fails otherwise)")
    params = dict(s.get("rope_parameters") or {"rope_type": "default", "rope_theta": 1e4})
    factor = params.pop("partial_rotary_factor", s.get("partial_rotary_factor", default=1.0))
    if s.get("use_mem_rope") and params.get("rope_type", "default") != "default" \
            and factor != 1.0:
        s.refuse("partial_rotary_factor", "Zamba2's RoPE turns the whole head (its factor is "
                                          "read by the scaled RoPE types alone)")
    s.attentions["zamba2_shared"] = {
        "d_model": str(2 * d), "out_dim": str(d), "heads": str(heads), "kv_heads": str(kv),
        "head_dim": str(head_dim), "bias": "false", "scale": num((head_dim / 2) ** -0.5),
        "position": rope(s, params, head_dim, dim=head_dim) if s.get("use_mem_rope")
        else "none",  # (the default RoPE turns every pair, whatever partial_rotary_factor)
        "mask": mask(True, padding)}
    s.comments["zamba2_shared"] = ("the shared block's attention: [x ; e] in, hidden_size "
                                   "out")
    gated = _GATED.get(s.get("hidden_act", default="gelu"))
    if gated is None:
        s.refuse("hidden_act", f"the shared MLP is imported gated, with one of "
                               f"{', '.join(sorted(_GATED))}")
    hybrid = ", ".join(str(i) for i, t in enumerate(types) if t == "hybrid")
    s.get("num_mem_blocks")  # (read by the name table: which shared block each layer uses)
    s.pattern = ["zamba2_mamba"]
    s.stack = {"layers": str(len(types)), "ffn": "none",
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}
    if hybrid:
        s.stack["side"] = (f"side(attention = zamba2_shared, ffn = {gated}("
                           f"{s.get('intermediate_size', default=4 * d)}), layers = [{hybrid}])")
    else:
        del s.attentions["zamba2_shared"]


def _merged(t: list[Any], a: Attention, cfg: dict) -> Any:
    """W + B A: a weight with its low-rank adapter (A [r, in], B [out, r]) added, in float64,
    rounded once to float32 (a half-precision checkpoint's sum is not rounded to its dtype:
    transformers adds the adapter's output to the weight's in the model's arithmetic)."""
    w, down, up = (np.asarray(x, np.float64) for x in t)
    return (w + up @ down).astype(np.float32)


def _merged_rows(part: int) -> Split:
    """gate_up_proj's gate (0) or up (1) rows, with the adapter added."""
    def split(t: list[Any], a: Attention, cfg: dict) -> Any:
        w = _merged(t, a, cfg)
        n = w.shape[0] // 2
        return w[part * n:(part + 1) * n]
    return split


def _adapter(name: str) -> tuple[str, str]:
    """The low-rank adapter of `name` at the block's slot `{k}`: (A, B)."""
    return tuple(f"{_SHARED}{name}_adapter_list.{{k}}.{j}.weight" for j in (0, 1))


def _names(cfg: dict) -> Names:
    """The table of this config's layers: hybrid layer k's side block under layer
    hybrid_layer_ids[k mod num_mem_blocks], its adapters at slot k; a hybrid layer's Mamba2
    under `mamba_decoder.`."""
    types = [_KINDS.get(t, "mamba") for t in cfg.get("layers_block_type")
             or cfg.get("layer_types") or []]
    hybrid = [i for i, t in enumerate(types) if t == "hybrid"]
    blocks = max(int(cfg.get("num_mem_blocks") or 1), 1)
    attn = "self_attn.linear_{}"
    side: dict[str, str | tuple] = {
        "side_norm.weight": f"{_SHARED}input_layernorm.weight",
        "side_attn.o_proj.weight": f"{_SHARED}self_attn.o_proj.weight",
        "side_ffn_norm.weight": f"{_SHARED}pre_ff_layernorm.weight",
        "side_mlp.down_proj.weight": f"{_SHARED}feed_forward.down_proj.weight",
        "side_proj.weight": "linear.weight",
        **{f"side_mlp.{p}_proj.weight": (f"{_SHARED}feed_forward.gate_up_proj.weight",
                                         _merged_rows(i), _adapter("feed_forward.gate_up_proj"))
           for i, p in enumerate(("gate", "up"))}}
    for p in "qkv":
        proj = f"{_SHARED}self_attn.{p}_proj.weight"
        side[f"side_attn.{p}_proj.weight"] = (proj, _merged, _adapter(attn.format(p))) \
            if cfg.get("use_shared_attention_adapter") else proj
    return Names("layers.{i}.", {
        **mamba2_names("{m}mamba."), "attn_norm.weight": "{m}input_layernorm.weight", **side},
        {"norm.weight": "final_layernorm.weight", **LM}, ("model.",),
        fields={i: {"m": "mamba_decoder." if i in hybrid else "",
                    "k": str(hybrid.index(i)) if i in hybrid else "0"}
                for i in range(len(types))},
        sides={i: hybrid[k % blocks] for k, i in enumerate(hybrid)})


# transformers' defaults (Zamba2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("zamba2", _read, _names({}), {
        "hidden_size": 2560, "num_hidden_layers": 54, "num_attention_heads": 32,
        "hidden_act": "gelu", "use_conv_bias": True,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "mamba_d_state": 64,
        "mamba_d_conv": 4, "mamba_expand": 2, "mamba_ngroups": 1, "n_mamba_heads": 8,
        "chunk_size": 256, "time_step_min": 0.001, "add_bias_linear": False,
        "num_mem_blocks": 1, "use_shared_attention_adapter": False, "use_mem_rope": False},
        inert={"num_logits_to_keep": "how many positions' logits generation computes",
               "time_step_max": "the initial dt's range (training)",
               "time_step_floor": "the initial dt's floor (training)",
               "use_conv_bias": "Zamba2's convolution always has a bias",
               "use_long_context": "only max_position_embeddings (no RoPE change)",
               "use_mem_eff_path": "a kernel choice", "use_mamba_kernels": "a kernel choice",
               "kv_channels": "not read by the model", "num_query_groups": "not read by the "
                                                                          "model",
               "adapter_rank": "the adapters' shapes give it"},
        lm=True, weights_for=_names, kinds=("hybrid",),
        types={"n_mamba_heads": ("int", 1), "mamba_headdim": ("int", 1),
               "mamba_ngroups": ("int", 1), "mamba_d_state": ("int", 1),
               "mamba_d_conv": ("int", 1), "mamba_expand": ("int", 1),
               "chunk_size": ("int", 1), "num_mem_blocks": ("int", 1),
               "attention_hidden_size": ("int", 1), "attention_head_dim": ("int", 1),
               "time_step_min": ("num", 0), "layers_block_type": ("list", None),
               "hybrid_layer_ids": ("list", None), "add_bias_linear": ("bool", None),
               "use_shared_attention_adapter": ("bool", None), "use_mem_rope": ("bool", None)}),
]
