"""Cohere (Command R, `cohere`): one bias-free LayerNorm feeds attention and the SwiGLU MLP in
parallel (x + attn(ln(x)) + mlp(ln(x))), every layer rotates q and k in the interleaved
(GPT-J) layout (transformers repeat_interleaves its frequencies and rotates pairs 2i, 2i + 1),
biases on q, k, v and o with attention_bias, the logits scaled by logit_scale. Its optional
q/k LayerNorm (`use_qk_norm`, Command R+) holds a weight per head ([heads, head_dim]), which
attndsl's qk_norm (one weight shared by the heads, or one norm over all of them) does not
express: refused."""

from __future__ import annotations

from .base import Family
from .names import ATTN, GATED, LM, Names
from .rope import num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    s.attentions["cohere_attn"] = roped_attention(s, padding, interleaved=True)
    s.comments["cohere_attn"] = "RoPE (interleaved) on every layer"
    s.pattern = ["cohere_attn"]
    gate = act(s, "hidden_act", s.need("hidden_act"), gated=True)
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{'swiglu' if gate == 'silu' else 'geglu'}({s.need('intermediate_size')})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_eps'))}, bias = false)",
               "residual": "parallel(shared_norm = true)"}
    if s.need("logit_scale") != 1:
        s.head["logit_scale"] = num(cfg["logit_scale"])


_COHERE = Names("layers.{i}.", {**ATTN, **GATED, "attn_norm.weight": "input_layernorm.weight"},
                {"norm.weight": "norm.weight", **LM}, ("model.",))

# transformers' defaults (CohereConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("cohere", _read, _COHERE, {
        "hidden_size": 8192, "intermediate_size": 22528, "logit_scale": 0.0625,
        "num_hidden_layers": 40, "num_attention_heads": 64, "hidden_act": "silu",
        "layer_norm_eps": 1e-05, "tie_word_embeddings": True, "attention_bias": False,
        "use_qk_norm": False},
        refused={"use_qk_norm": (bool, "Cohere's q/k LayerNorm holds a weight per head "
                                       "([heads, head_dim]); attndsl's qk_norm shares one "
                                       "weight among the heads")}, lm=True,
        rope={"rope_type": "default", "rope_theta": 500000.0}),
]
