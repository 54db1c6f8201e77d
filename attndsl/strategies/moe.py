"""Strategy `moe`: a mixture of experts' `ffn` node in ONNX (mechanisms/moe.py is the
mixture's module, this its ONNX forms, which only the ONNX backend has: the gather/scatter
graph and ONNX Runtime's com.microsoft.MoE and QMoE kernels, as planned by the module's
`plan`), lowered here by the form's name (`LOWERINGS`); it plans no attention core (no
priority). The router's gates come from the module's `route`. The experts' weights are stored
stacked, [experts, in, out] per projection, and each token runs its top_k experts alone, in
one of two forms chosen at run time by an If on the number of routed rows R = tokens x top_k:

- R < experts (decoding a few tokens): each routed row gathers its expert's weights and
  multiplies by them (batched MatMul): the weights of the experts no token chose are never
  read;
- otherwise (prompts): the routed rows are sorted by expert into a zero-padded block [experts,
  C, d] (C the most rows any expert got), every expert multiplies its own rows at once
  (batched MatMul), and each row is read back and added, in float32, to its token.

Either way a token's work is its top_k experts', whatever their count."""

from __future__ import annotations

import numpy as np

from ..backends.formulas import activation, clamped_glu
from ..backends.lower.builder import Lowering, arg, parts, shape_of
from ..backends.lower.switch import subgraph
from ..backends.lower.sym import Sym
from ..ir import Node
from ..mechanisms.moe import route
from ..quantize import block_shapes, dequantize, quantize
from .base import Reject, Strategy

__all__ = ["STRATEGY"]


def lower_moe(lw: Lowering, node: Node) -> str:
    """The router's logits and gates (always built; where the kernel routes by the logits
    itself, the unused gates are pruned with the model's dead nodes), then each token's
    experts: com.microsoft.MoE where the module's `plan` chose it, else the graph."""
    logits, gates = _route(lw, node)
    y = _moe_kernel(lw, node, logits) if node.attr("kernel") == "moe" else \
        _experts(lw, node, gates)
    bias = node.attr("output_bias")  # the routed sum's bias (JetMoE's), in the model dtype
    return y if bias is None else lw.b.op("Add", y, lw.w(bias))


def _route(lw: Lowering, node: Node) -> tuple[Sym, str]:
    """The router's logits (B, L, experts), what com.microsoft.MoE routes by, and the gates
    (B, L, experts), float32."""
    x, b = lw.sym(node), lw.b
    router = node.attr("weights")
    logits = lw.xp.matmul(x, lw.xp.swap_last(lw.weight(router[0], 2)))
    if node.attr("router_bias"):
        logits = logits + lw.weight(router[1])
    experts = node.attr("experts") + node.attr("zero_experts")  # (identities routed last)
    flat = Sym(b, b.op("Reshape", logits.name, b.i64(-1, experts)), logits.dtype, 2)
    selection = router[-1] if node.attr("selection_bias") else None
    gates = route(lw.xp, flat, node.attr("top_k"), node.attr("router"), node.attr("normalize"),
                  node.attr("scale"), lw.weight(selection) if selection else None,
                  node.attr("groups"), node.attr("top_groups"), node.attr("group_score"),
                  node.attr("threshold"), node.attr("select_by"), node.attr("sink_experts"))
    return logits, b.op("Reshape", gates.name, b.op("Shape", logits.name))


def _stacked(lw: Lowering, node: Node, name: str, make, one: tuple[int, ...]) -> str:
    """Initializer `{prefix}{name}`: each expert's `make(f"{prefix}{e}.")` (of shape `one`)
    stacked along a new first axis, once per model; read when the model is written."""
    prefix, experts = node.attr("prefix"), node.attr("experts")
    key = f"{prefix}{name}"
    if key not in lw.used:
        lw.used.add(key)
        lw.b.deferred(key, (experts, *one), lambda: np.stack([make(f"{prefix}{e}.")
                                                             for e in range(experts)]))
    return key


