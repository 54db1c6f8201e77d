"""The torch module's plan: how each attention of a one-pass graph runs in PyTorch, and why
(`explain --target torch`). Torch-free, like the rest of the planner; the paths' functions are
backends/torch_attention.py, which runs what this plan says.

Each attention that keeps no nodes of its own (`_own`: kernels, decoding, a switch's branches,
path = 'dense') is offered to `TORCH_PATHS` in order; the first whose `match` applies takes it,
else `dense` (the core left unplanned: the module runs its primitive ops, `ir.decompose`):

- `block_sparse` where the mask's cover is a bounded band (the ONNX targets' block_sparse
  match, the same cover and block size): attndsl's block-sparse form, trainable on every
  device, which applies every score modifier and `softmax` hook mechanism. What runs it is
  planned too, as plain node attributes: `flex` (where FlexAttention runs it: 'cuda', 'always'
  under path = 'flex', 'never' with a mechanism it does not take, `FLEX_TAKES`) and
  `sdpa_side` (up to sdpa_side x sdpa_side query-key pairs SDPA with the mask runs it; 0 with
  a score bias or a mechanism SDPA does not take, `SDPA_TAKES`). The device, the lengths and
  training are known only at run time: `block_sparse_kernel` applies the planned values to
  them, and `block_sparse_rule` says the same in the words explain prints;
- `sdpa` for every other softmax core without a score bias or a mechanism SDPA does not take:
  F.scaled_dot_product_attention (`is_causal`, or a boolean mask).

What each path takes of the score modifiers and `softmax` hook mechanisms is data
(`TorchPath.takes`, `FLEX_TAKES`, `SDPA_TAKES`: mechanism keys, as a strategy's `takes`), and
a reason names a mechanism it cannot take by its module's `described`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..ir import Graph
from ..mechanisms import SCORED
from ..targets import PORTABLE_TARGET
from .cores import Choice, Core, cores, fuse, where

if TYPE_CHECKING:  # (strategies imports the planner's cores: read at run time in the functions)
    from ..strategies import Match, Reject

__all__ = ["FLEX_TAKES", "PATHS", "SDPA_SIDE", "SDPA_TAKES", "TORCH_PATHS", "TorchContext",
           "TorchPath", "block_sparse_kernel", "block_sparse_rule", "plan_torch"]

PATHS = ("auto", "dense", "flex")
# the score modifiers and `softmax` hook mechanisms (keys) each of torch's kernels applies:
# FlexAttention the score modifiers, as its score_mod, but no extra softmax logit; SDPA none
FLEX_TAKES = frozenset(SCORED)
SDPA_TAKES: frozenset[str] = frozenset()
# up to SDPA_SIDE x SDPA_SIDE query-key pairs a block-sparse attention without a score bias or
# a mechanism SDPA does not take runs as SDPA with its mask: on the CPU SDPA's fused kernel is
# faster there than gathered blocks (BENCHMARKS.md). Read when planning (the tests set it to 0
# to plan the blocks at small shapes); the module reads the planned node's `sdpa_side`.
SDPA_SIDE = 1536


@dataclass(frozen=True)
class TorchContext:
    """What a torch path's match reads besides the core: the module's `path` (auto or flex)
    and the core's dropout (its softmax node's)."""

    path: str
    dropout: float


@dataclass(frozen=True)
class TorchPath:
    """One way the torch module runs a softmax core as one fused `attention` node (`name`, its
    function in backends/torch_attention.py): `match(core, ctx)` gives its parameters (shown
    by explain), the node attributes it runs by and its reasons, or why not. `takes`: the score
    modifiers and `softmax` hook mechanisms (keys) it applies, which its match refuses the
    rest of; None: every one."""

    name: str
    match: Callable[[Core, TorchContext], Match | Reject]
    takes: frozenset[str] | None = None


def plan_torch(graph: Graph, path: str = "auto") -> tuple[Graph, list[Choice]]:
    """The graph with each attention a torch path takes fused into one `attention` node, and
    one Choice per attention. `path`: `auto` (as above), `dense` (every attention's own
    nodes), `flex` (as auto, with FlexAttention for block-sparse attentions on any device)."""
    from ..strategies import Match

    nodes = list(graph.nodes)
    choices = []
    for core in cores(graph):
        layer, branch = where(core.prefix, graph)
        own = _own(core, graph, path)
        if own:
            choices.append(Choice(layer, branch, *own))
            continue
        ctx = TorchContext(path, core.dropout)
        notes = []  # why a path that could have taken the core did not
        for torch_path in TORCH_PATHS:
            found = torch_path.match(core, ctx)
            if isinstance(found, Match):
                nodes = fuse(nodes, core, torch_path.name, {**found.params, **dict(found.attrs)})
                choices.append(Choice(layer, branch, torch_path.name, found.reasons,
                                      tuple(found.params.items())))
                break
            notes.append(found.note)
        else:
            sparse = notes[0] if notes[0] and "bounded band" not in notes[0] else \
                "the mask has no bounded band for the block-sparse form"
            choices.append(Choice(layer, branch, "dense", (
                f"the exact dense form: {_sdpa_blocker(core)}; "
                f"{sparse.removeprefix('dense masked form: ')} (memory grows with L x S)",)))
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
        why = "a core selector's branch: torch.cond runs each variant's own nodes"
    else:
        return None
    return "dense", (why,)


def _block_sparse(core: Core, ctx: TorchContext) -> Match | Reject:
    """The ONNX targets' cover and blocks (torch runs them on any device), and what runs them:
    FlexAttention where `flex` says, SDPA with the mask up to `sdpa_side` squared pairs, the
    gathered blocks otherwise."""
    from ..strategies import Match
    from ..strategies.block_sparse import blocks

    found = blocks(core, "torch ops")
    if not isinstance(found, Match):
        return found
    flexless = core.untaken(FLEX_TAKES)
    flex = "never" if flexless else "always" if ctx.path == "flex" else "cuda"
    blocker = _scored(core)
    side = 0 if blocker else SDPA_SIDE
    rule = {"flex": flex, "sdpa_side": side}
    why = (f"not FlexAttention: {flexless[0].described}" if flexless else
           "FlexAttention: a BlockMask of the same mask, the score formulas as its score_mod",
           f"not SDPA with the mask: {blocker}" if blocker else
           "SDPA with the mask: faster than gathered blocks at small shapes")
    reasons = [*found.reasons, "trainable: autograd through the gathered blocks", "; ".join(why)]
    reasons.append(f"runs: {block_sparse_rule({**rule, 'dropout': ctx.dropout})}")
    return Match(found.params, tuple(reasons), {**found.attrs, **rule})


def block_sparse_rule(attrs: Mapping[str, Any]) -> str:
    """What runs a planned block_sparse node, in words, from its attributes `flex`,
    `sdpa_side` and `dropout` (what `block_sparse_kernel` does with them)."""
    flex, side, dropout = attrs["flex"], attrs["sdpa_side"], attrs["dropout"]
    rest = "the gathered blocks"
    if side:
        rest = f"SDPA with the mask up to {side} x {side} query-key pairs, the gathered blocks " \
               "beyond"
    if flex == "never":
        return f"{rest}, on every device"
    where = "on CUDA" if flex == "cuda" else "on every device"
    if dropout:
        where += f" (not in training: dropout {dropout})"
    if flex == "cuda":
        return f"FlexAttention {where}; otherwise {rest}"
    return f"FlexAttention {where}" + (f"; in training {rest}" if dropout else "")


def block_sparse_kernel(attrs: Mapping[str, Any], device: str, pairs: int,
                        training: bool) -> str:
    """Which function runs a planned block_sparse node ('flex', 'sdpa' or 'blocks'), from its
    attributes and what only the call knows: the device type ('cuda', 'cpu', ...), the
    query-key pairs L x S and whether the module is training."""
    flex = attrs["flex"]
    if (flex == "always" or flex == device) and not (training and attrs["dropout"]):
        return "flex"
    side = attrs["sdpa_side"]
    return "sdpa" if side and pairs <= side * side else "blocks"


def _sdpa(core: Core, ctx: TorchContext) -> Match | Reject:
    from ..strategies import Match, Reject

    blocker = _sdpa_blocker(core)
    return Reject(blocker) if blocker else Match({}, (_sdpa_reason(core),))


TORCH_PATHS = (TorchPath("block_sparse", _block_sparse), TorchPath("sdpa", _sdpa, SDPA_TAKES))


def _scored(core: Core) -> str | None:
    """What of the core's scores SDPA has no place for: a score bias, or a score modifier or
    `softmax` hook mechanism it does not take (the first), else None."""
    if core.bias_kind:
        return {"alibi": "ALiBi's score bias", "relative_logits": "relative logits (a score "
                "bias of each query's relative states)", "indexed": "a selection of keys (a "
                "score bias of 0 or -inf)", "relative_2d": "BEiT's 2-D relative bias (read "
                "at each pair of the grid's rows and columns)"}.get(core.bias_kind,
                                                          "T5's relative score bias")
    untaken = core.untaken(SDPA_TAKES)
    return untaken[0].described if untaken else None


def _sdpa_blocker(core: Core) -> str | None:
    """Why the `sdpa` path cannot take the core, or None."""
    wider = "values of another width than the keys" if core.head_dim != core.value_dim else None
    return _scored(core) or wider


def _sdpa_reason(core: Core) -> str:
    from .. import masks

    if core.mask == masks.Full() or (core.mask == masks.Causal() and core.kind == "self"):
        how = "is_causal, no mask tensor" if core.mask == masks.Causal() else "no mask"
    else:
        how = (f"`{masks.render(core.mask)}` as a boolean L x S mask (1 byte a pair); rows "
               "with no visible key are zeros")
    return (f"F.scaled_dot_product_attention ({how}): its fused kernels keep no L x S scores "
            "for backward")
