"""Strategy `kda`: the lowering of Kimi delta attention's own `kernel` node
(mechanisms/kda.py) by the kernel's name (`LOWERINGS`): ONNX Runtime's com.microsoft.
LinearAttention (update_rule `gated_delta`, its decay per key channel) where the planner set
its `form` (`Kernel.planned`: the target's provider has the kernel), else the module's
standard ops (`lower_linear_attention`, backends/lower/recurrent.py, which the delta rule's
strategy also uses, its decay one per head)."""

from __future__ import annotations

from ..backends.lower.builder import Lowering
from ..backends.lower.ops import kernel_form
from ..backends.lower.recurrent import lower_linear_attention
from ..ir import Node
from ..mechanisms.base_recurrent import CONTRIB
from ..mechanisms.kda_chunks import kda_gates
from .base import Strategy, never

__all__ = ["STRATEGY"]


def lower_kda(lw: Lowering, node: Node) -> str:
    """LinearAttention where its form is the contrib op's; the module's standard ops else."""
    if node.attr("form") != CONTRIB:
        return kernel_form(lw, node)
    return lower_linear_attention(lw, node, lambda xp, args, w: kda_gates(
        xp, args[3], args[4], *w, node.attr("lower_bound")))


STRATEGY = Strategy("kda", None, never, lambda params: 1, lower_kda, fuses=False)
