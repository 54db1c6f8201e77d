"""Qwen3-Next (`qwen3_next`): a hybrid of gated delta-rule layers (`linear_attention`, Gated
DeltaNet) and gated softmax attention (`full_attention`: a sigmoid output gate written by
q_proj, unit-offset q/k RMSNorm, RoPE on a part of each head), as layer_types says; unit-offset
RMSNorm around every block; a mixture of experts with a sigmoid-gated shared expert (dense
layers from mlp_only_layers and decoder_sparse_step). The delta-rule layers keep fused
projections: in_proj_qkvz holds, per key head g, [q_g, k_g, v and z of its value heads] and
in_proj_ba per key head [b, a] of its value heads."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names, Split
from .rope import num, rope
from .text import SpecText, mask, period

__all__ = ["DELTA_KEPT", "FAMILIES", "MIXTURE", "read_hybrid"]

_KINDS = ("linear_attention", "full_attention")


def read_hybrid(s: SpecText, padding: str | None) -> list[str] | None:
    """The delta-rule and gated softmax attentions (`<stack>_linear`, `<stack>_full`) and the
    layer pattern layer_types makes of them, as Qwen3-Next and Qwen3.5 share them; the layer
    kinds, or None where layer_types is refused."""
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv, head_dim = s.get("num_key_value_heads", default=heads), s.need("head_dim")
    eps, layers = s.need("rms_norm_eps"), s.need("num_hidden_layers")
    every = s.get("full_attention_interval", default=4)
    types = s.get("layer_types") or ["linear_attention" if (i + 1) % every else
                                     "full_attention" for i in range(layers)]
    other = [t for t in dict.fromkeys(types) if t not in _KINDS]
    if len(types) != layers or other:
        s.refuse("layer_types", f"one entry per layer ({layers}), each linear_attention or "
                                "full_attention" + (f"; attndsl does not import layer kind "
                                                    f"`{other[0]}` for it" if other else ""))
        return None
    if cfg.get("rope_parameters") is None and cfg.get("partial_rotary_factor") is None:
        cfg["partial_rotary_factor"] = 0.25  # the config class's default, config.json's BC
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "the delta rule's convolution, the MLPs and experts use silu")
    linear, full = f"{s.name}_linear", f"{s.name}_full"
    value_heads, key_heads = s.need("linear_num_value_heads"), s.need("linear_num_key_heads")
    s.attentions[linear] = {
        "d_model": str(d), "heads": str(value_heads),
        "head_dim": str(s.need("linear_key_head_dim")),
        "value_dim": str(s.need("linear_value_head_dim")), "bias": "false",
        "kernel": f"delta_rule(key_heads = {key_heads}, conv = "
                  f"{s.need('linear_conv_kernel_dim')}, chunk = 64, eps = {num(eps)})",
        "mask": mask(True, padding)}
    s.comments[linear] = ("gated delta rule (linear attention): a state per value head; "
                          "padding slots are skipped")
    s.attentions[full] = {
        "d_model": str(d), "heads": str(heads), "kv_heads": str(kv), "head_dim": str(head_dim),
        "bias": "true" if cfg.get("attention_bias") else "false",
        "qk_norm": f"rmsnorm(eps = {num(eps)}, unit_offset = true)",
        "position": rope(s, cfg.get("rope_parameters"), head_dim),
        "mask": mask(True, padding), "output_gate": "sigmoid"}
    names = {"linear_attention": linear, "full_attention": full}
    s.pattern = [names[t] for t in period(types)]
    if set(types) != set(_KINDS):  # one kind only: the other attention goes
        for kind in set(_KINDS) - set(types):
            del s.attentions[names[kind]]
    return types


def _read(s: SpecText, padding: str | None) -> None:
    if read_hybrid(s, padding) is None:
        return
    cfg, layers, eps = s.cfg, s.get("num_hidden_layers"), s.get("rms_norm_eps")
    only = s.get("mlp_only_layers") or []
    step, experts = s.get("decoder_sparse_step", default=1), s.get("num_experts", default=0)
    dense = [i for i in range(layers) if not experts or i in only or (i + 1) % step != 0]
    ffn = (f"moe(experts = {experts}, top_k = {s.need('num_experts_per_tok')}, expert = "
           f"swiglu({s.need('moe_intermediate_size')}), normalize = "
           f"{'true' if cfg.get('norm_topk_prob') else 'false'}, shared = "
           f"swiglu({s.need('shared_expert_intermediate_size')}), shared_gate = true")
    s.stack = {"layers": str(layers),
               "ffn": mixture(ffn, dense, layers, s.need("intermediate_size")),
               "norm": f"rmsnorm(pre, eps = {num(eps)}, unit_offset = true)"}


def _qkvz(part: int) -> Split:
    """q (0), k (1), v (2) or z (3) of in_proj_qkvz: per key head [q, k, v, z] rows."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        key_heads = a.kernel.key_heads
        r = a.heads // key_heads
        sizes = [a.head_dim, a.head_dim, r * a.value_dim, r * a.value_dim]
        start = sum(sizes[:part])
        grouped = t.reshape(key_heads, sum(sizes), *t.shape[1:])
        return grouped[:, start:start + sizes[part]].reshape(key_heads * sizes[part],
                                                              *t.shape[1:])
    return split


