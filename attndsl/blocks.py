"""The resolved spec of a block's parts besides attention: its MLP forms (`Ffn`) and its norms
(`Norm`, also the q/k norms'). Re-exported by `spec`. A feed-forward form other than one MLP
is a module of its own (`mechanisms/base_ffn.py`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GATED", "Ffn", "Norm"]


@dataclass(frozen=True)
class Ffn:
    kind: str  # relu | relu2 | gelu | gelu_tanh | quick_gelu (fc1, act, fc2) | swiglu | geglu |
    # relu2_glu | clamped_swiglu | gelu_glu (exact erf GELU's gate: ModernBERT's)
    hidden: int
    bias: bool
    # clamped_swiglu (gpt-oss): (clamp(up, -limit, limit) + 1) * g sigmoid(alpha g), g =
    # min(gate, limit)
    alpha: float = 1.702
    limit: float = 7.0

    @property
    def gated(self) -> bool:
        return self.kind in GATED

    @property
    def activation(self) -> str:
        return GATED.get(self.kind, self.kind)


# gated FFN -> its gate's activation (clamped_swiglu: its own, with the up projection's clamp)
GATED = {"swiglu": "silu", "geglu": "gelu_tanh", "relu2_glu": "relu2",
         "clamped_swiglu": "clamped_swiglu", "gelu_glu": "gelu"}


@dataclass(frozen=True)
class Norm:
    """LayerNorm (weight and bias; `affine = False`: neither, OLMo's), RMSNorm (weight;
    `unit_offset`: scaled by 1 + weight, as Gemma's; `affine = False`: none, NanoChat's) or,
    for q and k only, l2norm (RMSNorm without a weight, Llama 4's), with its epsilon."""

    kind: str  # layernorm | rmsnorm | l2norm
    eps: float
    unit_offset: bool = False
    bias: bool = False  # a layernorm's bias (Cohere's has none; q/k layernorms never)
    across_heads: bool = False  # q/k: over all heads of a token (OLMo 2), else per head
    affine: bool = True  # a norm's weight (and bias); OLMo's LayerNorm, NanoChat's RMSNorm: none

    @property
    def weighted(self) -> bool:
        return self.kind != "l2norm" and self.affine

    @staticmethod
    def default_eps(kind: str) -> float:
        return 1e-5 if kind == "layernorm" else 1e-6
