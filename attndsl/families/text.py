"""The spec text an import writes (`SpecText`: attentions, a layer pattern and stack entries,
and the problems found), and the pieces every family's reader writes it with."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from .rope import rope

__all__ = ["SpecText", "act", "mask", "period", "roped_attention"]


class SpecText:
    """Attentions (name -> entries), a layer pattern and stack entries, rendered as text."""

    def __init__(self, cfg: dict, name: str):
        self.cfg, self.name = cfg, name
        self.attentions: dict[str, dict[str, str]] = {}
        self.comments: dict[str, str] = {}
        self.pattern: list[str] = []
        self.stack: dict[str, str] = {}
        # what a language model adds (its embedding and head): stack entries, and attention
        # entries (GPT-2's learned positions, which a stack of hidden states has already added)
        self.head: dict[str, str] = {}
        self.head_attention: dict[str, str] = {}
        # an encoder-decoder's encoder: its layer pattern and stack entries (the stack, named
        # `<name>_encoder`, is written before the decoder, which names it)
        self.encoder_pattern: list[str] = []
        self.encoder: dict[str, str] = {}
        # a family whose language model is an encoder-decoder around the stack it reads (T5):
        # the decoder's attentions, its pattern's first (the import makes the stack read the
        # encoder, and `head` the decoder's entries)
        self.decoder: dict[str, dict[str, str]] = {}
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
        if self.encoder:
            what = ["# An encoder-decoder: the encoder's stack, then the decoder's, whose token "
                    "embedding both read", "# and whose LM head gives the logits."]
        elif self.stack.get("lm_head") == "false":  # (a text encoder: CLIP's)
            what = ["# The stack is the model's token embedding, transformer layers and final "
                    "norm:", "# token ids in, hidden states out (no LM head)."]
        elif "vocab" in self.stack:
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
        if self.encoder:  # (an encoder-decoder: the decoder below names it)
            lines.append(f"transformer {self.name}_encoder {{")
            lines += [f"    {k} = {v}" for k, v in {"attention": _pattern(
                self.encoder_pattern), **self.encoder}.items()]
            lines += ["}", ""]
        lines.append(f"transformer {self.name} {{")
        lines += [f"    {k} = {v}" for k, v in {"attention": _pattern(self.pattern),
                                                 **self.stack}.items()]
        lines.append("}")
        return "\n".join(lines) + "\n"


def _pattern(names: list[str]) -> str:
    """A stack's `attention` value: its one attention, or the pattern's list."""
    unique = list(dict.fromkeys(names))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(names) + "]"


def act(s: SpecText, key: str, value: str, gated: bool = False) -> str:
    table = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
             "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu",
             "relu2": "relu2", "quick_gelu": "quick_gelu"}
    act = table.get(value)
    if act is None or (gated and act not in ("silu", "gelu_tanh")):
        s.refuse(key, "no such activation in attndsl" + (" for a gated MLP (silu, "
                                                          "gelu_tanh)" if gated else ""))
        return "silu" if gated else "gelu"
    return act


def mask(causal: bool, padding: str | None, window: int | None = None,
          both_sides: bool = False) -> str:
    """`window` keys up to the query's own (both_sides: window - 1 on each side)."""
    parts = ["causal"] if causal else []
    if window is not None:
        parts.append(f"window(left = {window - 1}, right = {window - 1 if both_sides else 0})")
    if padding is not None:
        parts.append("padding" if padding == "right" else "padding(side = left)")
    return " & ".join(parts) or "full"


def roped_attention(s: SpecText, padding: str | None, interleaved: bool = False) -> dict:
    """One causal attention's entries as LlamaAttention reads the config (head_dim, else
    hidden_size / heads; kv heads; attention_bias on every projection), RoPE on every layer
    (`interleaved`: pairs 2i and 2i + 1)."""
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = s.get("head_dim", default=d // max(heads, 1))
    return {
        "d_model": str(d), "heads": str(heads),
        "kv_heads": str(s.get("num_key_value_heads", default=heads)), "head_dim": str(head_dim),
        "bias": "true" if s.cfg.get("attention_bias") else "false",
        "position": rope(s, s.cfg.get("rope_parameters"), head_dim, interleaved=interleaved),
        "mask": mask(True, padding)}


def period(types: list[str]) -> list[str]:
    """The shortest prefix that repeats into `types` (cut at the end)."""
    for n in range(1, len(types) + 1):
        if all(types[i] == types[i % n] for i in range(len(types))):
            return types[:n]
    return types
