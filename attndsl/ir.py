"""Resolved spec -> graph IR: typed nodes in execution order, with a stable text form (golden
tests, `attndsl explain`). The mask stays a symbolic expression on its node; nothing here is
ever materialised at a concrete length."""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from . import masks
from .spec import (
    Alibi,
    Attention,
    Layer,
    Learned,
    LinearKernel,
    LinformerKernel,
    LshKernel,
    Norm,
    RelativeBias,
    Rope,
    Sinusoidal,
    Transformer,
    input_names,
    is_lm,
    output_name,
)

__all__ = ["Graph", "Node", "Op", "Weight", "all_nodes", "build", "cache_names",
           "decode_inputs", "parameter_count", "weight_table"]


class Op(enum.Enum):
    INPUT = "input"
    ADD_POSITION = "add_position"  # sinusoidal table or learned embedding, added to x
    LINEAR = "linear"  # x @ W^T (+ b)
    SPLIT_HEADS = "split_heads"  # (B, n, h*d) -> (B, h, n, d)
    NORM = "norm"  # rmsnorm | layernorm over the last axis
    ROPE = "rope"
    REPEAT_KV = "repeat_kv"  # (B, Hkv, S, d) -> (B, H, S, d): head h reads kv h // groups
    SCORES = "scores"  # scale * q @ k^T
    SCORE_BIAS = "score_bias"  # + alibi | relative_bias
    SOFTCAP = "softcap"
    MASK = "mask"  # boolean visibility from index ranges (and runtime inputs)
    SOFTMAX = "masked_softmax"  # rows with no visible key -> zeros
    ATTEND = "attend"  # p @ v
    LINEAR_ATTENTION = "linear_attention"
    MERGE_HEADS = "merge_heads"  # (B, H, L, dv) -> (B, L, H*dv)
    ATTENTION = "attention"  # planned core: q, k, v (+ runtime inputs) -> (B, L, H*dv)
    ACTIVATION = "activation"
    MUL = "mul"
    ADD = "add"  # a + b (a residual: dropout on b in training)
    EMBED = "embed"  # token ids -> rows of the embedding table, times a scale
    CACHE = "cache"  # (past, new) -> present: the cache with the new keys or values appended
    TAIL = "tail"  # the last `keep` keys or values of a cache (a window's bounded present)
    SWITCH = "switch"  # by_length: the branch whose up_to first holds L (the last: longer L)
    SEQ_PROJECT = "seq_project"  # Linformer: E[:, :n] @ keys (masked keys zeroed) -> k rows
    LSH_ATTENTION = "lsh_attention"  # Reformer: shared-QK heads hashed, sorted, chunked


@dataclass(frozen=True)
class Node:
    op: Op
    out: str
    args: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...]
    shape: str

    def attr(self, key: str) -> Any:
        return dict(self.attrs)[key]

    def text(self) -> str:
        def fmt(v: Any) -> str:
            if isinstance(v, float):
                return repr(round(v, 9))
            if isinstance(v, masks.MaskNode):
                return masks.render(v)
            return str(v)

        args = ", ".join(f"%{a}" for a in self.args)
        hidden = ("branches", "outputs") if self.op is Op.SWITCH else ()
        attrs = " ".join(f"{k}={fmt(v)}" for k, v in self.attrs
                         if v is not None and k not in hidden)
        head = f"%{self.out} = {self.op.value}"
        body = " ".join(p for p in (args, attrs) if p)
        text = f"{head} {body}".rstrip() + f" : {self.shape}"
        if self.op is not Op.SWITCH:
            return text
        lines = [text]
        bounds = [f"L <= {n}" for n in self.attr("up_to")] + ["otherwise"]
        for bound, nodes, out in zip(bounds, self.attr("branches"), self.attr("outputs"),
                                     strict=True):
            lines.append(f"    {bound}: %{out}")
            lines += [f"      {n.text()}" for n in nodes]
        return "\n".join(lines)


@dataclass(frozen=True)
class Weight:
    """A tensor of the layer: its state-dict name, shape, and how a seeded module draws it."""

    name: str
    shape: tuple[int, ...]
    # linear | linear_bias (nn.Linear's), embedding (N(0, 1)), norm_weight (around 1),
    # norm_bias and norm_offset (a unit-offset norm's weight: around 0), sequence (Linformer's
    # E and F: uniform in +-1/sqrt(k))
    init: str
    fan_in: int = 0  # of a linear weight or bias


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
        lines += [f"  {n.text()}" for n in self.nodes]
        lines.append(f"  output {self.output_name} = %{self.output}")
        lines += [f"  output {p} = %{p}" for p in self.presents]
        return "\n".join(lines) + "\n"


