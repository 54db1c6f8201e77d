"""`attndsl import`: a Hugging Face config.json -> a formatted, commented .attn spec of the
model's transformer stack (its layers and final norm; embeddings and heads stay outside), which
`compile --weights CHECKPOINT_DIR` fills with the checkpoint's tensors. Plain JSON reading: no
network and no transformers needed. A field the language cannot express is an error naming
it; each family's fields are in docs/CHECKPOINTS.md."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from .errors import Diagnostic, SpecError
from .hf_fields import DEFAULTS, Recorded, read_config, refusals
from .hf_rope import num as _num
from .hf_rope import rope as _rope

__all__ = ["FAMILIES", "import_config"]


class _Spec:
    """Attentions (name -> entries), a layer pattern and stack entries, rendered as text."""

    def __init__(self, cfg: dict, name: str):
        self.cfg, self.name = cfg, name
        self.attentions: dict[str, dict[str, str]] = {}
        self.comments: dict[str, str] = {}
        self.pattern: list[str] = []
        self.stack: dict[str, str] = {}
        self.problems: list[str] = []

    def get(self, *keys: str, default: Any = None) -> Any:
        for key in keys:
            if self.cfg.get(key) is not None:
                return self.cfg[key]
        return default

    def need(self, *keys: str) -> Any:
        value = self.get(*keys)
        if value is None:
            self.problems.append(f"`{keys[0]}` is missing")
            return 0
        return value

    def refuse(self, key: str, why: str) -> None:
        self.problems.append(f"`{key}` = {json.dumps(self.cfg.get(key))}: {why}")

    def text(self, source: str, unread: list[str] = ()) -> str:
        model_type = self.cfg.get("model_type")
        if "vocab" in self.stack:
            what = ["# The stack is the model's token embedding, transformer layers, final norm "
                    "and LM head:", "# a language model."]
        else:
            what = ["# The stack is the model's transformer layers and final norm; embeddings "
                    "and heads stay", "# outside."]
        lines = [f"# Imported by `attndsl import` from {source} (model_type {model_type}).",
                 what[0], f"{what[1]} Compile with `--weights` on the checkpoint folder.", ""]
        if unread:
            lines[-1:-1] = textwrap.wrap(f"Not read (unknown to attndsl): {', '.join(unread)}.",
                                         98, initial_indent="# ", subsequent_indent="# ")
        for name, entries in self.attentions.items():
            if name in self.comments:
                lines.append(f"# {self.comments[name]}")
            lines.append(f"attention {name} {{")
            lines += [f"    {k} = {v}" for k, v in entries.items()]
            lines += ["}", ""]
        unique = list(dict.fromkeys(self.pattern))
        pattern = unique[0] if len(unique) == 1 else "[" + ", ".join(self.pattern) + "]"
        lines.append(f"transformer {self.name} {{")
        lines += [f"    {k} = {v}" for k, v in {"attention": pattern, **self.stack}.items()]
        lines.append("}")
        return "\n".join(lines) + "\n"


def _act(s: _Spec, key: str, value: str, gated: bool = False) -> str:
    table = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
             "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}
    act = table.get(value)
    if act is None or (gated and act not in ("silu", "gelu_tanh")):
        s.refuse(key, "no such activation in attndsl" + (" for a gated MLP (silu, "
                                                          "gelu_tanh)" if gated else ""))
        return "silu" if gated else "gelu"
    return act


def _mask(causal: bool, padding: str | None, window: int | None = None,
          both_sides: bool = False) -> str:
    """`window` keys up to the query's own (both_sides: window - 1 on each side)."""
    parts = ["causal"] if causal else []
    if window is not None:
        parts.append(f"window(left = {window - 1}, right = {window - 1 if both_sides else 0})")
    if padding is not None:
        parts.append("padding" if padding == "right" else "padding(side = left)")
    return " & ".join(parts) or "full"


