"""The graph IR's types: ops, nodes (each value typed), the graph, and the builder that
appends nodes in execution order."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..shapes import TensorType
from ..weight_table import Weight
from .literals import render

__all__ = ["Graph", "GraphBuilder", "Node", "Op", "all_nodes", "over_memory"]


class Op(enum.Enum):
    INPUT = "input"
    ADD_POSITION = "add_position"  # sinusoidal table or learned embedding, added to x
    LINEAR = "linear"  # x @ W^T (+ b)
    SPLIT_HEADS = "split_heads"  # (B, n, h*d) -> (B, h, n, d)
    HEAD_SLICE = "head_slice"  # (B, n, h*w) -> (B, n, h*(stop-start)): columns of each head
    NORM = "norm"  # rmsnorm | layernorm over the last axis
    ROPE = "rope"
    # a mechanism's transform at a hook point of the attention (heads (B, h, n, d), scores,
    # merged heads) or of a language model's logits (`Mechanism.head`), its arithmetic in its
    # module (`attndsl/mechanisms/<mechanism>.py`); (x, position_ids) when decoding and the
    # mechanism reads positions
    APPLY = "apply"
    REPEAT_KV = "repeat_kv"  # (B, Hkv, S, d) -> (B, H, S, d): head h reads kv h // groups
    SCORES = "scores"  # scale * q @ k^T
    SCORE_BIAS = "score_bias"  # + alibi | relative_bias
    MASK = "mask"  # boolean visibility from index ranges (and runtime inputs)
    SELECT_KEYS = "select_keys"  # keys chosen per query (`keys` hook): -inf on those dropped
    SOFTMAX = "masked_softmax"  # rows with no visible key -> zeros
    ATTEND = "attend"  # p @ v
    MERGE_HEADS = "merge_heads"  # (B, H, L, dv) -> (B, L, H*dv)
    # an attention core (unplanned: strategy "", ops.core_attributes; or planned):
    # q, k, v (+ its mask's runtime inputs) -> (B, L, H*dv)
    ATTENTION = "attention"
    ACTIVATION = "activation"  # relu | relu2 | silu | gelu | gelu_tanh | quick_gelu | sigmoid
    MUL = "mul"
    CLAMPED_GLU = "clamped_glu"  # (gate, up) -> (clamp(up, -l, l) + 1) g sigmoid(alpha g)
    ADD = "add"  # a + b (a residual: dropout on b in training)
    SCALE = "scale"  # x * factor, in the model dtype (Granite's residual, a logit scale)
    # (B, n, h*i) -> (B, n, h*o): head h's features times rows start..stop of its block of
    # `weight` (h * block, c): x_h @ W_h, or x_h @ W_h^T if transposed (absorption)
    HEAD_LINEAR = "head_linear"
    JOIN_HEADS = "join_heads"  # (B, H, n, a), (B, H | 1, n, c) -> (B, H, n, a + c): features
    VALUE_PAIRS = "value_pairs"  # (B, Hkv, S, dv) -> (B, Hkv, S, 2 dv): [v_j', v_j' + Hkv/2]
    # a feed-forward form's node (mechanisms.FFNS): x -> its output, as its module computes
    # it; its attributes its own (`FeedForward.attributes`), `kernel` set by the planner
    FFN = "ffn"
    EMBED = "embed"  # token ids -> rows of the embedding table, times a scale
    PATCHES = "patches"  # pixel_values -> [class token;] patch rows (+ their 2-D positions)
    GRID = "grid"  # pixel_values -> each token's row and column (2, 1, L) int64
    CACHE = "cache"  # (past, new) -> present: the cache with the new keys or values appended
    TAIL = "tail"  # the last `keep` keys or values of a cache (a window's bounded present)
    SWITCH = "switch"  # a core selector: the branch whose up_to first holds L (the last: longer L)
    SEQ_PROJECT = "seq_project"  # a kernel's rows: E[:, :n] @ keys (masked keys zeroed) -> k
    # (q, k, v) (B, L, c_i) each -> (B, L, sum c_i): silu of each channel's causal convolution
    # over the last `width` tokens (a kernel's own layer), with the past's inputs when decoding
    # (part = state: the last width - 1 inputs, the next call's past_key_values.{i}.conv)
    CAUSAL_CONV = "causal_conv"
    ROWS = "rows"  # x[:, :, start:stop] (negative: from the end): a packed output's parts
    KERNEL = "kernel"  # a kernel module's core (mechanisms.KERNELS): its attributes its own


@dataclass(frozen=True)
class Node:
    op: Op
    out: str
    args: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...]
    shape: TensorType

    def attr(self, key: str) -> Any:
        return dict(self.attrs)[key]

    def text(self) -> str:
        """`%out = op %arg, ... key=value ... : type`, every attribute written exactly
        (`literals.render`); a switch's branches follow on indented lines, each under its
        bound (`L <= n:` or `otherwise:`) and its output."""
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        args = ", ".join(f"%{a}" for a in self.args)
        hidden = ("branches", "outputs") if self.op is Op.SWITCH else ()
        attrs = " ".join(f"{k}={render(v)}" for k, v in self.attrs if k not in hidden)
        head = f"%{self.out} = {self.op.value}"
        body = " ".join(p for p in (args, attrs) if p)
        lines = [f"{head} {body}".rstrip() + f" : {self.shape}"]
        if self.op is not Op.SWITCH:
            return lines
        bounds = [f"L <= {n}" for n in self.attr("up_to")] + ["otherwise"]
        for bound, nodes, out in zip(bounds, self.attr("branches"), self.attr("outputs"),
                                     strict=True):
            lines.append(f"    {bound}: %{out}")
            lines += [f"      {line}" for n in nodes for line in n.lines()]
        return lines


@dataclass(frozen=True)
class Graph:
    name: str
    kind: str  # attention | transformer
    summary: str
    nodes: tuple[Node, ...]
    output: str
    # every tensor the nodes read, in the order a seeded module draws them (nn.Module order)
    weights: tuple[Weight, ...] = ()
    output_name: str = "y"  # logits for a language model
    # a decoding graph's cache outputs (present.{i}.key, .value), values of the same names
    presents: tuple[str, ...] = ()

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(n.out for n in self.nodes if n.op is Op.INPUT)

    @property
    def decoding(self) -> bool:
        return bool(self.presents)

    def text(self) -> str:
        lines = [f"{self.kind} {self.name}: {self.summary}"]
        lines += [f"  {line}" for n in self.nodes for line in n.lines()]
        lines.append(f"  output {self.output_name} = %{self.output}")
        lines += [f"  output {p} = %{p}" for p in self.presents]
        lines += [f"  weight {w.name} : {list(w.shape)} {w.init}"
                  + (f" fan_in={w.fan_in}" if w.fan_in else "") for w in self.weights]
        return "\n".join(lines) + "\n"


@dataclass
class GraphBuilder:
    nodes: list[Node] = field(default_factory=list)
    names: set[str] = field(default_factory=set)

    def emit(self, op: Op, out: str, args: tuple[str, ...], shape: TensorType,
             **attrs: Any) -> str:
        if out in self.names:
            raise AssertionError(f"IR value %{out} defined twice")
        self.names.add(out)
        self.nodes.append(Node(op, out, args, tuple(attrs.items()), shape))
        return out


def all_nodes(nodes: Iterable[Node]) -> Iterator[Node]:
    """The nodes, each switch followed by the nodes of its branches."""
    for n in nodes:
        yield n
        if n.op is Op.SWITCH:
            for branch in n.attr("branches"):
                yield from all_nodes(branch)


def over_memory(node: Node, types: dict) -> bool:
    """Whether a node of a decoder stack works over the memory rows (a cross attention's core,
    or a value whose type, or an operand's, has the memory's length `S`), so that its keys
    are the memory's; the stack's other nodes' keys are its tokens. `types`: value types by
    name."""
    if dict(node.attrs).get("kind") == "cross":
        return True
    return any("S" in t.dims for t in (node.shape, *(types[a] for a in node.args
                                                      if a in types)))