@dataclass
class _Builder:
    nodes: list[Node] = field(default_factory=list)
    names: set[str] = field(default_factory=set)

    def emit(self, op: Op, out: str, args: tuple[str, ...], shape: str, **attrs: Any) -> str:
        if out in self.names:
            raise AssertionError(f"IR value %{out} defined twice")
        self.names.add(out)
        self.nodes.append(Node(op, out, args, tuple(attrs.items()), shape))
        return out


def build(spec: Layer, decode: bool = False, bounded: bool = False) -> Graph:
    """The IR of one layer. Parameter names are the state-dict names of docs/LANGUAGE.md
    (Weights). `decode`: the decoding form (docs/LANGUAGE.md, Decoding): the new tokens, an
    attention_mask over cache and new tokens, their position_ids and each layer's past keys
    and values in; the output and each layer's present keys and values out. `bounded`: a
    layer whose mask reaches back a bounded number of keys (a window, a chunk) keeps only
    those in its present."""
    b = _Builder()
    attn = spec.attention if isinstance(spec, Transformer) else spec
    for name in decode_inputs(spec) if decode else input_names(spec):
        b.emit(Op.INPUT, name, (), _type_of(name, attn, spec))
    x = "x"
    if is_lm(spec):
        x = b.emit(Op.EMBED, "x", ("input_ids",), f"[B, L, {spec.d_model}]",
                   weight="embed_tokens.weight", scale=spec.embedding_scale)
    pos = ("position_ids",) if decode else ()
    h = _absolute(b, attn, x, "", pos)
    if isinstance(spec, Transformer):
        for i in range(spec.layers):
            h = _block(b, spec, i, h, pos, bounded)
        if spec.placement != "post":
            h = _norm(b, "out", h, f"[B, L, {spec.d_model}]", spec.norm, "norm")
        if is_lm(spec):
            h = _lm_head(b, spec, h)
        names = ", ".join(a.name for a in spec.attentions)
        summary = (f"{spec.layers} x {spec.norm.kind}({spec.placement}) {spec.residual} blocks "
                   f"of attention {names} and {spec.ffn.kind}({spec.ffn.hidden})")
        kind = "transformer"
    else:
        h = _attention(b, spec, "", h, "memory" if spec.kind == "cross" else h,
                       cache=0 if decode else None, pos=pos, bounded=bounded)
        summary, kind = _summary(spec), "attention"
    return Graph(spec.name, kind, summary, tuple(b.nodes), h, weight_table(spec),
                 output_name(spec), cache_names(spec) if decode else ())


def all_nodes(nodes: Iterable[Node]) -> Iterator[Node]:
    """The nodes, each switch followed by the nodes of its branches."""
    for n in nodes:
        yield n
        if n.op is Op.SWITCH:
            for branch in n.attr("branches"):
                yield from all_nodes(branch)


def cache_names(spec: Layer) -> tuple[str, ...]:
    """present.{i}.key, present.{i}.value per self-attention layer i."""
    n = spec.layers if isinstance(spec, Transformer) else 1
    return tuple(f"present.{i}.{kv}" for i in range(n) for kv in ("key", "value"))


def decode_inputs(spec: Layer) -> tuple[str, ...]:
    """A decoding graph's inputs: input_ids (or x), attention_mask, position_ids, then
    past_key_values.{i}.key, .value per layer (onnxruntime-genai's names). Cross attention
    takes memory after x (the rows its cache appends: all of them once, then none) and
    key_lengths last when its mask reads them."""
    first = "input_ids" if is_lm(spec) else "x"
    past = tuple(n.replace("present", "past_key_values") for n in cache_names(spec))
    if isinstance(spec, Attention) and spec.kind == "cross":  # memory rows, and their padding
        return (first, "memory", "attention_mask", "position_ids", *past,
                *spec.runtime_inputs)
    return (first, "attention_mask", "position_ids", *past)