def _tensor(lw: Lowering, name: str) -> np.ndarray:
    """A weight; an expert's of a quantized model (the gather/scatter form): the float values
    its blocks give (`quantize.dequantize`), as the kernel form computes with."""
    if lw.quantization is not None and name in lw.quantized:
        q = lw.quantization
        return dequantize(quantize(np.asarray(lw.weights[name], np.float32), q), q)
    return np.asarray(lw.weights[name])


def _projection(lw: Lowering, node: Node, proj: str) -> tuple[str, str | None]:
    """The experts' `proj` weights as one [experts, in, out] initializer (and biases
    [experts, 1, out])."""
    first = f"{node.attr('prefix')}0.{proj}"  # every expert's shapes are the first's
    weight = _stacked(lw, node, f"{proj}.weight", lambda p: _tensor(lw, f"{p}{proj}.weight").T,
                      shape_of(lw.weights, f"{first}.weight")[::-1])
    if not node.attr("bias"):
        return weight, None
    return weight, _stacked(lw, node, f"{proj}.bias",
                            lambda p: _tensor(lw, f"{p}{proj}.bias")[None],
                            (1, *shape_of(lw.weights, f"{first}.bias")))


def _experts_on(lw: Lowering, node: Node, h: Sym, pick) -> Sym:
    """The expert MLP on rows h (.., rows, in): `pick(stacked)` selects, from a stacked
    [experts, ...] tensor, the weights (or biases) that multiply those rows."""
    gated, act = node.attr("gated"), node.attr("act")
    names = ("gate_proj", "up_proj", "down_proj") if gated else ("fc1", "fc2")
    b = lw.b

    def linear(x: Sym, proj: str) -> Sym:
        weight, bias = _projection(lw, node, proj)
        y = Sym(b, b.op("MatMul", x.name, pick(weight)), b.dtype, x.ndim)
        return y if bias is None else Sym(b, b.op("Add", y.name, pick(bias)), b.dtype, x.ndim)

    if act == "clamped_swiglu":
        return linear(clamped_glu(lw.xp, linear(h, names[0]), linear(h, names[1]),
                                  node.attr("alpha"), node.attr("limit")), names[2])
    if gated:
        return linear(activation(lw.xp, linear(h, names[0]), act) * linear(h, names[1]),
                      names[2])
    return linear(activation(lw.xp, linear(h, names[0]), act), names[1])


