"""One lowering per IR op left after planning (`@lower(Op.X)`); the attention core dispatches
to its strategy's lowering (`Lowering.strategies`, passed to `build_model`), and so does a
kernel module's node where its strategy lowers it (else its module's arithmetic)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ... import masks
from ...dtypes import ONNX_TYPE
from ...ir import Node, Op
from ...ir.ops import conv_inputs
from ...mechanisms import APPLIERS, FFNS, KERNELS
from ...quantize import block_shapes, quantize
from .. import formulas
from ..cache_slots import bounded_present
from ..conv import causal_conv, conv_window, new_tokens
from .attend import kept_keys
from .builder import Lowering, Sym, arg, lower, parts, repeat, shape_of, width
from .switch import subgraph
from .sym import OnnxArrays


@lower(Op.ADD_POSITION)
def _add_position(lw: Lowering, node: Node) -> str:
    b, x = lw.b, arg(lw, node)
    if node.attr("kind") == "learned":
        ids = arg(lw, node, 1) if len(node.args) > 1 else lw.arange(lw.L).name
        return b.op("Add", x, b.op("Gather", lw.w(node.attr("weight")), ids, axis=0))
    pos = lw.token_positions(node, lw.L)
    table = formulas.sinusoidal_table(lw.xp, pos, width(node.shape),
                                      **formulas.sinusoidal_variant(node))
    return b.op("Add", x, b.to_model(table.name))


@lower(Op.EMBED)
def _embed(lw: Lowering, node: Node) -> str:
    b = lw.b
    name = node.attr("weight")
    if lw.quantization is not None and name in lw.quantized:  # the table in blocks
        q = lw.quantization
        n, k = shape_of(lw.weights, name)
        data, scales, zero = block_shapes(n, k, q)

        def blocks() -> tuple:  # made as the model is written
            w = quantize(lw.weights[name], q)
            return w.data.reshape(w.n, -1), w.scales, w.zero_points
        read = parts(blocks, 2 if zero is None else 3)
        inputs = [b.deferred(f"{name}.rows.int{q.bits}", (n, data[1] * data[2]), read[0],
                             typed=True), arg(lw, node),
                  b.deferred(f"{name}.rows.scales", scales, read[1])]
        if zero is not None:
            inputs.append(b.deferred(f"{name}.rows.zero_points", zero, read[2], typed=True))
        x = b.op("GatherBlockQuantized", *inputs, domain="com.microsoft", bits=q.bits,
                 block_size=q.block, gather_axis=0, quantize_axis=1)
    else:
        x = b.op("Gather", lw.w(name), arg(lw, node), axis=0)
    scale = node.attr("scale")  # in the model dtype, as Gemma's normalizer
    return x if scale == 1.0 else b.op("Mul", x, b.const(scale, b.dtype))


@lower(Op.VALUE_PAIRS)
def _value_pairs(lw: Lowering, node: Node) -> str:
    return formulas.value_pairs(lw.xp, lw.sym(node), node.shape.dims[1]).name


@lower(Op.CLAMPED_GLU)
def _clamped_glu(lw: Lowering, node: Node) -> str:
    return formulas.clamped_glu(lw.xp, lw.sym(node, 0), lw.sym(node, 1), node.attr("alpha"),
                                node.attr("limit")).name


@lower(Op.SCALE)
def _scale(lw: Lowering, node: Node) -> str:
    weight = dict(node.attrs).get("weight")
    if weight is not None:  # one learned number (Gemma 4's layer_scalar); factor 1
        return lw.b.op("Mul", arg(lw, node), lw.w(weight))
    return lw.b.op("Mul", arg(lw, node), lw.b.const(node.attr("factor"), lw.b.dtype))


@lower(Op.CACHE)
def _cache(lw: Lowering, node: Node) -> str:
    """past (B, Hkv, P, d) then the new (B, Hkv, L, d) along the sequence axis."""
    return lw.b.op("Concat", arg(lw, node, 0), arg(lw, node, 1), axis=2)


@lower(Op.TAIL)
def _tail(lw: Lowering, node: Node) -> str:
    """The last `keep` slots of a cache (all of them while it is shorter), after the keys of
    its `first` first positions when its mask shows them (`cache_slots.bounded_present`)."""
    b = lw.b
    full = Sym(b, arg(lw, node), b.dtype, 4)
    mask = Sym(b, lw.env["attention_mask"], "int64", 2)
    return bounded_present(OnnxArrays(b), full, mask, node.attr("first"),
                           node.attr("keep")).name


@lower(Op.SEQ_PROJECT)
def _seq_project(lw: Lowering, node: Node) -> str:
    """A kernel module's rows (`Kernel.rows`): E[..., :n] @ keys (B, h, n, d), the keys the
    mask hides zeroed first."""
    b = lw.b
    t = arg(lw, node)
    n = lw.dim(t, 2)
    end = b.op("Unsqueeze", n.name, b.i64(0))
    e = b.op("Slice", lw.w(node.attr("weight")), b.i64(0), end, b.i64(-1))  # (.., k, n)
    expr = node.attr("expr")
    if expr != masks.Full():
        kept = kept_keys(lw, expr, n)  # (B|1, 1, n)
        keep = b.op("Cast", b.op("Unsqueeze", kept.name, b.i64(-1)), to=ONNX_TYPE[b.dtype])
        t = b.op("Mul", t, keep)  # not Where: CUDA has no bfloat16 Where
    return b.op("MatMul", e, t)


@lower(Op.LINEAR)
def _linear(lw: Lowering, node: Node) -> str:
    b = lw.b
    if node.out in lw.fused:
        return lw.fused[node.out]
    group = lw.siblings.get(node.out, [node])
    names = [n.attr("weight") for n in group]
    if lw.quantization is not None and all(n in lw.quantized for n in names):
        y = _nbits(lw, arg(lw, node), names)
    else:
        weights = [b.op("Transpose", lw.w(n), perm=[1, 0]) for n in names]
        # projections of one input become one GEMM; the weight concat is folded at session
        # start
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
    lw.packed[tuple(n.out for n in group)] = y  # a kernel may read the packed projections
    return lw.fused[node.out]


def _nbits(lw: Lowering, x: str, names: list[str]) -> str:
    """x @ W^T with W the weights `names` stacked by rows (one input's projections, one
    GEMM), quantized: com.microsoft.MatMulNBits over its blocks (`quantize`)."""
    q = lw.quantization
    shapes = [shape_of(lw.weights, n) for n in names]
    rows, k = sum(s[0] for s in shapes), shapes[0][1]
    data, scales, zero = block_shapes(rows, k, q)

    def blocks() -> tuple:  # made as the model is written
        w = quantize(np.concatenate([lw.weights[n] for n in names], axis=0), q)
        return w.data, w.scales, w.zero_points
    read = parts(blocks, 2 if zero is None else 3)
    key = "+".join([names[0], *(n.rsplit(".", 2)[-2] for n in names[1:])])
    b = lw.b
    inputs = [b.deferred(f"{key}.int{q.bits}", data, read[0], typed=True),
              b.deferred(f"{key}.scales", scales, read[1])]
    if zero is not None:
        inputs.append(b.deferred(f"{key}.zero_points", zero, read[2], typed=True))
    return b.op("MatMulNBits", x, *inputs, domain="com.microsoft", K=k, N=rows, bits=q.bits,
                block_size=q.block, accuracy_level=q.accuracy or None)


@lower(Op.SPLIT_HEADS)
def _split_heads(lw: Lowering, node: Node) -> str:
    b = lw.b
    x = b.op("Reshape", arg(lw, node), b.i64(0, 0, node.attr("heads"), node.attr("dim")))
    return b.op("Transpose", x, perm=[0, 2, 1, 3])


@lower(Op.HEAD_SLICE)
def _head_slice(lw: Lowering, node: Node) -> str:
    b = lw.b
    if node.attr("heads") == 1:  # any rank: a cache's first features too
        return b.op("Slice", arg(lw, node), b.i64(node.attr("start")),
                    b.i64(node.attr("stop")), b.i64(-1))
    x = b.op("Reshape", arg(lw, node), b.i64(0, 0, node.attr("heads"), -1))
    x = b.op("Slice", x, b.i64(node.attr("start")), b.i64(node.attr("stop")), b.i64(-1))
    return b.op("Reshape", x, b.i64(0, 0, -1))


def _real(lw: Lowering, node: Node, like: Sym, axis: int) -> Sym | None:
    """A convolution's or a kernel's real tokens (B, L), float32: a decoding call's from
    attention_mask, one pass's from its `padding` (key_lengths), or None (every token)."""
    xp, L = lw.xp, lw.xp.shape(like, axis)
    if node.attr("decoding"):
        return new_tokens(xp, Sym(lw.b, lw.env["attention_mask"], "int64", 2), L)
    if node.attr("padding") is None:
        return None
    kept = kept_keys(lw, node.attr("padding"), L)  # (B, 1, L)
    return xp.astype(xp.reshape(kept, [xp.shape(kept, 0), -1]), "float32")