def parameter_count(spec: Attention | Transformer) -> int:
    """How many numbers the layer's weights hold, counted without expanding a stack: block i
    holds what block i % P holds (P the pattern's length), so the weight table of the first
    min(layers, P) blocks gives every block's count."""
    if not isinstance(spec, Transformer) or spec.layers <= len(spec.attentions):
        return sum(math.prod(w.shape) for w in weight_table(spec))
    period = len(spec.attentions)
    block = [0] * period
    top = 0
    for w in weight_table(replace(spec, layers=period)):
        index = w.name.split(".")[1] if w.name.startswith("layers.") else None
        if index is None:
            top += math.prod(w.shape)
        else:
            block[int(index)] += math.prod(w.shape)
    full, rest = divmod(spec.layers, period)
    return top + full * sum(block) + sum(block[:rest])


def weight_table(spec: Attention | Transformer) -> tuple[Weight, ...]:
    """The layer's tensors, in the order its torch module has always drawn them from a seed:
    per attention q, k, v, o projections (weight, then bias), q/k norms, the T5 table; a stack
    draws its learned positions and shared T5 table first, then per block the attention, its
    norms (`_block_norms`) and the MLP, then the final norm. Names are the nodes' weight
    names."""
    out: list[Weight] = []

    def linear(name: str, rows: int, cols: int, bias: bool) -> None:
        out.append(Weight(f"{name}.weight", (rows, cols), "linear", cols))
        if bias:
            out.append(Weight(f"{name}.bias", (rows,), "linear_bias", cols))

    def norm(name: str, width: int, kind: Norm, bias: bool) -> None:
        init = "norm_offset" if kind.unit_offset else "norm_weight"
        out.append(Weight(f"{name}.weight", (width,), init))
        if bias:
            out.append(Weight(f"{name}.bias", (width,), "norm_bias"))

    def attention(s: Attention, p: str, absolute: bool, table: bool = True) -> None:
        linear(f"{p}q_proj", s.heads * s.head_dim, s.d_model, "q" in s.bias)
        if not isinstance(s.kernel, LshKernel):  # LSH: the keys are the queries
            linear(f"{p}k_proj", s.kv_heads * s.head_dim, s.memory_dim, "k" in s.bias)
        linear(f"{p}v_proj", s.kv_heads * s.value_dim, s.memory_dim, "v" in s.bias)
        if s.out_proj:
            linear(f"{p}o_proj", s.d_model, s.heads * s.value_dim, "o" in s.bias)
        if s.qk_norm:
            norm(f"{p}q_norm", s.head_dim, s.qk_norm, False)
            norm(f"{p}k_norm", s.head_dim, s.qk_norm, False)
        if isinstance(s.position, RelativeBias) and table:
            out.append(Weight(f"{p}relative_attention_bias.weight",
                              (s.position.buckets, s.heads), "embedding"))
        if absolute and isinstance(s.position, Learned):
            out.append(Weight(f"{p}position_embeddings.weight", (s.position.max_len, s.d_model),
                              "embedding"))
        for c in s.cores:  # a by_length attention: its one Linformer variant's
            if isinstance(c.kernel, LinformerKernel) and (c.kernel.share != "layerwise" or
                                                          isinstance(spec, Attention)):
                for name in dict.fromkeys(linformer_weights(c, p)):  # E = F: once
                    out.append(Weight(name, _linformer_shape(c), "sequence", c.kernel.k))

    if isinstance(spec, Attention):
        attention(spec, "", True)
        return tuple(out)
    a, d, ffn = spec.attention, spec.d_model, spec.ffn
    if spec.vocab is not None:
        out.append(Weight("embed_tokens.weight", (spec.vocab, d), "embedding"))
    if isinstance(a.position, Learned):
        out.append(Weight("position_embeddings.weight", (a.position.max_len, d), "embedding"))
    if spec.shared_relative_bias:
        out.append(Weight("relative_attention_bias.weight", (a.position.buckets, a.heads),
                          "embedding"))
    shared = next((c for c in a.cores if isinstance(c.kernel, LinformerKernel)
                   and c.kernel.share == "layerwise"), None)
    if shared is not None:
        out.append(Weight(linformer_weights(shared, "")[0], _linformer_shape(shared),
                          "sequence", shared.kernel.k))
    layernorm = spec.norm.kind == "layernorm"
    for i in range(spec.layers):
        p = f"layers.{i}."
        attention(spec.layer_attention(i), f"{p}self_attn.", False,
                  table=not spec.shared_relative_bias)
        for which in _block_norms(spec):
            norm(f"{p}{which}", d, spec.norm, layernorm)
        if ffn.gated:
            linear(f"{p}mlp.gate_proj", ffn.hidden, d, ffn.bias)
            linear(f"{p}mlp.up_proj", ffn.hidden, d, ffn.bias)
            linear(f"{p}mlp.down_proj", d, ffn.hidden, ffn.bias)
        else:
            linear(f"{p}mlp.fc1", ffn.hidden, d, ffn.bias)
            linear(f"{p}mlp.fc2", d, ffn.hidden, ffn.bias)
    if spec.placement != "post":
        norm("norm", d, spec.norm, layernorm)
    if spec.vocab is not None and not spec.tied:
        linear("lm_head", spec.vocab, d, False)
    return tuple(out)


