"""Mask expressions, resolved: small frozen nodes, one per primitive of docs/LANGUAGE.md, and
the one function that evaluates them on index arrays.

`evaluate` uses only operators that NumPy arrays and torch tensors share (`<=`, `&`, `%`, ...),
so the NumPy reference, the PyTorch module and (through torch.export) the ONNX graph all run the
same definition, computed from index ranges at run time: nothing of size L x S is ever stored."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "RANDOM_MULTIPLIER",
    "RANDOM_PRIME",
    "And",
    "Causal",
    "Chunked",
    "Compare",
    "Dilated",
    "Document",
    "Full",
    "Global",
    "Index",
    "Mask",
    "Not",
    "Or",
    "Padding",
    "Prefix",
    "Random",
    "Strided",
    "Window",
    "evaluate",
    "index_value",
    "lookahead",
    "primitives",
    "random_key_block",
    "reach_back",
    "reads_documents",
    "real_keys",
    "render",
    "runtime_inputs",
]


@dataclass(frozen=True)
class Full:
    pass


@dataclass(frozen=True)
class Causal:
    align: str = "top_left"  # or bottom_right: k <= q + (S - L)


@dataclass(frozen=True)
class Window:
    left: int
    right: int
    align: str = "top_left"  # or bottom_right: query q sits at position q + (S - L)


@dataclass(frozen=True)
class Dilated:
    left: int
    right: int
    dilation: int


@dataclass(frozen=True)
class Chunked:
    n: int


@dataclass(frozen=True)
class Strided:
    n: int


@dataclass(frozen=True)
class Global:
    first: int = 0  # tokens 0..first-1 are global
    tokens: tuple[int, ...] = ()  # and these


@dataclass(frozen=True)
class Prefix:
    n: int


@dataclass(frozen=True)
class Random:
    blocks: int
    block: int
    seed: int


@dataclass(frozen=True)
class Padding:
    side: str = "right"  # right: keys 0 .. n-1 are real; left: keys S-n .. S-1


@dataclass(frozen=True)
class Document:
    pass


@dataclass(frozen=True)
class Index:
    """An integer expression of the query and key indices: `q`, `k`, their positions within
    their documents `qd`, `kd`, a constant, `a op b` for op in + - * // % (the divisor of //
    and % a positive constant), or abs(a), min(a, b), max(a, b)."""

    op: str  # q | k | qd | kd | const | + | - | * | // | % | abs | min | max
    args: tuple[Index, ...] = ()
    value: int = 0  # of a const


@dataclass(frozen=True)
class Compare:
    """Visible where `left op right`, op in < <= == != >= > (NATTEN neighbourhoods, per-image
    blocks: any rule of integer arithmetic on q and k)."""

    op: str
    left: Index
    right: Index


@dataclass(frozen=True)
class And:
    left: Mask
    right: Mask


@dataclass(frozen=True)
class Or:
    left: Mask
    right: Mask


@dataclass(frozen=True)
class Not:
    operand: Mask


Mask = (Full | Causal | Window | Dilated | Chunked | Strided | Global | Prefix | Random | Padding
        | Document | Compare | And | Or | Not)

# The BigBird-style random draw, exactly (docs/LANGUAGE.md): for query block i and draw j,
#   h = seed mod P;  h = (h*M + i + 1) mod P;  h = (h*M + j + 1) mod P;  h = (h*M) mod P twice;
#   key block = h mod ceil(S / block).
# Every product stays below 2**47, so int64 arithmetic is exact in NumPy, torch and ONNX.
RANDOM_PRIME = 2_147_483_647
RANDOM_MULTIPLIER = 48_271


def random_key_block(seed: int, query_block: Any, draw: int, num_key_blocks: Any) -> Any:
    """Key block of draw `draw` for query block(s) `query_block` (int or int64 array)."""
    p, m = RANDOM_PRIME, RANDOM_MULTIPLIER
    h = (seed % p * m + query_block + 1) % p
    h = (h * m + draw + 1) % p
    h = h * m % p
    h = h * m % p
    return h % num_key_blocks


def evaluate(mask: Mask, q: Any, k: Any, *, L: Any, S: Any, key_lengths: Any = None,
             segment_ids: Any = None, document_positions: Any = None,
             memory_segment_ids: Any = None) -> Any:
    """Boolean visibility of key positions k from query positions q.

    q and k are int64 position arrays that broadcast against each other: usually q [L, 1] and
    k [1, S] giving [L, S], but any shapes work (block-sparse execution passes gathered
    positions). Padding and document masks add a leading batch axis. L and S may be symbolic
    sizes. `key_lengths` is int64 [B]; `segment_ids` is int64 [B, L], and q, k index it, so
    they must lie in [0, L) wherever a document mask is evaluated; `document_positions` [B, L]
    (`qd`, `kd`: each token's position within its document, `backends.formulas`) likewise.
    Cross attention's keys are memory rows: `memory_segment_ids` [B, S] gives theirs."""
    match mask:
        case Full():
            return (q >= 0) & (k >= 0)
        case Causal(align="top_left"):
            return k <= q
        case Causal():
            return k <= q + (S - L)
        case Window(left, right, align):
            at = q if align == "top_left" else q + (S - L)
            return (k >= at - left) & (k <= at + right)
        case Dilated(left, right, dilation):
            return (k >= q - left) & (k <= q + right) & ((q - k) % dilation == 0)
        case Chunked(n):
            return q // n == k // n
        case Strided(n):
            return (q - k) % n == 0
        case Global(first, tokens):
            q_global = q < first
            k_global = k < first
            for t in tokens:
                q_global = q_global | (q == t)
                k_global = k_global | (k == t)
            return q_global | k_global
        case Prefix(n):
            return (k < n) & (q >= 0)
        case Random(blocks, block, seed):
            q_block = q // block
            k_block = k // block
            # ceil(S / block) from S itself: k may hold only some keys (block-sparse gathers)
            num_key_blocks = (S + (block - 1)) // block
            seen = k_block < 0
            for j in range(blocks):
                seen = seen | (random_key_block(seed, q_block, j, num_key_blocks) == k_block)
            return seen
        case Padding(side):
            batch = (slice(None),) + (None,) * k.ndim  # (B, 1, ..., 1) against positions
            if side == "left":
                return (k >= S - key_lengths[batch]) & (q >= 0)
            return (k < key_lengths[batch]) & (q >= 0)
        case Document():  # gathers: (B, *q.shape), (B, *k.shape)
            keys = segment_ids if memory_segment_ids is None else memory_segment_ids
            return segment_ids[:, q] == keys[:, k]
        case Compare(op, left, right):
            a = index_value(left, q, k, document_positions)
            b = index_value(right, q, k, document_positions)
            seen = {"<": lambda: a < b, "<=": lambda: a <= b, "==": lambda: a == b,
                    "!=": lambda: a != b,
                    ">=": lambda: a >= b, ">": lambda: a > b}[op]()
            return (q >= 0) & (k >= 0) & seen  # the full (L, S) shape, even for constants
        case And(left, right):
            return _eval(left, q, k, L, S, key_lengths, segment_ids, document_positions,
                         memory_segment_ids) & \
                _eval(right, q, k, L, S, key_lengths, segment_ids, document_positions,
                      memory_segment_ids)
        case Or(left, right):
            return _eval(left, q, k, L, S, key_lengths, segment_ids, document_positions,
                         memory_segment_ids) | \
                _eval(right, q, k, L, S, key_lengths, segment_ids, document_positions,
                      memory_segment_ids)
        case Not(operand):
            return ~_eval(operand, q, k, L, S, key_lengths, segment_ids, document_positions,
                          memory_segment_ids)
    raise AssertionError(f"unknown mask node {mask!r}")


def index_value(e: Index, q: Any, k: Any, document_positions: Any = None) -> Any:
    """An index expression at query and key indices q, k (int64 arrays or ints), with the
    operators arrays, tensors and symbolic ONNX values share: `//` as (a - a % n) / n and
    min, max as (a + b -/+ |a - b|) / 2, both exact divisions, so floor semantics hold for
    negative values too (ONNX's integer Div truncates). `qd`, `kd` gather the [B, L]
    `document_positions` at q, k (a leading batch axis)."""
    match e.op:
        case "q":
            return q
        case "k":
            return k
        case "qd":
            return document_positions[:, q]
        case "kd":
            return document_positions[:, k]
        case "const":
            return e.value
        case "abs":
            return abs(index_value(e.args[0], q, k, document_positions))
    a, b = (index_value(x, q, k, document_positions) for x in e.args)
    match e.op:
        case "+":
            return a + b
        case "-":
            return a - b
        case "*":
            return a * b
        case "%":
            return a % b
        case "//":
            return (a - a % b) // b
        case "min":
            return (a + b - abs(a - b)) // 2
        case "max":
            return (a + b + abs(a - b)) // 2
    raise AssertionError(f"unknown index operator {e.op!r}")


def _eval(mask: Mask, q: Any, k: Any, L: Any, S: Any, key_lengths: Any, segment_ids: Any,
          document_positions: Any, memory_segment_ids: Any) -> Any:
    return evaluate(mask, q, k, L=L, S=S, key_lengths=key_lengths, segment_ids=segment_ids,
                    document_positions=document_positions,
                    memory_segment_ids=memory_segment_ids)


def lookahead(mask: Mask) -> tuple[int, int] | None:
    """A (query, key) pair with key > query that `mask` shows, or None: a mask without one can
    decode token by token against a cache (a query never needs a key that comes after it).

    Checked on one sequence (L = S, every key real, one document) at queries 0 .. N-1 and keys
    q + d, for offsets d of 1 .. 64 and around every parameter p of the mask (p - 1, p, p + 1,
    2p, 2p + 1), N = 2 * max(p) + 64: every primitive's first key after its query lies at one
    of these offsets (a window's right edge, the next chunk or stride, a prefix or global
    token)."""
    import numpy as np

    params = sorted(_parameters(mask)) or [1]
    offsets = set(range(1, 65))
    for p in params:
        offsets |= {p - 1, p, p + 1, 2 * p, 2 * p + 1}
    d = np.array(sorted(o for o in offsets if o >= 1), dtype=np.int64)
    n = min(2 * params[-1] + 64, 1 << 16)
    size = n + int(d[-1])
    q = np.arange(n, dtype=np.int64)[:, None]
    k = q + d[None, :]
    seen = evaluate(mask, q, k, L=size, S=size, key_lengths=np.array([size]),
                    segment_ids=np.zeros((1, size), dtype=np.int64),
                    document_positions=np.arange(size, dtype=np.int64)[None])
    seen = np.broadcast_to(seen, (1, *k.shape))[0] if seen.ndim == 3 else seen
    hits = np.argwhere(seen & (k < size))
    if not len(hits):
        return None
    i, j = hits[0]
    return int(q[i, 0]), int(k[i, j])


def real_keys(mask: Mask) -> Mask:
    """The mask of a decoding graph: `padding` becomes `full`, for there the attention_mask
    input says which keys are real (and is applied to every mask)."""
    match mask:
        case Padding():
            return Full()
        case And(a, b):
            a, b = real_keys(a), real_keys(b)
            return a if b == Full() else b if a == Full() else And(a, b)
        case Or(a, b):
            return Or(real_keys(a), real_keys(b))
        case Not(a):
            return Not(real_keys(a))
    return mask


def reach_back(mask: Mask) -> int | None:
    """How many keys before its own a query can see at most, or None when unbounded: a
    window's left, a chunk's n - 1; `&` takes the nearer bound, `|` the farther. A decoding
    cache keeps only that many keys (the later queries cannot see the rest)."""
    match mask:
        case Window(left, _, _) | Dilated(left, _, _):
            return left
        case Chunked(n):
            return n - 1
        case And(a, b):
            ra, rb = reach_back(a), reach_back(b)
            return rb if ra is None else ra if rb is None else min(ra, rb)
        case Or(a, b):
            ra, rb = reach_back(a), reach_back(b)
            return None if ra is None or rb is None else max(ra, rb)
    return None


def _parameters(mask: Mask) -> set[int]:
    out: set[int] = set()
    for m in primitives(mask):
        match m:
            case Window(left, right, _):
                out |= {left, right}
            case Dilated(left, right, dilation):
                out |= {left, right, dilation}
            case Chunked(n) | Strided(n) | Prefix(n):
                out.add(n)
            case Global(first, tokens):
                out |= {first, *tokens}
            case Random(blocks, block, _):
                out |= {block, blocks * block}
            case Compare(_, left, right):  # its constants (a NATTEN grid's width, a radius)
                out |= {abs(c) for c in _constants(left) + _constants(right) if c}
    return out


def _constants(e: Index) -> list[int]:
    return [e.value] if e.op == "const" else [c for a in e.args for c in _constants(a)]


def primitives(mask: Mask) -> Iterator[Mask]:
    """The primitives of a mask expression (its leaves), left to right."""
    match mask:
        case And(a, b) | Or(a, b):
            yield from primitives(a)
            yield from primitives(b)
        case Not(a):
            yield from primitives(a)
        case _:
            yield mask


def runtime_inputs(mask: Mask) -> tuple[str, ...]:
    """The graph inputs a mask reads at run time, in the order of the graph's inputs."""
    found = {type(m) for m in primitives(mask)}
    if reads_documents(mask):
        found.add(Document)
    return tuple(n for n, t in (("key_lengths", Padding), ("segment_ids", Document))
                 if t in found)


def reads_documents(mask: Mask) -> bool:
    """Whether an index mask reads positions within documents (`qd`, `kd`)."""
    def uses(e: Index) -> bool:
        return e.op in ("qd", "kd") or any(uses(a) for a in e.args)
    return any(isinstance(p, Compare) and (uses(p.left) or uses(p.right))
               for p in primitives(mask))


_PRECEDENCE = {Or: 1, And: 2, Not: 3, Compare: 3.5}


def render(mask: Mask, parent: int = 0) -> str:
    """Canonical text of a resolved mask, fully expanded (names of `mask` definitions inlined)."""
    level = _PRECEDENCE.get(type(mask), 4)
    match mask:
        case Full():
            text = "full"
        case Causal(align):
            text = "causal" if align == "top_left" else "causal(align = bottom_right)"
        case Window(left, right, align):
            text = f"window(left = {left}, right = {right}" + (
                ")" if align == "top_left" else ", align = bottom_right)")
        case Dilated(left, right, dilation):
            text = f"dilated(left = {left}, right = {right}, dilation = {dilation})"
        case Chunked(n):
            text = f"chunked({n})"
        case Strided(n):
            text = f"strided({n})"
        case Global(first, tokens):
            parts = ([f"first = {first}"] if first else []) + (
                [f"tokens = [{', '.join(map(str, tokens))}]"] if tokens else [])
            text = f"global({', '.join(parts)})"
        case Prefix(n):
            text = f"prefix({n})"
        case Random(blocks, block, seed):
            text = f"random(blocks = {blocks}, block = {block}, seed = {seed})"
        case Padding(side):
            text = "padding" if side == "right" else "padding(side = left)"
        case Document():
            text = "document"
        case And(a, b):
            text = f"{render(a, 2)} & {render(b, 3)}"
        case Or(a, b):
            text = f"{render(a, 1)} | {render(b, 2)}"
        case Compare(op, a, b):
            text = f"{render_index(a, 4)} {op} {render_index(b, 4)}"
        case Not(a):
            text = f"!{render(a, 4 if isinstance(a, Compare) else 3)}"
        case _:
            raise AssertionError(f"unknown mask node {mask!r}")
    return f"({text})" if level < parent else text


def render_index(e: Index, parent: int = 0) -> str:
    """Canonical text of an index expression."""
    levels = {"+": 4, "-": 4, "*": 5, "//": 5, "%": 5}
    match e.op:
        case "q" | "k" | "qd" | "kd":
            return e.op
        case "const":
            return str(e.value) if e.value >= 0 or parent < 6 else f"({e.value})"
        case "abs" | "min" | "max":
            return f"{e.op}({', '.join(render_index(a) for a in e.args)})"
    level = levels[e.op]
    a, b = e.args
    if e.op == "-" and a == Index("const"):  # a negation
        text = f"-{render_index(b, 6)}"
        return f"({text})" if parent > 6 else text
    text = f"{render_index(a, level)} {e.op} {render_index(b, level + 1)}"
    return f"({text})" if level < parent else text
