"""GPTBigCode (SantaCoder, StarCoder 1): GPT-2's block (learned absolute positions, pre-LayerNorm,
biases everywhere, a tanh-GELU MLP) with nn.Linear layers and multi-query attention: one fused
`c_attn` holding the queries' rows, then the one key head's, then the value head's (without
multi_query: per head, [heads, 3, head_dim])."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .names import Names, Split, linear, norms, per_head, qkv_names
from .rope import num
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("n_embd"), s.need("n_head")
    entries = {"d_model": str(d), "heads": str(heads)}
    if cfg.get("multi_query"):
        entries["kv_heads"] = "1"
    if not cfg.get("scale_attn_weights"):
        entries["scale"] = "1"
    entries["mask"] = mask(True, padding)
    s.attentions["gpt_bigcode_attn"] = entries
    s.pattern = ["gpt_bigcode_attn"]
    # the token embedding of a language model comes with its positions (a stack of hidden
    # states takes them already added, as the blocks do)
    s.head_attention["position"] = f"learned({s.need('n_positions')})"
    hidden = cfg.get("n_inner") or 4 * d
    s.stack = {"layers": str(s.need("n_layer")),
               "ffn": f"{act(s, 'activation_function', s.need('activation_function'))}({hidden})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_epsilon'))})"}


def _c_attn(part: int) -> Split:
    """q, k or v of c_attn: with multi_query its rows are the heads' queries, then the key
    head, then the value head; otherwise per head ([heads, 3, head_dim])."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        if not cfg.get("multi_query", True):
            return per_head(part)(t, a, cfg)
        q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
        start = 0 if part == 0 else q + (part - 1) * kv
        return t[start:start + (q if part == 0 else kv)]
    return split


_BIGCODE = Names("h.{i}.", {
    **qkv_names("attn.c_attn", _c_attn), **linear("self_attn.o_proj", "attn.c_proj"),
    **linear("mlp.fc1", "mlp.c_fc"), **linear("mlp.fc2", "mlp.c_proj"),
    **norms({"attn_norm": "ln_1", "ffn_norm": "ln_2"})},
    {**norms({"norm": "ln_f"}), "embed_tokens.weight": "wte.weight",
     "position_embeddings.weight": "wpe.weight", "lm_head.weight": "lm_head.weight"},
    ("transformer.",))

_FP32 = "computes the softmax (and its scale) in float32: attndsl's scores are float32 already"

# transformers' defaults (GPTBigCodeConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("gpt_bigcode", _read, _BIGCODE, {
        "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-05,
        "scale_attn_weights": True, "multi_query": True, "add_cross_attention": False,
        "tie_word_embeddings": True},
        inert={"attention_softmax_in_fp32": _FP32, "scale_attention_softmax_in_fp32": _FP32,
               "num_key_value_heads": "derived by GPTBigCodeConfig from multi_query, which the "
                                      "import reads"},
        refused={"add_cross_attention": (
            bool, "GPTBigCode's cross attention layers (for an encoder-decoder) are not "
                  "imported")},
        lm=True),
]