@lower(Op.CAUSAL_CONV)
def _causal_conv(lw: Lowering, node: Node) -> str:
    n = len(conv_inputs(node))
    parts = [lw.sym(node, i) for i in range(n)]
    xp, width = lw.xp, node.attr("width")
    past = lw.sym(node, n) if node.attr("decoding") else None  # the past inputs
    full = conv_window(xp, parts, width, past, _real(lw, node, parts[0], 1))
    if node.attr("part") == "state":  # the last width - 1 inputs
        return xp.astype(xp.slice(full, 1, xp.shape(full, 1) - (width - 1), None),
                         lw.b.dtype).name
    bias = dict(node.attrs).get("bias")
    return causal_conv(xp, full, lw.weight(node.attr("weight"), 3), width, lw.b.dtype,
                       node.attr("activation"),
                       None if bias is None else lw.weight(bias)).name


@lower(Op.ROWS)
def _rows(lw: Lowering, node: Node) -> str:
    return lw.xp.slice(lw.sym(node), 2, node.attr("start"), node.attr("stop")).name


@lower(Op.HEAD_LINEAR)
def _head_linear(lw: Lowering, node: Node) -> str:
    """Weights sliced and transposed from their initializer: folded at session start."""
    return formulas.head_linear(lw.xp, lw.sym(node), lw.weight(node.attr("weight"), 2),
                                *(node.attr(a) for a in ("heads", "block", "start", "stop",
                                                         "transposed"))).name


