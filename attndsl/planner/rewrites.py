"""The plan's rewrites beside the attention strategies: what the lowering joins, each named
with its reason, so that `explain` shows them and the lowering only carries them out.

- `packed_projections`: linear projections of one input with the same bias setting (an
  attention's q, k and v; an MLP's gate and up) as one MatMul of their joined weights, split
  after (with q, k, v first, in the order GroupQueryAttention takes them packed);
- `skip_norm` (planned targets, float32): a residual add and the norm of its sum as one ONNX
  Runtime kernel (SkipSimplifiedLayerNormalization for RMSNorm, SkipLayerNormalization for
  LayerNorm);
- `contrib_norms` (planned targets, float32): the other norms as ONNX Runtime's
  RMSNormalization or LayerNormalization kernels;
- `quantized` (`--quantize`): which weights are stored in blocks, and as what kernel reads
  them (`unquantized`: those that stay float, and why);
- `packed_qkv` and `rotary` (decoding in place, `gqa_cache`): GroupQueryAttention reading q,
  k and v as one GEMM's output, and rotating q and k itself (do_rotary) from cos/sin caches
  folded to constants for the longest call where it is known;
- `mrotary` (planned targets with the kernel for the dtype): multimodal RoPE as ONNX
  Runtime's MRotaryEmbedding."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..ir import Graph, Node, Op, all_nodes
from ..mechanisms import FFNS
from ..targets import get, has_kernel

__all__ = ["Rewrites", "Rotary", "explained", "quantized", "rewrites"]

_QKV = {"q_proj": 0, "k_proj": 1, "v_proj": 2}  # GroupQueryAttention's packed order
_SKIP_KERNELS = {"rmsnorm": "SkipSimplifiedLayerNormalization",
                 "layernorm": "SkipLayerNormalization"}
# how each quantized weight is read, by form (`Rewrites.quantized`), and why
_FORMS = {
    "MatMulNBits": "as com.microsoft.MatMulNBits blocks: the weights linear nodes read "
                   "(projections, MLPs, the LM head)",
    "GatherBlockQuantized": "as com.microsoft.GatherBlockQuantized blocks: the token "
                            "embedding, its width a multiple of the block",
    **{form: why for ffn in FFNS.values() for form, why in ffn.quantized_forms.items()},
}


@dataclass(frozen=True)
class Rotary:
    """An in-place decoding attention's GroupQueryAttention reading q, k and v as they come:
    `packed`, the q, k and v projections' outputs (one GEMM, `packed_projections`); `rope`,
    the RoPE node of q that the kernel applies itself (do_rotary), or None (q and k not
    rotated); `rows`, the positions of its cos/sin caches when folded to constants, or None
    (each call's positions), with `why`."""

    packed: tuple[str, ...]
    rope: Node | None = None
    rows: int | None = None
    why: str = ""


@dataclass(frozen=True)
class Rewrites:
    """What the lowering joins: `siblings`, each packed projection's output -> its group (in
    packed order); `skip_norms`, each residual add -> the norm of its sum; `contrib_norms`,
    whether norms run as ONNX Runtime's kernels; `quantization` (quantize.Quantization or
    None) and `quantized`, each form (`_FORMS`) -> the weights stored so;
    `quantized_kernels`, the feed-forward nodes (by prefix) that run as their form's
    quantized kernel; `unquantized`, weight -> why it stays float; `rotary`,
    each in-place attention's output -> what its kernel takes as it comes."""

    siblings: dict[str, list[Node]] = field(default_factory=dict)
    skip_norms: dict[str, Node] = field(default_factory=dict)
    contrib_norms: bool = False
    contrib: tuple[str, ...] = ()  # the norms (not joined with an add) that run so
    quantization: Any = None
    quantized: dict[str, tuple[str, ...]] = field(default_factory=dict)
    quantized_kernels: frozenset[str] = frozenset()
    unquantized: dict[str, str] = field(default_factory=dict)
    rotary: dict[str, Rotary] = field(default_factory=dict)
    mrotary: tuple[str, ...] = ()  # multimodal RoPE nodes run as MRotaryEmbedding

    @property
    def blocks(self) -> frozenset[str]:
        """The weights stored in blocks (or as the float values of their blocks)."""
        return frozenset(n for names in self.quantized.values() for n in names)

    def lines(self) -> list[str]:
        """One line per rewrite, for `explain`."""
        out, seen = [], set()
        for group in self.siblings.values():
            names = tuple(n.out for n in group)
            if names not in seen:
                seen.add(names)
                out.append(f"packed_projections: {', '.join(names)} read {group[0].args[0]}: "
                           "one MatMul of their joined weights, split after")
        for add, norm in self.skip_norms.items():
            kernel = _SKIP_KERNELS.get(norm.attr("kind"), "a skip norm kernel")
            out.append(f"skip_norm: {add} and {norm.out}: one {kernel} (the residual add "
                       "and the norm of its sum)")
        if self.contrib:
            out.append(f"contrib_norms: {', '.join(self.contrib)}: ONNX Runtime's "
                       "RMSNormalization or LayerNormalization kernels (float32)")
        for form, names in self.quantized.items():
            out.append(f"quantized: {_names(names)} {_FORMS[form]} "
                       f"({self.quantization.text()})")
        for why in dict.fromkeys(self.unquantized.values()):
            names = [n for n, w in self.unquantized.items() if w == why]
            out.append(f"unquantized: {_names(names)}: {why}")
        for attention, r in self.rotary.items():
            out.append(f"packed_qkv: {attention} reads {', '.join(r.packed)} packed: "
                       "GroupQueryAttention takes the one GEMM's output, split into heads "
                       "in the kernel")
            if r.rope is not None:
                pairs = ", interleaved" if r.rope.attr("interleaved") else ""
                out.append(f"rotary: {attention}: RoPE (theta {r.rope.attr('theta')}, dim "
                           f"{r.rope.attr('dim')}{pairs}) in GroupQueryAttention (do_rotary"
                           f"{', rotary_interleaved' if pairs else ''}) rather than in "
                           f"standard ops before it; {r.why}")
        if self.mrotary:
            out.append(f"mrotary: {_names(self.mrotary)}: multimodal RoPE as ONNX Runtime's "
                       "MRotaryEmbedding (its three position streams read in the kernel) "
                       "rather than in standard ops")
        return out


def rewrites(graph: Graph, target: str, dtype: str = "float32", quantization: Any = None,
             max_length: int | None = None) -> Rewrites:
    """The rewrites the lowering of the planned `graph` carries out on `target`:
    `quantization` (quantize.Quantization), the weights' blocks; `max_length`, the longest
    call a decoding model holds when known (its rotary tables may be folded for it)."""
    fused = get(target).planned and dtype == "float32"
    skips = _skip_norms(graph) if fused else {}
    joined = {n.out for n in skips.values()}
    contrib = tuple(n.out for n in all_nodes(graph.nodes) if fused and n.op is Op.NORM
                    and n.attr("kind") != "l2norm" and dict(n.attrs).get("affine", True)
                    and n.out not in joined)
    siblings = _packed(graph)
    forms, kernels, kept = quantized(graph, quantization) if quantization else ({}, set(), {})
    kernel = get(target).planned and has_kernel("MRotaryEmbedding", dtype, get(target).provider)
    mrotary = tuple(n.out for n in all_nodes(graph.nodes) if kernel and n.op is Op.ROPE
                    and dict(n.attrs).get("mrope") is not None)
    return Rewrites(siblings, skips, fused, contrib, quantization, forms, frozenset(kernels),
                    kept, _rotary(graph, siblings, max_length), mrotary)


def explained(graph: Graph, target: str, dtype: str = "float32", quantization: Any = None,
              max_length: int | None = None) -> list[str]:
    """`explain`'s lines for the planned `graph`: none where attndsl does not lower it (the
    portable target's one-pass graphs without a switch or a kernel's own control
    flow, which torch.onnx.export writes)."""
    from .cores import attndsl_lowered

    lowered = graph.decoding or get(target).planned or any(
        attndsl_lowered(n) for n in graph.nodes)
    return rewrites(graph, target, dtype, quantization, max_length).lines() if lowered else []


def quantized(graph: Graph, q: Any) -> tuple[dict[str, tuple[str, ...]], set[str],
                                             dict[str, str]]:
    """Which weights a quantized export (quantize.Quantization `q`) stores in blocks, by
    form: those read by linear nodes alone (q, k, v, o projections, MLPs, the LM head) as
    MatMulNBits; the token embedding (its width a multiple of the block) as
    GatherBlockQuantized, a tied LM head reading it too; a feed-forward form's own weights
    as its module says (`quantized`: in its quantized kernel's blocks, or why not), else
    stored as the float values their blocks give. Not a weight another op reads
    (a head_linear node's, when a decoding form absorbs it). Gives (form -> weights, the
    feed-forward nodes' prefixes run as their quantized kernel, weight -> why it stays
    float)."""
    shapes = {w.name: w.shape for w in graph.weights}
    forms: dict[str, set[str]] = {}  # each weight it could store in blocks -> its forms
    why_not: dict[str, str] = {}  # weight -> why it stays float
    for node in all_nodes(graph.nodes):
        for ffn in FFNS.values():  # a feed-forward form's own weights, as its module says
            own, why = ffn.quantized(node, shapes, q)
            why_not |= why
            for w, form in own.items():
                forms.setdefault(w, set()).add(form)
        for key, value in node.attrs:
            if not isinstance(value, str) or value not in shapes:
                continue
            if key == "weight" and node.op is Op.LINEAR:
                forms.setdefault(value, set()).add("MatMulNBits")
            elif key == "weight" and node.op is Op.EMBED and shapes[value][1] % q.block == 0:
                forms.setdefault(value, set()).add("GatherBlockQuantized")
            elif key == "weight" and node.op is Op.EMBED:
                forms.setdefault(value, set())
                why_not.setdefault(value, f"the embedding's width {shapes[value][1]} is not "
                                          f"a multiple of the block ({q.block})")
            else:  # a bias, a norm's gain, or a weight no block kernel reads
                if key == "weight":
                    forms.setdefault(value, set())
                why_not.setdefault(value, f"a {node.op.value} node reads it, and blocks are "
                                          "read by linear, embed and feed-forward form nodes "
                                          "alone")
    by_form = {form: tuple(sorted(w for w, f in forms.items() if form in f and w not in why_not))
               for form in _FORMS}
    kernels = {ffn.kernel_form for ffn in FFNS.values() if ffn.kernel_form}
    prefixes = {dict(n.attrs).get("prefix") for n in all_nodes(graph.nodes)
                if n.op is Op.FFN} - {None}
    quantized_kernels = {p for p in prefixes if any(w.startswith(p) for form in kernels
                                       for w in by_form[form])}
    kept = {w: why for w, why in sorted(why_not.items()) if w in forms}
    return {f: names for f, names in by_form.items() if names}, quantized_kernels, kept


def _names(names) -> str:
    """Weight names for a line, those differing only by a layer's or an expert's number
    written once with `*` for it."""
    pattern = [re.sub(r"(^|\.)\d+(?=\.)", r"\1*", n) for n in names]
    return ", ".join(dict.fromkeys(p if pattern.count(p) > 1 else n
                                   for n, p in zip(names, pattern, strict=True)))


def _rotary(graph: Graph, siblings: dict[str, list[Node]],
            max_length: int | None) -> dict[str, Rotary]:
    """Each in-place decoding attention whose GroupQueryAttention takes q, k and v packed
    (and rotates them) as they come (`gqa_cache.kernel_inputs`), with its cos/sin caches'
    rows (`gqa_cache.folded_rows`)."""
    from ..strategies.gqa_cache import folded_rows, kernel_inputs

    nodes = {n.out: n for n in all_nodes(graph.nodes)}
    out = {}
    for n in graph.nodes:
        if n.op is Op.ATTENTION and n.attr("strategy") == "gqa_cache":
            found = kernel_inputs(n, nodes, siblings)
            if found is not None:
                packed, rope = found
                rows, why = folded_rows(rope, max_length) if rope is not None else (None, "")
                out[n.out] = Rotary(packed, rope, rows, why)
    return out
def _packed(graph: Graph) -> dict[str, list[Node]]:
    """LINEAR nodes reading the same value with the same bias setting, by output name; an
    attention's q, k and v first, in that order."""
    by_input: dict[tuple[str, bool], list[Node]] = {}
    for n in graph.nodes:
        if n.op is Op.LINEAR:
            by_input.setdefault((n.args[0], n.attr("bias") is not None), []).append(n)

    def rank(n: Node) -> int:
        return _QKV.get(n.attr("weight").rsplit(".", 2)[-2], len(_QKV))

    return {n.out: sorted(group, key=rank) for group in by_input.values() if len(group) > 1
            for n in group}


def _skip_norms(graph: Graph) -> dict[str, Node]:
    """Residual adds whose sum is normed (pre-norm blocks, the final norm, post-norm blocks)
    -> that norm. Not for q/k norms (no add before them)."""
    adds = {n.out: n for n in graph.nodes if n.op is Op.ADD}
    out: dict[str, Node] = {}
    for n in graph.nodes:  # (a norm without a weight has none for the kernel's gamma)
        if n.op is Op.NORM and n.args[0] in adds and n.args[0] not in out \
                and dict(n.attrs).get("affine", True):
            out[n.args[0]] = n
    return out
