"""GPT-2: learned absolute positions, pre-LayerNorm blocks with biases everywhere, a tanh-GELU
MLP, and Conv1D layers: weights stored [in, out] (x @ W + b), the q, k and v projections
fused in one `c_attn` along its columns."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .names import Names, Split, norms
from .rope import num
from .text import SpecText, act, mask

__all__ = ["FAMILIES", "GPT2"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("n_embd"), s.need("n_head")
    entries = {"d_model": str(d), "heads": str(heads)}
    if not cfg.get("scale_attn_weights"):
        entries["scale"] = "1"
    if cfg.get("scale_attn_by_inverse_layer_idx"):
        s.refuse("scale_attn_by_inverse_layer_idx", "a score scale that changes with the layer "
                                                     "index has no attndsl form")
    entries["mask"] = mask(True, padding)
    s.attentions["gpt2_attn"] = entries
    s.pattern = ["gpt2_attn"]
    # the token embedding of a language model comes with its positions (a stack of hidden
    # states takes them already added, as GPT-2's blocks do)
    s.head_attention["position"] = f"learned({s.need('n_positions')})"
    hidden = cfg.get("n_inner") or 4 * d
    s.stack = {"layers": str(s.need("n_layer")),
               "ffn": f"{act(s, 'activation_function', s.need('activation_function'))}({hidden})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_epsilon'))})"}


def _transposed(t: Any, a: Attention, cfg: dict) -> Any:
    """A Conv1D weight [in, out] as nn.Linear's [out, in]."""
    return t.T


def _c_attn(part: int, weight: bool) -> Split:
    """q, k or v of c_attn: columns part * d_model .. (part + 1) * d_model of the weight
    [d_model, 3 d_model] (transposed) or of the bias [3 d_model]."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        d = a.d_model
        return t[:, part * d:(part + 1) * d].T if weight else t[part * d:(part + 1) * d]
    return split


def _conv1d(ours: str, theirs: str) -> dict[str, tuple[str, Split] | str]:
    return {f"{ours}.weight": (f"{theirs}.weight", _transposed), f"{ours}.bias": f"{theirs}.bias"}


# GPT-2's names (GPT-1, openai.py, keeps the same names in its layers)
GPT2 = Names("h.{i}.", {
    **{f"self_attn.{p}_proj.{kind}": ("attn.c_attn." + kind, _c_attn(i, kind == "weight"))
       for i, p in enumerate("qkv") for kind in ("weight", "bias")},
    **_conv1d("self_attn.o_proj", "attn.c_proj"),
    **_conv1d("mlp.fc1", "mlp.c_fc"), **_conv1d("mlp.fc2", "mlp.c_proj"),
    **norms({"attn_norm": "ln_1", "ffn_norm": "ln_2"})},
    {**norms({"norm": "ln_f"}), "embed_tokens.weight": "wte.weight",
     "position_embeddings.weight": "wpe.weight", "lm_head.weight": "lm_head.weight"},
    ("transformer.",))

# transformers' defaults (GPT2Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("gpt2", _read, GPT2, {
        "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "add_cross_attention": False, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-05,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "tie_word_embeddings": True},
        inert={"reorder_and_upcast_attn": "computes the scores in float32 in another order: "
                                          "the same numbers to rounding (attndsl's scores are "
                                          "float32 already)",
               "summary_type": "a sequence-classification head's setting",
               "summary_use_proj": "a sequence-classification head's setting",
               "summary_activation": "a sequence-classification head's setting",
               "summary_proj_to_labels": "a sequence-classification head's setting",
               "summary_first_dropout": "a sequence-classification head's setting"},
        refused={"add_cross_attention": (
            bool, "GPT-2's cross attention layers (for an encoder-decoder) are not imported")},
        lm=True),
]