def linformer_weights(s: Attention, prefix: str) -> tuple[str, str]:
    """The E and F tensors of a Linformer attention (the same name twice when shared)."""
    share = s.kernel.share
    if share == "layerwise":
        return ("linformer_e.weight",) * 2
    e = f"{prefix}linformer_e.weight"
    return (e, e) if share == "kv" else (e, f"{prefix}linformer_f.weight")


def _linformer_shape(s: Attention) -> tuple[int, ...]:
    """[kv_heads, k, max_len] per kv head (share = none), else [k, max_len]."""
    kernel = s.kernel
    rows = (kernel.k, kernel.max_len)
    return (s.kv_heads, *rows) if kernel.share == "none" else rows


def _block_norms(t: Transformer) -> tuple[str, ...]:
    """A block's norms, in weight-table order."""
    if t.placement == "sandwich":
        return ("attn_norm", "post_attn_norm", "ffn_norm", "post_ffn_norm")
    return ("attn_norm",) if t.shared_norm else ("attn_norm", "ffn_norm")


def _summary(s: Attention) -> str:
    return (f"{s.kind}, d_model={s.d_model}, heads={s.heads}, kv_heads={s.kv_heads}, "
            f"head_dim={s.head_dim}, value_dim={s.value_dim}")


def _type_of(name: str, s: Attention, spec: Layer) -> str:
    if name.startswith("past_key_values."):
        i = int(name.split(".")[1])
        a = spec.layer_attention(i) if isinstance(spec, Transformer) else spec
        width = a.head_dim if name.endswith(".key") else a.value_dim
        rows = "M" if a.kind == "cross" else "P"  # memory rows, or earlier tokens
        return f"float[B, {a.kv_heads}, {rows}, {width}]"
    return {"x": f"float[B, L, {s.d_model}]", "memory": f"float[B, S, {s.memory_dim}]",
            "key_lengths": "int64[B]", "segment_ids": "int64[B, L]",
            "memory_segment_ids": "int64[B, S]",
            "input_ids": "int64[B, L]", "attention_mask": "int64[B, P + L]",
            "position_ids": "int64[B, L]"}[name]


def _absolute(b: _Builder, s: Attention, x: str, prefix: str, pos: tuple[str, ...]) -> str:
    """x plus the sinusoidal or learned table at each token's position (0 .. L-1, or
    position_ids when decoding)."""
    if isinstance(s.position, Sinusoidal):
        return b.emit(Op.ADD_POSITION, "x_pos", (x, *pos), f"[B, L, {s.d_model}]",
                      kind="sinusoidal")
    if isinstance(s.position, Learned):
        return b.emit(Op.ADD_POSITION, "x_pos", (x, *pos), f"[B, L, {s.d_model}]",
                      kind="learned", weight=f"{prefix}position_embeddings.weight",
                      max_len=s.position.max_len)
    return x


def _lm_head(b: _Builder, t: Transformer, h: str) -> str:
    """logits = h @ W^T (W: lm_head, or embed_tokens when tied), then the final softcap."""
    shape = f"[B, L, {t.vocab}]"
    weight = "embed_tokens.weight" if t.tied else "lm_head.weight"
    if t.logit_softcap is None:
        return b.emit(Op.LINEAR, "logits", (h,), shape, weight=weight, bias=None)
    raw = b.emit(Op.LINEAR, "lm_logits", (h,), shape, weight=weight, bias=None)
    return b.emit(Op.SOFTCAP, "logits", (raw,), shape, cap=t.logit_softcap)


