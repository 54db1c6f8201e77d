"""The resolved spec of a block's parts besides attention: its MLP forms (`Ffn`), its norms
(`Norm`, also the q/k norms') and a mixture of experts (`Moe`). Re-exported by `spec`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GATED", "Ffn", "Moe", "Norm"]


@dataclass(frozen=True)
class Ffn:
    kind: str  # relu | gelu | gelu_tanh (fc1 -> act -> fc2) | swiglu | geglu | clamped_swiglu
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
GATED = {"swiglu": "silu", "geglu": "gelu_tanh", "clamped_swiglu": "clamped_swiglu"}


@dataclass(frozen=True)
class Norm:
    """LayerNorm (weight and bias), RMSNorm (weight; `unit_offset`: scaled by 1 + weight, as
    Gemma's) or, for q and k only, l2norm (RMSNorm without a weight, Llama 4's), with its
    epsilon."""

    kind: str  # layernorm | rmsnorm | l2norm
    eps: float
    unit_offset: bool = False
    bias: bool = False  # a layernorm's bias (Cohere's has none; q/k layernorms never)
    across_heads: bool = False  # q/k: over all heads of a token (OLMo 2), else per head

    @property
    def weighted(self) -> bool:
        return self.kind != "l2norm"

    @staticmethod
    def default_eps(kind: str) -> float:
        return 1e-5 if kind == "layernorm" else 1e-6


@dataclass(frozen=True)
class Moe:
    """A mixture-of-experts feed-forward (docs/LANGUAGE.md, Transformer keys): a router picks
    `top_k` of `experts` MLPs per token (`router`: softmax or sigmoid of the router's logits,
    chosen by those plus a learned `selection_bias` and among the `top_groups` best of
    `groups` groups, the top k weights renormalised when `normalize`, times `routed_scale`);
    each token runs
    only those, its gate multiplying the expert's output (or, `gate = input`, its input), plus
    the `shared` MLP when there is one (times sigmoid(x W) with `shared_gate`). Every expert is
    the stack's `ffn` form; the layers in `dense_layers` run the `dense` MLP instead."""

    experts: int
    top_k: int
    normalize: bool
    router_bias: bool
    shared: Ffn | None
    routed_scale: float
    router: str = "softmax"  # softmax | sigmoid
    gate: str = "output"  # output | input
    shared_gate: bool = False
    dense: Ffn | None = None
    dense_layers: tuple[int, ...] = ()
    selection_bias: bool = False  # DeepSeek-V3's e_score_correction_bias: added to choose
    groups: int = 1  # group-limited routing (DeepSeek): experts in `groups` groups, of which
    top_groups: int = 1  # the `top_groups` best (by `group_score`: top2 | max) are eligible
    group_score: str = "top2"
