"""The op registry: each IR op defined once, with how many operands it reads, its attributes
(required, optional, and whether a planned node may carry more), and the rule its result type
keeps given its operands' types. `verify.verify` checks every node of a graph against its
definition after each pass."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from ..shapes import TensorType
from .attributes import Record, declared, record
from .graph import Node, Op

__all__ = ["OPS", "SCORE_BIASES", "OpDef", "conv_inputs", "core_attributes", "core_operands"]

# (node, its operands' types) -> the rule the node breaks, or None
Rule = Callable[[Node, Sequence[TensorType]], str | None]


@dataclass(frozen=True)
class OpDef:
    """One op: its operand count, its attributes declared `name: kind` (`attributes.KINDS`; a
    trailing `?`: it may be None), required then optional, read into its record, a frozen
    dataclass (`record`), and the rule its result type keeps."""

    op: Op
    operands: tuple[int, int]  # fewest, most
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    open: bool = False  # a planned node: its strategy's parameters ride along
    rule: Rule | None = None
    tensors: tuple[str, ...] = ()  # the attributes that name weight-table tensors
    # the attributes naming values the node defines besides its result (a decoding kernel's
    # updated caches, written in place)
    defines: tuple[str, ...] = ()
    # it takes the `softmax` hook mechanisms' attributes (`mechanisms.SOFTMAX_ATTRS`), each
    # optional and naming a weight-table tensor: the weight of an extra logit per head
    softmax_hook: bool = False

    @cached_property
    def required_names(self) -> tuple[str, ...]:
        return tuple(declared(e)[0] for e in self.required)

    def tensor_attrs(self) -> tuple[str, ...]:
        """The attributes that name weight-table tensors: `tensors`, then the `softmax`
        hook's attributes where it takes them."""
        return self.tensors + _softmax_attrs(self)

    @cached_property
    def record(self) -> type[Record]:
        """The op's frozen attribute dataclass (`attributes.record`), made when first read
        (after the mechanism modules, whose softmax attributes it may hold)."""
        name = "".join(part.title() for part in self.op.name.split("_"))
        hooked = tuple(f"{key}: str?" for key in _softmax_attrs(self))
        return record(name, self.required, self.optional + hooked, self.open)

    def attributes(self, node: Node) -> Record:
        """`node`'s attributes as the op's record (TypeError: a value not of its kind)."""
        return self.record.of(node.attrs)


def _softmax_attrs(d: OpDef) -> tuple[str, ...]:
    """The `softmax` hook's attributes on an op that takes them (read when a graph is checked,
    not at import: the mechanism modules import the IR package, and this module with it)."""
    if not d.softmax_hook:
        return ()
    from .. import mechanisms

    return mechanisms.SOFTMAX_ATTRS


def _same(node: Node, a: Sequence[TensorType]) -> str | None:
    """The result has the first operand's axes (an elementwise op)."""
    if node.shape.dims != a[0].dims:
        return f"result axes {list(node.shape.dims)} must equal operand 0's {list(a[0].dims)}"
    return None


def _rank(*ranks: int) -> Rule:
    def rule(node: Node, a: Sequence[TensorType]) -> str | None:
        if node.shape.rank not in ranks:
            return f"result rank {node.shape.rank} must be one of {list(ranks)}"
        return None

    return rule


def _linear(node: Node, a: Sequence[TensorType]) -> str | None:
    if node.shape.dims[:-1] != a[0].dims[:-1]:
        return "result axes but the last must equal the input's"
    return None


def _module(kind: str, ranks: tuple[int, ...]) -> Rule:
    """A mechanism's `apply`, a kernel's `kernel` or a feed-forward form's `ffn` node: named
    by its first attribute, the module's own attributes after it, and a result of one of
    `ranks`."""

    def rule(node: Node, a: Sequence[TensorType]) -> str | None:
        from .. import mechanisms

        modules = {"mechanism": mechanisms.APPLIERS, "kernel": mechanisms.KERNELS,
                   "ffn": mechanisms.FFNS}[kind]
        module = modules.get(node.attr(kind))
        if module is None:
            return f"no {kind} module {node.attr(kind)!r}"
        keys = tuple(k for k, _ in node.attrs[1:])
        if keys != module.attributes:
            return f"attributes {list(keys)} must be the {kind}'s {list(module.attributes)}"
        return _rank(*ranks)(node, a)

    return rule


