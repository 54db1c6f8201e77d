"""The planner: per target, how each attention runs, and why.

A pass over the graph IR (`plan(graph, target) -> (graph, choices)`): for the `ort-cpu`
and `ort-cuda` targets it replaces each softmax attention core (repeat_kv .. merge_heads) by one
`attention` node whose `strategy` names the execution:

- `gqa`: com.microsoft.GroupQueryAttention (causal, or a causal sliding window; GQA/MQA;
  softcap) -- ONNX Runtime's fused causal kernel;
- `mha`: com.microsoft.MultiHeadAttention (no mask, or key padding only; plain causal on
  `ort-cuda` in float32, where GQA has no kernel) -- a flash / memory-efficient kernel;
- `block_sparse`: standard ONNX ops that visit, per block of queries, only the key blocks the
  mask can reach (band, global, random), so memory grows with L x (window + globals);
- `dense`: the masked L x S form, when nothing better applies.

`portable` is never planned: it is the dense standard-op export (the baseline), made by
torch.onnx.export. Choices never change results; `attndsl verify` checks every target.

Choices depend on the dtype too: ONNX Runtime's CUDA GroupQueryAttention kernel takes only
float16 and bfloat16, and its CUDA MultiHeadAttention only float32 and float16. A node without
a CUDA kernel for its type would silently run on the CPU, so `ort-cuda` never emits one."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from . import masks as m
from .ir import Graph, Node, Op, all_nodes
from .spec import MAX_LENGTH, Sparsity
from .targets import (
    GQA_HEAD_DIM_MULTIPLE,
    get,
    has_kernel,
    kernel_dtypes,
    kernel_skips_outside_window,
)

__all__ = ["Choice", "Core", "Cover", "cores", "cover", "fuse_cores", "in_place_obstacle",
           "plan"]

_BLOCK_SIZES = (64, 128, 256)
# Block-sparse execution deduplicates the visited key blocks with (K x K) tables per query block
# and gathers K * n keys per query: beyond this many blocks dense attention is no slower.
MAX_KEY_BLOCKS = 64
MAX_BLOCK = 1024  # the largest query/key block it executes (a random mask's own block size)
MAX_STRIDED_BAND = 1024  # strided execution gathers the band's keys for every query
INF = math.inf


@dataclass(frozen=True)
class Cover:
    """A superset of a mask's visible pairs: the band q - left <= k <= q + right, plus every
    key for global queries, every query for global keys, and random key blocks."""

    left: float = INF
    right: float = INF
    q_first: int = 0  # queries 0..q_first-1 see every key
    q_tokens: tuple[int, ...] = ()
    k_first: int = 0  # keys 0..k_first-1 are seen by every query
    k_tokens: tuple[int, ...] = ()
    randoms: tuple[m.Random, ...] = ()
    strides: tuple[int, ...] = ()  # every key k with k = q (mod n), for each n (self only)

    @property
    def banded(self) -> bool:
        return self.left < INF and self.right < INF

    def key_blocks(self, n: int) -> int:
        """Key blocks visited per query block at block size n."""
        band = math.ceil(self.left / n) + math.ceil(self.right / n) + 1
        globals_ = len(self.global_key_blocks(n))
        return band + globals_ + sum(r.blocks for r in self.randoms)

    def global_key_blocks(self, n: int) -> tuple[int, ...]:
        blocks = set(range(math.ceil(self.k_first / n)))
        blocks |= {t // n for t in self.k_tokens}
        return tuple(sorted(blocks))

    def union(self, other: Cover) -> Cover:
        return Cover(max(self.left, other.left), max(self.right, other.right),
                     max(self.q_first, other.q_first),
                     tuple(sorted(set(self.q_tokens) | set(other.q_tokens))),
                     max(self.k_first, other.k_first),
                     tuple(sorted(set(self.k_tokens) | set(other.k_tokens))),
                     self.randoms + other.randoms,
                     tuple(sorted(set(self.strides) | set(other.strides))))

    def cost(self) -> float:
        extra = self.q_first + len(self.q_tokens) + self.k_first + len(self.k_tokens)
        # a residue class holds L / n keys: weighed at the longest length that can exist
        strided = sum(MAX_LENGTH / n for n in self.strides)
        return self.left + self.right + extra + sum(r.blocks * r.block for r in self.randoms) \
            + strided

    def describe(self) -> str:
        parts = []
        if self.banded:
            parts.append(f"band q-{int(self.left)}..q+{int(self.right)}")
        if self.k_first or self.k_tokens:
            parts.append(f"{self.k_first + len(self.k_tokens)} global key(s)")
        if self.q_first or self.q_tokens:
            parts.append(f"{self.q_first + len(self.q_tokens)} global query row(s)")
        for r in self.randoms:
            parts.append(f"{r.blocks} random block(s) of {r.block}")
        parts += [f"every {n}th key (k = q mod {n})" for n in self.strides]
        return ", ".join(parts)


@functools.cache  # asked by choose and again when fusing the node that carries it
def cover(mask: m.Mask, *, self_attention: bool) -> Cover:
    """A cheap superset of `mask` (see Cover). Sound for every mask; tight for the usual ones.

    Positions never exceed MAX_LENGTH, so a band that reaches further is no band, and global
    positions beyond it are dropped: the cover's size follows what can exist, not a parameter's
    magnitude (`window(left = 10**7)` is unbounded, `prefix(10**18)` is MAX_LENGTH keys)."""
    c = _fix(_cover(mask, self_attention))
    band = (c.left, c.right) if max(c.left, c.right) < MAX_LENGTH else (INF, INF)
    return replace(c, left=band[0], right=band[1], q_first=min(c.q_first, MAX_LENGTH),
                   k_first=min(c.k_first, MAX_LENGTH),
                   q_tokens=tuple(t for t in c.q_tokens if t < MAX_LENGTH),
                   k_tokens=tuple(t for t in c.k_tokens if t < MAX_LENGTH))


def _cover(mask: m.Mask, self_attention: bool) -> Cover:
    match mask:
        case m.Causal(align="top_left"):
            return Cover(INF, 0)
        case m.Causal():
            return Cover(INF, 0) if self_attention else Cover()
        case m.Window(left, right, align):
            return Cover(left, right) if self_attention or align == "top_left" else Cover()
        case m.Dilated(left, right, _):
            return Cover(left, right)
        case m.Chunked(n):
            return Cover(n - 1, n - 1)
        case m.Global(first, tokens):
            return Cover(-INF, -INF, first, tokens, first, tokens)
        case m.Prefix(n):
            return Cover(-INF, -INF, k_first=n)
        case m.Random() as r:
            return Cover(-INF, -INF, randoms=(r,))
        case m.Strided(n) if self_attention:
            return Cover(-INF, -INF, strides=(n,))
        case m.Compare(op, left, right) if self_attention:
            return _compare_cover(op, left, right)
        case m.Or(a, b):
            return _fix(_cover(a, self_attention).union(_cover(b, self_attention)))
        case m.And(a, b):
            ca = _cover(a, self_attention)
            cb = _cover(b, self_attention)
            both = _fix(Cover(min(ca.left, cb.left), min(ca.right, cb.right)).union(
                replace(ca, left=-INF, right=-INF)).union(replace(cb, left=-INF, right=-INF)))
            return min((_fix(ca), _fix(cb), both), key=Cover.cost)
    return Cover()  # full, strided, padding, document, negations: no bound


def _offset(e: m.Index) -> tuple[int, int] | None:
    """(a, c) with e = a * (k - q) + c for every q, k, when e is such an affine function of
    the offset k - q, else None."""
    linear = _linear(e)
    if linear is None or linear[0] != -linear[1]:
        return None
    return linear[1], linear[2]


def _linear(e: m.Index) -> tuple[int, int, int] | None:
    """(x, y, c) with e = x q + y k + c, when e is affine in q and k (sums, differences,
    constant multiples), else None."""
    match e.op:
        case "q":
            return 1, 0, 0
        case "k":
            return 0, 1, 0
        case "const":
            return 0, 0, e.value
        case "+" | "-":
            a, b = _linear(e.args[0]), _linear(e.args[1])
            if a is None or b is None:
                return None
            sign = 1 if e.op == "+" else -1
            return a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2]
        case "*":
            a, b = _linear(e.args[0]), _linear(e.args[1])
            if a is None or b is None:
                return None
            if a[:2] == (0, 0):
                a, b = b, a
            if b[:2] != (0, 0):
                return None  # a product of two indices
            return a[0] * b[2], a[1] * b[2], a[2] * b[2]
    return None


def _compare_cover(op: str, left: m.Index, right: m.Index) -> Cover:
    """The band of an index comparison of the offset d = k - q alone: `a d + c op 0`, or
    `abs(a d + c) op' r` (op' one of < <=); no band for anything else."""
    def band(lo: float, hi: float) -> Cover:  # lo <= d <= hi
        return Cover(max(-lo, 0) if lo > -INF else INF, max(hi, 0) if hi < INF else INF)

    if left.op == "abs" and op in ("<", "<=") and right.op == "const":
        inner = _offset(left.args[0])
        if inner is not None and inner[0] != 0:  # |a d + c| <= r: -r - c <= a d <= r - c
            r = right.value - (op == "<")
            a, c = inner
            lo, hi = sorted(((-r - c) / a, (r - c) / a))
            return band(math.floor(lo), math.ceil(hi)) if r >= 0 else Cover(-INF, -INF)
        return Cover()
    diff = _offset(m.Index("-", (left, right)))  # `k <= q` too: its sides alone are not
    if diff is None:
        return Cover()
    a, c = diff  # a d + c op 0
    if a == 0:
        return Cover()
    strict = op in ("<", ">")
    if op == "==":
        return band(math.floor(-c / a), math.ceil(-c / a))
    if op == "!=":
        return Cover()
    upper = op in ("<", "<=")  # a d + c < 0 (or <=): d below -c/a when a > 0
    bound = -c / a
    if (a > 0) == upper:  # d <= bound
        return band(-INF, math.ceil(bound) - (strict and float(bound).is_integer()))
    return band(math.floor(bound) + (strict and float(bound).is_integer()), INF)


def _fix(c: Cover) -> Cover:
    """A band of -inf means 'no band part'; keep it as an empty band at the diagonal."""
    return replace(c, left=max(c.left, 0), right=max(c.right, 0))


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
    linear: bool  # a linear kernel (no softmax core to replace)
    linformer: bool  # a Linformer kernel: softmax over k projected rows, in standard ops
    lsh: bool  # an LSH kernel (Reformer): hashed, sorted and chunked, in standard ops
    kind: str  # self | cross
    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    scale: float | None
    softcap: float | None
    bias: tuple[tuple[str, object], ...]  # the score bias node's attributes, or ()
    mask: m.Mask
    sparsity: Sparsity
    prepared: bool  # qk_norm or RoPE run before the core

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    @property
    def bias_kind(self) -> str | None:
        return dict(self.bias).get("kind")


def cores(graph: Graph) -> list[Core]:
    """Every attention of the graph, in order (one per `merge_heads`), those of by_length
    variants included."""
    by_name = {n.out: n for n in all_nodes(graph.nodes)}
    return _cores(list(all_nodes(graph.nodes)), by_name)


def _cores(nodes, by_name: dict[str, Node]) -> list[Core]:
    """The attentions whose `merge_heads` is one of `nodes`; q, k and v are traced back to
    their split_heads through rotation, norms, caches, repeats and Linformer's projection,
    which may lie outside `nodes` (a switch's branches share them)."""

    def trace(name: str) -> tuple[Node, set[Op]]:
        seen: set[Op] = set()
        node = by_name[name]
        while node.op is not Op.SPLIT_HEADS:
            seen.add(node.op)
            node = by_name[node.args[1] if node.op is Op.CACHE else node.args[0]]
        return node, seen

    found = []
    for node in nodes:
        if node.op is not Op.MERGE_HEADS:
            continue
        p = node.out.removesuffix("merged")

        def get_node(suffix: str, p: str = p) -> Node | None:
            return by_name.get(f"{p}{suffix}")

        attend = by_name[node.args[0]]
        mask, scores = get_node("mask"), get_node("scores")
        linear, lsh = attend.op is Op.LINEAR_ATTENTION, attend.op is Op.LSH_ATTENTION
        q_src, k_src, v_src = ((attend.args[0],) * 2 + (attend.args[1],) if lsh else
                               (*attend.args[:2], attend.args[-1]) if linear else
                               (*scores.args, attend.args[-1]))
        (q, q_ops), (k, k_ops), (v, _) = trace(q_src), trace(k_src), trace(v_src)
        bias, cap = get_node("biased"), get_node("capped")
        found.append(Core(
            prefix=p, linear=linear, linformer=Op.SEQ_PROJECT in k_ops, lsh=lsh,
            kind="cross" if by_name[k.args[0]].args[0] == "memory" else "self",
            heads=q.attr("heads"), kv_heads=k.attr("heads"), head_dim=q.attr("dim"),
            value_dim=v.attr("dim"), scale=scores.attr("scale") if scores else None,
            softcap=cap.attr("cap") if cap else None,
            bias=tuple((key, value) for key, value in bias.attrs) if bias else (),
            mask=mask.attr("expr") if mask else _lsh_mask(attend) if lsh else m.Full(),
            sparsity=mask.attr("sparsity") if mask else Sparsity("auto"),
            prepared=bool(q_ops & {Op.ROPE, Op.NORM})))
    return found


def choose(a: Core, target: str, dtype: str = "float32",
           ) -> tuple[str, dict[str, object], list[str]]:
    """(strategy, params, reasons) for one attention on a planned target."""
    reasons: list[str] = []
    provider = get(target).provider
    if a.linear:
        return "linear", {}, ["linear kernel: O(L) sums in standard ops (causal: in chunks of "
                              "64 queries, running sums across chunks); no softmax kernel "
                              "applies"]
    if a.lsh:
        return "lsh", {}, ["LSH (Reformer): queries hashed into buckets, sorted, and attended "
                           "in chunks with the previous chunk, in standard ops (TopK sorts): "
                           "O(L log L) time, O(L chunk) memory; no fused kernel hashes"]
    if a.linformer:
        return "linformer", {}, ["Linformer: keys and values projected to k rows, then the "
                                 "L x k softmax in standard ops (O(L k) time and memory); no "
                                 "fused kernel takes projected keys"]
    mask = a.mask
    causal_window = _causal_window(mask) if a.kind == "self" else None
    has_bias = a.bias_kind is not None
    if a.sparsity.mode == "dense":
        return "dense", {}, ["sparsity = dense asks for the dense masked form"]
    # 1. GroupQueryAttention: ORT's fused causal kernel
    why_not_gqa = []
    if causal_window is None:
        why_not_gqa.append("the mask is not `causal` or `causal & window(left = w - 1, right = 0)`"
                           + ("" if a.kind == "self" else " on self attention"))
    if a.value_dim != a.head_dim:
        why_not_gqa.append(f"value_dim ({a.value_dim}) differs from head_dim ({a.head_dim})")
    if a.head_dim % GQA_HEAD_DIM_MULTIPLE:
        why_not_gqa.append(f"its kernels need head_dim a multiple of {GQA_HEAD_DIM_MULTIPLE} "
                           f"(found {a.head_dim})")
    if has_bias:
        why_not_gqa.append(f"{_BIAS_NAMES[a.bias_kind]} score biases would need an L x S "
                           "attention_bias input")
    windowed = causal_window is not None and causal_window != INF
    gqa_kernel = has_kernel("GroupQueryAttention", dtype, provider)
    if not why_not_gqa and not gqa_kernel:
        why_not_gqa.append(f"its {provider.upper()} kernel takes "
                           f"{' or '.join(kernel_dtypes('GroupQueryAttention', provider))} only "
                           "(compile with --dtype float16 for it)")
    elif not why_not_gqa and windowed and not kernel_skips_outside_window(provider):
        why_not_gqa.append("on the CPU its kernel still visits every earlier key outside "
                           "local_window_size (about 4x slower than block-sparse at L = 8192, "
                           "BENCHMARKS.md); ort-cuda uses it")
    if not why_not_gqa and a.sparsity.mode != "block":
        window = causal_window if causal_window != INF else -1
        reasons.append("GroupQueryAttention: ORT's fused causal kernel"
                       + (f" with local_window_size = {window}" if window > 0 else "")
                       + (f", {a.groups} query heads per kv head" if a.groups > 1 else "")
                       + (f", softcap {a.softcap}" if a.softcap else ""))
        if a.prepared:
            reasons.append("qk_norm / RoPE are applied in standard ops before the kernel "
                           "(do_rotary is not used: it needs cos/sin caches of a maximum length)")
        return "gqa", {"local_window_size": window}, reasons
    if why_not_gqa:
        reasons.append("not GroupQueryAttention: " + "; ".join(why_not_gqa))
    # 2. MultiHeadAttention: flash kernel for unmasked / key-padded attention (and plain causal
    # on CUDA in float32, through its `unidirectional` attribute)
    mask_kind = _padding_only(mask)
    causal = (not gqa_kernel and causal_window == INF and a.kind == "self"
              and mask_kind is None)
    why_not_mha = []
    if mask_kind is None and not causal:
        why_not_mha.append("the mask is more than full or key padding")
    if a.softcap:
        why_not_mha.append("MultiHeadAttention has no softcap")
    if has_bias:
        why_not_mha.append("score biases would need an L x S attention_bias input")
    if a.value_dim != a.head_dim:
        why_not_mha.append("value_dim differs from head_dim")
    if not has_kernel("MultiHeadAttention", dtype, provider):
        why_not_mha.append(f"its {provider.upper()} kernel has no {dtype} ("
                           f"{' and '.join(kernel_dtypes('MultiHeadAttention', provider))} only)")
    if not why_not_mha and a.sparsity.mode != "block":
        if causal:
            reasons.append("MultiHeadAttention with unidirectional = 1: ORT's fused causal "
                           "kernel for float32 on CUDA")
        else:
            reasons.append("MultiHeadAttention: ORT's flash kernel for attention without a "
                           "mask" + (" (key lengths as key_padding_mask)" if mask_kind else ""))
        if a.groups > 1:
            reasons.append("kv heads are expanded to all query heads first (MHA has no GQA)")
        return "mha", {"key_padding": bool(mask_kind)} | ({"causal": True} if causal else {}), \
            reasons
    if why_not_mha and (mask_kind is not None or causal):
        reasons.append("not MultiHeadAttention: " + "; ".join(why_not_mha))
    # 3. block-sparse: only the key blocks the mask can reach
    c = cover(mask, self_attention=a.kind == "self")
    random_blocks = {r.block for r in c.randoms}
    if c.strides:  # 4. strided: a band and one residue class per query
        why_not = []
        if len(c.strides) > 1:
            why_not.append(f"it mixes strides {', '.join(map(str, c.strides))}")
        if c.randoms or c.q_first or c.q_tokens or c.k_first or c.k_tokens:
            why_not.append("it has global or random parts besides the stride")
        if not c.banded or c.left + c.right + 1 > MAX_STRIDED_BAND:
            why_not.append(f"its band is wider than {MAX_STRIDED_BAND} keys")
        if not why_not:
            n, left, right = c.strides[0], int(c.left), int(c.right)
            reasons.append(f"strided in standard ops: {c.describe()}; each query scores its "
                           f"band of {left + right + 1} keys and its residue class mod {n} "
                           f"(L / {n} keys), so work and memory grow with L x (L / {n} + "
                           f"{left + right + 1}), not L x S")
            return "strided", {"stride": n, "left": left, "right": right}, reasons
        reasons.append("dense masked form: not strided execution: " + "; ".join(why_not))
        return "dense", {}, reasons
    if c.banded and len(random_blocks) > 1:
        reasons.append("random masks with different block sizes cannot share one execution "
                       "block")
    elif c.banded:
        if random_blocks:  # random draws are per block: execute at the draw's block size
            n = random_blocks.pop()
        elif a.sparsity.mode == "block":
            n = a.sparsity.block
        else:
            n = min(_BLOCK_SIZES, key=lambda b: (c.key_blocks(b) * b, -b))
        k = c.key_blocks(n)
        if n > MAX_BLOCK:
            reasons.append(f"dense masked form: blocks of {n} (the "
                           f"{'random draw' if c.randoms else 'sparsity'}'s block size) exceed "
                           f"the largest block block-sparse execution serves ({MAX_BLOCK})")
            return "dense", {}, reasons
        if k > MAX_KEY_BLOCKS:
            reasons.append(f"dense masked form: the cover ({c.describe()}) needs {k} key blocks "
                           f"of {n} per query block, more than block-sparse execution serves "
                           f"({MAX_KEY_BLOCKS})")
            return "dense", {}, reasons
        reasons.append(f"block-sparse in standard ops: {c.describe()}; each block of {n} "
                       f"queries visits {k} key blocks ({k * n} keys), so memory grows with "
                       f"L x {k * n}, not L x S")
        if c.q_first or c.q_tokens:
            reasons.append("global query rows are computed densely against all keys (few rows)")
        return "block_sparse", {"block": n, "key_blocks": k}, reasons
    else:
        reasons.append(f"dense masked form: `{m.render(mask)}` can reach every key (no "
                       "bounded band), so no sparse lowering applies")
    return "dense", {}, reasons


def _causal_window(mask: m.Mask) -> float | None:
    """w for `causal & window(left = w - 1, right = 0)` (INF for plain causal), else None."""
    match mask:
        case m.Causal():
            return INF
        case m.And(m.Causal(), m.Window(left, _)) | m.And(m.Window(left, _), m.Causal()):
            # no position is MAX_LENGTH keys back: a wider window is plain causal (and ORT's
            # local_window_size is a 32-bit int)
            return left + 1 if left + 1 < MAX_LENGTH else INF
    return None


def _padding_only(mask: m.Mask) -> str | None:
    """'' for full, 'padding' for key padding (alone or with full), None otherwise."""
    match mask:
        case m.Full():
            return ""
        case m.Padding(side="right"):  # MultiHeadAttention's key lengths pad on the right
            return "padding"
        case m.And(a, b):
            x, y = _padding_only(a), _padding_only(b)
            if x is None or y is None:
                return None
            return x or y
    return None


_CORE = (Op.REPEAT_KV, Op.SCORES, Op.SCORE_BIAS, Op.SOFTCAP, Op.MASK, Op.SOFTMAX, Op.ATTEND,
         Op.MERGE_HEADS)


def plan(graph: Graph, target: str, dtype: str = "float32") -> tuple[Graph, list[Choice]]:
    """The planned graph and one Choice per attention, read from the graph alone.

    Requires: a graph from `ir.build` (named values `<prefix>q_heads` .. `<prefix>merged`).
    Ensures: on a planned target, each softmax core (repeat_kv .. merge_heads) is one
    `attention` node carrying its strategy, parameters and mask cover; other nodes unchanged.
    A target that is not planned (portable) gets the graph as it is, unless it decodes: every
    target lowers a decoding graph's cores to the dense masked form over cache and new keys
    (standard ops only)."""
    found = cores(graph)
    switch = any(n.op is Op.SWITCH for n in graph.nodes)
    if not get(target).planned and not graph.decoding and not switch:
        return graph, [Choice(*_where(c.prefix, graph), "dense",
                              ("portable: standard ONNX ops only, exported by "
                               "torch.onnx.export; no planning",))
                       for c in found]
    if graph.decoding:
        return _plan_decoding(graph, found, target, dtype)
    by_name = {n.out: n for n in all_nodes(graph.nodes)}
    choices: list[Choice] = []

    def planned(nodes: list[Node]) -> list[Node]:
        """`nodes` with each of their cores fused (and each switch's branches planned)."""
        for node in list(nodes):
            if node.op is Op.SWITCH:
                branches = tuple(tuple(planned(list(b))) for b in node.attr("branches"))
                attrs = tuple((k, branches if k == "branches" else v) for k, v in node.attrs)
                nodes = [replace(n, attrs=attrs) if n is node else n for n in nodes]
            elif node.op is Op.MERGE_HEADS:
                core = _cores([node], by_name)[0]
                strategy, params, reasons = choose(core, target, dtype) if \
                    get(target).planned else _portable(core)
                choices.append(Choice(*_where(core.prefix, graph), strategy, tuple(reasons),
                                      tuple(params.items())))
                if strategy not in ("linear", "lsh"):
                    nodes = _fuse(nodes, core, strategy, params)
        return nodes

    return replace(graph, nodes=tuple(planned(list(graph.nodes)))), choices


def _portable(core: Core) -> tuple[str, dict[str, object], list[str]]:
    """A portable graph with a by_length switch: attndsl lowers it (an `If` on the length,
    which torch.onnx.export cannot write), every core in standard ops."""
    strategy = "linear" if core.linear else "linformer" if core.linformer else \
        "lsh" if core.lsh else "dense"
    return strategy, {}, ["portable: standard ONNX ops only; the by_length `If` is lowered by "
                          "attndsl, each core in its standard-ops form"]


def _lsh_mask(attend: Node) -> m.Mask:
    """An LSH core's mask, from its node: causal, & its padding."""
    keys = attend.attr("keys")
    if not attend.attr("causal"):
        return keys
    return m.Causal() if keys == m.Full() else m.And(m.Causal(), keys)


def _where(prefix: str, graph: Graph) -> tuple[str, str]:
    """(layer prefix, branch) of a core's value prefix: `layers.0.self_attn.variant1.` is
    branch `L <= n` (or `L > n`, the last) of the switch `layers.0.self_attn.merged`."""
    head, sep, rest = prefix.rpartition("variant")
    if not sep or not rest.rstrip(".").isdigit():
        return prefix, ""
    i = int(rest.rstrip("."))
    switch = next(n for n in all_nodes(graph.nodes) if n.out == f"{head}merged")
    bounds = switch.attr("up_to")
    return head, f"L <= {bounds[i]}" if i < len(bounds) else f"L > {bounds[-1]}"


def in_place_obstacle(a: Core, target: str, dtype: str = "float32") -> str | None:
    """Why attention `a` cannot decode with GroupQueryAttention writing one cache buffer in
    place, or None when it can."""
    provider = get(target).provider
    if not get(target).planned:
        return "the portable target uses standard ops only"
    if a.kind == "cross":
        return "cross attention caches the memory's keys, not the tokens'"
    if a.linear:
        return "a linear kernel has no fused cache kernel"
    if _causal_window(a.mask) is None:
        return f"its mask `{m.render(a.mask)}` is not `causal` or `causal & window(left = " \
               "w - 1, right = 0)`"
    if a.bias_kind is not None:
        return f"{_BIAS_NAMES[a.bias_kind]} score biases have no place in the kernel"
    if a.value_dim != a.head_dim:
        return f"value_dim ({a.value_dim}) differs from head_dim ({a.head_dim})"
    if a.head_dim % GQA_HEAD_DIM_MULTIPLE:
        return f"head_dim {a.head_dim} is not a multiple of {GQA_HEAD_DIM_MULTIPLE}"
    if not has_kernel("GroupQueryAttention", dtype, provider):
        return f"GroupQueryAttention's {provider.upper()} kernel takes " \
               f"{' or '.join(kernel_dtypes('GroupQueryAttention', provider))} only"
    if a.sparsity.mode == "dense":
        return "sparsity = dense asks for the dense masked form"
    return None


def _plan_decoding(graph: Graph, found: list[Core], target: str,
                   dtype: str) -> tuple[Graph, list[Choice]]:
    """A decoding graph: every attention in place (`gqa_cache`: GroupQueryAttention reads and
    writes a [B, kv_heads, max_length, head_dim] buffer bound as both past and present) when
    every one can, else every one `dense` against a growing cache (standard ops: past and new
    keys concatenated). One model has one cache layout, as onnxruntime-genai runs it."""
    obstacles = [(c, in_place_obstacle(c, target, dtype)) for c in found]
    blocked = next(((c, why) for c, why in obstacles if why), None)
    tail = next((n for n in graph.nodes if n.op is Op.TAIL), None)
    if blocked is None and tail is not None:
        layer = int(tail.out.split(".")[1])  # present.{i}.key: the i-th attention's
        blocked = (found[layer], "a bounded cache (a window's last keys) grows and slides in "
                                 "standard ops")
    nodes = list(graph.nodes)
    choices = []
    for core in found:
        if blocked is None:
            window = _causal_window(core.mask)
            params = {"local_window_size": window if window != INF else -1}
            reasons = ["decoding in place: GroupQueryAttention appends the new keys and "
                       "values to one max_length buffer (past = present) and attends causally"
                       + (f" within {window} keys" if window != INF else "")]
            nodes = _fuse(nodes, core, "gqa_cache", params)
            choices.append(Choice(core.prefix, "", "gqa_cache", tuple(reasons),
                                  tuple(params.items())))
            continue
        layer, why = blocked
        reasons = ["decoding against a growing cache: past and new keys concatenated, the "
                   "masked form over them (standard ops)",
                   f"not in place: {layer.prefix.rstrip('.') or 'the attention'}: {why}"]
        strategy = "linear" if core.linear else "dense"
        choices.append(Choice(core.prefix, "", strategy, tuple(reasons)))
        if not core.linear:
            nodes = _fuse(nodes, core, "dense", {})
    if blocked is None:
        nodes = _cache_into_kernel(nodes)
    return replace(graph, nodes=tuple(nodes)), choices


def _cache_into_kernel(nodes: list[Node]) -> list[Node]:
    """gqa_cache attention nodes take (q, new k, new v, past k, past v, attention_mask) and
    write present.{i}.* themselves: their `cache` nodes go."""
    caches = {n.out: n for n in nodes if n.op is Op.CACHE}
    out = []
    for n in nodes:
        if n.op is Op.CACHE:
            continue
        if n.op is Op.ATTENTION and n.attr("strategy") == "gqa_cache":
            q, k, v, mask, *_ = n.args  # the keys' count is the kernel's own business
            ck, cv = caches[k], caches[v]
            n = replace(n, args=(q, ck.args[1], cv.args[1], ck.args[0], cv.args[0], mask),
                        attrs=(*n.attrs, ("presents", (ck.out, cv.out))))
        out.append(n)
    return out


def fuse_cores(graph: Graph, strategy: str) -> Graph:
    """The graph with every softmax core fused into one `attention` node of `strategy`, no
    choice made: bench's PyTorch SDPA baseline runs such a graph (strategy `sdpa`)."""
    nodes = list(graph.nodes)
    for core in cores(graph):
        if not (core.linear or core.linformer or core.lsh):
            nodes = _fuse(nodes, core, strategy, {})
    return replace(graph, nodes=tuple(nodes))


def _fuse(nodes: list[Node], a: Core, strategy: str, params: dict[str, object]) -> list[Node]:
    p = a.prefix

    def named(suffix: str) -> Node | None:
        return next((n for n in nodes if n.out == f"{p}{suffix}"), None)

    scores, attend = named("scores"), named("attn")
    k_rep, v_rep = named("k_rep"), named("v_rep")
    q = scores.args[0]
    k = k_rep.args[0] if k_rep else scores.args[1]
    v = v_rep.args[0] if v_rep else attend.args[1]
    bias = dict(a.bias)
    bias = {"bias": bias.pop("kind", None), **bias}
    cover_ = ({"cover": cover(a.mask, self_attention=a.kind == "self")}
              if strategy == "block_sparse" else {})
    merged = named("merged")
    mask_node = named("mask")  # its args: the runtime inputs (attention_mask when decoding)
    runtime = mask_node.args if mask_node else ()
    fused = Node(Op.ATTENTION, merged.out, (q, k, v, *runtime), tuple({
        "strategy": strategy, "heads": a.heads, "kv_heads": a.kv_heads, "scale": a.scale,
        "softcap": a.softcap, **bias, "expr": a.mask, "kind": a.kind, **params,
        **cover_}.items()), merged.shape)
    core = {n.out for n in nodes if n.op in _CORE and n.out.startswith(p)
            and n.out[len(p):].count(".") == 0}
    out = []
    for n in nodes:
        if n.out == merged.out:
            out.append(fused)
        elif n.out not in core:
            out.append(n)
    return out


_BIAS_NAMES = {"alibi": "Alibi", "relative_bias": "RelativeBias"}
