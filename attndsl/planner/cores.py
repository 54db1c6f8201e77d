"""The planner's view of a graph: each attention core (`Core`), read from the graph's nodes
alone, and the planner's answer for it (`Choice`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import masks as m
from ..ir import Graph, Node, Op, all_nodes
from ..mechanisms import KERNELS, SCORED
from ..spec import MAX_LENGTH, Sparsity
from .cover import INF

__all__ = ["BIAS_NAMES", "CORE_OPS", "Choice", "Core", "causal_window", "cores", "cores_of",
           "padding_only", "render_choices", "where"]

BIAS_NAMES = {"alibi": "Alibi", "relative_bias": "RelativeBias"}
# the ops of a softmax attention core, from the repeated kv heads to the merged heads
CORE_OPS = frozenset({Op.REPEAT_KV, Op.SCORES, Op.SCORE_BIAS, Op.MASK, Op.SOFTMAX, Op.ATTEND,
                      Op.MERGE_HEADS, *(mechanism.op for mechanism in SCORED.values())})


@dataclass(frozen=True)
class Choice:
    """How one attention runs on one target, and why."""

    layer: str  # prefix of the attention's tensors ('' or 'layers.{i}.self_attn.')
    branch: str  # a by_length variant's lengths ('L <= 2000', 'L > 10000'), else ''
    strategy: str
    reasons: tuple[str, ...]
    params: tuple[tuple[str, object], ...] = field(default=())

    def text(self, label: str | None = None) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params)
        head = f"{self.strategy}({params})" if params else self.strategy
        where = label or self.layer.rstrip('.') or 'attention'
        where += f" ({self.branch})" if self.branch else ""
        return "\n".join([f"{where}: {head}", *(f"    - {r}" for r in self.reasons)])


@dataclass(frozen=True)
class Core:
    """One attention of a graph, as the planner reads it from the graph's nodes."""

    prefix: str  # of its value names: '' or 'layers.{i}.self_attn.'
    # a kernel's core, which keeps its own nodes: a kernel module's name
    # (`mechanisms.KERNELS`: its `kernel` node, or with `softmax_core` a softmax over its
    # rows of the keys); "" for a softmax core
    kernel: str
    kind: str  # self | cross
    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    scale: float | None
    # the score modifiers (`mechanisms.SCORED`) its nodes apply: (key, value), in order
    modifiers: tuple[tuple[str, Any], ...]
    bias: tuple[tuple[str, object], ...]  # the score bias node's attributes, or ()
    mask: m.Mask
    sparsity: Sparsity
    prepared: bool  # norms or RoPE run on q and k before the core
    # the nodes a fusing strategy replaces, by identity: the core's own (repeat_kv ..
    # merge_heads), the value it writes (and its shape), what the fused node reads
    members: frozenset[str] = frozenset()
    out: str = ""
    shape: Any = None
    qkv: tuple[str, str, str] = ("", "", "")
    runtime: tuple[str, ...] = ()  # the mask's runtime inputs (attention_mask when decoding)
    sinks: str | None = None  # the weight of its learned sink logits (heads,), if any
    paired_values: bool = False  # two kv heads' values paired after the cache (value_pairs)

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    def modifier(self, key: str) -> Any:
        """The value of the score modifier `key`, or None where the core has none."""
        return dict(self.modifiers).get(key)

    @property
    def bias_kind(self) -> str | None:
        return dict(self.bias).get("kind")


def cores(graph: Graph) -> list[Core]:
    """Every attention of the graph, in order (one per `merge_heads`), those of by_length
    variants included."""
    by_name = {n.out: n for n in all_nodes(graph.nodes)}
    return cores_of(list(all_nodes(graph.nodes)), by_name)