# a score bias's kind -> its parameters, the attributes of an attention core that follow `bias`
SCORE_BIASES: dict[str | None, tuple[str, ...]] = {
    None: (), "alibi": ("slopes", "max_bias", "factor", "rounding"),
    "relative_bias": ("buckets", "max_distance", "bidirectional", "weight"),
    "relative_logits": ("d_rel", "extent", "weight"), "indexed": ("top_k", "selector"),
    "relative_2d": ("window", "class_token", "weight")}
# the score biases that read a tensor of the layer's own besides positions: an attention core's
# fourth operand, a score_bias node's second (Inkling's relative states, (B, heads, L, d_rel);
# a `keys` hook mechanism's selection, (B, L, n): -inf on the visible keys it drops, 0
# elsewhere)
BIAS_OPERANDS = frozenset({"relative_logits", "indexed", "relative_2d"})


def conv_inputs(node: Node) -> tuple[str, ...]:
    """A causal_conv node's inputs, laid side by side along the channels: its operands before
    the runtime ones (a decoding call's past inputs and attention_mask, or one pass's
    key_lengths where its `padding` reads them)."""
    runtime = 2 if node.attr("decoding") else int(node.attr("padding") is not None)
    return node.args[:len(node.args) - runtime]


def core_operands(node: Node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An attention core's operands after q, k and v: (its score bias's own operands, the
    runtime inputs its mask reads)."""
    rest = node.args[3:]
    n = int(node.attr("bias") in BIAS_OPERANDS)
    return rest[:n], rest[n:]


def core_attributes(bias: str | None) -> tuple[str, ...]:
    """The attributes of an `attention` core, in order, each a plain value: its strategy ("" in
    an unplanned graph: the planner sets it, and appends the strategy's parameters), the
    heads, the score scale, each score modifier's value under its key (`mechanisms.SCORED`,
    None where unset), the score bias's kind (or None) and its parameters, each `softmax`
    hook mechanism's attribute (the weight of its extra logit), the mask expression (None where a
    kernel's rows applied it), its sparsity, `memory` (decoding cross attention: its keys
    are the cached memory rows), the softmax's dropout and the attention's kind. `_core`
    (ir/attention.py) writes them in this order, the verifier holds every core to it."""
    from .. import mechanisms

    return ("strategy", "heads", "kv_heads", "scale", *mechanisms.SCORED, "bias",
            *SCORE_BIASES[bias], *mechanisms.SOFTMAX_ATTRS, "expr", "sparsity", "memory",
            "dropout", "kind")


def _core(node: Node, a: Sequence[TensorType]) -> str | None:
    """An attention core's attributes are `core_attributes` of its bias, exactly (unplanned),
    or followed by its strategy's parameters (planned)."""
    bias = node.attr("bias")
    if bias not in SCORE_BIASES:
        return f"no score bias {bias!r}"
    keys, want = tuple(k for k, _ in node.attrs), core_attributes(bias)
    if keys[:len(want)] != want or (not node.attr("strategy") and keys != want):
        return f"attributes {list(keys)} must be {list(want)}" + (
            ", then the strategy's parameters" if node.attr("strategy") else "")
    return _rank(3)(node, a)


def _selector(node: Node, a: Sequence[TensorType]) -> str | None:
    """A `select_keys` node names a mechanism at the `keys` hook."""
    from .. import mechanisms

    module = mechanisms.MECHANISMS.get(node.attr("mechanism"))
    if module is None or module.hook != "keys":
        return f"no mechanism {node.attr('mechanism')!r} at the `keys` hook"
    return _rank(3)(node, a)


def _split(node: Node, a: Sequence[TensorType]) -> str | None:
    h, d = node.attr("heads"), node.attr("dim")
    b, n, width = a[0].dims
    if width != h * d or node.shape.dims != (b, h, n, d):
        return f"(B, n, heads * dim) must become (B, heads, n, dim) with heads={h}, dim={d}"
    return None


def _merge(node: Node, a: Sequence[TensorType]) -> str | None:
    b, h, n, d = a[0].dims
    if node.shape.dims != (b, n, h * d):
        return "(B, H, n, d) must become (B, n, H * d)"
    return None


