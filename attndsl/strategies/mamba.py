"""Strategy `mamba`: the lowering of Mamba's own `kernel` node (mechanisms/mamba.py) by the
kernel's name (`LOWERINGS`): ONNX Runtime's com.microsoft.LinearAttention (update_rule `gated`,
a decay per head and key channel) where the planner set its `form` (`Kernel.planned`), else the
module's standard ops. The op runs S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = q_t^T S_t
(scale 1) from the past state (zeros without one): attndsl passes C and B repeated to the
d_inner channels as q and k, dt x as v and g = dt A (`selective_inputs`), zero with a zero key
at a padding slot so the state passes it unchanged, and adds the skip D x to its outputs."""

from __future__ import annotations

from ..backends.lower.builder import Lowering, bsh
from ..backends.lower.ops import kernel_form
from ..backends.lower.recurrent import contrib, real_tokens
from ..ir import Node
from ..mechanisms.base_recurrent import CONTRIB, repeat_heads
from ..mechanisms.mamba import selective_inputs
from .base import Strategy, never

__all__ = ["STRATEGY"]


def lower_mamba(lw: Lowering, node: Node) -> str:
    """LinearAttention where its form is the contrib op's; the module's standard ops else."""
    if node.attr("form") != CONTRIB:
        return kernel_form(lw, node)
    xp, heads = lw.xp, node.attr("heads")
    args = [lw.sym(node, i) for i in range(4)]
    q, k, v, g, skip = selective_inputs(xp, *args, *(lw.weight(w) for w in node.attr("weights")),
                                        real_tokens(lw, node, xp.shape(args[0], 2)))
    q, k = repeat_heads(xp, q, heads), repeat_heads(xp, k, heads)
    return contrib(lw, node, "gated", (q, k, v), bsh(lw, g.name), None, heads, skip)


STRATEGY = Strategy("mamba", None, never, lambda params: 1, lower_mamba, fuses=False)
