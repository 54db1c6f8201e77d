"""Gemma 4's text model (`gemma4_text`): Gemma 3's sliding and full layers with sandwich norms
and tanh-GELU GeGLU MLPs, and what Gemma 4 changed:

- RMSNorm without Gemma's unit offset (x · w), attention scores unscaled (`scale = 1`), q and
  k RMS-normed per head before RoPE, the values RMS-normed per head without a weight
  (`v_norm = rmsnorm(affine = false)`);
- a head size (and, with `attention_k_eq_v`, a kv head count) of its own on the full layers
  (`per_layer_config`, made of `global_head_dim` and `num_global_key_value_heads`), where
  `attention_k_eq_v` makes the values the keys' rows (`values = keys`: no v_proj);
- each kind's RoPE (`rope_parameters[kind]`: proportional on the full layers);
- the last `num_kv_shared_layers` layers reuse the keys and values of the last earlier layer
  of their kind (`kv_shared_layers`), and each layer's output is times its learned
  `layer_scalar`;
- per-layer inputs (`hidden_size_per_layer_input` > 0): a second token embedding feeding
  every layer (`per_layer_inputs = ple(...)`).

The mixture-of-experts block, the double-wide MLP of the sharing layers and bidirectional
attention are refused, naming them. `gemma4_unified_text` is the same text model
without per-layer inputs or experts (its own defaults)."""

from __future__ import annotations

from .base import Family
from .names import ATTN, GATED, LM, Names
from .rope import num, rope
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("sliding_attention", "full_attention")


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv, head_dim = s.need("num_key_value_heads"), s.need("head_dim")
    eps, layers = num(s.need("rms_norm_eps")), s.need("num_hidden_layers")
    types = s.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 else
                                     "sliding_attention" for i in range(layers)]
    if len(types) != layers or any(t not in _KINDS for t in types):
        s.refuse("layer_types", f"one entry per layer ({layers}), each sliding_attention or "
                                "full_attention")
        return
    ple = s.get("hidden_size_per_layer_input", default=0)
    ple_vocab = s.get("vocab_size_per_layer_input")
    if ple and s.cfg.get("model_type") == "gemma4_unified_text":
        s.refuse("hidden_size_per_layer_input", "Gemma 4's unified text model has no per-layer "
                                                "inputs (transformers ignores the field)")
        ple = 0
    for key in ("num_experts", "top_k_experts", "moe_intermediate_size"):
        s.get(key)  # (the mixture block's, refused below where it is on)
    if s.get("enable_moe_block", default=False):
        s.refuse("enable_moe_block", "Gemma 4's mixture-of-experts block beside the MLP (its "
                                     "router reads the unnormed residual) is not imported")
    shared = s.get("num_kv_shared_layers", default=0)
    if s.get("use_double_wide_mlp", default=False) and shared:
        s.refuse("use_double_wide_mlp", "the layers sharing keys and values would have an MLP "
                                        "twice as wide: attndsl's stack has one MLP width")
    if s.get("use_bidirectional_attention") not in (None, False, "vision"):  # ("vision":
        # the image tokens' attention of the multimodal model; its text model stays causal)
        s.refuse("use_bidirectional_attention", "Gemma 4's text model is imported causal")
    k_eq_v = bool(s.get("attention_k_eq_v", default=False))
    per_layer = _per_layer(s, types, kv, k_eq_v)
    if per_layer is None:
        return
    window = s.need("sliding_window")
    params = s.get("rope_parameters") or {  # Gemma4TextConfig's when config.json has none
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1e6}}
    for kind in dict.fromkeys(types):
        full = kind == "full_attention"
        own = per_layer.get(kind, {})
        size = own.get("head_dim", head_dim)
        kv_heads = own.get("num_key_value_heads", kv)
        entries = {"d_model": str(d), "heads": str(heads), "kv_heads": str(kv_heads),
                   "head_dim": str(size),
                   "bias": "true" if s.get("attention_bias", default=False) else "false",
                   "scale": "1", "qk_norm": f"rmsnorm(eps = {eps})",
                   "v_norm": f"rmsnorm(eps = {eps}, affine = false)"}
        if full and k_eq_v:
            entries["values"] = "keys"
        entries["position"] = rope(s, params.get(kind), size)
        entries["mask"] = mask(True, padding, None if full else window)
        name = f"gemma4_{'global' if full else 'local'}"
        s.attentions[name] = entries
        if not full:
            s.comments[name] = (f"sliding_window = {window}: each query sees itself and the "
                                f"{window - 1} keys before it")
    names = {"sliding_attention": "gemma4_local", "full_attention": "gemma4_global"}
    s.pattern = [names[t] for t in period(types)]
    gate = act(s, "hidden_activation", s.need("hidden_activation"), gated=True)
    ffn = f"{'swiglu' if gate == 'silu' else 'geglu'}({s.need('intermediate_size')})"
    s.stack = {"layers": str(layers), "ffn": ffn, "norm": f"rmsnorm(sandwich, eps = {eps})",
               "layer_scalar": "true"}
    if shared:
        s.stack["kv_shared_layers"] = str(shared)
    if ple:  # per-layer inputs: their embedding's own vocabulary, gated by hidden_activation
        s.stack["per_layer_inputs"] = (f"ple(width = {ple}, vocab = {ple_vocab}, activation = "
                                       f"{gate})")