def _head_slice(node: Node, a: Sequence[TensorType]) -> str | None:
    h, start, stop = node.attr("heads"), node.attr("start"), node.attr("stop")
    if a[0].last % h or not 0 <= start < stop <= a[0].last // h:
        return f"columns {start}..{stop} must lie within each of {h} heads"
    if node.shape.last != h * (stop - start):
        return "result width must be heads * (stop - start)"
    return None


def _repeat(node: Node, a: Sequence[TensorType]) -> str | None:
    b, h, n, d = a[0].dims
    if node.shape.dims != (b, h * node.attr("groups"), n, d):
        return "(B, Hkv, S, d) must become (B, Hkv * groups, S, d)"
    return None


def _scores(node: Node, a: Sequence[TensorType]) -> str | None:
    q, k = a
    if q.last != k.last:
        return f"queries ({q.last}) and keys ({k.last}) must have one feature width"
    if node.shape.dims != (*q.dims[:3], k.dims[2]):
        return "scores must be (B, H, L, S) of queries (B, H, L, d) and keys (B, H, S, d)"
    return None


def _softmax(node: Node, a: Sequence[TensorType]) -> str | None:
    if len(a) > 1 and a[1].dtype != "bool":
        return "operand 1 (the mask) must be bool"
    return _same(node, a)


def _attend(node: Node, a: Sequence[TensorType]) -> str | None:
    p, v = a
    if p.dims[-1] != v.dims[-2] or node.shape.dims != (*p.dims[:3], v.last):
        return "(B, H, L, S) probabilities times (B, H, S, d) values must be (B, H, L, d)"
    return None


def _mask(node: Node, a: Sequence[TensorType]) -> str | None:
    if node.shape.dtype != "bool" or node.shape.rank not in (2, 3):
        return "a mask is bool[L, S] or bool[B, L, S]"
    return None


def _cache(node: Node, a: Sequence[TensorType]) -> str | None:
    past, new = a
    if past.rank != 4 or new.rank != 4 or past.last != new.last or node.shape.last != new.last:
        return "past (B, H, P, d) and new (B, H, L, d) keys must share their width"
    return None


def _value_pairs(node: Node, a: Sequence[TensorType]) -> str | None:
    if node.shape.dims != (*a[0].dims[:3], 2 * a[0].last):
        return "(B, Hkv, S, dv) must become (B, Hkv, S, 2 dv)"
    return None


def _embed(node: Node, a: Sequence[TensorType]) -> str | None:
    if a[0].dtype != "int64":
        return "token ids must be int64"
    return None


def _float_result(rule: Rule | None) -> Rule:
    def checked(node: Node, a: Sequence[TensorType]) -> str | None:
        if node.shape.dtype not in (None, "float"):
            return f"result must be the model's float type, not {node.shape.dtype}"
        return rule(node, a) if rule else None

    return checked


# the attributes of an attention core after `strategy` and `bias` (`core_attributes`), each
# score modifier's and softmax hook's being its module's (plain, or a tensor name)
_CORE = ("heads: int", "kv_heads: int", "scale: number", "slopes: str", "max_bias: number",
         "factor: number", "rounding: str", "buckets: int", "max_distance: int",
         "bidirectional: bool", "weight: str", "d_rel: int", "extent: int", "top_k: int",
         "selector: str", "window: int", "class_token: bool", "expr: mask?",
         "sparsity: sparsity?", "memory: bool?", "dropout: number", "kind: str")
