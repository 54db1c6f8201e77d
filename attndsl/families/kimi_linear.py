"""Kimi Linear (`kimi_linear`, Moonshot) and Ling 3 (`bailing_hybrid`, inclusionAI): hybrids of
Kimi delta attention layers (`linear_attention`: `kernel = kda(...)`, a delta rule with a log
decay per key channel) and DeepSeek's multi-head latent attention (`full_attention`), as
layer_types says, with DeepSeek-V3's mixture of experts (the dense layers those mlp_layer_types
names `dense`) and pre-norm RMSNorm blocks. Kimi Linear's latent attention has no positions
(its rope features join each head unrotated) and its KDA gates are low-rank pairs of rank
head_dim (f_a_proj/f_b_proj, g_a_proj/g_b_proj) with the softplus forget gate; Ling 3's latent
attention has interleaved RoPE and a sigmoid gate per head (`g_proj`, read as the query
projection's gate rows: `output_gate = sigmoid(per_head = true)`), and its KDA gates are full
projections with, by kda_safe_gate, the forget gate bounded below by kda_lower_bound. The
checkpoints keep the convolution's q, k and v taps apart (q_conv1d, k_conv1d, v_conv1d), read
as one."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .deepseek import moe_ffn, read_latent
from .moe import ROUTER_INERT, expanded
from .names import Names
from .rope import num
from .text import SpecText, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("linear_attention", "full_attention")
# config.json's names of DeepSeek-V3's routing fields (the config classes' attribute_map)
_ALIASES = {"num_experts": "num_local_experts", "num_experts_per_token": "num_experts_per_tok",
            "moe_renormalize": "norm_topk_prob", "num_expert_group": "n_group",
            "num_shared_experts": "n_shared_experts"}


def _layer_types(s: SpecText, kimi: bool, layers: int) -> Any:
    """layer_types, or as the config class derives it: Kimi Linear's from linear_attn_config's
    1-based full_attn_layers and kda_layers (else every fourth layer from layer 4 full), Ling
    3's the last of each layer_group_size layers full."""
    types = s.get("layer_types")
    if not kimi:
        group = s.get("layer_group_size", default=6)  # (read either way)
        return types if types is not None else [
            "full_attention" if (i + 1) % group == 0 else "linear_attention"
            for i in range(layers)]
    if types is not None:
        return types
    own = _own(s)
    if "full_attn_layers" in own and "kda_layers" in own:
        types = [None] * layers
        for kind, key in (("full_attention", "full_attn_layers"),
                          ("linear_attention", "kda_layers")):
            for i in own[key]:
                if isinstance(i, int) and 1 <= i <= layers:
                    types[i - 1] = kind
        return types
    return ["full_attention" if i and i % 4 == 0 else "linear_attention"
            for i in range(layers)]


def _own(s: SpecText) -> dict:
    """Kimi Linear's linear_attn_config, its entries checked: its 1-based layer lists lists of
    integers, its sizes positive integers (else refused, and read as absent)."""
    own = s.get("linear_attn_config") or {}
    checked = {}
    for key, value in own.items():
        if key in ("full_attn_layers", "kda_layers"):
            good = isinstance(value, list) and all(
                isinstance(i, int) and not isinstance(i, bool) for i in value)
        elif key in ("head_dim", "num_heads", "short_conv_kernel_size"):
            good = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        else:
            continue
        if good:
            checked[key] = value
        else:
            s.refuse("linear_attn_config", f"its `{key}` must be "
                     + ("a list of layer numbers" if key.endswith("layers") else
                        "an integer >= 1") + f", found {value!r}")
    return checked