def _llama_like(s: _Spec, padding: str | None) -> None:
    """llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3: pre-norm decoders with SwiGLU or
    GeGLU MLPs; gemma adds sandwich norms, unit-offset RMSNorm and softcapping."""
    cfg, t = s.cfg, s.cfg.get("model_type")
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    kv = s.get("num_key_value_heads", default=heads)
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    eps = s.get("rms_norm_eps", default=1e-6)
    gemma = t.startswith("gemma")
    bias = "false"
    if t == "qwen2":
        bias = "[q, k, v]"
    elif cfg.get("attention_bias"):
        bias = "true"
    base = {"d_model": str(d), "heads": str(heads), "kv_heads": str(kv),
            "head_dim": str(head_dim), "bias": bias}
    if gemma:
        base["scale"] = f"{_num(s.need('query_pre_attn_scalar'))} ** -0.5"
        if t == "gemma2" and cfg.get("attn_logit_softcapping"):  # Gemma 3 never applies it
            base["softcap"] = _num(cfg["attn_logit_softcapping"])
    norm_args = f"eps = {_num(eps)}" + (", unit_offset = true" if gemma else "")
    if t in ("qwen3", "gemma3", "gemma3_text"):
        base["qk_norm"] = f"rmsnorm({norm_args})"
    layers = s.need("num_hidden_layers")
    types = cfg.get("layer_types")
    if not types and t == "gemma2":  # before layer_types: even layers slide
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    elif not types and t.startswith("gemma3"):
        every = s.get("sliding_window_pattern", "_sliding_window_pattern", default=6)
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                 for i in range(layers)]
    types = types or ["full_attention"] * layers
    window = s.get("sliding_window")
    if t == "mistral" or t == "phi3":
        types = ["sliding_attention" if window else "full_attention"] * layers
    elif t in ("qwen2", "qwen3") and not cfg.get("use_sliding_window"):
        types = ["full_attention"] * layers
    elif t in ("qwen2", "qwen3") and not cfg.get("layer_types"):  # as Qwen2Config derives them
        first = s.get("max_window_layers", default=28)
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    rope_params = cfg.get("rope_parameters")
    bidirectional = t.startswith("gemma3") and bool(cfg.get("use_bidirectional_attention"))
    for kind in dict.fromkeys(types):
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
        entries = dict(base, position=_rope(s, params, head_dim))
        slide = kind == "sliding_attention"
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
            window = 1  # (refused: the import fails, having listed every problem)
        if bidirectional:  # EmbeddingGemma: Gemma3TextConfig turns the config's window w into
            # w // 2 + 1 and its sliding layers see |q - k| < w // 2 + 1; full layers see all
            entries["mask"] = _mask(False, padding, window // 2 + 1 if slide else None,
                                    both_sides=True)
        else:
            entries["mask"] = _mask(True, padding, window if slide else None)
        name = f"{t}_attn" if len(set(types)) == 1 else f"{t}_{'local' if slide else 'global'}"
        s.attentions[name] = entries
        if slide and bidirectional:
            s.comments[name] = (f"sliding_window = {window}, bidirectional: each query sees the "
                                f"{window // 2} keys on each side of it")
        elif slide:
            s.comments[name] = (f"sliding_window = {window}: each query sees itself and the "
                                f"{window - 1} keys before it")
    names = list(s.attentions)
    kinds = list(dict.fromkeys(types))
    s.pattern = [names[kinds.index(k)] for k in _period(types)]
    hidden = s.need("intermediate_size")
    act = _act(s, "hidden_activation" if "hidden_activation" in cfg else "hidden_act",
               s.get("hidden_activation", "hidden_act", default="silu"), gated=True)
    ffn = f"{'swiglu' if act == 'silu' else 'geglu'}({hidden}"
    ffn += ", bias = true)" if cfg.get("mlp_bias") else ")"
    s.stack = {"layers": str(layers), "ffn": ffn,
               "norm": f"rmsnorm({'sandwich' if gemma else 'pre'}, {norm_args})"}


def _period(types: list[str]) -> list[str]:
    """The shortest prefix that repeats into `types` (cut at the end)."""
    for n in range(1, len(types) + 1):
        if all(types[i] == types[i % n] for i in range(len(types))):
            return types[:n]
    return types