def _attention(b: _Builder, s: Attention, prefix: str, x: str, kv: str,
               table: str | None = None, cache: int | None = None,
               pos: tuple[str, ...] = (), bounded: bool = False) -> str:
    """One attention; `table` names a relative-bias table shared with other layers; `cache`:
    the layer's index when decoding (keys and values appended to past_key_values.{i}), with
    `pos` the position_ids input its RoPE reads."""
    p = prefix
    n = "S" if s.kind == "cross" else "L"

    def linear(out: str, arg: str, proj: str, width: int, length: str) -> str:
        return b.emit(Op.LINEAR, f"{p}{out}", (arg,), f"[B, {length}, {width}]",
                      weight=f"{prefix}{proj}.weight",
                      bias=f"{prefix}{proj}.bias" if proj[0] in s.bias else None)

    q = linear("q", x, "q_proj", s.heads * s.head_dim, "L")
    v = linear("v", kv, "v_proj", s.kv_heads * s.value_dim, n)
    q = b.emit(Op.SPLIT_HEADS, f"{p}q_heads", (q,), f"[B, {s.heads}, L, {s.head_dim}]",
               heads=s.heads, dim=s.head_dim)
    v = b.emit(Op.SPLIT_HEADS, f"{p}v_heads", (v,), f"[B, {s.kv_heads}, {n}, {s.value_dim}]",
               heads=s.kv_heads, dim=s.value_dim)
    if isinstance(s.kernel, LshKernel):  # shared query/key heads: no k, no norms, no RoPE
        o = _lsh(b, s, p, q, v)
        return linear("out", o, "o_proj", s.d_model, "L") if s.out_proj else o
    k = linear("k", kv, "k_proj", s.kv_heads * s.head_dim, n)
    k = b.emit(Op.SPLIT_HEADS, f"{p}k_heads", (k,), f"[B, {s.kv_heads}, {n}, {s.head_dim}]",
               heads=s.kv_heads, dim=s.head_dim)
    if s.qk_norm:
        q = _norm(b, f"{p}q_normed", q, f"[B, {s.heads}, L, {s.head_dim}]", s.qk_norm,
                  f"{prefix}q_norm", bias=False)
        k = _norm(b, f"{p}k_normed", k, f"[B, {s.kv_heads}, {n}, {s.head_dim}]", s.qk_norm,
                  f"{prefix}k_norm", bias=False)
    if isinstance(s.position, Rope):
        r = s.position
        q = b.emit(Op.ROPE, f"{p}q_rope", (q, *pos), f"[B, {s.heads}, L, {s.head_dim}]",
                   theta=r.theta, dim=r.dim, interleaved=r.interleaved, scaling=r.scaling)
        k = b.emit(Op.ROPE, f"{p}k_rope", (k, *pos), f"[B, {s.kv_heads}, {n}, {s.head_dim}]",
                   theta=r.theta, dim=r.dim, interleaved=r.interleaved, scaling=r.scaling)
    if cache is not None:  # keys are cached rotated: a step rotates only its own
        n = "M + S" if s.kind == "cross" else "P + L"  # M: memory rows cached so far
        keep = masks.reach_back(s.mask) if bounded else None
        cached = []
        for name, t, width in (("key", k, s.head_dim), ("value", v, s.value_dim)):
            shape = f"[B, {s.kv_heads}, {n}, {width}]"
            present = f"present.{cache}.{name}"
            past = f"past_key_values.{cache}.{name}"
            if keep is None:
                cached.append(b.emit(Op.CACHE, present, (past, t), shape))
                continue
            full = b.emit(Op.CACHE, f"{p}{name}_cache", (past, t), shape)
            b.emit(Op.TAIL, present, (full,), f"[B, {s.kv_heads}, <= {keep}, {width}]",
                   keep=keep)
            cached.append(full)
        k, v = cached
    if s.variants:  # the core by query length: one branch per variant, projections shared
        branches, outs = [], []
        for i, variant in enumerate(s.variants):
            sub = _Builder(names=b.names)
            outs.append(_core(sub, variant.attention, f"{p}variant{i}.", prefix, q, k, v, n,
                              table, cache))
            branches.append(tuple(sub.nodes))
        o = b.emit(Op.SWITCH, f"{p}merged", (q, k, v), f"[B, L, {s.heads * s.value_dim}]",
                   up_to=tuple(v.up_to for v in s.variants[:-1]), branches=tuple(branches),
                   outputs=tuple(outs))
    else:
        o = _core(b, s, p, prefix, q, k, v, n, table, cache)
    if s.out_proj:
        o = linear("out", o, "o_proj", s.d_model, "L")
    return o


