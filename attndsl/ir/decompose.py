"""An unplanned attention core (`attention` with strategy "", `ops.core_attributes`) in the
primitive ops, where no kernel takes it: repeat_kv (query groups), scores, the score bias,
each score modifier's nodes (from its mechanism module), the mask, the softmax (with the
`softmax` hook's attributes), attend and merge_heads. The planner's non-fusing strategies
(`dense`, the ONNX targets) and the torch module's dense path run these; the portable export
traces the latter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .. import mechanisms
from ..shapes import T, TensorType
from .graph import GraphBuilder, Node, Op, all_nodes
from .ops import SCORE_BIASES, core_operands

__all__ = ["decompose", "decomposed", "is_core"]


@dataclass(frozen=True)
class _Scored:
    """What a score modifier's `expand` reads of the attention (`Site.spec`): its heads and
    the mechanisms it sets at `scores`, with the values the core node carries."""

    heads: int
    mechanisms: tuple[tuple[str, Any], ...]


def is_core(node: Node) -> bool:
    """Whether `node` is an unplanned attention core."""
    return node.op is Op.ATTENTION and node.attr("strategy") == ""


def decompose(node: Node, types: Mapping[str, TensorType]) -> list[Node]:
    """The primitive nodes of the unplanned core `node` (same output value); `types`: its
    operands' types (the keys' length symbol and widths are theirs)."""
    a = dict(node.attrs)
    p = node.out.removesuffix("merged")
    q, k, v = node.args[:3]
    operands, runtime = core_operands(node)
    n, head_dim, value_dim = types[k].dims[2], types[k].dims[3], types[v].dims[3]
    heads, groups = a["heads"], a["heads"] // a["kv_heads"]
    b = GraphBuilder()
    if groups > 1:
        k = b.emit(Op.REPEAT_KV, f"{p}k_rep", (k,), T("B", heads, n, head_dim), groups=groups)
        v = b.emit(Op.REPEAT_KV, f"{p}v_rep", (v,), T("B", heads, n, value_dim), groups=groups)
    scores = T("B", heads, "L", n)
    sc = b.emit(Op.SCORES, f"{p}scores", (q, k), scores, scale=a["scale"])
    if a["bias"] is not None:
        sc = b.emit(Op.SCORE_BIAS, f"{p}biased", (sc, *operands), scores, kind=a["bias"],
                    **{key: a[key] for key in SCORE_BIASES[a["bias"]]})
    scored = _Scored(heads, tuple((key, a[key]) for key in mechanisms.SCORED
                                  if a[key] is not None))
    sc = mechanisms.expand(mechanisms.Site(b, scored, p, "", (), n), "scores", sc, "scores")
    seen: tuple[str, ...] = ()  # no mask where a kernel's rows applied it
    if a["expr"] is not None:
        batched = runtime[1:] if a["memory"] else runtime  # memory rows: read by index alone
        seen = (b.emit(Op.MASK, f"{p}mask", tuple(runtime),
                       T(*("B",) * bool(batched), "L", n, dtype="bool"), expr=a["expr"],
                       sparsity=a["sparsity"], memory=a["memory"]),)
    pr = b.emit(Op.SOFTMAX, f"{p}probs", (sc, *seen), scores, dropout=a["dropout"],
                **{key: a[key] for key in mechanisms.SOFTMAX_ATTRS})
    o = b.emit(Op.ATTEND, f"{p}attn", (pr, v), T("B", heads, "L", value_dim))
    b.emit(Op.MERGE_HEADS, node.out, (o,), node.shape)
    return b.nodes


def decomposed(nodes: Iterable[Node], types: Mapping[str, TensorType] | None = None,
               ) -> list[Node]:
    """`nodes` with every unplanned core decomposed, a switch's branches' too; `types`: the
    values' types (by default those `nodes` define, theirs and their branches')."""
    nodes = list(nodes)
    types = types or {n.out: n.shape for n in all_nodes(nodes)}
    out: list[Node] = []
    for node in nodes:
        if is_core(node):
            out += decompose(node, types)
        elif node.op is Op.SWITCH:
            branches = tuple(tuple(decomposed(b, types)) for b in node.attr("branches"))
            out.append(replace(node, attrs=tuple((k, branches if k == "branches" else v)
                                                 for k, v in node.attrs)))
        else:
            out.append(node)
    return out
