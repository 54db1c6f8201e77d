"""Nemotron-H (`nemotron_h`): layers that are each one mixer behind a pre-norm RMSNorm (`norm`,
the final `norm_f`): a Mamba2 mixer (`mamba2(...)`, Bamba's tensors under `mixer.`, its step
clamped below at time_step_min), softmax attention without positions, a squared-ReLU MLP
(`up_proj`, `down_proj`) or a mixture of those MLPs (DeepSeek-V3's grouped sigmoid router, its
experts stored one module each, a shared MLP beside them). attndsl's block is an attention and
its feed-forward, so each mixer layer and the MLP layer after it are one block, and a mixer
layer that no MLP layer follows is a block without one (`attention_only`): `Names.blocks`
reads each block's tensors from its two layers."""

from __future__ import annotations

from dataclasses import replace

from .bamba import MAMBA2_COMMENT, MAMBA2_TYPES, mamba2_attention, mamba2_names
from .base import Family
from .moe import ROUTER_INERT, expanded, grouped_sigmoid
from .names import LM, Names
from .rope import num
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES", "blocks"]

_MIXERS = ("linear_attention", "full_attention")
_FFNS = ("mlp", "moe")
# layer kinds transformers renames (configuration_utils' _LEGACY_LAYER_TYPE_REMAP)
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
# hybrid_override_pattern's letters (the configs the hub holds), as NemotronHConfig reads them
_LETTERS = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def layer_types(cfg: dict) -> list | None:
    """The config's layer kinds: layers_block_type (or its alias layer_types), else
    hybrid_override_pattern's letters, else NemotronHConfig's default; None where malformed."""
    types = cfg.get("layers_block_type") or cfg.get("layer_types")
    if isinstance(types, list):  # (transformers' legacy names, as it remaps them)
        types = [_LEGACY.get(t, t) if isinstance(t, str) else t for t in types]
    pattern = cfg.get("hybrid_override_pattern")
    if types is None and isinstance(pattern, str) and pattern and all(
            c in _LETTERS for c in pattern):
        types = [_LETTERS[c] for c in pattern]
    if types is None and pattern is None:
        types = ["linear_attention", "moe", "full_attention", "mlp"]
    ok = isinstance(types, list) and types and all(t in (*_MIXERS, *_FFNS) for t in types)
    return types if ok else None


def blocks(types: list[str]) -> list[tuple[int, int | None]] | int:
    """attndsl's blocks of the layers `types`: each mixer layer with the MLP layer after it
    where one follows, else alone; or the index of the first MLP layer no mixer precedes."""
    out, i = [], 0
    while i < len(types):
        if types[i] not in _MIXERS:
            return i
        ffn = i + 1 if i + 1 < len(types) and types[i + 1] in _FFNS else None
        out.append((i, ffn))
        i += 1 if ffn is None else 2
    return out