def _read(s: SpecText, padding: str | None) -> None:
    cfg, kimi = s.cfg, s.cfg.get("model_type") == "kimi_linear"
    for theirs, ours in _ALIASES.items():
        value = s.get(theirs)
        if value is not None:
            cfg[ours] = value
    cfg["n_routed_experts"] = s.need("num_local_experts")
    first = s.get("first_k_dense_replace")  # (read into mlp_layer_types where that is absent)
    if kimi and first is None:
        cfg["first_k_dense_replace"] = 1  # KimiLinearConfig's default
    layers = s.need("num_hidden_layers")
    types = _layer_types(s, kimi, layers)
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(_KINDS):
        if s.get("layer_types") is None and kimi:  # derived: name what it was derived from
            s.refuse("linear_attn_config", f"its full_attn_layers and kda_layers (1-based) "
                     f"must give each of the {layers} layers one kind")
        else:
            s.refuse("layer_types", f"{layers} entries, each linear_attention or "
                                    "full_attention, are needed")
        return
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "the delta rule's convolution, the MLPs and the experts use silu")
    if not kimi:
        s.get("q_lora_rank")  # (BailingHybridConfig deletes it: one q_proj, no bottleneck)
        cfg["q_lora_rank"] = None
        cfg["rope_interleave"] = True  # Ling 3's latent attention rotates pairs 2i, 2i + 1
        theta = s.need("rope_theta")  # its rope_parameters where config.json has none
        if cfg.get("rope_parameters") is None:
            cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    eps = read_latent(s, padding, latent_eps=1e-6)
    latent = s.attentions.pop("deepseek_mla")
    if kimi:  # no positions: the rope features join each head as they are, and its scale
        latent["position"] = "none"  # is qk_head_dim ** -0.5 whatever rope_parameters say
        latent.pop("scale", None)
    else:  # a sigmoid gate per head from its own g_proj
        latent["output_gate"] = "sigmoid(per_head = true)"
    # Ling 3's KDA sizes are head_dim, num_attention_heads and short_conv_kernel_size as its
    # config.json writes them, saved as linear_* once its config class has read them (head_dim
    # then is qk_rope_head_dim, as DeepseekV3Config sets it); Kimi Linear's are
    # linear_attn_config's where it holds them
    own = _own(s) if kimi else {}
    heads, head_dim, conv = (
        own.get(key, s.get(f"linear_{ours}", default=None if kimi else s.need(theirs)))
        for key, ours, theirs in (("num_heads", "num_heads", "num_attention_heads"),
                                  ("head_dim", "head_dim", "head_dim"),
                                  ("short_conv_kernel_size", "conv_kernel_dim",
                                   "short_conv_kernel_size")))
    bound = s.need("kda_lower_bound") if not kimi and s.need("kda_safe_gate") else None
    if bound is not None and not bound < 0:
        s.refuse("kda_lower_bound", f"the forget gate's lower bound is a log decay below 0, "
                                    f"found {bound}")
        bound = -5.0  # (refused: the import fails, having listed every problem)
    gates = (f", forget_rank = {head_dim}, gate_rank = {head_dim}" if kimi else
             f", lower_bound = {num(bound)}" if bound is not None else "")
    linear, full = f"{s.name}_kda", f"{s.name}_mla"
    s.attentions[linear] = {
        "d_model": str(s.need("hidden_size")), "heads": str(heads), "head_dim": str(head_dim),
        "bias": "false",
        "kernel": f"kda(conv = {conv}, chunk = 64, eps = {num(eps)}{gates})",
        "mask": mask(True, padding)}
    s.comments[linear] = ("Kimi delta attention (linear attention): a state per head, a "
                          "decay per key channel; padding slots are skipped")
    s.attentions[full] = latent
    s.comments[full] = "multi-head latent attention" + (", no positions" if kimi else "")
    names = {"linear_attention": linear, "full_attention": full}
    for kind in set(_KINDS) - set(types):
        del s.attentions[names[kind]]
    s.pattern = [names[t] for t in period(types)]
    s.stack = {"layers": str(layers), "ffn": moe_ffn(s),
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}


def _joined(t: list, a: Attention, cfg: dict) -> Any:
    """conv1d.weight [C, 1, K] from the q, k and v taps (each [H d, 1, K]), in that order."""
    import numpy as np

    return np.concatenate([np.asarray(x) for x in t], axis=0)


def _per_head(t: Any, a: Attention, cfg: dict) -> Any:
    """A_log, one value per head (Kimi Linear keeps it [1, 1, heads, 1])."""
    return t.reshape(-1)