def _experts(lw: Lowering, node: Node, gates: str) -> str:
    """The gather/scatter graph: each token's top_k experts alone; identity experts (routed
    after the `experts`) add each token's input times their gates."""
    b = lw.b
    x = arg(lw, node, 0)
    n, k, zero = node.attr("experts"), node.attr("top_k"), node.attr("zero_experts")
    k += node.attr("sink_experts")  # (every token's sink experts beside its top_k)
    flat = b.op("Reshape", x, b.op("Concat", b.i64(-1), b.op("Shape", x, start=-1), axis=0))
    table = b.op("Reshape", gates, b.i64(-1, n + zero))  # (T, experts), float32
    identity = None
    if zero:  # the MLP experts' gates alone: the top min(k, n) of them hold every nonzero one
        identity = b.op("ReduceSum", b.op("Slice", table, b.i64(n), b.i64(n + zero), b.i64(1)),
                        b.i64(-1), keepdims=1)  # (T, 1)
        table, k = b.op("Slice", table, b.i64(0), b.i64(n), b.i64(1)), min(k, n)
    weight, expert = b.op("TopK", table, b.i64(k), outputs=2, axis=-1, largest=1, sorted=1)
    expert = b.op("Reshape", expert, b.i64(-1))  # (R,): routed row r = token r // k
    weight = b.op("Reshape", weight, b.i64(-1, 1))  # (R, 1)
    routed = b.op("Range", b.const(0, "int64"), b.op("Squeeze", b.op("Shape", expert),
                                                    b.i64(0)), b.const(1, "int64"))
    token = b.op("Div", routed, b.const(k, "int64"))  # (R,): each routed row's token
    rows = b.op("Gather", flat, token, axis=0)  # (R, d)
    if node.attr("gate") == "input":  # Llama 4: each routed row times its gate, then 1 after
        rows = b.op("Mul", rows, Sym(b, weight, "float32", 2).astype(b.dtype).name)
        # (beside identities an MLP expert of gate 0 may be picked: its output, of a zero
        # input and its biases, is dropped)
        weight = b.op("Cast", b.op("Greater", weight, b.const(0.0, "float32")), to=1) \
            if zero else None

    def gathered() -> str:
        """Each routed row times its own expert's gathered weights."""
        h = Sym(b, b.op("Unsqueeze", rows, b.i64(1)), b.dtype, 3)  # (R, 1, d)
        y = _experts_on(lw, node, h, lambda t: b.op("Gather", t, expert, axis=0))
        return _summed(lw, b.op("Squeeze", y.name, b.i64(1)), weight, k)

    def grouped() -> str:
        """Routed rows sorted by expert into [experts, C, d], multiplied expert by expert."""
        count = b.op("Shape", expert)
        order = b.op("TopK", b.op("Cast", expert, to=1), count, outputs=2, axis=0, largest=0,
                     sorted=1)[1]  # by expert; among one expert's rows, the lower row first
        by = b.op("Gather", expert, order, axis=0)
        hits = b.op("Cast", b.op("Equal", b.op("Unsqueeze", expert, b.i64(1)), b.op(
            "Range", b.const(0, "int64"), b.const(n, "int64"), b.const(1, "int64"))), to=7)
        sizes = b.op("ReduceSum", hits, b.i64(0), keepdims=0)  # rows per expert, (experts,)
        start = b.op("CumSum", sizes, b.const(0, "int64"), exclusive=1)
        slot = b.op("Sub", b.op("Range", b.const(0, "int64"), b.op("Squeeze", count, b.i64(0)),
                                b.const(1, "int64")), b.op("Gather", start, by, axis=0))
        where = b.op("Concat", b.op("Unsqueeze", by, b.i64(1)), b.op("Unsqueeze", slot, b.i64(1)),
                     axis=1)  # (R, 2): (expert, slot)
        widest = b.op("ReduceMax", sizes, b.i64(0), keepdims=1)
        shape = b.op("Concat", b.const([n], "int64"), widest, b.op("Shape", flat, start=1),
                     axis=0)
        block = b.op("ScatterND", b.op("ConstantOfShape", shape, value=_zero(b.dtype)), where,
                     b.op("Gather", rows, order, axis=0))  # (experts, C, d)
        y = _experts_on(lw, node, Sym(b, block, b.dtype, 3), lambda t: t)
        # each routed row's (expert, slot), in token order again: `order` inverted
        unsorted = b.op("TopK", b.op("Cast", order, to=1), count, outputs=2, axis=0,
                        largest=0, sorted=1)[1]
        back = b.op("GatherND", y.name, b.op("Gather", where, unsorted, axis=0))  # (R, d)
        return _summed(lw, back, weight, k)

    few = b.op("Less", b.op("Squeeze", b.op("Shape", expert), b.i64(0)), b.const(n, "int64"))
    out = b.op("If", few, then_branch=subgraph(lw, f"{node.out}_gathered", gathered),
               else_branch=subgraph(lw, f"{node.out}_grouped", grouped))
    if identity is not None:  # (in float32, as the experts' sum)
        kept = Sym(b, b.op("Mul", Sym(b, flat, b.dtype, 2).astype("float32").name, identity),
                   "float32", 2)
        out = b.op("Add", out, kept.astype(b.dtype).name)
    return b.op("Reshape", out, b.op("Shape", x))


