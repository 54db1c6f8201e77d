"""Strategy `lightning`: the lowering of lightning attention's own `kernel` node
(mechanisms/lightning.py) by the kernel's name (`LOWERINGS`): ONNX Runtime's com.microsoft.
LinearAttention (update_rule `gated`, a decay per head) where the planner set its `form`
(`Kernel.planned`), else the module's standard ops. The op runs S_t = exp(g_t) S_{t-1} +
k_t v_t^T, o_t = q_t^T S_t (scale 1) from the past state (zeros without one): attndsl passes
the module's gates, g = -rate at a real token and 0 with a zero key at a padding slot, so the
state passes it unchanged, as in the module's own form."""

from __future__ import annotations

from ..backends.lower.builder import Lowering
from ..backends.lower.ops import kernel_form
from ..backends.lower.recurrent import contrib, real_tokens
from ..ir import Node
from ..mechanisms.base_recurrent import CONTRIB
from ..mechanisms.lightning import gates, slopes
from .base import Strategy, never

__all__ = ["STRATEGY"]


def lower_lightning(lw: Lowering, node: Node) -> str:
    """LinearAttention where its form is the contrib op's; the module's standard ops else."""
    if node.attr("form") != CONTRIB:
        return kernel_form(lw, node)
    xp, heads = lw.xp, node.attr("heads")
    q, k, v = (xp.astype(lw.sym(node, i), "float32") for i in range(3))
    rates = slopes(heads, node.attr("layer"), node.attr("layers"))
    g, keep = gates(xp, q, rates, real_tokens(lw, node, xp.shape(q, 2)))
    if keep is not None:
        k = k * keep
    return contrib(lw, node, "gated", (q, k, v), xp.swap_last(g).name, None, heads)


STRATEGY = Strategy("lightning", None, never, lambda params: 1, lower_lightning, fuses=False)
