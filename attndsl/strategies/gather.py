"""Strategy `gather`: decoding an attention whose keys an indexer selects (`indexer =
lightning(...)`, the core's score bias `indexed`) over the selected keys alone. Each new query
takes the top_k keys it kept (their indices by ONNX's TopK over the selection where the mask
shows a key), gathers those rows of the cache (GatherND), and attends over them: the
attention costs O(top_k) per query whatever the cache's length; the indexer that chose them
stays O(P) (`explain`)."""

from __future__ import annotations

from ..backends import formulas
from ..backends.lower.attend import qk_float32
from ..backends.lower.builder import Lowering, Sym, arg
from ..ir import Node
from ..mechanisms.indexer import LOWEST
from ..planner.cores import Core
from .base import Context, Match, Reject, Strategy
from .dense import decoding_visibility

__all__ = ["STRATEGY"]


def match(a: Core, ctx: Context) -> Match | Reject:
    """Decoding (its mask reads attention_mask), the keys an indexer selected, one key head
    (latent attention's absorbed cache: one latent row per token), no score modifier or
    softmax logit of its own."""
    if a.bias_kind != "indexed" or "attention_mask" not in a.runtime or a.kind != "self":
        return Reject()
    if a.sparsity.mode == "dense":
        return Reject("sparsity = dense asks for the dense masked form")
    if a.kv_heads != 1:
        return Reject("no gather of the selected keys: it reads one key head (latent "
                      "attention's absorbed cache)")
    if a.untaken(frozenset()):
        return Reject(f"no gather of the selected keys: it cannot apply "
                      f"{a.untaken(frozenset())[0].described}")
    top_k = dict(a.bias)["top_k"]
    return Match({"top_k": top_k}, (
        f"decoding over the keys the indexer chose: each new query gathers its {top_k} cache "
        f"rows and attends over them alone, O(top_k) per token whatever the cache's length",))


def lower(lw: Lowering, node: Node) -> str:
    """q (B, H, L, w), the cache k (B, 1, n, w), its values v (B, 1, n, r), the selection
    (B, L, n) -> (B, L, H * r)."""
    b = lw.b
    top_k, scale = node.attr("top_k"), node.attr("scale")
    q, k = qk_float32(lw, node)
    v = b.to_float32(arg(lw, node, 2))
    n = lw.dim(arg(lw, node, 1), 2)  # the cache's and the call's keys
    visible = b.op("Squeeze", decoding_visibility(lw, node.attr("expr"), n).name,
                   b.i64(1, 2))  # (B, L, n)
    # the selection is 0 on the keys kept, LOWEST on those dropped; LOWEST too where hidden
    chosen = b.op("Where", visible, b.to_float32(arg(lw, node, 3)), b.const(LOWEST, "float32"))
    count = b.op("Min", b.i64(top_k), n.name)
    values, index = b.op("TopK", chosen, count, outputs=2, axis=-1, largest=1, sorted=1)
    kept = b.op("Unsqueeze", b.op("Equal", values, b.const(0.0, "float32")),
                b.i64(2))  # (B, L, 1, kk): a row's kept keys (fewer than kk where it sees few)
    rows = b.op("Reshape", index, b.i64(0, -1, 1))  # (B, L * kk, 1)
    shape = b.op("Concat", b.op("Shape", index), b.i64(-1), axis=0)  # (B, L, kk, -1)

    def gathered(x: str) -> str:  # (B, 1, n, d) -> its chosen rows (B, L, kk, d)
        rows_of = b.op("GatherND", b.op("Squeeze", x, b.i64(1)), rows, batch_dims=1)
        return b.op("Reshape", rows_of, shape)

    keys, vals = gathered(k), gathered(v)
    queries = b.op("Transpose", q, perm=[0, 2, 1, 3])  # (B, L, H, w)
    s = b.op("Mul", b.op("MatMul", queries, b.op("Transpose", keys, perm=[0, 1, 3, 2])),
             b.const(scale, "float32"))  # (B, L, H, kk)
    probs, any_key = formulas.masked_softmax(lw.xp, Sym(b, s, "float32", 4),
                                             Sym(b, kept, "bool", 4))
    o = b.op("Mul", b.op("MatMul", probs.name, vals), any_key.name)  # (B, L, H, r)
    return b.to_model(b.op("Reshape", o, b.i64(0, 0, -1)))


STRATEGY = Strategy("gather", 5, match, lambda params: 0, lower, takes=frozenset())
