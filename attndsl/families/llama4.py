"""Llama 4's text model (`llama4_text`, and the text model of the multimodal `llama4`): chunked
causal attention with RoPE (interleaved pairs) and a weightless L2 qk-norm on most layers,
NoPE full-attention layers with attention temperature tuning between them (layer_types,
no_rope_layers), and a mixture of experts with a sigmoid router whose score multiplies the
expert's input, a shared expert beside it, on the layers in moe_layers; the others run a dense
SwiGLU of intermediate_size_mlp. The experts are stored fused: `gate_up_proj` [experts, d,
2 n] (each expert's gate columns, then its up columns) and `down_proj` [experts, n, d]."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names, Split
from .rope import num, rope
from .text import SpecText, period

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv = s.get("num_key_value_heads", default=heads)
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    eps, layers = s.need("rms_norm_eps"), s.need("num_hidden_layers")
    every = s.get("no_rope_layer_interval", default=4)
    ropes = s.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
    types = s.get("layer_types") or ["chunked_attention" if r else "full_attention"
                                     for r in ropes]
    if len(ropes) != layers or len(types) != layers:
        s.refuse("no_rope_layers" if len(ropes) != layers else "layer_types",
                 f"a list of {layers} entries (one per layer) is needed")
        return
    other = [k for k in dict.fromkeys(types) if k not in ("chunked_attention", "full_attention")]
    if other:  # refused before any attention is named (two kinds would share a name)
        s.refuse("layer_types", f"Llama 4's layers are chunked_attention or full_attention; "
                                f"attndsl does not import layer kind `{other[0]}` for it")
        return
    base = {"d_model": str(d), "heads": str(heads), "kv_heads": str(kv),
            "head_dim": str(head_dim), "bias": "true" if cfg.get("attention_bias") else "false"}
    tail = ("padding" if padding == "right" else "padding(side = left)") if padding else None
    kinds = list(zip(types, (bool(r) for r in ropes), strict=True))
    for kind, roped in dict.fromkeys(kinds):
        entries = dict(base)
        if roped:
            entries["position"] = rope(s, cfg.get("rope_parameters"), head_dim,
                                       interleaved=True)
            if cfg.get("use_qk_norm"):
                entries["qk_norm"] = f"l2norm(eps = {num(eps)})"
        elif cfg.get("attn_temperature_tuning"):
            entries["temperature"] = (f"log(floor = {s.need('floor_scale')}, scale = "
                                      f"{num(s.need('attn_scale'))})")
        mask = ["causal"]
        if kind == "chunked_attention":
            mask.append(f"chunked({s.need('attention_chunk_size')})")
        entries["mask"] = " & ".join(mask + ([tail] if tail else []))
        name = f"llama4_{'chunked' if kind == 'chunked_attention' else 'full'}" + (
            "" if roped else "_nope")
        s.attentions[name] = entries
        s.comments[name] = ("RoPE (interleaved) and L2 qk-norm" if roped else
                            "a NoPE layer: no position encoding") + (
            f"; each query sees the keys of its chunk of {cfg.get('attention_chunk_size')} "
            "tokens" if kind == "chunked_attention" else "")
    names = list(s.attentions)
    unique = list(dict.fromkeys(kinds))
    s.pattern = [names[unique.index(k)] for k in period(kinds)]
    step = s.get("interleave_moe_layer_step", default=1)
    moe_layers = s.get("moe_layers")
    if moe_layers is None:
        moe_layers = list(range(step - 1, layers, step))
    elif any(i >= layers for i in moe_layers):
        s.refuse("moe_layers", f"layer indices 0 .. {layers - 1} are needed")
        return
    dense = [i for i in range(layers) if i not in moe_layers]
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "Llama 4's MLPs and experts are SwiGLU (silu)")
    hidden, dense_hidden = s.need("intermediate_size"), s.need("intermediate_size_mlp")
    ffn = (f"moe(experts = {s.need('num_local_experts')}, top_k = "
           f"{s.need('num_experts_per_tok')}, expert = swiglu({hidden}), router = sigmoid, "
           f"normalize = false, gate = input, shared = swiglu({hidden})")
    s.stack = {"layers": str(layers), "ffn": mixture(ffn, dense, layers, dense_hidden),
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


def _half(start: int, weight: bool):
    """Expert e's gate (start 0) or up (start 1) half of gate_up_proj [experts, d, 2 n],
    transposed to [n, d]; `weight` False takes down_proj [experts, n, d] to [d, n]."""
    def make(e: int) -> Split:
        def split(t: Any, a: Attention, cfg: dict) -> Any:
            if not weight:
                return t[e].T
            n = t.shape[-1] // 2
            return t[e][:, start * n:(start + 1) * n].T
        return split
    return make


_E = "mlp.experts.{e}."
_FF = "feed_forward."
_LLAMA4 = Names("layers.{i}.", {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    **{f"mlp.{p}.weight": f"{_FF}{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
    **{f"mlp.shared.{p}.weight": f"{_FF}shared_expert.{p}.weight"
       for p in ("gate_proj", "up_proj", "down_proj")},
    "mlp.router.weight": f"{_FF}router.weight",
    f"{_E}gate_proj.weight": (f"{_FF}experts.gate_up_proj", _half(0, True)),
    f"{_E}up_proj.weight": (f"{_FF}experts.gate_up_proj", _half(1, True)),
    f"{_E}down_proj.weight": (f"{_FF}experts.down_proj", _half(0, False))},
    LLAMA.top, ("model.language_model.", "language_model.model.", "model."))

# transformers' defaults (Llama4TextConfig, 5.23) for the fields the import reads
_DEFAULTS = {
    "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1,
    "use_qk_norm": True, "no_rope_layer_interval": 4, "attention_chunk_size": 8192,
    "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1,
    "attention_bias": False}
_INERT = {**ROUTER_INERT, "router_jitter_noise": "noise on the router's logits in training",
          "interleave_moe_layer_step": "read into moe_layers by Llama4TextConfig; the import "
                                       "reads it only when moe_layers is absent",
          "no_rope_layer_interval": "read into no_rope_layers by Llama4TextConfig; the import "
                                    "reads it only when no_rope_layers is absent"}
FAMILIES = [
    Family("llama4_text", _read, _LLAMA4, _DEFAULTS, inert=_INERT, lm=True,
           weights_for=expanded(_LLAMA4),
        rope={"rope_type": "default", "rope_theta": 500000.0}),
]
