"""One lowering per IR op left after planning (`@lower(Op.X)`); the attention core dispatches
to its strategy's module."""

from __future__ import annotations

from ...ir import Graph, Node, Op
from ...positions import rope_inv_freq, sinusoidal_inv_freq
from ...targets import lacks_bfloat16_cuda_kernel
from .block_sparse import block_sparse
from .builder import Lowering, Sym, arg, lower, repeat, width
from .dense import dense
from .gqa import gqa
from .mha import mha

__all__ = ["STRATEGIES", "projection_groups"]


@lower(Op.ADD_POSITION)
def _add_position(lw: Lowering, node: Node) -> str:
    b, x = lw.b, arg(lw, node)
    if node.attr("kind") == "learned":
        table = b.op("Gather", lw.w(node.attr("weight")), lw.arange(lw.L).name, axis=0)
        return b.op("Add", x, table)
    d = width(node.shape)
    pos = b.op("Unsqueeze", lw.arange(lw.L, "float32").name, b.i64(1))  # (L, 1)
    inv = b.const(sinusoidal_inv_freq(d), "float32")
    angle = b.op("Unsqueeze", b.op("Mul", pos, inv), b.i64(2))  # (L, d/2, 1)
    table = b.op("Concat", b.op("Sin", angle), b.op("Cos", angle), axis=2)
    table = b.to_model(b.op("Reshape", table, b.i64(0, d)))  # (L, d): sin, cos interleaved
    return b.op("Add", x, table)


@lower(Op.LINEAR)
def _linear(lw: Lowering, node: Node) -> str:
    b = lw.b
    if node.out in lw.fused:
        return lw.fused[node.out]
    group = lw.siblings.get(node.out, [node])
    weights = [b.op("Transpose", lw.w(n.attr("weight")), perm=[1, 0]) for n in group]
    # projections of one input become one GEMM; the weight concat is folded at session start
    w = weights[0] if len(group) == 1 else b.op("Concat", *weights, axis=1)
    y = b.op("MatMul", arg(lw, node), w)
    if node.attr("bias"):
        biases = [lw.w(n.attr("bias")) for n in group]
        y = b.op("Add", y, biases[0] if len(group) == 1 else b.op("Concat", *biases, axis=0))
    if len(group) == 1:
        return y
    widths = [width(n.shape) for n in group]
    parts = b.op("Split", y, b.i64(*widths), axis=-1, outputs=len(group))
    for n, part in zip(group, parts, strict=True):
        lw.fused[n.out] = part
    return lw.fused[node.out]


def projection_groups(graph: Graph) -> dict[str, list[Node]]:
    """LINEAR nodes reading the same value with the same bias setting, by output name."""
    by_input: dict[tuple[str, bool], list[Node]] = {}
    for n in graph.nodes:
        if n.op is Op.LINEAR:
            by_input.setdefault((n.args[0], n.attr("bias") is not None), []).append(n)
    return {n.out: group for group in by_input.values() if len(group) > 1 for n in group}


@lower(Op.SPLIT_HEADS)
def _split_heads(lw: Lowering, node: Node) -> str:
    b = lw.b
    x = b.op("Reshape", arg(lw, node), b.i64(0, 0, node.attr("heads"), node.attr("dim")))
    return b.op("Transpose", x, perm=[0, 2, 1, 3])


@lower(Op.MERGE_HEADS)
def _merge_heads(lw: Lowering, node: Node) -> str:
    b = lw.b
    return b.op("Reshape", b.op("Transpose", arg(lw, node), perm=[0, 2, 1, 3]), b.i64(0, 0, -1))


@lower(Op.NORM)
def _norm(lw: Lowering, node: Node) -> str:
    b, x = lw.b, arg(lw, node)
    module = node.attr("module")
    weight = lw.w(f"{module}.weight")
    if node.attr("kind") == "layernorm":
        inputs = [x, weight] + ([lw.w(f"{module}.bias")] if node.attr("bias") else [])
        return b.op("LayerNormalization", *inputs, axis=-1, epsilon=node.attr("eps"))
    h = b.to_float32(x)  # statistics in float32: x^2 overflows float16 from |x| = 256
    ms = b.op("ReduceMean", b.op("Mul", h, h), b.i64(-1), keepdims=1)
    rms = b.op("Sqrt", b.op("Add", ms, b.const(node.attr("eps"), "float32")))
    return b.op("Mul", b.to_model(b.op("Div", h, rms)), weight)


