"""The llama-like decoders: llama, mistral, ministral, qwen2, qwen3, phi3, gemma2, gemma3 (and
its text model), smollm3: pre-norm decoders with SwiGLU or GeGLU MLPs and RMSNorm; Gemma adds
sandwich norms, unit-offset RMSNorm, softcapping and sliding/global layer patterns; SmolLM3
NoPE layers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..spec import Attention
from .base import Family
from .names import ATTN, GATED, LM, Names, rows
from .rope import num, rope
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES", "LLAMA", "LLAMA_DEFAULTS", "read", "read_nope_full"]


# the layer kinds other readers import, to name in this reader's refusal of them
_KIND_READERS = {"chunked_attention": "llama4_text", "linear_attention": "qwen3_next",
                 "conv": "lfm2"}

def read(s: SpecText, padding: str | None, interleaved: bool = False,
         gated: bool = True) -> None:
    """llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3: pre-norm decoders with SwiGLU or
    GeGLU MLPs; gemma adds sandwich norms, unit-offset RMSNorm and softcapping. `interleaved`:
    RoPE pairs features 2i and 2i + 1 (a family whose rotation is GPT-J's: Helium, GLM,
    ERNIE 4.5); `gated` false: an MLP down(act(up(x))) (Arcee's)."""
    cfg, t = s.cfg, s.cfg.get("model_type")
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv = s.get("num_key_value_heads", default=heads)
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    eps = s.need("rms_norm_eps")
    # Gemma 1 (`gemma`) scales by head_dim ** -0.5 and norms before each sublayer alone;
    # VaultGemma is Gemma 2 without the norms after the sublayers
    gemma = t.startswith("gemma") or t == "vaultgemma"
    sandwich = gemma and t not in ("gemma", "vaultgemma")
    bias = "false"
    if t == "qwen2":
        bias = "[q, k, v]"
    elif cfg.get("attention_bias"):
        bias = "true"
    base = {"d_model": str(d), "heads": str(heads), "kv_heads": str(kv),
            "head_dim": str(head_dim), "bias": bias}
    if gemma and t != "gemma":
        base["scale"] = f"{num(s.need('query_pre_attn_scalar'))} ** -0.5"
        # Gemma 3 never applies it
        if t in ("gemma2", "vaultgemma") and cfg.get("attn_logit_softcapping"):
            base["softcap"] = num(cfg["attn_logit_softcapping"])
    norm_args = f"eps = {num(eps)}" + (", unit_offset = true" if gemma else "")
    if t in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
        base["qk_norm"] = f"rmsnorm({norm_args})"
    layers = s.need("num_hidden_layers")
    types = cfg.get("layer_types")
    if not types and t in ("gemma2", "vaultgemma"):  # before layer_types: even layers slide
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    elif not types and t.startswith("gemma3"):
        every = s.get("sliding_window_pattern", "_sliding_window_pattern", default=6)
        if not isinstance(every, int) or every < 1:  # EXAONE 4's forms, which Gemma 3 has not
            s.refuse("sliding_window_pattern", "Gemma 3's pattern is an integer >= 1")
            every = 6
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                 for i in range(layers)]
    elif not types and t == "ministral":  # as MinistralConfig derives them
        types = ["sliding_attention" if s.get("sliding_window") is not None else
                 "full_attention"] * layers
    types = types or ["full_attention"] * layers
    for kind in dict.fromkeys(types):  # any kind but these two: refused, never read as full
        if kind not in ("sliding_attention", "full_attention"):
            who = _KIND_READERS.get(kind)
            s.refuse("layer_types", f"attndsl does not import layer kind `{kind}` for {t}"
                                    + (f" (it does for {who})" if who else ""))
    # read on as if full (the import fails, having listed every problem): sliding and full
    # layers are the only kinds this reader names, and two kinds must not share a name
    types = [k if k == "sliding_attention" else "full_attention" for k in types]
    window = s.get("sliding_window")
    if t in ("mistral", "ministral3", "mixtral", "qwen3_moe", "phi3"):  # every layer slides
        types = ["sliding_attention" if window else "full_attention"] * layers
    elif t in ("qwen2", "qwen3") and not cfg.get("use_sliding_window"):
        types = ["full_attention"] * layers
    elif t in ("qwen2", "qwen3") and not cfg.get("layer_types"):  # as Qwen2Config derives them
        first = s.need("max_window_layers")
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    elif t == "qwen2_moe" and not cfg.get("layer_types"):  # as Qwen2MoeConfig derives them
        below = s.need("max_window_layers")
        types = ["sliding_attention" if (i + 1) % 2 and i < below and
                 cfg.get("use_sliding_window") else "full_attention" for i in range(layers)]
    rope_params = cfg.get("rope_parameters")
    bidirectional = t.startswith("gemma3") and bool(cfg.get("use_bidirectional_attention"))
    # SmolLM3: no_rope_layers[i] = 0 makes layer i a NoPE layer (no position at all)
    ropes = s.get("no_rope_layers", default=[1] * layers)
    if not isinstance(ropes, list) or len(ropes) != layers:
        s.refuse("no_rope_layers", f"a list of {layers} entries (one per layer) is needed")
        ropes = [1] * layers
    kinds = [(kind, bool(r)) for kind, r in zip(types, ropes, strict=False)]
    for kind, roped in dict.fromkeys(kinds):
        params = rope_params
        if isinstance(rope_params, dict) and kind in rope_params:  # per layer type (Gemma 3)
            params = rope_params[kind]
        elif gemma and kind == "sliding_attention" and cfg.get("rope_local_base_freq"):
            params = {"rope_theta": cfg["rope_local_base_freq"]}
        elif not params and t.startswith("gemma3"):  # Gemma3TextConfig's default thetas
            params = {"rope_theta": cfg.get("rope_theta") or 1e6} if kind == "full_attention" \
                else {"rope_theta": 10000.0}
        if params is not None and "rope_theta" not in params:  # as standardize_rope_params
            default = 1e6 if t.startswith("gemma3") and kind == "full_attention" else 10000.0
            params = {**params, "rope_theta": cfg.get("rope_theta", default)}
        entries = dict(base, position=rope(s, params, head_dim, interleaved)
                       if roped else "none")
        slide = kind == "sliding_attention"
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
            window = 1  # (refused: the import fails, having listed every problem)
        if bidirectional:  # EmbeddingGemma: Gemma3TextConfig turns the config's window w into
            # w // 2 + 1 and its sliding layers see |q - k| < w // 2 + 1; full layers see all
            entries["mask"] = mask(False, padding, window // 2 + 1 if slide else None,
                                    both_sides=True)
        else:
            entries["mask"] = mask(True, padding, window if slide else None)
        name = f"{t}_attn"
        if len({k for k, _ in kinds}) > 1:
            name = f"{t}_{'local' if slide else 'global'}"
        if not roped:
            name = f"{name.removesuffix('_attn')}_nope"
        s.attentions[name] = entries
        if slide and bidirectional:
            s.comments[name] = (f"sliding_window = {window}, bidirectional: each query sees the "
                                f"{window // 2} keys on each side of it")
        elif slide:
            s.comments[name] = (f"sliding_window = {window}: each query sees itself and the "
                                f"{window - 1} keys before it")
        elif not roped:
            s.comments[name] = "a NoPE layer: no position encoding"
    names = list(s.attentions)
    unique = list(dict.fromkeys(kinds))
    s.pattern = [names[unique.index(k)] for k in period(kinds)]
    hidden = s.need("intermediate_size")
    key = "hidden_activation" if "hidden_activation" in cfg and t != "gemma" else "hidden_act"
    gate = act(s, key, s.need(key), gated=gated)
    if gated:
        ffn = f"{'swiglu' if gate == 'silu' else 'geglu'}({hidden}"
        ffn += ", bias = true)" if cfg.get("mlp_bias") else ")"
    else:
        ffn = f"{gate}({hidden}{'' if cfg.get('mlp_bias') else ', bias = false'})"
    s.stack = {"layers": str(layers), "ffn": ffn,
               "norm": f"rmsnorm({'sandwich' if sandwich else 'pre'}, {norm_args})"}