def _lsh(b: _Builder, s: Attention, p: str, q: str, v: str) -> str:
    """Reformer's LSH attention on the shared query/key heads: `keys` is the mask's padding
    part (the keys it shows), `causal` whether it is causal too."""
    kernel = s.kernel
    pads = [m for m in masks.primitives(s.mask) if isinstance(m, masks.Padding)]
    keys = functools.reduce(masks.And, pads) if pads else masks.Full()
    causal = any(isinstance(m, masks.Causal) for m in masks.primitives(s.mask))
    o = b.emit(Op.LSH_ATTENTION, f"{p}attn", (q, v, *s.runtime_inputs),
               f"[B, {s.heads}, L, {s.value_dim}]", buckets=kernel.buckets,
               rounds=kernel.rounds, chunk=kernel.chunk, seed=kernel.seed, scale=s.scale,
               causal=causal, keys=keys)
    return b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), f"[B, L, {s.heads * s.value_dim}]")


def _core(b: _Builder, s: Attention, p: str, prefix: str, q: str, k: str, v: str, n: str,
          table: str | None, cache: int | None) -> str:
    """The attention core from q, k, v heads to merged heads (B, L, heads * value_dim); `p`
    prefixes its value names, `prefix` its weights'."""
    linformer = s.kernel if isinstance(s.kernel, LinformerKernel) else None
    if linformer is not None:  # k rows, each a mix of the (kept) keys; values likewise
        e, f = linformer_weights(s, prefix)

        def rows(name: str, t: str, width: int, weight: str) -> str:
            return b.emit(Op.SEQ_PROJECT, f"{p}{name}_rows", (t, *s.runtime_inputs),
                          f"[B, {s.kv_heads}, {linformer.k}, {width}]", weight=weight,
                          max_len=linformer.max_len, expr=s.mask)

        k, v = rows("k", k, s.head_dim, e), rows("v", v, s.value_dim, f)
        n = str(linformer.k)
    keys = k  # the keys the scores read, before any repeat over query groups
    if s.groups > 1:
        k = b.emit(Op.REPEAT_KV, f"{p}k_rep", (k,), f"[B, {s.heads}, {n}, {s.head_dim}]",
                   groups=s.groups)
        v = b.emit(Op.REPEAT_KV, f"{p}v_rep", (v,), f"[B, {s.heads}, {n}, {s.value_dim}]",
                   groups=s.groups)
    heads_out = f"[B, {s.heads}, L, {s.value_dim}]"
    if isinstance(s.kernel, LinearKernel):
        o = b.emit(Op.LINEAR_ATTENTION, f"{p}attn", (q, k, v), heads_out,
                   feature=s.kernel.feature, causal=s.mask == masks.Causal())
    else:
        sc = b.emit(Op.SCORES, f"{p}scores", (q, k), f"[B, {s.heads}, L, {n}]", scale=s.scale)
        if isinstance(s.position, Alibi):
            a = s.position  # slopes x factor: `scaled` multiplies them by the score scale
            sc = b.emit(Op.SCORE_BIAS, f"{p}biased", (sc,), f"[B, {s.heads}, L, {n}]",
                        kind="alibi", slopes=a.slopes, max_bias=a.max_bias,
                        factor=s.scale if a.scaled else 1.0, rounding=a.rounding)
        elif isinstance(s.position, RelativeBias):
            r = s.position
            sc = b.emit(Op.SCORE_BIAS, f"{p}biased", (sc,), f"[B, {s.heads}, L, {n}]",
                        kind="relative_bias", buckets=r.buckets, max_distance=r.max_distance,
                        bidirectional=r.bidirectional,
                        weight=table or f"{prefix}relative_attention_bias.weight")
        if s.softcap is not None:
            sc = b.emit(Op.SOFTCAP, f"{p}capped", (sc,), f"[B, {s.heads}, L, {n}]",
                        cap=s.softcap)
        seen: tuple[str, ...] = ()  # Linformer: none, the mask dropped keys before the rows
        if linformer is None:
            # decoding: the mask reads the keys' count too (a bounded cache holds the last
            # ones); cross attention's keys are the cached memory rows, read by index alone
            runtime, expr, memory = tuple(s.runtime_inputs), s.mask, None
            if cache is not None and s.kind == "cross":
                runtime, memory = (keys, *runtime), True
            elif cache is not None:
                runtime, expr = ("attention_mask", keys), masks.real_keys(s.mask)
            batched = runtime if memory is None else s.runtime_inputs
            seen = (b.emit(Op.MASK, f"{p}mask", runtime,
                           f"bool[{'B, ' if batched else ''}L, {n}]", expr=expr,
                           sparsity=s.sparsity, memory=memory),)
        pr = b.emit(Op.SOFTMAX, f"{p}probs", (sc, *seen), f"[B, {s.heads}, L, {n}]",
                    dropout=s.dropout)
        o = b.emit(Op.ATTEND, f"{p}attn", (pr, v), heads_out)
    return b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), f"[B, L, {s.heads * s.value_dim}]")


