"""The plan's rewrites beside the attention strategies: what the lowering joins, each named
with its reason, so that `explain` shows them and the lowering only carries them out.

- `packed_projections`: linear projections of one input with the same bias setting (an
  attention's q, k and v; an MLP's gate and up) as one MatMul of their joined weights, split
  after (with q, k, v first, in the order GroupQueryAttention takes them packed);
- `skip_norm` (planned targets, float32): a residual add and the norm of its sum as one ONNX
  Runtime kernel (SkipSimplifiedLayerNormalization for RMSNorm, SkipLayerNormalization for
  LayerNorm);
- `contrib_norms` (planned targets, float32): the other norms as ONNX Runtime's
  RMSNormalization or LayerNormalization kernels."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, Node, Op, all_nodes
from ..targets import get

__all__ = ["Rewrites", "explained", "rewrites"]

_QKV = {"q_proj": 0, "k_proj": 1, "v_proj": 2}  # GroupQueryAttention's packed order
_SKIP_KERNELS = {"rmsnorm": "SkipSimplifiedLayerNormalization",
                 "layernorm": "SkipLayerNormalization"}


@dataclass(frozen=True)
class Rewrites:
    """What the lowering joins: `siblings`, each packed projection's output -> its group (in
    packed order); `skip_norms`, each residual add -> the norm of its sum; `contrib_norms`,
    whether norms run as ONNX Runtime's kernels."""

    siblings: dict[str, list[Node]] = field(default_factory=dict)
    skip_norms: dict[str, Node] = field(default_factory=dict)
    contrib_norms: bool = False
    contrib: tuple[str, ...] = ()  # the norms (not joined with an add) that run so

    def lines(self) -> list[str]:
        """One line per rewrite, for `explain`."""
        out, seen = [], set()
        for group in self.siblings.values():
            names = tuple(n.out for n in group)
            if names not in seen:
                seen.add(names)
                out.append(f"packed_projections: {', '.join(names)} read {group[0].args[0]}: "
                           "one MatMul of their joined weights, split after")
        for add, norm in self.skip_norms.items():
            kernel = _SKIP_KERNELS.get(norm.attr("kind"), "a skip norm kernel")
            out.append(f"skip_norm: {add} and {norm.out}: one {kernel} (the residual add "
                       "and the norm of its sum)")
        if self.contrib:
            out.append(f"contrib_norms: {', '.join(self.contrib)}: ONNX Runtime's "
                       "RMSNormalization or LayerNormalization kernels (float32)")
        return out


def rewrites(graph: Graph, target: str, dtype: str = "float32") -> Rewrites:
    """The rewrites the lowering of the planned `graph` carries out on `target`."""
    fused = get(target).planned and dtype == "float32"
    skips = _skip_norms(graph) if fused else {}
    joined = {n.out for n in skips.values()}
    contrib = tuple(n.out for n in all_nodes(graph.nodes) if fused and n.op is Op.NORM
                    and n.attr("kind") != "l2norm" and n.out not in joined)
    return Rewrites(_packed(graph), skips, fused, contrib)


def explained(graph: Graph, target: str, dtype: str = "float32") -> list[str]:
    """`explain`'s lines for the planned `graph`: none where attndsl does not lower it (the
    portable target's one-pass graphs without a by_length switch or a delta rule's Scan,
    which torch.onnx.export writes)."""
    lowered = graph.decoding or get(target).planned or any(
        n.op in (Op.SWITCH, Op.DELTA_RULE) for n in graph.nodes)
    return rewrites(graph, target, dtype).lines() if lowered else []


def _packed(graph: Graph) -> dict[str, list[Node]]:
    """LINEAR nodes reading the same value with the same bias setting, by output name; an
    attention's q, k and v first, in that order."""
    by_input: dict[tuple[str, bool], list[Node]] = {}
    for n in graph.nodes:
        if n.op is Op.LINEAR:
            by_input.setdefault((n.args[0], n.attr("bias") is not None), []).append(n)

    def rank(n: Node) -> int:
        return _QKV.get(n.attr("weight").rsplit(".", 2)[-2], len(_QKV))

    return {n.out: sorted(group, key=rank) for group in by_input.values() if len(group) > 1
            for n in group}


def _skip_norms(graph: Graph) -> dict[str, Node]:
    """Residual adds whose sum is normed (pre-norm blocks, the final norm, post-norm blocks)
    -> that norm. Not for q/k norms (no add before them)."""
    adds = {n.out: n for n in graph.nodes if n.op is Op.ADD}
    out: dict[str, Node] = {}
    for n in graph.nodes:
        if n.op is Op.NORM and n.args[0] in adds and n.args[0] not in out:
            out[n.args[0]] = n
    return out
