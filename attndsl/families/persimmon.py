"""Persimmon (Adept's Persimmon-8B): a pre-norm LayerNorm decoder whose q, k and v come from one
projection interleaved per head ([heads, 3, head_dim], as GPT-NeoX's), each head of q and of k
LayerNormed with its bias before RoPE (`qk_norm = layernorm(bias = true)`, with
`qk_layernorm`), RoPE on the first `partial_rotary_factor` of each head (0.5 by default), biases
on every projection and a squared-ReLU MLP without a gate, with biases."""

from __future__ import annotations

from .base import Family
from .names import LM, Names, linear, norms, per_head, qkv_names
from .rope import default_partial, num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    default_partial(s, 0.5)  # PersimmonConfig's default
    eps = num(s.need("layer_norm_eps"))
    entries = roped_attention(s, padding)  # (no num_key_value_heads: every head a kv head)
    entries["bias"] = "true"  # query_key_value and dense always have biases
    if s.cfg.get("qk_layernorm"):
        entries = {**{k: v for k, v in entries.items() if k != "mask"},
                   "qk_norm": f"layernorm(eps = {eps}, bias = true)", "mask": entries["mask"]}
    s.attentions["persimmon_attn"] = entries
    s.pattern = ["persimmon_attn"]
    ffn = act(s, "hidden_act", s.need("hidden_act"))
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{ffn}({s.need('intermediate_size')})",
               "norm": f"layernorm(pre, eps = {eps})"}


_PERSIMMON = Names("layers.{i}.", {
    **qkv_names("self_attn.query_key_value", per_head),
    **linear("self_attn.o_proj", "self_attn.dense"),
    **linear("self_attn.q_norm", "self_attn.q_layernorm"),
    **linear("self_attn.k_norm", "self_attn.k_layernorm"),
    **linear("mlp.fc1", "mlp.dense_h_to_4h"), **linear("mlp.fc2", "mlp.dense_4h_to_h"),
    **norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"})},
    {**norms({"norm": "final_layernorm"}), **LM}, ("model.",))

# transformers' defaults (PersimmonConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("persimmon", _read, _PERSIMMON, {
        "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 36,
        "num_attention_heads": 64, "hidden_act": "relu2", "layer_norm_eps": 1e-05,
        "tie_word_embeddings": False, "qk_layernorm": True}, lm=True),
]