def _per_layer(s: SpecText, types: list[str], kv: int, k_eq_v: bool) -> dict | None:
    """Each layer kind's own head size and kv heads: config.json's `per_layer_config` (layer
    index -> {head_dim, num_key_value_heads}), else what Gemma4TextConfig makes of
    `global_head_dim` (512 by default) and, with `attention_k_eq_v`,
    `num_global_key_value_heads`, for the full layers; None where refused (the layers of
    one kind must agree)."""
    given = s.get("per_layer_config")
    global_dim = s.get("global_head_dim", default=512)
    global_kv = s.get("num_global_key_value_heads")
    if given is None:
        full = {"head_dim": global_dim}
        if k_eq_v and global_kv is not None:
            full["num_key_value_heads"] = global_kv
        return {"full_attention": full}
    if not isinstance(given, dict) or not all(
            str(i).isdigit() and int(i) < len(types) and isinstance(c, dict)
            for i, c in given.items()):
        s.refuse("per_layer_config", "an object from layer indices to {head_dim, "
                                     "num_key_value_heads}")
        return None
    out: dict[str, dict] = {}
    for i, c in sorted((int(i), c) for i, c in given.items()):
        kind = types[i]
        if out.setdefault(kind, dict(c)) != dict(c):
            s.refuse("per_layer_config", f"layer {i} ({kind}) differs from the earlier layers "
                                         "of its kind: attndsl gives a layer kind one head "
                                         "size and kv head count")
            return None
    return out


_NAMES = Names("layers.{i}.", {
    **ATTN, **GATED, "attn_norm.weight": "input_layernorm.weight",
    "post_attn_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffn_norm.weight": "post_feedforward_layernorm.weight",
    "layer_scalar": "layer_scalar",
    **{f"{n}.weight": f"{n}.weight" for n in ("per_layer_input_gate", "per_layer_projection",
                                              "post_per_layer_input_norm")}},
    {"norm.weight": "norm.weight", **LM,
     **{f"{n}.weight": f"{n}.weight" for n in ("embed_tokens_per_layer",
                                               "per_layer_model_projection",
                                               "per_layer_projection_norm")}},
    ("model.language_model.", "language_model.model.", "model."),
    outside=(r"vision_tower\..+", r"audio_tower\..+", r"embed_vision\..+",
             r"embed_audio\..+"))

# transformers' defaults (Gemma4TextConfig, Gemma4UnifiedTextConfig, 5.23) for the fields the
# import reads; the unified text model has no per-layer inputs or experts
_SHARED = {
    "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06, "tie_word_embeddings": True,
    "attention_bias": False, "attention_k_eq_v": False, "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False}
FAMILIES = [
    Family("gemma4_text", _read, _NAMES, {
        **_SHARED, "sliding_window": 512, "hidden_size_per_layer_input": 256,
        "vocab_size_per_layer_input": 262144, "enable_moe_block": False}, lm=True),
    Family("gemma4_unified_text", _read, _NAMES, {
        **_SHARED, "sliding_window": 1024, "use_bidirectional_attention": "vision"}, lm=True),
]