def _tables(attn: str, moe: str, experts: dict, low_rank: bool) -> tuple[dict, dict]:
    """(the latent-attention layers' table, the KDA layers' entries) under the checkpoint's
    attention prefix `attn`, MLP prefix `moe` and expert tensor names `experts` (ours ->
    theirs)."""
    o = f"{attn}.{'o_proj' if low_rank else 'dense'}.weight"
    latent = {f"self_attn.{p}.weight": f"{attn}.{p}.weight"
              for p in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")}
    latent |= {f"self_attn.{n}.weight": f"{attn}.{n}.weight"
               for n in ("q_a_layernorm", "kv_a_layernorm")}
    latent["self_attn.o_proj.weight"] = o
    latent["self_attn.q_proj.weight"] = f"{attn}.q_proj.weight"
    if not low_rank:  # Ling 3's gate per head: its rows after each head's query rows
        from .names import gate_joined

        latent |= {k: (f"{attn}.q_proj.weight", *v[1:]) for k, v in
                   gate_joined(f"{attn}.g_proj.weight").items() if k.endswith("weight")}
    common = {
        "attn_norm.weight": "input_layernorm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        **{f"mlp.{p}.weight": f"{moe}.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
        **{f"mlp.experts.{{e}}.{ours}.weight": f"{moe}.experts.{{e}}.{theirs}.weight"
           for ours, theirs in experts.items()},
        **{f"mlp.shared.{p}.weight": f"{moe}.shared_experts.{p}.weight"
           for p in ("gate_proj", "up_proj", "down_proj")},
        "mlp.router.weight": f"{moe}.gate.weight",
        "mlp.router.selection_bias": f"{moe}.gate." + ("e_score_correction_bias" if low_rank
                                                     else "expert_bias")}
    gates = (("f_a_proj", "f_b_proj", "g_a_proj", "g_b_proj") if low_rank
             else ("f_proj", "g_proj"))
    kda = {f"self_attn.{p}.weight": f"{attn}.{p}.weight"
           for p in ("q_proj", "k_proj", "v_proj", "b_proj", *gates)}
    kda |= {"self_attn.o_proj.weight": o, "self_attn.dt_bias": f"{attn}.dt_bias",
            "self_attn.A_log": (f"{attn}.A_log", _per_head),
            "self_attn.norm.weight": f"{attn}.o_norm.weight",
            "self_attn.conv1d.weight": (f"{attn}.q_conv1d.weight", _joined,
                                        (f"{attn}.k_conv1d.weight", f"{attn}.v_conv1d.weight"))}
    return {**common, **latent}, kda


_KIMI_LAYERS, _KIMI_KDA = _tables("self_attn", "block_sparse_moe",
                                  {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}, True)
_KIMI = Names("layers.{i}.", _KIMI_LAYERS, {
    "embed_tokens.weight": "embed_tokens.weight", "norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight"}, ("model.",), by_kernel={"KDA": _KIMI_KDA})
_LING_LAYERS, _LING_KDA = _tables("attention", "mlp", {p: p for p in ("gate_proj", "up_proj",
                                                                     "down_proj")}, False)
_LING = Names("layers.{i}.", _LING_LAYERS, {
    "embed_tokens.weight": "word_embeddings.weight", "norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight"}, ("model.",), by_kernel={"KDA": _LING_KDA},
    past_layers=True)  # num_nextn_predict_layers: multi-token prediction past the layers

_LATENT_INERT = {"head_dim": "the latent attention's head size is qk_nope_head_dim + "
                             "qk_rope_head_dim",
                 "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
                 "pretraining_tp": "transformers' forward does not read it",
                 "model_max_length": "the longest sequence trained on (max_position_embeddings)"}
_MTP = "multi-token prediction, for training and speculative decoding, not in the forward"
_REFUSED = {"attention_bias": (bool, "the released checkpoints' projections have no biases; "
                                     "biased latent projections have no import here yet")}
_ROUTING = {"num_local_experts": 256, "num_experts_per_tok": 8, "norm_topk_prob": True}
# transformers' defaults (KimiLinearConfig, BailingHybridConfig, 5.23) for the fields the
# import reads, under the config classes' names
FAMILIES = [
    Family("kimi_linear", _read, _KIMI, {
        "hidden_size": 2304, "intermediate_size": 9216, "moe_intermediate_size": 1024,
        "num_hidden_layers": 27, "num_attention_heads": 32, "num_key_value_heads": 32,
        **_ROUTING, "routed_scaling_factor": 2.446, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 1,
        "topk_group": 1, "n_shared_experts": 1, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "attention_bias": False, "linear_head_dim": 128,
        "linear_num_heads": 32, "linear_conv_kernel_dim": 4},
        inert={**ROUTER_INERT, **_LATENT_INERT}, refused=_REFUSED, lm=True,
        weights_for=expanded(_KIMI)),
    Family("bailing_hybrid", _read, _LING, {
        "hidden_size": 2560, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_hidden_layers": 42, "num_attention_heads": 32, "num_key_value_heads": 32,
        **_ROUTING, "num_local_experts": 512, "n_shared_experts": 1, "n_group": 8,
        "topk_group": 4, "routed_scaling_factor": 2.5, "first_k_dense_replace": 2,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "attention_bias": False, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "head_dim": 128, "rope_theta": 6000000.0,
        "short_conv_kernel_size": 4, "kda_safe_gate": True, "kda_lower_bound": -5.0,
        "layer_group_size": 6},
        inert={**ROUTER_INERT, **{k: v for k, v in _LATENT_INERT.items() if k != "head_dim"},
               "num_nextn_predict_layers": _MTP, "mtp_loss_scaling_factor": _MTP},
        refused=_REFUSED, lm=True, weights_for=expanded(_LING)),
]