@lower(Op.JOIN_HEADS)
def _join_heads(lw: Lowering, node: Node) -> str:
    """(B, H, n, a) and (B, H | 1, n, c) -> (B, H, n, a + c): the second broadcast over heads."""
    b = lw.b
    a, c = arg(lw, node, 0), arg(lw, node, 1)
    shape = b.op("Concat", b.op("Shape", a, end=3), b.op("Shape", c, start=3), axis=0)
    return b.op("Concat", a, b.op("Expand", c, shape), axis=-1)


@lower(Op.MERGE_HEADS)
def _merge_heads(lw: Lowering, node: Node) -> str:
    b = lw.b
    return b.op("Reshape", b.op("Transpose", arg(lw, node), perm=[0, 2, 1, 3]), b.i64(0, 0, -1))


@lower(Op.NORM)
def _norm(lw: Lowering, node: Node) -> str:
    if node.out in lw.fused:  # computed with the residual add before it
        return lw.fused[node.out]
    weighted = node.attr("kind") != "l2norm" and dict(node.attrs).get("affine", True)
    if lw.contrib_norms and weighted:
        return _contrib_norm(lw, node, [arg(lw, node)])
    module = node.attr("module")
    bias = lw.weight(f"{module}.bias") if node.attr("bias") else None
    weight = lw.weight(f"{module}.weight") if weighted else None
    return formulas.norm(lw.xp, lw.sym(node), node.attr("kind"), weight, bias,
                         node.attr("eps"), node.attr("unit_offset")).name


def _contrib_norm(lw: Lowering, node: Node, inputs: list[str]):
    """A float32 norm as one kernel: RMSNormalization or SkipSimplifiedLayerNormalization for
    RMSNorm (x / sqrt(mean(x^2) + eps) * w, the gain 1 + w for unit offset, folded at session
    start), LayerNormalization or SkipLayerNormalization for LayerNorm. With two inputs it adds
    them first and returns (norm, sum)."""
    b = lw.b
    module = node.attr("module")
    gain = lw.w(f"{module}.weight")
    if node.attr("unit_offset"):
        gain = b.op("Add", gain, b.const(1.0, "float32"))
    rms = node.attr("kind") == "rmsnorm"
    skip = len(inputs) == 2
    extra = [] if rms else [lw.w(f"{module}.bias") if node.attr("bias") else ""]
    if skip:
        op = "SkipSimplifiedLayerNormalization" if rms else "SkipLayerNormalization"
        out = b.op(op, *inputs, gain, *extra, outputs=4, domain="com.microsoft",
                   epsilon=float(node.attr("eps")))
        return out[0], out[3]
    if rms:  # the standard op (opset 23)
        return b.op("RMSNormalization", inputs[0], gain, axis=-1,
                    epsilon=float(node.attr("eps")))
    return b.op("LayerNormalization", inputs[0], gain, *[e for e in extra if e], axis=-1,
                epsilon=float(node.attr("eps")))


@lower(Op.APPLY)
def _apply(lw: Lowering, node: Node) -> str:
    """A mechanism's arithmetic, from its module; its second operand, where it has one, is
    position_ids where the mechanism reads positions, else the value it names."""
    b = lw.b
    attrs = dict(node.attrs[1:])
    if "weights" in attrs:  # (read before the heads, as the lowering always has)
        attrs["weights"] = [lw.weight(w, len(shape_of(lw.weights, w)))
                            for w in attrs["weights"]]
    x = lw.sym(node)
    mechanism = APPLIERS[node.attr("mechanism")]
    pos = None
    if len(node.args) > 1 and not mechanism.reads_positions:  # the value it names
        pos = lw.sym(node, 1)
    elif len(node.args) > 1:  # position_ids (B, n) -> (B, 1, n, 1)
        pos = Sym(b, lw.env[node.args[1]], "int64", 2)[:, None, :, None]
    elif mechanism.reads_positions:
        pos = lw.arange(lw.dim(x.name, 2))[:, None]  # (n, 1)
    return mechanism.apply(lw.xp, x, pos, **attrs).name


