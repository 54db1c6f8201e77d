"""Cohere 2 (Command R7B, Command A): one bias-free LayerNorm feeds attention and the SwiGLU MLP
in parallel; sliding-window layers rotate q and k in the interleaved (GPT-J) layout, the full
layers between them have no positions at all (NoPE); the logits are scaled by logit_scale."""

from __future__ import annotations

from .base import Family
from .names import ATTN, GATED, LM, Names
from .rope import num, rope
from .text import SpecText, act, mask, period

__all__ = ["COHERE2", "FAMILIES", "base_entries", "blocks", "known_kinds"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = s.get("head_dim", default=d // max(heads, 1))  # Cohere2Config derives it
    layers = s.need("num_hidden_layers")
    types = cfg.get("layer_types") or [
        "sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)]
    if not known_kinds(s, types, "Cohere 2"):
        return
    window, base = s.get("sliding_window"), base_entries(s, head_dim)
    for kind in dict.fromkeys(types):
        slide = kind == "sliding_attention"
        if slide and not window:
            s.refuse("sliding_window", "sliding layers need a window size")
            window = 1
        name = "cohere2_local" if slide else "cohere2_global"
        s.attentions[name] = dict(
            base, position=rope(s, cfg.get("rope_parameters"), head_dim, interleaved=True)
            if slide else "none", mask=mask(True, padding, window if slide else None))
        s.comments[name] = (f"sliding_window = {window}, RoPE (interleaved)" if slide else
                            "a full layer: no position encoding (NoPE)")
    blocks(s, layers, types, "cohere2", s.need("logit_scale"))


def known_kinds(s: SpecText, types: list[str], who: str) -> bool:
    """Whether every layer kind is sliding_attention or full_attention; else refused."""
    other = [t for t in dict.fromkeys(types) if t not in ("sliding_attention", "full_attention")]
    if other:
        s.refuse("layer_types", f"{who}'s layers are sliding_attention or full_attention; "
                                f"attndsl does not import layer kind `{other[0]}` for it")
    return not other


def base_entries(s: SpecText, head_dim: int) -> dict[str, str]:
    """Every Cohere 2 attention's sizes and bias (attention_bias)."""
    heads = s.need("num_attention_heads")
    return {"d_model": str(s.need("hidden_size")), "heads": str(heads),
            "kv_heads": str(s.get("num_key_value_heads", default=heads)),
            "head_dim": str(head_dim),
            "bias": "true" if s.cfg.get("attention_bias") else "false"}


def blocks(s: SpecText, layers: int, types: list[str], prefix: str,
           logit_scale: float | None) -> None:
    """Cohere 2's layer pattern (`{prefix}_local` sliding, `{prefix}_global` full) and stack:
    one bias-free LayerNorm before attention and the MLP in parallel, logits times
    `logit_scale` where it is set and not 1."""
    names = {"sliding_attention": f"{prefix}_local", "full_attention": f"{prefix}_global"}
    s.pattern = [names[k] for k in period(types)]
    gate = act(s, "hidden_act", s.need("hidden_act"), gated=True)
    s.stack = {"layers": str(layers),
               "ffn": f"{'swiglu' if gate == 'silu' else 'geglu'}({s.need('intermediate_size')})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_eps'))}, bias = false)",
               "residual": "parallel(shared_norm = true)"}
    if logit_scale is not None and logit_scale != 1:
        s.head["logit_scale"] = num(logit_scale)


COHERE2 = Names("layers.{i}.", {**ATTN, **GATED, "attn_norm.weight": "input_layernorm.weight"},
                 {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (Cohere2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("cohere2", _read, COHERE2, {
        "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
        "num_attention_heads": 64, "hidden_act": "silu", "layer_norm_eps": 1e-5,
        "logit_scale": 0.0625, "tie_word_embeddings": True, "attention_bias": False,
        "sliding_window": 4096}, lm=True),
]