def cores_of(nodes, by_name: dict[str, Node]) -> list[Core]:
    """The attentions whose `merge_heads` is one of `nodes`; q, k and v are traced back to
    their split_heads through rotation, norms, caches, repeats and a kernel's rows,
    which may lie outside `nodes` (a switch's branches share them)."""

    def trace(name: str) -> tuple[Node, set[Op]]:
        seen: set[Op] = set()
        node = by_name[name]
        while node.op is not Op.SPLIT_HEADS:
            seen.add(node.op)
            node = by_name[node.args[1] if node.op is Op.CACHE else node.args[0]]
        if by_name[node.args[0]].op is Op.NORM:  # a norm across heads, before the split
            seen.add(Op.NORM)
        return node, seen

    def projected(split: Node) -> Node:
        """The linear projection a split_heads reads (through a norm across heads)."""
        node = by_name[split.args[0]]
        return by_name[node.args[0]] if node.op is Op.NORM else node

    found = []
    for node in nodes:
        if node.op is not Op.MERGE_HEADS:
            continue
        own = _members(node, by_name)
        one = {op: ns[0] for op, ns in own.items()}
        attend, scores, mask = by_name[node.args[0]], one.get(Op.SCORES), one.get(Op.MASK)
        if attend.op not in (Op.ATTEND, Op.KERNEL):
            continue  # no attention core (a kernel's own layer, normed): nothing to plan
        bias, soft = one.get(Op.SCORE_BIAS), one.get(Op.SOFTMAX)
        modifiers = tuple((key, mech.fused(one[mech.op])) for key, mech in SCORED.items()
                          if mech.op in one)
        module = KERNELS[attend.attr("kernel")] if attend.op is Op.KERNEL else None
        kernel = module.name if module else ""
        q_src, k_src, v_src = ((attend.args[0],) * 2 + (attend.args[1],)
                               if module and module.shares_keys else
                               tuple(attend.args[:3]) if module else
                               (*scores.args, attend.args[-1]))
        (q, q_ops), (k, k_ops), (v, v_ops) = trace(q_src), trace(k_src), trace(v_src)
        paired = Op.VALUE_PAIRS in v_ops  # two kv heads' values (a value_pairs node)
        repeats = {n.out: n.args[0] for n in own.get(Op.REPEAT_KV, ())}
        found.append(Core(
            prefix=node.out.removesuffix("merged"),
            kernel=kernel or next((k.name for k in KERNELS.values() if k.key_ops & k_ops), ""),
            kind="cross" if projected(k).args[0] == "memory" else "self",
            heads=q.attr("heads"), kv_heads=k.attr("heads"),
            head_dim=by_name[q_src].shape.dims[-1],  # joined features (a projection form's)
            value_dim=v.attr("dim") * (2 if paired else 1), paired_values=paired,
            scale=scores.attr("scale") if scores else None,
            modifiers=modifiers,
            bias=tuple((key, value) for key, value in bias.attrs) if bias else (),
            mask=mask.attr("expr") if mask else module.mask(attend) if module else m.Full(),
            sparsity=mask.attr("sparsity") if mask else Sparsity("auto"),
            prepared=bool(q_ops & {Op.ROPE, Op.NORM, Op.JOIN_HEADS}),
            members=frozenset(n.out for ns in own.values() for n in ns), out=node.out,
            shape=node.shape,
            qkv=(q_src, repeats.get(k_src, k_src), repeats.get(v_src, v_src)),
            runtime=mask.args if mask else (),
            sinks=soft.attr("sinks") if soft else None))
    return found


def _members(merge: Node, by_name: dict[str, Node]) -> dict[Op, list[Node]]:
    """The core's own nodes by op: those of CORE_OPS reached from its merge_heads through
    their arguments (a core's inputs come from outside them: heads, rotations, caches)."""
    own: dict[Op, list[Node]] = {}
    stack, seen = [merge], set()
    while stack:
        n = stack.pop()
        if n.out in seen:
            continue
        seen.add(n.out)
        own.setdefault(n.op, []).append(n)
        stack += [by_name[a] for a in n.args if a in by_name and by_name[a].op in CORE_OPS]
    return own


