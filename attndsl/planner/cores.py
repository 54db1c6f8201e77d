"""The planner's view of a graph: each attention core (`Core`), read from the graph's nodes
alone, and the planner's answer for it (`Choice`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .. import masks as m
from ..ir import Graph, Node, Op, all_nodes
from ..ir.decompose import decompose, is_core
from ..ir.ops import SCORE_BIASES, core_operands
from ..mechanisms import KERNELS, MECHANISMS, SCORED, SOFTMAX, Mechanism
from ..spec import MAX_LENGTH, Sparsity
from .cover import INF

__all__ = ["BIAS_NAMES", "Choice", "Core", "attndsl_lowered", "causal_window", "cores",
           "cores_of", "fuse", "padding_only", "render_choices", "unfused", "where"]

BIAS_NAMES = {"alibi": "Alibi", "relative_bias": "RelativeBias",
              "relative_logits": "RelativeLogits", "indexed": "Key selection",
              "relative_2d": "Relative2D"}
@dataclass(frozen=True)
class Choice:
    """How one attention runs on one target, and why."""

    layer: str  # prefix of the attention's tensors ('' or 'layers.{i}.self_attn.')
    branch: str  # a switch branch's lengths ('L <= 2000', 'L > 10000'), else ''
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
    """One attention of a graph, as the planner reads it: its core node's attributes, and
    what precedes the core (its q, k and v heads)."""

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
    # the score modifiers (`mechanisms.SCORED`) it applies: (key, value), in order
    modifiers: tuple[tuple[str, Any], ...]
    bias: tuple[tuple[str, object], ...]  # its score bias: (kind, ...) and parameters, or ()
    mask: m.Mask
    sparsity: Sparsity
    prepared: bool  # norms or RoPE run on q and k before the core
    dropout: float = 0.0  # its softmax's
    # its node's output value (and shape), what its node reads
    out: str = ""
    shape: Any = None
    qkv: tuple[str, str, str] = ("", "", "")
    runtime: tuple[str, ...] = ()  # the mask's runtime inputs (attention_mask when decoding)
    # the `softmax` hook's mechanisms (`mechanisms.SOFTMAX`) it applies: (key, value: the
    # weight of its extra logit per head), in order
    softmax: tuple[tuple[str, Any], ...] = ()
    paired_values: bool = False  # two kv heads' values paired after the cache (value_pairs)

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    def modifier(self, key: str) -> Any:
        """The value of the score modifier `key`, or None where the core has none."""
        return dict(self.modifiers).get(key)

    def untaken(self, takes: frozenset[str] | None) -> list[Mechanism]:
        """Its score modifiers and `softmax` hook mechanisms, in order, that a kernel taking
        `takes` (mechanism keys, as a strategy or a torch path declares them; None: every one,
        in standard ops) leaves out."""
        if takes is None:
            return []
        return [MECHANISMS[key] for key, _ in (*self.modifiers, *self.softmax)
                if key not in takes]

    @property
    def bias_kind(self) -> str | None:
        return dict(self.bias).get("kind")

    @property
    def selector(self) -> Mechanism | None:
        """The `keys` hook mechanism that chose its keys (its score bias `indexed`), or None."""
        key = dict(self.bias).get("selector")
        return MECHANISMS[key] if key else None


def cores(graph: Graph) -> list[Core]:
    """Every attention of the graph, in order (its unplanned `attention` core, or a kernel
    module's `merge_heads`), those of a switch's branches included."""
    by_name = {n.out: n for n in all_nodes(graph.nodes)}
    return cores_of(list(all_nodes(graph.nodes)), by_name)


def cores_of(nodes, by_name: dict[str, Node]) -> list[Core]:
    """The attentions whose unplanned `attention` core (`ir.decompose.is_core`), or kernel
    module's `merge_heads`, is one of `nodes`: a core as its node's attributes say; q, k and
    v traced back to their split_heads through rotation, norms, caches, repeats and a
    kernel's rows, which may lie outside `nodes` (a switch's branches share them)."""

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
        core = is_core(node)
        kernel = by_name.get(node.args[0]) if node.op is Op.MERGE_HEADS else None
        if not core and not (kernel is not None and kernel.op is Op.KERNEL and
                             not KERNELS[kernel.attr("kernel")].own_layer):
            continue  # no attention core (a kernel's own layer): nothing to plan
        a = dict(node.attrs) if core else {}
        if core:
            qkv = node.args[:3]
            module = None
        else:  # a kernel module's node on the (repeated) q, k and v heads
            kernel = by_name[node.args[0]]
            module = KERNELS[kernel.attr("kernel")]
            qkv = tuple(by_name[x].args[0] if by_name[x].op is Op.REPEAT_KV else x
                        for x in (kernel.args[:1] * 2 + kernel.args[1:2] if module.shares_keys
                                  else kernel.args[:3]))
        (q, q_ops), (k, k_ops), (v, v_ops) = (trace(x) for x in qkv)
        paired = Op.VALUE_PAIRS in v_ops  # two kv heads' values (a value_pairs node)
        bias = a.get("bias")
        found.append(Core(
            prefix=node.out.removesuffix("merged"),
            kernel=module.name if module else next(
                (k.name for k in KERNELS.values() if k.key_ops & k_ops), ""),
            kind="cross" if projected(k).args[0] == "memory" else "self",
            heads=a.get("heads", q.attr("heads")), kv_heads=a.get("kv_heads", k.attr("heads")),
            head_dim=by_name[qkv[0]].shape.dims[-1],  # joined features (a projection form's)
            value_dim=v.attr("dim") * (2 if paired else 1), paired_values=paired,
            scale=a.get("scale"),
            modifiers=tuple((key, a[key]) for key in SCORED if a.get(key) is not None),
            bias=(("kind", bias), *((key, a[key]) for key in SCORE_BIASES[bias])) if bias
            else (),
            # a kernel's rows applied the mask: the core sees every row
            mask=(m.Full() if a["expr"] is None else a["expr"]) if core else
            module.mask(by_name[node.args[0]]),
            sparsity=a["sparsity"] if a.get("expr") is not None else Sparsity("auto"),
            dropout=a.get("dropout", 0.0),
            prepared=bool(q_ops & {Op.ROPE, Op.NORM, Op.JOIN_HEADS}),
            out=node.out, shape=node.shape, qkv=qkv, runtime=core_operands(node)[1] if core else (),
            softmax=tuple((key, a[m.softmax_attr]) for key, m in SOFTMAX.items()
                          if a.get(m.softmax_attr) is not None)))
    return found


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
    """`nodes` with the core `a` (its unplanned `attention` node, by its output) planned: its
    strategy set, the strategy's parameters after its attributes."""
    def planned(n: Node) -> Node:
        attrs = dict(n.attrs) | {"strategy": strategy} | params
        return replace(n, attrs=tuple(attrs.items()))

    return [planned(n) if n.out == a.out else n for n in nodes]


def unfused(nodes: list[Node], a: Core, types: dict[str, Any]) -> list[Node]:
    """`nodes` with the core `a` in primitive ops (`ir.decompose`, `types` its operands'):
    no kernel takes it."""
    return [d for n in nodes for d in (decompose(n, types) if n.out == a.out and is_core(n)
                                       else (n,))]


def attndsl_lowered(node: Node) -> bool:
    """Whether attndsl lowers `node` itself on every target, the portable one included: a
    switch (an If over cores, one per range of L), a kernel's node with control flow of its
    own (`Kernel.lowered`: a Scan, an If), which torch.onnx.export cannot write."""
    return node.op is Op.SWITCH or (node.op is Op.KERNEL and
                                    KERNELS[node.attr("kernel")].lowered)
