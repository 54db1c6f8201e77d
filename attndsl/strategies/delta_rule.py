"""Strategy `delta_rule`: the lowering of the gated delta rule's own `kernel` node
(mechanisms/delta_rule.py) by the kernel's name (`LOWERINGS`): ONNX Runtime's
com.microsoft.LinearAttention (update_rule `gated_delta`, its decay one per head) where the
planner set its `form` (`Kernel.planned`), else the module's standard ops; as Kimi delta
attention's (`lower_linear_attention`, backends/lower/recurrent.py), each key head's q and k
repeated to the value heads it serves."""

from __future__ import annotations

from ..backends.lower.builder import Lowering
from ..backends.lower.ops import kernel_form
from ..backends.lower.recurrent import lower_linear_attention
from ..ir import Node
from ..mechanisms.base_recurrent import CONTRIB
from ..mechanisms.delta_rule_chunks import delta_gates
from .base import Strategy, never

__all__ = ["STRATEGY"]


def lower_delta_rule(lw: Lowering, node: Node) -> str:
    """LinearAttention where its form is the contrib op's; the module's standard ops else."""
    if node.attr("form") != CONTRIB:
        return kernel_form(lw, node)
    return lower_linear_attention(lw, node, lambda xp, args, w: delta_gates(
        xp, args[3], args[4], *w, negative=node.attr("negative")))


STRATEGY = Strategy("delta_rule", None, never, lambda params: 1, lower_delta_rule,
                    fuses=False)
