"""Phi (Phi-1, Phi-1.5, Phi-2): one LayerNorm feeds attention and the MLP in parallel
(x + attn(ln(x)) + mlp(ln(x))), rotate-half RoPE on the first partial_rotary_factor of each
head, biases everywhere (the LM head's too) and a tanh-GELU MLP."""

from __future__ import annotations

from .base import Family
from .names import LM, Names, linear, norms
from .rope import num, rope
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = d // max(heads, 1)
    if cfg.get("qk_layernorm"):
        s.refuse("qk_layernorm", "Phi's per-head LayerNorm of q and k has biases, which "
                                 "attndsl's qk_norm does not take")
    s.attentions["phi_attn"] = {
        "d_model": str(d), "heads": str(heads),
        "kv_heads": str(s.get("num_key_value_heads", default=heads)), "bias": "true",
        "position": rope(s, cfg.get("rope_parameters"), head_dim), "mask": mask(True, padding)}
    s.pattern = ["phi_attn"]
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{act(s, 'hidden_act', s.need('hidden_act'))}"
                      f"({s.need('intermediate_size')})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_eps'))})",
               "residual": "parallel(shared_norm = true)"}
    s.head["head_bias"] = "true"


_PHI = Names("layers.{i}.", {
    **{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj",
                                               f"self_attn.{p}_proj").items()},
    **linear("self_attn.o_proj", "self_attn.dense"), **norms({"attn_norm": "input_layernorm"}),
    **linear("mlp.fc1", "mlp.fc1"), **linear("mlp.fc2", "mlp.fc2")},
    {**norms({"norm": "final_layernorm"}), **LM, "lm_head.bias": "lm_head.bias"}, ("model.",))

# transformers' defaults (PhiConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("phi", _read, _PHI, {
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
        "num_attention_heads": 32, "hidden_act": "gelu_new", "layer_norm_eps": 1e-05,
        "tie_word_embeddings": False, "qk_layernorm": False}, lm=True),
]