def _summed(lw: Lowering, y: str, weight: str | None, k: int) -> str:
    """Routed rows y (R, d) in token order (row r of token r // k) times their gate weights
    (None: already applied to the input), each token's k rows summed in float32, in the model
    dtype: a reduction over a reshape, not a scatter-add (whose duplicate indices ONNX Runtime
    adds from several threads at once)."""
    b = lw.b
    y = b.op("Cast", y, to=1)
    if weight is not None:
        y = b.op("Mul", y, weight)
    rows = b.op("Reshape", y, b.op("Concat", b.i64(-1, k), b.op("Shape", y, start=1), axis=0))
    total = b.op("ReduceSum", rows, b.i64(1), keepdims=0)  # (T, d)
    return Sym(b, total, "float32", 2).astype(b.dtype).name


def _zero(dtype: str):
    from onnx import helper

    from ..dtypes import ONNX_TYPE
    return helper.make_tensor("zero", ONNX_TYPE[dtype], [1], [0])


_FLOAT32_MAX = 3.4028234663852886e38


def _moe_kernel(lw: Lowering, node: Node, logits: Sym) -> str:
    """The mixture as one com.microsoft.MoE node (the module's `plan` says when): the router's
    logits in, its softmax, top-k and renormalisation inside; fc1 [experts, 2 n, d] with each
    expert's gate and up rows interleaved (SwiGLU: g * sigmoid(alpha g) * (u + beta), g
    clamped above and u both ways at `swiglu_limit`: alpha 1, beta 0 and no limit for plain
    SwiGLU, gpt-oss's alpha, 1 and limit for its clamped unit), fc2 [experts, d, n]; times
    the routed scale after."""
    b = lw.b
    x = arg(lw, node, 0)
    n, gated = node.attr("experts"), node.attr("gated")
    width = b.op("Shape", x, start=-1)
    flat = b.op("Reshape", x, b.op("Concat", b.i64(-1), width, axis=0))
    logits = b.op("Reshape", logits.name, b.i64(-1, n))

    def one(name: str) -> tuple[int, ...]:  # every expert's shapes are the first's
        return shape_of(lw.weights, f"{node.attr('prefix')}0.{name}")

    def fc1(part: str) -> str:
        if not gated:
            return _stacked(lw, node, f"moe_fc1.{part}", lambda p: _tensor(lw, f"{p}fc1.{part}"),
                            one(f"fc1.{part}"))
        gate = one(f"gate_proj.{part}")
        return _stacked(lw, node, f"moe_fc1.{part}", lambda p: _interleaved(
            _tensor(lw, f"{p}gate_proj.{part}"), _tensor(lw, f"{p}up_proj.{part}")),
                        (2 * gate[0], *gate[1:]))

    def fc2(part: str) -> str:
        down = f"{'down_proj' if gated else 'fc2'}.{part}"
        return _stacked(lw, node, f"moe_fc2.{part}", lambda p: _tensor(lw, f"{p}{down}"),
                        one(down))

    biased = node.attr("bias")
    clamped = node.attr("act") == "clamped_swiglu"
    attrs = dict(k=node.attr("top_k"), normalize_routing_weights=int(node.attr("normalize")),
                 activation_type="swiglu" if gated else "relu")
    if gated:
        attrs |= dict(swiglu_fusion=1, activation_alpha=node.attr("alpha") if clamped else 1.0,
                      activation_beta=1.0 if clamped else 0.0,
                      swiglu_limit=node.attr("limit") if clamped else _FLOAT32_MAX)
    if _in_blocks(lw, node):
        y = _qmoe(lw, node, flat, logits, fc1, fc2, biased, attrs)
    else:
        y = b.op("MoE", flat, logits, fc1("weight"), fc1("bias") if biased else "",
                 fc2("weight"), fc2("bias") if biased else "", domain="com.microsoft", **attrs)
    if node.attr("scale") != 1.0:
        y = b.op("Mul", y, b.const(node.attr("scale"), b.dtype))
    return b.op("Reshape", y, b.op("Shape", x))