def _read(s: SpecText, padding: str | None) -> None:
    cfg, d = s.cfg, s.need("hidden_size")
    eps = s.need("layer_norm_epsilon")
    types = layer_types(cfg)
    if types is None:
        s.refuse("layers_block_type", "a list of linear_attention, full_attention, mlp and moe "
                                      "(or a hybrid_override_pattern of M, *, - and E) is needed")
        return
    pairs = blocks(types)
    if isinstance(pairs, int):
        s.refuse("layers_block_type", f"layer {pairs} is an MLP layer that does not follow a "
                                      "mixer layer: attndsl's block is an attention and its "
                                      "feed-forward")
        return
    for key, want in (("mamba_hidden_act", "silu"), ("use_bias", False)):
        if s.get(key, default=want) != want:
            s.refuse(key, "Mamba2's convolution is imported with silu, and its projections "
                          "without biases (a padding slot's would reach the convolution)")
    if s.get("moe_latent_size") is not None:
        s.refuse("moe_latent_size", "experts behind a latent projection have no import")
    # (a legacy mamba_* name, where given, wins over the field, as NemotronHConfig reads it)
    heads = s.need("mamba_num_heads")
    groups = s.need("mamba_n_groups", "n_groups")
    if groups and heads % groups:
        s.refuse("n_groups", f"each group of B and C serves mamba_num_heads / n_groups heads: "
                             f"it must divide {heads}")
        return
    floor = s.get("mamba_dt_min", "time_step_min", default=0.0)  # (its mixer's clamp)
    s.attentions[f"{s.name}_mamba"] = mamba2_attention(
        s, d, heads, s.need("mamba_head_dim"), s.need("ssm_state_size"), groups,
        s.need("mamba_d_conv", "conv_kernel"),
        bool(s.get("mamba_conv_bias", "use_conv_bias", default=True)), eps,
        s.need("mamba_chunk_size", "chunk_size"), [floor, float("inf")], padding)
    s.comments[f"{s.name}_mamba"] = MAMBA2_COMMENT
    attn_heads = s.need("num_attention_heads")
    s.attentions[f"{s.name}_attn"] = {
        "d_model": str(d), "heads": str(attn_heads),
        "kv_heads": str(s.get("num_key_value_heads", default=attn_heads)),
        "head_dim": str(s.get("head_dim", default=d // max(attn_heads, 1))), "bias": "false",
        "mask": mask(True, padding)}
    s.comments[f"{s.name}_attn"] = "no positions (Nemotron-H's attention has none)"
    names = {"linear_attention": f"{s.name}_mamba", "full_attention": f"{s.name}_attn"}
    for kind in set(names) - set(types):
        del s.attentions[names[kind]]
    s.pattern = [names[t] for t in period([types[a] for a, _ in pairs])]
    mlp = act(s, "mlp_hidden_act", s.get("mlp_hidden_act", default="relu2"))
    if mlp not in ("relu", "relu2", "gelu", "gelu_tanh"):  # (its MLP has no gate)
        s.refuse("mlp_hidden_act", "Nemotron-H's MLP has no gate: relu2, relu, gelu or "
                                   "gelu_tanh")
        return
    cfg["tie_word_embeddings"] = False  # (NemotronHForCausalLM ties nothing, whatever it says)
    bias = "true" if s.get("mlp_bias") else "false"
    dense = f"{mlp}({s.need('intermediate_size')}, bias = {bias})"
    ffn = dense
    if "moe" in types:
        # (DeepSeek-V3's router over bias-free experts; one shared MLP of its own width)
        ffn = grouped_sigmoid(s, "n_routed_experts", "", mlp, s.need("moe_intermediate_size"),
                              ", bias = false")
        ffn += (f", shared = {mlp}({s.need('moe_shared_expert_intermediate_size')}, bias = "
                f"{bias})")
        dense_layers = [b for b, (_, f) in enumerate(pairs) if f is not None
                        and types[f] == "mlp"]
        ffn += (f", dense = {dense}, dense_layers = {dense_layers})" if dense_layers
                else ")")
    alone = [b for b, (_, f) in enumerate(pairs) if f is None]
    s.stack = {"layers": str(len(pairs)), "ffn": ffn if alone != list(range(len(pairs)))
               else "none", "norm": f"rmsnorm(pre, eps = {num(eps)})"}
    if alone and s.stack["ffn"] != "none":
        s.stack["attention_only"] = f"[{', '.join(map(str, alone))}]"


_EXPERT = {f"mlp.experts.{{e}}.{ours}.weight": f"mixer.experts.{{e}}.{theirs}.weight"
           for ours, theirs in (("fc1", "up_proj"), ("fc2", "down_proj"))}
_NEMOTRON_H = Names("layers.{i}.", {
    "attn_norm.weight": "norm.weight", "ffn_norm.weight": "norm.weight",
    **{f"self_attn.{p}_proj.weight": f"mixer.{p}_proj.weight" for p in "qkvo"},
    **{f"mlp.fc{n}.{w}": f"mixer.{p}_proj.{w}" for n, p in ((1, "up"), (2, "down"))
       for w in ("weight", "bias")},
    **_EXPERT,
    **{f"mlp.shared.fc{n}.{w}": f"mixer.shared_experts.{p}_proj.{w}"
       for n, p in ((1, "up"), (2, "down")) for w in ("weight", "bias")},
    "mlp.router.weight": "mixer.gate.weight",
    "mlp.router.selection_bias": "mixer.gate.e_score_correction_bias"},
    {"embed_tokens.weight": "embeddings.weight", "norm.weight": "norm_f.weight",
     "lm_head.weight": LM["lm_head.weight"]}, ("backbone.", "model."),
    by_kernel={"Mamba2": mamba2_names("mixer.")}, outside=(r"mtp\..*",))


def _weights(cfg: dict) -> Names:
    """The table for a config: its experts, and its blocks' layers (`Names.blocks`)."""
    types = layer_types(cfg)
    pairs = blocks(types) if types is not None else []
    return replace(expanded(_NEMOTRON_H)(cfg),
                   blocks=() if isinstance(pairs, int) else tuple(pairs))


_MTP = "multi-token prediction layers (mtp.*), which the model's forward does not run"
# transformers' defaults (NemotronHConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("nemotron_h", _read, _NEMOTRON_H, {
        "hidden_size": 4096, "intermediate_size": 21504, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": False, "mlp_hidden_act": "relu2", "mlp_bias": False,
        "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
        "conv_kernel": 4, "use_conv_bias": True, "chunk_size": 128, "time_step_min": 0.001,
        "mamba_hidden_act": "silu", "use_bias": False, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "moe_intermediate_size": 7688,
        "moe_shared_expert_intermediate_size": 7688, "routed_scaling_factor": 1.0,
        "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "attention_bias": False,
        "mamba_proj_bias": False, "n_shared_experts": 1, "expand": 2},
        inert={**ROUTER_INERT,
               "attention_bias": "Nemotron-H's attention projections have no bias whatever "
                                 "it says",
               "sliding_window": "Nemotron-H's attention is causal over every key (its mask "
                                 "reads no window)",
               "mamba_proj_bias": "Nemotron-H's mixer reads use_bias for its projections",
               "expand": "Nemotron-H's mixer is mamba_num_heads x mamba_head_dim wide",
               "n_shared_experts": "Nemotron-H's mixture has one shared MLP of "
                                   "moe_shared_expert_intermediate_size",
               "moe_shared_expert_overlap": "how the shared MLP is scheduled, not what it "
                                            "computes",
               "mamba_ssm_cache_dtype": "the state cache's storage; attndsl keeps states in "
                                        "float32",
               "residual_in_fp32": "Nemotron-H's blocks do not read it",
               "num_nextn_predict_layers": _MTP, "mtp_layers_block_type": _MTP,
               "num_logits_to_keep": "how many positions' logits generation computes",
               "use_mamba_kernels": "which kernels transformers runs, not what they compute",
               "time_step_max": "the initial dt's range (training)",
               "time_step_floor": "the initial dt's floor (training)",
               "time_step_limit": "Nemotron-H's mixer clamps dt at [time_step_min, inf) "
                                  "whatever it says",
               "rescale_prenorm_residual": "how untrained weights are drawn",
               "mamba_expand": "Nemotron-H's mixer is mamba_num_heads x mamba_head_dim wide",
               "mamba_dt_max": "the initial dt's range (training)",
               "mamba_dt_init_floor": "the initial dt's floor (training)",
               "mamba_dt_limit": "Nemotron-H's mixer clamps dt at [time_step_min, inf) "
                                 "whatever it says"},
        lm=True, weights_for=_weights, kinds=("moe", "mlp"),
        types={**MAMBA2_TYPES, **dict.fromkeys(
            ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel",
             "chunk_size", "moe_shared_expert_intermediate_size", "moe_latent_size"),
            ("int", 1)),
            "use_conv_bias": ("bool", None), "time_step_min": ("num", None),
            "mamba_dt_min": ("num", None), "layers_block_type": ("list", None),
            "hybrid_override_pattern": ("str", None), "mlp_hidden_act": ("str", None),
            "mamba_hidden_act": ("str", None)}),
]