@lower(Op.ROPE)
def _rope(lw: Lowering, node: Node) -> str:
    b, x = lw.b, arg(lw, node)
    dim = node.attr("dim")
    half = dim // 2
    n = lw.dim(x, 2)
    pos = b.op("Unsqueeze", lw.arange(n, "float32").name, b.i64(1))  # (n, 1)
    angle = b.op("Mul", pos, b.const(rope_inv_freq(node.attr("theta"), dim), "float32"))
    cos, sin = b.to_model(b.op("Cos", angle)), b.to_model(b.op("Sin", angle))  # (n, dim/2)
    rest = b.op("Slice", x, b.i64(dim), b.i64(2**62), b.i64(-1))
    if node.attr("interleaved"):
        pairs = b.op("Reshape", b.op("Slice", x, b.i64(0), b.i64(dim), b.i64(-1)),
                     b.i64(0, 0, 0, half, 2))  # (B, h, n, dim/2, 2)
        even = b.op("Squeeze", b.op("Slice", pairs, b.i64(0), b.i64(1), b.i64(-1)), b.i64(-1))
        odd = b.op("Squeeze", b.op("Slice", pairs, b.i64(1), b.i64(2), b.i64(-1)), b.i64(-1))
        new_even = b.op("Sub", b.op("Mul", even, cos), b.op("Mul", odd, sin))
        new_odd = b.op("Add", b.op("Mul", even, sin), b.op("Mul", odd, cos))
        stacked = b.op("Concat", b.op("Unsqueeze", new_even, b.i64(-1)),
                       b.op("Unsqueeze", new_odd, b.i64(-1)), axis=-1)
        rot = b.op("Reshape", stacked, b.i64(0, 0, 0, dim))
    else:
        x1 = b.op("Slice", x, b.i64(0), b.i64(half), b.i64(-1))
        x2 = b.op("Slice", x, b.i64(half), b.i64(dim), b.i64(-1))
        rot = b.op("Concat", b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin)),
                   b.op("Add", b.op("Mul", x2, cos), b.op("Mul", x1, sin)), axis=-1)
    return b.op("Concat", rot, rest, axis=-1)


@lower(Op.REPEAT_KV)
def _repeat_kv(lw: Lowering, node: Node) -> str:
    return repeat(lw, arg(lw, node), node.attr("groups"))


@lower(Op.ACTIVATION)
def _activation(lw: Lowering, node: Node) -> str:
    b, x = lw.b, arg(lw, node)
    kind = node.attr("kind")
    if kind == "relu":
        return b.op("Relu", x)
    if kind == "silu":
        return b.op("Mul", x, b.op("Sigmoid", x))
    approximate = "tanh" if kind == "gelu_tanh" else "none"
    if lacks_bfloat16_cuda_kernel("Gelu", b.dtype):
        return b.to_model(b.op("Gelu", b.to_float32(x), approximate=approximate))
    return b.op("Gelu", x, approximate=approximate)


@lower(Op.MUL)
def _mul(lw: Lowering, node: Node) -> str:
    return lw.b.op("Mul", arg(lw, node, 0), arg(lw, node, 1))


@lower(Op.ADD)
def _add(lw: Lowering, node: Node) -> str:
    return lw.b.op("Add", arg(lw, node, 0), arg(lw, node, 1))


@lower(Op.LINEAR_ATTENTION)
def _linear_attention(lw: Lowering, node: Node) -> str:
    b = lw.b
    q, k, v = (b.to_float32(arg(lw, node, i)) for i in range(3))  # sums over keys: float32
    feature = node.attr("feature")

    def phi(t: str) -> str:
        if feature == "elu":
            return b.op("Add", b.op("Elu", t, alpha=1.0), b.const(1.0, "float32"))
        if feature == "relu":
            return b.op("Relu", t)
        return b.op("Softmax", t, axis=-1)

    fq, fk = phi(q), phi(k)
    if node.attr("causal"):
        weights = b.op("MatMul", fq, b.op("Transpose", fk, perm=[0, 1, 3, 2]))  # (B, H, L, S)
        qi = Sym(b, b.op("Unsqueeze", lw.arange(lw.L).name, b.i64(1)), "int64", 2)
        ki = Sym(b, b.op("Unsqueeze", lw.arange(lw.S).name, b.i64(0)), "int64", 2)
        keep = (ki <= qi).astype("float32")
        weights = b.op("Mul", weights, keep.name)
        num = b.op("MatMul", weights, v)
        den = b.op("ReduceSum", weights, b.i64(-1), keepdims=1)
    else:
        kv = b.op("MatMul", b.op("Transpose", fk, perm=[0, 1, 3, 2]), v)  # (B, H, d, dv)
        num = b.op("MatMul", fq, kv)
        z = b.op("ReduceSum", fk, b.i64(2), keepdims=1)  # (B, H, 1, d)
        den = b.op("ReduceSum", b.op("Mul", fq, z), b.i64(-1), keepdims=1)
    return b.to_model(b.op("Div", num, b.op("Max", den, b.const(1e-6, "float32"))))


@lower(Op.ATTENTION)
def _attention(lw: Lowering, node: Node) -> str:
    return STRATEGIES[node.attr("strategy")](lw, node)


STRATEGIES = {"gqa": gqa, "mha": mha, "dense": dense, "block_sparse": block_sparse}