def _interleaved(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Rows gate[0], up[0], gate[1], up[1], ...: MoE's fused SwiGLU fc1 (swiglu_fusion = 1)."""
    out = np.empty((2 * gate.shape[0], *gate.shape[1:]), gate.dtype)
    out[0::2], out[1::2] = gate, up
    return out


def _in_blocks(lw: Lowering, node: Node) -> bool:
    """Whether a mixture's experts are stored as QMoE blocks: as planned
    (`planner.rewrites.quantized` says which, `_qmoe` why)."""
    return node.attr("prefix") in lw.quantized_kernels


def _qmoe(lw: Lowering, node: Node, flat: str, logits: str, fc1, fc2, biased: bool,
          attrs: dict) -> str:
    """com.microsoft.QMoE: MoE's inputs with each expert's fc1 [2 n, d] (gate and up rows
    interleaved) and fc2 [d, n] in MatMulNBits' blocks (`quantize`: per output row, a scale
    per `block` inputs, the codes packed along the inputs), stacked [experts, rows, inputs x
    bits / 8], scales [experts, rows, inputs / block], zero points when asymmetric. For int4
    experts, and int8 ones that are symmetric at accuracy_level 4: ONNX Runtime 1.31's 8-bit
    experts always quantize their activations (so not at a lower level), and its asymmetric
    8-bit experts read their zero points otherwise than MatMulNBits (measured off by 8e-2);
    those run as com.microsoft.MoE on the float values of their blocks."""
    b, q = lw.b, lw.quantization
    prefix, gated = node.attr("prefix"), node.attr("gated")

    def raw(name: str) -> np.ndarray:
        return np.asarray(lw.weights[name], np.float32)

    def rows(p: str, fc: int) -> np.ndarray:
        if not gated:
            return raw(f"{p}fc{fc}.weight")
        if fc == 2:
            return raw(f"{p}down_proj.weight")
        return _interleaved(raw(f"{p}gate_proj.weight"), raw(f"{p}up_proj.weight"))

    experts, blocks = node.attr("experts"), []
    for fc in (1, 2):
        key = f"{prefix}qmoe_fc{fc}"
        first = (f"{prefix}0.{'fc1' if fc == 1 else 'fc2'}.weight" if not gated else
                 f"{prefix}0.{'gate_proj' if fc == 1 else 'down_proj'}.weight")
        n, k = shape_of(lw.weights, first)
        data, scales, zero = block_shapes(n * (2 if gated and fc == 1 else 1), k, q)

        def stacked(fc: int = fc) -> tuple:  # every expert's blocks, made as they are written
            found = [quantize(rows(f"{prefix}{e}.", fc), q) for e in range(experts)]
            return (np.stack([w.data.reshape(w.n, -1) for w in found]),
                    np.stack([w.scales.reshape(w.n, -1) for w in found]),
                    None if q.symmetric else np.stack([w.zero_points for w in found]))
        read = parts(stacked, 2 if zero is None else 3)
        # in the order they were stored before they were deferred: zero points, codes, scales
        held = (b.deferred(f"{key}.zero_points", (experts, *zero), read[2], typed=True)
                if zero is not None else "")
        blocks.append((b.deferred(f"{key}.int{q.bits}", (experts, data[0], data[1] * data[2]),
                                  read[0], typed=True),
                       b.deferred(f"{key}.scales", (experts, *scales), read[1]), held))
    args = [flat, logits, *blocks[0][:2], fc1("bias") if biased else "", *blocks[1][:2],
            fc2("bias") if biased else "", "", "", "", blocks[0][2], blocks[1][2]]
    while args[-1] == "":
        args.pop()
    return b.op("QMoE", *args, domain="com.microsoft", expert_weight_bits=q.bits,
                block_size=q.block, accuracy_level=q.accuracy, **attrs)


STRATEGY = Strategy("moe", None, lambda core, ctx: Reject(), lambda params: 1.0, lower_moe,
                    fuses=False)
