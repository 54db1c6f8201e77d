"""Granite 4 (`granitemoehybrid`): GraniteMoeShared's decoder (its four multipliers, a mixture
of SwiGLU experts stored fused under `block_sparse_moe` beside a shared SwiGLU expert,
`shared_mlp`; the shared expert alone where num_local_experts is 0) whose layers are Mamba2
mixers (`mamba2(...)`, Bamba's fields) or softmax attention as layer_types says; the attention
has RoPE with position_embedding_type "rope", no positions otherwise."""

from __future__ import annotations

from .bamba import MAMBA2_COMMENT, MAMBA2_TYPES, mamba2_fields, mamba2_names
from .base import Family
from .granite import FAMILIES as _GRANITE
from .granitemoe import DEFAULTS, GRANITEMOE_SHARED, half
from .moe import ROUTER_INERT, expanded
from .names import Names
from .text import SpecText, period

__all__ = ["FAMILIES"]

_read_granite = next(f.read for f in _GRANITE if f.model_type == "granite")
_KINDS = {"mamba": "linear_attention", "attention": "full_attention"}  # the legacy names


def _read(s: SpecText, padding: str | None) -> None:
    cfg, layers = s.cfg, s.need("num_hidden_layers")
    types = s.get("layer_types", "layers_block_type")  # (its attribute_map's alias)
    if types is None:
        types = ["linear_attention"] * layers  # (its config's default)
    if isinstance(types, list):
        types = [_KINDS.get(t, t) for t in types]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(
            _KINDS.values()):
        s.refuse("layer_types", f"{layers} entries, each linear_attention (mamba) or "
                                "full_attention (attention), are needed")
        return
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "Granite 4's MLPs are imported as SwiGLU and its "
                               "convolution's activation as silu")
    cfg["layer_types"] = None  # (the softmax attention alone, as Granite's reader reads it)
    _read_granite(s, padding)
    cfg["layer_types"] = types
    if not s.attentions:  # (refused: a field it needs is missing)
        return
    full = s.attentions.pop(next(iter(s.attentions)))
    if s.get("position_embedding_type") != "rope":
        full.pop("position", None)  # (GraniteMoeHybrid rotates nothing then)
    mamba = mamba2_fields(s, s.need("hidden_size"), s.need("rms_norm_eps"), padding)
    if mamba is None:
        return
    names = {"linear_attention": f"{s.name}_mamba", "full_attention": f"{s.name}_attn"}
    if "full_attention" in types:
        s.attentions[names["full_attention"]] = full
    if "linear_attention" in types:
        s.attentions[names["linear_attention"]] = mamba
        s.comments[names["linear_attention"]] = MAMBA2_COMMENT
    s.pattern = [names[t] for t in period(types)]
    experts, shared = s.need("num_local_experts"), s.get("shared_intermediate_size", default=0)
    if not experts:
        if not shared:
            s.refuse("shared_intermediate_size", "a layer with neither experts nor a shared "
                                                 "MLP has no import")
        s.stack["ffn"] = f"swiglu({shared})"
        return
    ffn = (f"moe(experts = {experts}, top_k = {s.need('num_experts_per_tok')}, expert = "
           f"swiglu({s.need('intermediate_size')})")
    s.stack["ffn"] = ffn + (f", shared = swiglu({shared}))" if shared else ")")


_HYBRID = Names(GRANITEMOE_SHARED.layer, GRANITEMOE_SHARED.names, GRANITEMOE_SHARED.top,
                GRANITEMOE_SHARED.bases, by_kernel={"Mamba2": mamba2_names("mamba.")})
# num_local_experts 0: the shared expert is the layer's MLP
_DENSE = Names(_HYBRID.layer, {
    **{k: v for k, v in _HYBRID.names.items() if not k.startswith("mlp.")},
    "mlp.gate_proj.weight": ("shared_mlp.input_linear.weight", half(False, False)),
    "mlp.up_proj.weight": ("shared_mlp.input_linear.weight", half(True, False)),
    "mlp.down_proj.weight": "shared_mlp.output_linear.weight"},
    _HYBRID.top, _HYBRID.bases, by_kernel=_HYBRID.by_kernel)


def _weights(cfg: dict) -> Names:
    experts = cfg.get("num_local_experts", DEFAULTS["num_local_experts"])
    return expanded(_HYBRID)(cfg) if experts else _DENSE


# transformers' defaults (GraniteMoeHybridConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("granitemoehybrid", _read, _HYBRID, {
        **DEFAULTS, "shared_intermediate_size": 1024, "mamba_n_heads": 128,
        "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2,
        "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False},
        inert=ROUTER_INERT, lm=True, weights_for=_weights, kinds=tuple(_KINDS),
        types=MAMBA2_TYPES),
]