def read_nope_full(s: SpecText, padding: str | None, **entries: str) -> str:
    """This reader over a config whose layer_types' full layers have no positions (the
    sliding ones alone rotate, as the reader's `no_rope_layers` say), q and k RMS-normed per
    head and `entries` added to each attention, its mask kept last; the eps, as written."""
    # the full layers are NoPE layers, as this reader names them (`no_rope_layers`)
    s.cfg["no_rope_layers"] = [1 if t == "sliding_attention" else 0
                               for t in s.cfg["layer_types"]]
    read(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for attention in s.attentions.values():
        kept = attention.pop("mask")
        attention.update(qk_norm=f"rmsnorm(eps = {eps})", **entries, mask=kept)
    return eps


def read_qk_normed(s: SpecText, padding: str | None, who: str) -> None:
    """This reader with q and k RMS-normed per head before RoPE (Qwen3's attention, in Hy3 and
    dots.llm1), whose MLPs and experts must be SwiGLU (`who` names the model in a refusal)."""
    read(s, padding)
    eps = num(s.need("rms_norm_eps"))
    for entries in s.attentions.values():  # each head of q and k, before RoPE
        kept = entries.pop("mask")
        entries.update(qk_norm=f"rmsnorm(eps = {eps})", mask=kept)
    if act(s, "hidden_act", s.need("hidden_act"), gated=True) != "silu":
        s.refuse("hidden_act", f"{who}'s MLPs and experts are imported as SwiGLU (silu)")


LLAMA = Names("layers.{i}.", {**ATTN, **GATED, "attn_norm.weight": "input_layernorm.weight",
                               "ffn_norm.weight": "post_attention_layernorm.weight"},
               {"norm.weight": "norm.weight", **LM}, ("model.",))
_GEMMA = Names("layers.{i}.", {**ATTN, **GATED,
                               "attn_norm.weight": "input_layernorm.weight",
                               "post_attn_norm.weight": "post_attention_layernorm.weight",
                               "ffn_norm.weight": "pre_feedforward_layernorm.weight",
                               "post_ffn_norm.weight": "post_feedforward_layernorm.weight"},
               {"norm.weight": "norm.weight", **LM},
               ("model.language_model.", "language_model.model.", "model."))
# Gemma 3's multimodal checkpoint: its vision tower and projector lie outside the text stack
_GEMMA3 = replace(_GEMMA, outside=(r"vision_tower\..+", r"multi_modal_projector\..+"))


def _q_rows(a: Attention, cfg: dict) -> int:
    return a.heads * a.head_dim


def _kv_rows(a: Attention, cfg: dict) -> int:
    return a.kv_heads * a.head_dim


def _half(cfg_key: str) -> Callable[[Attention, dict], int]:
    return lambda a, cfg: cfg[cfg_key]


_PHI3 = Names("layers.{i}.", {
    "self_attn.q_proj.weight": ("self_attn.qkv_proj.weight", rows(lambda a, c: 0, _q_rows)),
    "self_attn.k_proj.weight": ("self_attn.qkv_proj.weight", rows(_q_rows, _kv_rows)),
    "self_attn.v_proj.weight": ("self_attn.qkv_proj.weight",
                                rows(lambda a, c: _q_rows(a, c) + _kv_rows(a, c), _kv_rows)),
    "self_attn.o_proj.weight": "self_attn.o_proj.weight",
    "mlp.gate_proj.weight": ("mlp.gate_up_proj.weight",
                             rows(lambda a, c: 0, _half("intermediate_size"))),
    "mlp.up_proj.weight": ("mlp.gate_up_proj.weight",
                           rows(_half("intermediate_size"), _half("intermediate_size"))),
    "mlp.down_proj.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight"},
    {"norm.weight": "norm.weight", **LM}, ("model.",))


# transformers' own defaults (its config classes, 5.23) for the fields the import reads: a field
# missing from config.json means what transformers means by it
LLAMA_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "hidden_act": "silu", "rms_norm_eps": 1e-06,
                   "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
_MISTRAL_DEFAULTS = {**{k: v for k, v in LLAMA_DEFAULTS.items() if not k.endswith("_bias")},
                     "intermediate_size": 14336, "num_key_value_heads": 8, "sliding_window": 4096}
_GEMMA_DEFAULTS = {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                   "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                   "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06,
                   "tie_word_embeddings": True, "attention_bias": False,
                   "query_pre_attn_scalar": 256, "sliding_window": 4096}
_QWEN_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
                  "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "use_sliding_window": False,
                  "sliding_window": 4096, "max_window_layers": 28}