def _neox_like(s: _Spec, padding: str | None) -> None:
    """gpt_neox, gptj, falcon, bloom: LayerNorm decoders with GELU MLPs, often parallel."""
    cfg, t = s.cfg, s.cfg["model_type"]
    d = s.need("hidden_size", "n_embd")
    heads = s.need("num_attention_heads", "n_head")
    head_dim = d // max(heads, 1)
    eps = s.get("layer_norm_eps", "layer_norm_epsilon", default=1e-5)
    layers = s.need("num_hidden_layers", "n_layer")
    entries = {"d_model": str(d), "heads": str(heads)}
    residual = None
    hidden = 4 * d
    ffn_bias = True
    if t == "gpt_neox":
        entries["bias"] = "true" if cfg.get("attention_bias", True) else "false"
        entries["position"] = _rope(s, cfg.get("rope_parameters"), head_dim,
                                    dim=None if cfg.get("rope_parameters") else
                                    int(head_dim * s.get("rotary_pct", "partial_rotary_factor",
                                                         default=0.25)))  # as GPTNeoXConfig
        residual = "parallel" if cfg.get("use_parallel_residual", True) else None
        hidden = s.need("intermediate_size")
        act = _act(s, "hidden_act", cfg.get("hidden_act", "gelu"))
    elif t == "gptj":
        entries["bias"] = "false"
        rotary = cfg.get("rotary_dim") or head_dim
        entries["position"] = _rope(s, {"rope_theta": 10000.0}, head_dim, interleaved=True,
                                    dim=rotary)
        residual = "parallel(shared_norm = true)"
        hidden = cfg.get("n_inner") or 4 * d
        act = _act(s, "activation_function", cfg.get("activation_function", "gelu_new"))
    elif t == "bloom":
        entries["bias"] = "true"
        entries["position"] = "alibi"
        if cfg.get("apply_residual_connection_post_layernorm"):
            s.refuse("apply_residual_connection_post_layernorm",
                     "the residual from the normed input has no attndsl form")
        act = "gelu_tanh"  # bloom_gelu_forward: the tanh approximation
    else:  # falcon
        bias = "true" if cfg.get("bias") else "false"
        entries["bias"] = bias
        if cfg.get("new_decoder_architecture"):
            entries["kv_heads"] = str(s.need("num_kv_heads"))
        elif cfg.get("multi_query", True):
            entries["kv_heads"] = "1"
        if cfg.get("alibi"):
            entries["position"] = "alibi(scaled = true, rounding = bfloat16)"  # as trained
            if padding == "left":
                s.problems.append("`alibi` = true with --padding left: Falcon-RW's bfloat16 "
                                  "ALiBi rounds each token's position among the real tokens, "
                                  "which attndsl reproduces for right padding only (--padding "
                                  "right)")
        else:
            entries["position"] = _rope(s, cfg.get("rope_parameters"), head_dim)
        if cfg.get("parallel_attn", True) or cfg.get("new_decoder_architecture"):
            two = cfg.get("new_decoder_architecture") and cfg.get(
                "num_ln_in_parallel_attn") in (None, 2)
            residual = "parallel" if two else "parallel(shared_norm = true)"
        hidden = cfg.get("ffn_hidden_size") or 4 * d
        ffn_bias = bool(cfg.get("bias"))
        act = _act(s, "activation", cfg.get("activation", "gelu"))
    entries["mask"] = _mask(True, padding)
    s.attentions[f"{t}_attn"] = entries
    s.pattern = [f"{t}_attn"]
    s.stack = {"layers": str(layers),
               "ffn": f"{act}({hidden}" + (")" if ffn_bias else ", bias = false)"),
               "norm": f"layernorm(pre, eps = {_num(eps)})"}
    if residual:
        s.stack["residual"] = residual


def _bert(s: _Spec, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        s.refuse("position_embedding_type", "relative_key positions have no attndsl form")
    s.attentions["bert_attn"] = {"d_model": str(d), "heads": str(heads), "bias": "true",
                                 "mask": _mask(bool(cfg.get("is_decoder")), padding)}
    s.comments["bert_attn"] = ("positions and token types are added by the embeddings, "
                               "outside the stack")
    s.pattern = ["bert_attn"]
    act = _act(s, "hidden_act", cfg.get("hidden_act", "gelu"))
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{act}({s.need('intermediate_size')})",
               "norm": f"layernorm(post, eps = {_num(s.get('layer_norm_eps', default=1e-12))})"}