@lower(Op.KERNEL)
def _kernel(lw: Lowering, node: Node) -> str:
    """A kernel module's core: its strategy's lowering by the kernel's name where the caller
    passed one (`Lowering.strategies`: a non-fusing strategy's plan, as a kernel's in
    chunks), else its module's arithmetic (`kernel_form`)."""
    own = lw.strategies.get(node.attr("kernel"))
    return own(lw, node) if own is not None else kernel_form(lw, node)


@lower(Op.FFN)
def _ffn(lw: Lowering, node: Node) -> str:
    """A feed-forward form's node: its ONNX forms, the lowering the caller passed by the form's
    name (`Lowering.strategies`: `strategies/<name>.py`, as a kernel's strategy lowers the
    kernel's node); a form with no ONNX forms of its own (`FeedForward.lowered`), its module's
    `run` over the ONNX array namespace."""
    form = FFNS[node.attr("ffn")]
    own = lw.strategies.get(node.attr("ffn"))
    if own is None and not form.lowered:
        return form.run(lw.xp, lw.sym(node), lw.weight, **dict(node.attrs[1:])).name
    if own is None:
        raise KeyError(f"no lowering of the feed-forward form {node.attr('ffn')!r} was passed")
    return own(lw, node)


def kernel_form(lw: Lowering, node: Node) -> str:
    """A kernel module's core by its module's `apply`: the query and key indices first where
    it is `indexed` and causal, then the keys it sees (a decoding call's real keys, or those
    its `keys` mask shows)."""
    kernel = KERNELS[node.attr("kernel")]
    if kernel.own_layer:
        return _own_layer(lw, node, kernel)
    heads = [lw.sym(node, i) for i in range(2 if kernel.shares_keys else 3)]
    q, k, v = (heads[0], None, heads[1]) if kernel.shares_keys else heads
    kept, attrs = None, dict(node.attrs[1:])
    if kernel.indexed:
        attrs["index"] = lw.indices() if attrs.get("causal") else None
    if lw.decoding:  # the cache's real keys, (B, n)
        kept = Sym(lw.b, lw.b.op("Cast", lw.env["attention_mask"], to=TensorProto.BOOL),
                   "bool", 2)
    elif attrs.get("keys", masks.Full()) != masks.Full():  # (B|1, n)
        n = lw.dim(q.name, 2)
        kept = lw.xp.reshape(kept_keys(lw, attrs["keys"], n), [-1, n])
    return kernel.apply(lw.xp, q, k, v, kept, **attrs).name


def _own_layer(lw: Lowering, node: Node, kernel) -> str:
    """A kernel with its own layer (`Kernel.run`): its branch is an If of two subgraphs named
    `<node>_<branch>`, built in order, then the condition."""
    args = [lw.sym(node, i) for i in range(len(node.args))]

    def branch(cond, branches) -> Sym:
        then, otherwise = (subgraph(lw, f"{node.out}_{name}", lambda fn=fn: fn().name)
                           for name, fn in branches)
        return Sym(lw.b, lw.b.op("If", cond().name, then_branch=then, else_branch=otherwise),
                   lw.b.dtype, node.shape.rank)

    return kernel.run(lw.xp, args, [lw.weight(w) for w in node.attr("weights")],
                      lambda: _real(lw, node, args[0], 2), branch, **dict(node.attrs[1:])).name


@lower(Op.REPEAT_KV)
def _repeat_kv(lw: Lowering, node: Node) -> str:
    return repeat(lw, arg(lw, node), node.attr("groups"))


@lower(Op.ACTIVATION)
def _activation(lw: Lowering, node: Node) -> str:
    return formulas.activation(lw.xp, lw.sym(node), node.attr("kind")).name


@lower(Op.MUL)
def _mul(lw: Lowering, node: Node) -> str:
    return lw.b.op("Mul", arg(lw, node, 0), arg(lw, node, 1))


@lower(Op.ADD)
def _add(lw: Lowering, node: Node) -> str:
    norm = lw.skip_norms.get(node.out)
    if norm is not None:
        normed, total = _contrib_norm(lw, norm, [arg(lw, node, 0), arg(lw, node, 1)])
        lw.fused[norm.out] = normed
        return total
    return lw.b.op("Add", arg(lw, node, 0), arg(lw, node, 1))


@lower(Op.ATTENTION)
def _attention(lw: Lowering, node: Node) -> str:
    """A fused attention core: its strategy's lowering, from the table the caller passed."""
    return lw.strategies[node.attr("strategy")](lw, node)