_QWEN_WINDOWS = "read into layer_types by {}Config; the import reads it only when layer_types " \
    "is absent"
_GEMMA3_SOFTCAP = "Gemma 3's attention never applies it (transformers keeps it unused)"
_GEMMA3_DEFAULTS = {**_GEMMA_DEFAULTS, "use_bidirectional_attention": False}

FAMILIES = [
    Family("llama", read, LLAMA, LLAMA_DEFAULTS, lm=True),
    Family("mistral", read, LLAMA, _MISTRAL_DEFAULTS, lm=True),
    # Ministral (8B): Mistral's layers, each sliding or full as layer_types says
    Family("ministral", read, LLAMA, _MISTRAL_DEFAULTS, lm=True),
    Family("qwen2", read, LLAMA, _QWEN_DEFAULTS,
           inert={"max_window_layers": _QWEN_WINDOWS.format("Qwen2")}, lm=True),
    Family("qwen3", read, LLAMA, {**_QWEN_DEFAULTS, "head_dim": 128, "attention_bias": False},
           inert={"max_window_layers": _QWEN_WINDOWS.format("Qwen3")}, lm=True),
    Family("gemma2", read, _GEMMA, {**_GEMMA_DEFAULTS, "final_logit_softcapping": 30.0,
                                     "attn_logit_softcapping": 50.0},
           refused={"use_bidirectional_attention": (
               bool, "transformers' Gemma 2 applies it in its SDPA path but keeps the causal "
                     "mask in its eager path")}, lm=True),
    Family("gemma3_text", read, _GEMMA, _GEMMA3_DEFAULTS,
           inert={"attn_logit_softcapping": _GEMMA3_SOFTCAP}, lm=True),
    Family("gemma3", read, _GEMMA3, _GEMMA3_DEFAULTS,
           inert={"attn_logit_softcapping": _GEMMA3_SOFTCAP},
           lm=True),
    Family("phi3", read, _PHI3, {
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "hidden_act": "silu", "original_max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False}, lm=True),
    Family("smollm3", read, LLAMA, {
        **LLAMA_DEFAULTS, "hidden_size": 2048, "intermediate_size": 11008,
        "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4,
        "tie_word_embeddings": True, "use_sliding_window": False, "no_rope_layer_interval": 4},
        inert={
            "no_rope_layer_interval": "read into no_rope_layers by SmolLM3Config",
            "use_sliding_window": "read into layer_types by SmolLM3Config; the mask follows "
                                  "layer_types"}, lm=True,
        rope={"rope_type": "default", "rope_theta": 2000000.0}),
]
