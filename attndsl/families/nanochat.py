"""NanoChat (Karpathy's nanochat): a pre-norm decoder whose RMSNorms have no weight (the token
embeddings normed before the first layer, each sublayer's input and the final norm:
`rmsnorm(..., affine = false)`, which NanoChatRMSNorm computes in float32 then narrows), q and
k heads normed the same way after RoPE (`qk_norm_after_rope = l2norm`), an MLP
fc2(relu2(fc1(x))) without biases and Gemma 2's final logit softcap.

Its RoPE turns the other way: rotate_half is cat(x2, -x1) where Llama's is cat(-x2, x1), so
each pair is rotated by -angle. With D the sign flip of the second half of each head's
features, that rotation of x is D rope(D x), and the weightless norm commutes with D; so the
scores q.k are those of the usual RoPE on D q and D k. The import reads q_proj and k_proj (and
their biases) with the second half of each head's rows negated (docs/CHECKPOINTS.md)."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .names import ATTN, LM, Names
from .rope import num
from .text import SpecText, act, roped_attention

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    eps = num(s.need("rms_norm_eps"))
    entries = roped_attention(s, padding)
    kept = entries.pop("mask")
    entries.update(qk_norm_after_rope=f"l2norm(eps = {eps})", mask=kept)
    s.attentions["nanochat_attn"] = entries
    s.comments["nanochat_attn"] = ("RoPE as NanoChat turns it: q_proj's and k_proj's rows are "
                                   "read with each head's second half negated")
    s.pattern = ["nanochat_attn"]
    if act(s, "hidden_act", s.need("hidden_act")) != "relu2":
        s.refuse("hidden_act", "NanoChat's MLP is imported as relu2 (squared ReLU)")
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"relu2({s.need('intermediate_size')}, bias = false)",
               "norm": f"rmsnorm(pre, eps = {eps}, affine = false)"}
    s.head["embedding_norm"] = f"rmsnorm(eps = {eps}, affine = false)"


def _turned(t: Any, a: Attention, cfg: dict) -> Any:
    """q_proj's or k_proj's rows (or bias), each head's second half of features negated."""
    halves = t.reshape(t.shape[0] // a.head_dim, 2, a.head_dim // 2, *t.shape[1:]) * 1
    halves[:, 1] = -halves[:, 1]  # (a new array, NumPy's or torch's alike)
    return halves.reshape(t.shape)


_TURNED = {f"self_attn.{p}_proj.{w}": (f"self_attn.{p}_proj.{w}", _turned)
           for p in "qk" for w in ("weight", "bias")}
_NANOCHAT = Names("layers.{i}.", {
    **{k: v for k, v in ATTN.items() if not k.endswith("_norm.weight")}, **_TURNED,
    "mlp.fc1.weight": "mlp.fc1.weight", "mlp.fc2.weight": "mlp.fc2.weight"},
    LM, ("model.",))

# transformers' defaults (NanoChatConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("nanochat", _read, _NANOCHAT, {
        "hidden_size": 768, "intermediate_size": 8192, "num_hidden_layers": 12,
        "num_attention_heads": 6, "hidden_act": "relu2", "rms_norm_eps": 1e-6,
        "final_logit_softcapping": 15.0, "attention_bias": False,
        "tie_word_embeddings": False}, lm=True),
]