_DEFS = [
    OpDef(Op.INPUT, (0, 0)),
    OpDef(Op.ADD_POSITION, (1, 2), ("kind: str",), ("weight: str", "max_len: int",
                                                     "layout: str", "offset: int",
                                                     "frequencies: str"), rule=_same,
          tensors=("weight",)),
    OpDef(Op.LINEAR, (1, 1), ("weight: str", "bias: str?"), rule=_linear,
          tensors=("weight", "bias")),
    OpDef(Op.SPLIT_HEADS, (1, 1), ("heads: int", "dim: int"), rule=_split),
    OpDef(Op.HEAD_SLICE, (1, 1), ("heads: int", "start: int", "stop: int"), rule=_head_slice),
    OpDef(Op.NORM, (1, 1), ("kind: str", "eps: number", "unit_offset: bool", "module: str",
                            "bias: bool"), ("affine: bool",), rule=_same),
    OpDef(Op.ROPE, (1, 2), ("theta: number", "dim: int", "interleaved: bool",
                            "scaling: scaling?"), ("mrope: ints", "mrope_interleaved: bool",
                                                     "axial: bool"),
          rule=_same),
    OpDef(Op.APPLY, (1, 2), ("mechanism: str",), open=True, rule=_module("mechanism", (3, 4)),
          tensors=("weights",)),
    OpDef(Op.REPEAT_KV, (1, 1), ("groups: int",), rule=_repeat),
    OpDef(Op.SCORES, (2, 2), ("scale: number",), rule=_scores),
    OpDef(Op.SELECT_KEYS, (4, 4), ("mechanism: str", "top_k: int", "scale: number"),
          rule=_selector),
    OpDef(Op.SCORE_BIAS, (1, 2), ("kind: str",), _CORE[3:17], rule=_same,
          tensors=("weight",)),
    OpDef(Op.MASK, (0, 3), ("expr: mask", "sparsity: sparsity?", "memory: bool?"), rule=_mask),
    OpDef(Op.SOFTMAX, (1, 2), ("dropout: number",), rule=_softmax, softmax_hook=True),
    OpDef(Op.ATTEND, (2, 2), rule=_attend),
    OpDef(Op.MERGE_HEADS, (1, 1), rule=_merge),
    # (open: the score modifiers' values, then a planned core's strategy parameters)
    OpDef(Op.ATTENTION, (3, 7), ("strategy: str", "bias: str?"), _CORE, open=True,
          rule=_core, tensors=("weight",), defines=("presents",), softmax_hook=True),
    OpDef(Op.ACTIVATION, (1, 1), ("kind: str",), rule=_same),
    OpDef(Op.MUL, (2, 2), rule=_same),
    OpDef(Op.CLAMPED_GLU, (2, 2), ("alpha: number", "limit: number"), rule=_same),
    OpDef(Op.ADD, (2, 2), (), ("dropout: number",), rule=_same),
    OpDef(Op.SCALE, (1, 1), ("factor: number",), ("weight: str",), rule=_same,
          tensors=("weight",)),
    OpDef(Op.HEAD_LINEAR, (1, 1), ("weight: str", "heads: int", "block: int", "start: int",
                                   "stop: int", "transposed: bool"), rule=_rank(3),
          tensors=("weight",)),
    OpDef(Op.JOIN_HEADS, (2, 2), rule=_rank(4)),
    OpDef(Op.VALUE_PAIRS, (1, 1), rule=_value_pairs),
    OpDef(Op.FFN, (1, 1), ("ffn: str",), open=True, rule=_module("ffn", (3,)),
          tensors=("weights", "output_bias")),
    OpDef(Op.EMBED, (1, 1), ("weight: str", "scale: number"), rule=_embed, tensors=("weight",)),
    OpDef(Op.PATCHES, (1, 1), ("size: int", "weight: str"), (
        "bias: str", "class_token: str", "distillation_token: str", "registers: str",
        "positions: str", "grid: int", "antialias: bool"), rule=_rank(3),
          tensors=("weight", "bias", "class_token", "distillation_token", "registers",
                   "positions")),
    OpDef(Op.GRID, (1, 1), ("size: int", "before: int"), rule=_rank(3)),
    OpDef(Op.CACHE, (2, 2), rule=_cache),
    OpDef(Op.TAIL, (1, 1), ("keep: int", "first: int"), rule=_rank(4)),
    OpDef(Op.SWITCH, (3, 3), ("up_to: ints", "branches: region", "outputs: strs"),
          rule=_rank(3)),
    OpDef(Op.SEQ_PROJECT, (1, 2), ("weight: str", "max_len: int", "expr: mask"), rule=_rank(4),
          tensors=("weight",)),
    OpDef(Op.CAUSAL_CONV, (1, 5), ("part: str", "weight: str", "width: int", "padding: mask?",
                                   "decoding: bool", "activation: str"), ("bias: str",),
          rule=_rank(3), tensors=("weight", "bias")),
    OpDef(Op.ROWS, (1, 1), ("start: int", "stop: int?"), rule=_rank(3, 4)),
    OpDef(Op.KERNEL, (2, 7), ("kernel: str",), open=True, rule=_module("kernel", (4,)),
          tensors=("weights",)),
]
OPS: dict[Op, OpDef] = {
    d.op: d if d.op in (Op.INPUT, Op.MASK, Op.GRID) else replace(d, rule=_float_result(d.rule))
    for d in _DEFS
}
assert set(OPS) == set(Op), "every op has its definition"