def where(prefix: str, graph: Graph) -> tuple[str, str]:
    """(layer prefix, branch) of a core's value prefix: `layers.0.self_attn.variant1.` is
    branch `L <= n` (or `L > n`, the last) of the switch `layers.0.self_attn.merged`."""
    head, sep, rest = prefix.rpartition("variant")
    if not sep or not rest.rstrip(".").isdigit():
        return prefix, ""
    i = int(rest.rstrip("."))
    switch = next(n for n in all_nodes(graph.nodes) if n.out == f"{head}merged")
    bounds = switch.attr("up_to")
    return head, f"L <= {bounds[i]}" if i < len(bounds) else f"L > {bounds[-1]}"


def causal_window(mask: m.Mask) -> float | None:
    """w for `causal & window(left = w - 1, right = 0)` (INF for plain causal), else None."""
    match mask:
        case m.Causal():
            return INF
        case m.And(m.Causal(), m.Window(left, _)) | m.And(m.Window(left, _), m.Causal()):
            # no position is MAX_LENGTH keys back: a wider window is plain causal (and ORT's
            # local_window_size is a 32-bit int)
            return left + 1 if left + 1 < MAX_LENGTH else INF
    return None


def padding_only(mask: m.Mask) -> str | None:
    """'' for full, 'padding' for key padding (alone or with full), None otherwise."""
    match mask:
        case m.Full():
            return ""
        case m.Padding(side="right"):  # MultiHeadAttention's key lengths pad on the right
            return "padding"
        case m.And(a, b):
            x, y = padding_only(a), padding_only(b)
            if x is None or y is None:
                return None
            return x or y
    return None


def render_choices(choices: list[Choice]) -> str:
    """The choices as `explain` prints them, indented; layers with the same choice (a stack's,
    of one attention spec) once, as `layers.0-3.self_attn` (or `layers.0,2.mlp`)."""
    groups: dict[tuple, list[str]] = {}
    for c in choices:
        groups.setdefault((c.branch, c.strategy, c.reasons, c.params), []).append(c.layer)
    out = []
    for (branch, *rest), layers in groups.items():
        text = Choice(layers[0], branch, *rest).text(_label(layers))
        out.append("  " + text.replace("\n", "\n  "))
    return "\n".join(out)


def _label(layers: list[str]) -> str | None:
    if len(layers) == 1:
        return None
    indices = [int(p.split(".")[1]) for p in layers]
    part = layers[0].split(".", 2)[2].rstrip(".")
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"layers.{indices[0]}-{indices[-1]}.{part}"
    return f"layers.{','.join(map(str, indices))}.{part}"


def fuse(nodes: list[Node], a: Core, strategy: str, params: dict[str, object]) -> list[Node]:
    """`nodes` with the core `a` (its member nodes, by identity) replaced by one `attention`
    node of `strategy` writing the core's output."""
    bias = dict(a.bias)
    bias = {"bias": bias.pop("kind", None), **bias}
    fused = Node(Op.ATTENTION, a.out, (*a.qkv, *a.runtime), tuple({
        "strategy": strategy, "heads": a.heads, "kv_heads": a.kv_heads, "scale": a.scale,
        **{key: a.modifier(key) for key in SCORED}, **bias, "sinks": a.sinks, "expr": a.mask,
        "kind": a.kind,
        **params}.items()),
        a.shape)
    return [fused if n.out == a.out else n for n in nodes
            if n.out == a.out or n.out not in a.members]
def attndsl_lowered(node: Node) -> bool:
    """Whether attndsl lowers `node` itself on every target, the portable one included: a
    by_length switch (an If), a kernel's node with control flow of its own (`Kernel.lowered`:
    a Scan, an If), which torch.onnx.export cannot write."""
    return node.op is Op.SWITCH or (node.op is Op.KERNEL and
                                    KERNELS[node.attr("kernel")].lowered)
