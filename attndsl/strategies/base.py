"""What an execution strategy is: one module of `attndsl/strategies/` holding its `STRATEGY`,
a `Strategy` that says when it applies (`match`, with the parameters and the reasons, or why
not), how it runs (`lower`, the ONNX it builds for an `attention` node of its name), how its
latency grows with L (`growth`, the exponent bench's fit is compared with) and where it stands
in the planner's order (`priority`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..targets import get

if TYPE_CHECKING:
    from ..backends.lower.builder import Lowering
    from ..ir import Node
    from ..planner.cores import Core

__all__ = ["Context", "Match", "Reject", "Strategy", "never"]


@dataclass(frozen=True)
class Context:
    """Where a core is planned: the target and the model's dtype."""

    target: str
    dtype: str

    @property
    def provider(self) -> str:
        return get(self.target).provider


@dataclass(frozen=True)
class Match:
    """The strategy applies: its parameters (shown by `explain`, attributes of the fused
    node), further node attributes it needs (`attrs`, not shown) and the reasons."""

    params: Mapping[str, Any] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reject:
    """The strategy does not apply; `note`, when given, joins the reasons of the choice."""

    note: str | None = None


@dataclass(frozen=True)
class Strategy:
    """One way to execute an attention core on a planned target.

    `priority`: the planner asks strategies in increasing priority and takes the first match
    (None: not in that order; `gqa_cache` is the decoding planner's). `fuses`: the core
    becomes one `attention` node with `strategy = name`, lowered by `lower`; otherwise the
    core keeps its kernel module's own `kernel` node, lowered by `lower` where given (the
    strategy then bears the kernel's name), else by the module; a strategy bearing a
    feed-forward form's name, with no priority, lowers that form's `ffn` nodes (`moe`).
    `growth(params)`: the exponent a of latency ~ L^a that the plan predicts. `takes`: the
    score modifiers and `softmax` hook mechanisms (`mechanisms.SCORED`, `mechanisms.SOFTMAX`:
    keys) its kernel applies, which its `match` refuses the rest of (`Core.untaken`); None:
    every one, as a form in standard ops does (`mechanisms.score`, the softmax's extra
    logit)."""

    name: str
    priority: int | None
    match: Callable[[Core, Context], Match | Reject]
    growth: Callable[[Mapping[str, Any]], float]
    lower: Callable[[Lowering, Node], str] | None = None
    fuses: bool = True
    takes: frozenset[str] | None = None


def never(core: Core, ctx: Context) -> Reject:
    """The match of a strategy that bears a kernel's name: never a core's, the planner plans
    the kernel's own node (`Kernel.planned`)."""
    return Reject()
