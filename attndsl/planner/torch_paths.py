"""The torch module's plan: how each attention of a one-pass graph runs in PyTorch, and why
(`explain --target torch`). Torch-free, like the rest of the planner; the paths themselves
are backends/torch_attention.py.

- `block_sparse` where the mask's cover is a bounded band (the ONNX targets' block_sparse
  match, the same cover and block size): attndsl's block-sparse form, trainable on every
  device, FlexAttention on CUDA;
- `sdpa` for every other softmax core without a score bias, score modifier or sink logits:
  F.scaled_dot_product_attention (`is_causal`, or a boolean mask);
- `dense`, the graph's own nodes, otherwise, and for every attention with path = 'dense'
  (what the portable and `torch.export` exports trace). Kernels (linear, LSH, Linformer),
  by_length's branches and decoding graphs keep their own nodes."""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Op
from ..mechanisms import SCORED
from ..targets import PORTABLE_TARGET
from .cores import Choice, Core, cores, where

__all__ = ["PATHS", "SDPA_SIDE", "plan_torch"]

PATHS = ("auto", "dense", "flex")
# up to SDPA_SIDE x SDPA_SIDE query-key pairs a block-sparse attention without a score bias,
# score modifier or sink logits runs as SDPA with its mask (torch_attention.SDPA_PAIRS): on the CPU
# SDPA's fused kernel is faster there than gathered blocks (BENCHMARKS.md)
SDPA_SIDE = 1536


def plan_torch(graph: Graph, path: str = "auto") -> tuple[Graph, list[Choice]]:
    """The graph with each attention a torch path takes fused into one `attention` node, and
    one Choice per attention. `path`: `auto` (as above), `dense` (every attention's own
    nodes), `flex` (as auto, with FlexAttention for block-sparse attentions on any device)."""
    from ..strategies import Match
    from ..strategies.block_sparse import blocks
    from . import _fuse

    nodes = list(graph.nodes)
    choices = []
    by_name = {n.out: n for n in graph.nodes}
    for core in cores(graph):
        layer, branch = where(core.prefix, graph)
        own = _own(core, graph, path)
        if own:
            choices.append(Choice(layer, branch, *own))
            continue
        dropout = next(by_name[n].attr("dropout") for n in core.members
                       if by_name[n].op is Op.SOFTMAX)
        # the same cover and blocks as the ONNX targets' (torch runs them on any device)
        found = blocks(core, "torch ops")
        if isinstance(found, Match):
            flex = "FlexAttention" if path == "flex" else "on CUDA FlexAttention"
            reasons = (*found.reasons,
                       "trainable: autograd through the gathered blocks; "
                       f"{flex} with a BlockMask of "
                       "the same mask" + ("" if core.sinks is None else
                                          " (not with sink logits: the block-sparse form)"),
                       f"up to {SDPA_SIDE} x {SDPA_SIDE} query-key pairs, without a score "
                       f"bias, {', '.join(m.described for m in SCORED.values())} or sinks: SDPA "
                       "with the mask (faster there than gathered blocks)")
            nodes = _fuse(nodes, core, "block_sparse",
                          {**found.params, **dict(found.attrs), "dropout": dropout})
            choices.append(Choice(layer, branch, "block_sparse", reasons,
                                  tuple(found.params.items())))
            continue
        blocker = _sdpa_blocker(core)
        if blocker:
            choices.append(Choice(layer, branch, "dense", (
                f"the exact dense form: {blocker}; the mask has no bounded band for the "
                "block-sparse form (memory grows with L x S)",)))
            continue
        nodes = _fuse(nodes, core, "sdpa", {"dropout": dropout})
        choices.append(Choice(layer, branch, "sdpa", (_sdpa_reason(core),)))
    return replace(graph, nodes=tuple(nodes)), choices


def _own(core: Core, graph: Graph, path: str) -> tuple[str, tuple[str]] | None:
    """(strategy, (reason,)) for an attention that keeps its own nodes, else None."""
    if core.kernel:
        return core.kernel, ("its kernel's own nodes (no L x S scores to fuse)",)
    if graph.decoding:
        why = "decoding: the exact dense form over the cache and the new keys"
    elif path == "dense":
        why = f"path = 'dense': the exact dense form, as the {PORTABLE_TARGET} and " \
              "torch.export exports trace it"
    elif where(core.prefix, graph)[1]:
        why = "a by_length branch: torch.cond runs each variant's own nodes"
    else:
        return None
    return "dense", (why,)


def _sdpa_blocker(core: Core) -> str | None:
    if core.bias_kind:
        return {"alibi": "ALiBi's score bias"}.get(core.bias_kind, "T5's relative score bias")
    if core.modifiers:
        return SCORED[core.modifiers[0][0]].described
    if core.sinks is not None:
        return "sink logits"
    if core.head_dim != core.value_dim:
        return "values of another width than the keys"
    return None


def _sdpa_reason(core: Core) -> str:
    from .. import masks

    if core.mask == masks.Full() or (core.mask == masks.Causal() and core.kind == "self"):
        how = "is_causal, no mask tensor" if core.mask == masks.Causal() else "no mask"
    else:
        how = (f"`{masks.render(core.mask)}` as a boolean L x S mask (1 byte a pair); rows "
               "with no visible key are zeros")
    return (f"F.scaled_dot_product_attention ({how}): its fused kernels keep no L x S scores "
            "for backward")