def _ba(part: int) -> Split:
    """b (0) or a (1) of in_proj_ba: per key head [b, a] of its value heads."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        r = a.heads // a.kernel.key_heads
        grouped = t.reshape(a.kernel.key_heads, 2 * r, *t.shape[1:])
        return grouped[:, part * r:(part + 1) * r].reshape(a.heads, *t.shape[1:])
    return split


_LA = "linear_attn."
# the delta-rule layer's tensors Qwen3-Next and Qwen3.5 name alike
DELTA_KEPT = {
    **{f"self_attn.{n}": f"{_LA}{n}" for n in ("conv1d.weight", "dt_bias", "A_log",
                                               "norm.weight")},
    "self_attn.o_proj.weight": f"{_LA}out_proj.weight"}
_DELTA = {
    **{f"self_attn.{p}_proj.weight": (f"{_LA}in_proj_qkvz.weight", _qkvz(i))
       for i, p in enumerate("qkvz")},
    "self_attn.b_proj.weight": (f"{_LA}in_proj_ba.weight", _ba(0)),
    "self_attn.a_proj.weight": (f"{_LA}in_proj_ba.weight", _ba(1)),
    **DELTA_KEPT}
_E = "mlp.experts.{e}."
# experts (as transformers saves them: one module each), the router and the gated shared expert
MIXTURE = {
    **{f"{_E}{p}.weight": f"{_E}{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
    "mlp.router.weight": "mlp.gate.weight",
    **{f"mlp.shared.{p}.weight": f"mlp.shared_expert.{p}.weight"
       for p in ("gate_proj", "up_proj", "down_proj")},
    "mlp.shared_gate.weight": "mlp.shared_expert_gate.weight"}
_QWEN3_NEXT = Names("layers.{i}.", {**LLAMA.names, **MIXTURE},
    LLAMA.top, LLAMA.bases, by_kernel={"DeltaRule": _DELTA},
    # its multi-token prediction module, not in the model's forward
    outside=(r"mtp(\.\w+)*\.(weight|bias)",))

# transformers' defaults (Qwen3NextConfig, 5.23) for the fields the import reads
_DEFAULTS = {
    "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 48,
    "num_attention_heads": 16, "num_key_value_heads": 2, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
    "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "decoder_sparse_step": 1, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "num_experts_per_tok": 10, "num_experts": 512,
    "norm_topk_prob": True}
FAMILIES = [
    Family("qwen3_next", _read, _QWEN3_NEXT, _DEFAULTS, inert={
        **ROUTER_INERT,
        "full_attention_interval": "read into layer_types by Qwen3NextConfig; the import "
                                   "reads it only when layer_types is absent"},
        lm=True, weights_for=expanded(_QWEN3_NEXT)),
]
