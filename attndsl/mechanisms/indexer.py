"""DeepSeek's lightning indexer (`indexer = lightning(heads, head_dim, top_k, rope = half,
eps = 1e-6)`; DeepSeek-V3.2's and GLM-5's sparse attention): on top of latent attention, each
query attends over the `top_k` visible keys of largest index score only.

The indexer has small query heads of its own from the query latent c_q (latent attention's
normed `q_a_layernorm` output), one key head from the tokens (LayerNorm with weight and bias),
RoPE on the first rope_dim features of both (`rope = half`: rotate-half, DeepSeek-V3.2's;
`interleaved`: GLM-5's), and a weight per head and query token:

    I[t, s] = H_i^-1/2 sum_h w_h(x_t) relu(D_i^-1/2 q_h(t) . k(s))

Query t keeps the min(top_k, visible) visible keys of largest I (ties: the earlier key
first); the attention core masks the rest (docs/LANGUAGE.md, Sparse attention). Its nodes
end in one `select_keys` op naming it, whose arithmetic over the array namespace is `select`
here (torch and ONNX from this one text); the core reads the selection as its score bias
`indexed`
(-inf on the visible keys it drops, 0 elsewhere). Decoding caches each token's index key beside the
latent (`present.{i}.index_key`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import ast
from ..ir.graph import Op
from ..shapes import T
from ..weight_table import Weight, linear_weights
from .base import Mechanism, Site, Where

__all__ = ["LOWEST", "MECHANISM", "Indexer", "select"]

# -inf as the backends write it: float32's lowest finite number (its softmax weight is 0 as
# -inf's; ONNX Runtime's CUDA kernels compare infinities unreliably)
LOWEST = -3.4028234663852886e38


@dataclass(frozen=True)
class Indexer:
    """The spec's value: the indexer's query heads and their width, the keys each query keeps,
    its RoPE layout and its key norm's epsilon."""

    heads: int
    head_dim: int
    top_k: int
    rope: str = "half"  # half | interleaved
    eps: float = 1e-6


_PARAMS = (("heads", True), ("head_dim", True), ("top_k", True), ("rope", False),
           ("eps", False))


def _none(e: Any) -> bool:
    return isinstance(e, ast.Name) and e.id in ("none", "false")


def _argument(call: Any, name: str) -> Any:
    """The value of the keyword argument `name` of an ast call, or None."""
    return next((a.value for a in getattr(call, "args", ()) if a.name == name), None)