def _block(b: _Builder, t: Transformer, i: int, h: str, pos: tuple[str, ...],
           bounded: bool = False) -> str:
    p = f"layers.{i}."
    d = f"[B, L, {t.d_model}]"
    drop = t.dropout or None  # residual dropout on the sublayer's output, training only

    def norm(out: str, arg: str, which: str) -> str:
        return _norm(b, f"{p}{out}", arg, d, t.norm, f"{p}{which}")

    def attn(arg: str) -> str:
        table = "relative_attention_bias.weight" if t.shared_relative_bias else None
        return _attention(b, t.layer_attention(i), f"{p}self_attn.", arg, arg, table,
                          cache=i if pos else None, pos=pos, bounded=bounded)

    def add(out: str, x: str, branch: str) -> str:
        return b.emit(Op.ADD, f"{p}{out}", (x, branch), d, dropout=drop)

    if t.residual == "parallel":  # x + attn(norm1(x)) + ffn(norm2(x)), norm2 = norm1 if shared
        n1 = norm("attn_in", h, "attn_norm")
        a = attn(n1)
        f = _mlp(b, t, p, n1 if t.shared_norm else norm("ffn_in", h, "ffn_norm"))
        return add("resid2", add("resid1", h, a), f)
    if t.placement == "sandwich":  # h = x + norm2(attn(norm1(x))); y = h + norm4(ffn(norm3(h)))
        a = norm("attn_out", attn(norm("attn_in", h, "attn_norm")), "post_attn_norm")
        h = add("resid1", h, a)
        f = norm("ffn_out", _mlp(b, t, p, norm("ffn_in", h, "ffn_norm")), "post_ffn_norm")
        return add("resid2", h, f)
    if t.placement == "pre":
        h = add("resid1", h, attn(norm("attn_in", h, "attn_norm")))
        return add("resid2", h, _mlp(b, t, p, norm("ffn_in", h, "ffn_norm")))
    h = norm("h", add("resid1", h, attn(h)), "attn_norm")
    return norm("y", add("resid2", h, _mlp(b, t, p, h)), "ffn_norm")


def _mlp(b: _Builder, t: Transformer, p: str, x: str) -> str:
    hidden = f"[B, L, {t.ffn.hidden}]"
    d = f"[B, L, {t.d_model}]"
    ffn = t.ffn

    def linear(out: str, arg: str, proj: str, shape: str) -> str:
        return b.emit(Op.LINEAR, f"{p}{out}", (arg,), shape, weight=f"{p}mlp.{proj}.weight",
                      bias=f"{p}mlp.{proj}.bias" if ffn.bias else None)

    if ffn.gated:  # down(act(gate(x)) * up(x))
        g = linear("gate", x, "gate_proj", hidden)
        u = linear("up", x, "up_proj", hidden)
        g = b.emit(Op.ACTIVATION, f"{p}gate_act", (g,), hidden, kind=ffn.activation)
        m = b.emit(Op.MUL, f"{p}gated", (g, u), hidden)
        return linear("mlp_out", m, "down_proj", d)
    h = linear("fc1", x, "fc1", hidden)
    h = b.emit(Op.ACTIVATION, f"{p}act", (h,), hidden, kind=ffn.activation)
    return linear("mlp_out", h, "fc2", d)


def _norm(b: _Builder, out: str, arg: str, shape: str, norm: Norm, module: str,
          bias: bool | None = None) -> str:
    """A norm node; LayerNorm has a bias unless `bias` says otherwise (q/k norms)."""
    return b.emit(Op.NORM, out, (arg,), shape, kind=norm.kind, eps=norm.eps,
                  unit_offset=norm.unit_offset, module=module,
                  bias=norm.kind == "layernorm" if bias is None else bias)