def _t5(s: _Spec, padding: str | None) -> None:
    cfg = s.cfg
    proj = cfg.get("feed_forward_proj", "relu")
    ffn = {"relu": "relu", "gated-gelu": "geglu", "gated-silu": "swiglu"}.get(proj)
    if ffn is None:
        s.refuse("feed_forward_proj", "attndsl has relu, gated-gelu and gated-silu")
        ffn = "relu"
    s.attentions["t5_attn"] = {
        "d_model": str(s.need("d_model")), "heads": str(s.need("num_heads")),
        "head_dim": str(s.need("d_kv")), "bias": "false", "scale": "1",
        "position": (f"relative_bias(buckets = {cfg.get('relative_attention_num_buckets', 32)}"
                     f", max_distance = {cfg.get('relative_attention_max_distance', 128)})"),
        "mask": _mask(False, padding)}
    s.comments["t5_attn"] = "the encoder's self attention (T5 does not scale q.k)"
    s.pattern = ["t5_attn"]
    s.stack = {"layers": str(s.need("num_layers")),
               "ffn": f"{ffn}({s.need('d_ff')}" + (", bias = false)" if ffn == "relu" else ")"),
               "norm": f"rmsnorm(pre, eps = {_num(s.get('layer_norm_epsilon', default=1e-6))})",
               "relative_bias": "shared"}


FAMILIES = {
    "llama": _llama_like, "mistral": _llama_like, "qwen2": _llama_like, "qwen3": _llama_like,
    "gemma2": _llama_like, "gemma3": _llama_like, "gemma3_text": _llama_like,
    "phi3": _llama_like, "gpt_neox": _neox_like, "gptj": _neox_like, "falcon": _neox_like,
    "bloom": _neox_like, "bert": _bert, "t5": _t5,
}
_ENCODERS = ("bert", "t5")
_LM_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma3_text", "phi3")


def _lm_head(s: _Spec) -> None:
    """vocab, tied embeddings, Gemma's embedding scale sqrt(hidden_size) and final logit
    softcap: the keys that make the stack a language model."""
    cfg = s.cfg
    s.stack["vocab"] = str(s.need("vocab_size"))
    gemma = cfg["model_type"].startswith("gemma")
    if cfg.get("tie_word_embeddings", gemma):
        s.stack["tie_embeddings"] = "true"
    if gemma:
        s.stack["embedding_scale"] = f"sqrt({s.need('hidden_size')})"
    if cfg.get("final_logit_softcapping"):
        s.stack["logit_softcap"] = _num(cfg["final_logit_softcapping"])


def import_config(path: Path, padding: str = "auto", head: str = "auto",
                  notes: list[str] | None = None) -> str:
    """The spec text for a config.json (or the folder holding one). `padding`: `auto` (right
    padding for encoders, none for decoders), `none`, `left` or `right`. `head`: `lm` (token
    embedding and LM head: a language model), `none` (the stack of hidden states) or `auto`
    (lm for the families whose embedding and head attndsl expresses, _LM_FAMILIES, when the
    config gives vocab_size)."""
    cfg, file = read_config(path)
    cfg = Recorded({**DEFAULTS.get(cfg.get("model_type"), {}), **cfg})  # as transformers reads it
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise SpecError([Diagnostic(
            f"{file}: model_type `{model_type}` is not one attndsl imports",
            hint=f"supported: {', '.join(sorted(set(FAMILIES)))}")])
    if padding == "auto":
        padding = "right" if model_type in _ENCODERS else "none"
    s = _Spec(cfg, model_type.replace("_text", ""))
    s.problems += refusals(cfg, model_type)
    FAMILIES[model_type](s, None if padding == "none" else padding)
    if head == "lm" and model_type not in _LM_FAMILIES:
        raise SpecError([Diagnostic(
            f"{file}: attndsl imports the embedding and LM head of "
            f"{', '.join(sorted(_LM_FAMILIES))}, not of `{model_type}`",
            hint="import the stack alone with --head none")])
    if head == "lm" or (head == "auto" and model_type in _LM_FAMILIES
                        and cfg.get("vocab_size") is not None):
        _lm_head(s)
    if s.problems:
        raise SpecError([Diagnostic(f"{file}: {p}", hint="attndsl cannot express this field; "
                                    "see docs/CHECKPOINTS.md") for p in s.problems])
    unread = cfg.unread(model_type)
    if unread and notes is not None:
        notes.append(f"{file}: not read: {', '.join(unread)} (attndsl does not know these "
                     "fields: check that they do not change what the model computes)")
    return s.text(file.name, unread)