class _Indexer(Mechanism):
    key = "indexer"
    hook = "keys"
    forms: ClassVar = {"lightning": _PARAMS}
    with_projection = True  # it reads latent attention's query latent
    described = "a top-k selection of keys (the lightning indexer)"
    cost = ("the lightning indexer scores every visible key for each query: O(L) per token "
            "(its heads x head_dim per key)")
    hf_types: ClassVar = {"index_n_heads": ("int", 1), "index_head_dim": ("int", 2),
                          "index_topk": ("int", 1)}

    def read(self, c: Any, e: Any) -> Indexer | None:
        name, args = c.call(e, self.forms, self.key)
        if name is None:
            return None
        head_dim = c.positive(args["head_dim"], "head_dim")
        if head_dim % 2:
            raise c.error(f"the indexer's head_dim must be even (RoPE rotates pairs), found "
                          f"{head_dim}", args["head_dim"].span,
                          hint="DeepSeek-V3.2: head_dim = 128")
        rope = c.word(args["rope"], ("half", "interleaved"), "rope") if "rope" in args \
            else "half"
        return Indexer(c.positive(args["heads"], "heads"), head_dim,
                       c.positive(args["top_k"], "top_k"), rope,
                       c.eps(args, 1e-6, "the indexer's key norm"))

    def conflicts(self, c: Any, value: Indexer, where: Where) -> bool:
        """Latent attention with a query latent (`q_rank`) and RoPE on at most head_dim of its
        features; no softcap (the selection's -inf would be capped)."""
        e, problem = where.entries, None
        latent = e["latent"].value if "latent" in e else None
        rope_dim = _argument(latent, "rope_dim")
        if latent is None or _none(latent):
            problem = ("the indexer scores keys from latent attention's query latent",
                       "set `latent = mla(kv_rank = ..., rope_dim = ..., q_rank = ...)`")
        elif _argument(latent, "q_rank") is None or _none(_argument(latent, "q_rank")):
            problem = ("the indexer's queries are projected from the query latent: latent "
                       "attention needs `q_rank`", "add `q_rank = ...` to mla(...)")
        elif isinstance(rope_dim, ast.Int) and rope_dim.value > value.head_dim:
            problem = (f"RoPE rotates the first rope_dim ({rope_dim.value}) features of the "
                       f"indexer's heads: head_dim ({value.head_dim}) is too small",
                       f"use head_dim >= {rope_dim.value}")
        elif "softcap" in e and not _none(e["softcap"].value):
            problem = ("a softcap would cap the -inf that drops a key the indexer did not "
                       "select", "remove `softcap`")
        if problem:
            c.error(problem[0], where.at(self.key), hint=problem[1])
        return problem is not None

    def weights(self, value: Indexer, spec: Any, prefix: str) -> list[Weight]:
        """transformers' DeepseekV32Indexer's: wq_b, wk, k_norm (weight and bias),
        weights_proj."""
        p = f"{prefix}indexer."
        return [*linear_weights(f"{p}wq_b", value.heads * value.head_dim,
                                spec.projection.q_rank, False),
                *linear_weights(f"{p}wk", value.head_dim, spec.d_model, False),
                Weight(f"{p}k_norm.weight", (value.head_dim,), "norm_weight"),
                Weight(f"{p}k_norm.bias", (value.head_dim,), "norm_bias"),
                *linear_weights(f"{p}weights_proj", value.heads, spec.d_model, False)]

    def selection(self, site: Site, value: Indexer, c_q: str, x: str, rope_dim: int,
                  cache: int | None, keep: tuple[int, int] | None = None) -> str:
        """Its nodes from the query latent `c_q` (B, L, q_rank) and the tokens `x`: the
        selection (B, L, n), -inf on the visible keys each query drops, 0 elsewhere, over
        the keys the attention's mask shows. Decoding (`cache`) appends the new index keys to
        past_key_values.{cache}.index_key and reads the mask over the cached keys (a bounded
        cache, `keep`, keeps the keys the latent cache keeps)."""
        from .. import masks

        b, s, p, prefix = site.b, site.spec, site.p, f"{site.prefix}indexer."
        H, D, n = value.heads, value.head_dim, site.n

        def linear(out: str, arg: str, proj: str, rows: int) -> str:
            return b.emit(Op.LINEAR, f"{p}index_{out}", (arg,), T("B", "L", rows),
                          weight=f"{prefix}{proj}.weight", bias=None)

        q = b.emit(Op.SPLIT_HEADS, f"{p}index_q_heads", (linear("q", c_q, "wq_b", H * D),),
                   T("B", H, "L", D), heads=H, dim=D)
        k = b.emit(Op.NORM, f"{p}index_k_normed", (linear("k", x, "wk", D),), T("B", "L", D),
                   kind="layernorm", eps=value.eps, unit_offset=False,
                   module=f"{prefix}k_norm", bias=True)
        k = b.emit(Op.SPLIT_HEADS, f"{p}index_k_heads", (k,), T("B", 1, "L", D), heads=1,
                   dim=D)
        if rope_dim:  # the first rope_dim features, in the indexer's own layout
            attrs = dict(s.position.attrs(rope_dim), interleaved=value.rope == "interleaved")
            q = b.emit(Op.ROPE, f"{p}index_q_rope", (q, *site.pos), T("B", H, "L", D), **attrs)
            k = b.emit(Op.ROPE, f"{p}index_k_rope", (k, *site.pos), T("B", 1, "L", D), **attrs)
        runtime, expr = tuple(s.runtime_inputs), s.mask
        if cache is not None:  # the cached index keys, then the new ones
            past, present = f"past_key_values.{cache}.index_key", f"present.{cache}.index_key"
            k = b.emit(Op.CACHE, f"{p}index_key_cache" if keep else present, (past, k),
                       T("B", 1, n, D))
            if keep:
                b.emit(Op.TAIL, present, (k,), T("B", 1, f"<= {sum(keep)}", D),
                       keep=keep[1], first=keep[0])
            runtime, expr = ("attention_mask", k), masks.real_keys(s.mask)
        w = b.emit(Op.SCALE, f"{p}index_weights", (linear("w", x, "weights_proj", H),),
                   T("B", "L", H), factor=H ** -0.5)
        seen = b.emit(Op.MASK, f"{p}index_visible", runtime,
                      T(*("B",) * bool(runtime), "L", n, dtype="bool"), expr=expr,
                      sparsity=s.sparsity, memory=None)
        return b.emit(Op.SELECT_KEYS, f"{p}selected", (q, k, w, seen),
                      T("B", "L", n, dtype="float"), mechanism=self.key, top_k=value.top_k,
                      scale=D ** -0.5)

    def select(self, xp: Any, *operands: Any, **attrs: Any) -> Any:
        """Its `select_keys` node's arithmetic: `select`."""
        return select(xp, *operands, **attrs)

    def states(self, value: Indexer, spec: Any, reused: bool = False) -> tuple:
        """Decoding caches each earlier token's rotated index key: past_key_values.{i}.index_key
        (B, 1, P, head_dim)."""
        return (("index_key", T("B", 1, "P", value.head_dim, dtype="float")),)


