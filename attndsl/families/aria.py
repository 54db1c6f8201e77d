"""Aria's text model (`aria_text`): Llama's decoder whose MLP is a mixture of experts. Its
router (`mlp.router`, no bias) picks the top k experts by logit and weighs them by a softmax
over those k logits, which is the softmax over every expert renormalised over its top k
(`normalize = true`: the exponentials' common denominator cancels). The routed experts are
SiLU-gated whatever hidden_act says, without biases, stored transposed and fused:
`experts.fc1.weight` [E, d, 2 n] (gate columns, then up columns) and `experts.fc2.weight`
[E, n, d]. Beside them, always run and added unweighted, the shared experts as one MLP of
intermediate_size x moe_num_shared_experts: hidden_act's gated unit, with mlp_bias's biases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..spec import Attention
from .base import Family
from .llama import LLAMA, LLAMA_DEFAULTS
from .llama import read as read_llama
from .moe import expanded
from .names import Names, Split
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    unit = s.stack["ffn"]  # hidden_act's gated unit of intermediate_size, mlp_bias's biases
    hidden = s.need("intermediate_size")
    ffn = (f"moe(experts = {s.need('moe_num_experts')}, top_k = {s.need('moe_topk')}, "
           f"expert = swiglu({hidden}), normalize = true")
    shared = s.need("moe_num_shared_experts")
    if shared:  # AriaSharedExpertsMLP: the llama reader's unit, shared times as wide
        name, rest = unit.split("(", 1)
        ffn += f", shared = {name}({hidden * shared}{rest[len(str(hidden)):]}"
    s.stack["ffn"] = ffn + ")"


def _fc1(second: bool) -> Callable[[int], Split]:
    """Expert e's gate (the first n columns of fc1's [d, 2 n]) or up (the last n), as [n, d]."""
    def make(e: int) -> Split:
        def split(t: Any, a: Attention, cfg: dict) -> Any:
            n = t.shape[-1] // 2
            return (t[e][:, n:] if second else t[e][:, :n]).T
        return split
    return make


def _fc2(e: int) -> Split:
    """Expert e's down projection: fc2's [n, d] transposed to [d, n]."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        return t[e].T
    return split


_E = "mlp.experts."
_ARIA = Names(LLAMA.layer, {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    "mlp.router.weight": "mlp.router.weight",
    "mlp.experts.{e}.gate_proj.weight": (f"{_E}fc1.weight", _fc1(False)),
    "mlp.experts.{e}.up_proj.weight": (f"{_E}fc1.weight", _fc1(True)),
    "mlp.experts.{e}.down_proj.weight": (f"{_E}fc2.weight", _fc2),
    **{f"mlp.shared.{p}_proj.{w}": f"mlp.shared_experts.{p}_proj.{w}"
       for p in ("gate", "up", "down") for w in ("weight", "bias")}},
    LLAMA.top, LLAMA.bases)


def _names(cfg: dict) -> Names:
    """The table with its experts 0 .. moe_num_experts - 1."""
    return expanded(_ARIA)({**cfg, "num_local_experts": cfg.get("moe_num_experts")})


# transformers' defaults (AriaTextConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("aria_text", _read, _ARIA, {
        **LLAMA_DEFAULTS, "intermediate_size": 4096, "moe_num_experts": 8, "moe_topk": 2,
        "moe_num_shared_experts": 2}, lm=True, weights_for=_names),
]
