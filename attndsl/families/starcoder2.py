"""StarCoder2: grouped-query RoPE attention with biases (use_bias), an optional sliding window
on every layer, pre-LayerNorm blocks and a GELU MLP (c_fc, c_proj)."""

from __future__ import annotations

from .base import Family
from .names import ATTN, LM, Names, linear, norms
from .rope import num, rope
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    bias = "true" if cfg.get("use_bias") else "false"
    window = s.get("sliding_window")
    s.attentions["starcoder2_attn"] = {
        "d_model": str(d), "heads": str(heads),
        "kv_heads": str(s.get("num_key_value_heads", default=heads)), "bias": bias,
        "position": rope(s, cfg.get("rope_parameters"), d // max(heads, 1)),
        "mask": mask(True, padding, window)}
    if window:
        s.comments["starcoder2_attn"] = (f"sliding_window = {window}: each query sees itself "
                                         f"and the {window - 1} keys before it")
    s.pattern = ["starcoder2_attn"]
    ffn = f"{act(s, 'hidden_act', s.need('hidden_act'))}({s.need('intermediate_size')}"
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": ffn + (")" if cfg.get("use_bias") else ", bias = false)"),
               "norm": f"layernorm(pre, eps = {num(s.need('norm_epsilon'))})"}


_STARCODER2 = Names("layers.{i}.", {
    **ATTN, **linear("mlp.fc1", "mlp.c_fc"), **linear("mlp.fc2", "mlp.c_proj"),
    **norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"})},
    {**norms({"norm": "norm"}), **LM}, ("model.",))

# transformers' defaults (Starcoder2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("starcoder2", _read, _STARCODER2, {
        "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30,
        "num_attention_heads": 24, "num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh",
        "norm_epsilon": 1e-5, "use_bias": True, "tie_word_embeddings": True}, lm=True),
]