def select(xp: Any, q: Any, k: Any, w: Any, visible: Any, top_k: int, scale: float) -> Any:
    """A `select_keys` node's arithmetic: q (B, H, L, D), k (B, 1, n, D), w (B, L, H) (each
    head's weight already times H^-1/2), visible (B | -, L, n) bool -> float32 (B, L, n):
    LOWEST (-inf's stand-in) on the visible keys each query drops, 0 on those it keeps (the
    min(top_k, visible) visible keys of largest I, ties to the earlier key) and on the keys
    the mask hides."""
    f32 = "float32"
    zero, low = xp.asarray(0.0, f32), xp.asarray(LOWEST, f32)
    s = xp.matmul(xp.astype(q, f32) * scale, xp.swap_last(xp.astype(k, f32)))  # (B, H, L, n)
    weight = xp.swap_last(xp.astype(w, f32))[..., None]  # (B, H, L, 1)
    index = xp.sum(weight * xp.maximum(s, 0.0), axis=1)  # (B, L, n)
    seen = xp.astype(visible, f32) + index * zero  # 1 where visible, at (B, L, n)
    real = seen > zero
    # top_k columns of no key after the keys: every row has a top_k-th value, LOWEST where
    # fewer than top_k keys are visible
    padded = xp.pad(xp.where(real, index, zero), -1, top_k)
    shown = xp.pad(seen, -1, top_k) > zero
    kth = xp.topk(xp.where(shown, padded, low), top_k)[0][..., top_k - 1:top_k]  # (B, L, 1)
    above = real & (index > kth)
    ties = real & (index == kth)
    room = xp.asarray(float(top_k), f32) - xp.sum(xp.astype(above, f32), axis=-1,
                                                    keepdims=True)
    kept = above | (ties & (xp.cumsum(xp.astype(ties, f32), axis=-1) <= room))
    return xp.where(real & ~kept, low, zero)  # (a row the mask hides whole stays finite)


MECHANISM = _Indexer()
