"""Resolved spec -> graph IR: typed nodes in execution order, with a stable text form (golden
tests, `attndsl explain`). The mask stays a symbolic expression on its node; nothing here is
ever materialised at a concrete length."""

from __future__ import annotations

import math

from ..shapes import T, TensorType
from ..spec import (
    CROSS_INPUTS,
    Attention,
    Layer,
    Transformer,
    input_names,
    is_lm,
    memory_reader,
    output_name,
    reads_streams,
)
from ..weight_table import Weight, parameter_count, weight_table
from .attention import absolute, attention, patches
from .attention import norm as emit_norm
from .ffn import feed_forward, shortcut
from .graph import Graph, GraphBuilder, Node, Op, all_nodes
from .per_layer import per_layer_inputs, per_layer_output
from .side import side_block
from .verify import verify

__all__ = ["Graph", "Node", "Op", "Weight", "all_nodes", "build", "cache_names",
           "decode_inputs", "own_states", "parameter_count", "weight_table"]


def build(spec: Layer, decode: bool = False, bounded: bool = False,
          own_cache: bool = True) -> Graph:
    """The IR of one layer. Parameter names are the state-dict names of docs/LANGUAGE.md
    (Weights). `decode`: the decoding form (docs/LANGUAGE.md, Decoding): the new tokens, an
    attention_mask over cache and new tokens, their position_ids and each layer's past keys
    and values in; the output and each layer's present keys and values out. `bounded`: a
    layer whose mask reaches back a bounded number of keys (a window, a chunk) keeps only
    those in its present. `own_cache`: a projection form decodes against a cache of its own
    entries (`Projection.cache`: its compressed rows; False: of every head's expanded
    keys and values, as a baseline to measure)."""
    b = GraphBuilder()
    attn = spec.attention if isinstance(spec, Transformer) else spec
    for name in decode_inputs(spec, own_cache) if decode else input_names(spec):
        b.emit(Op.INPUT, name, (), _type_of(name, attn, spec, own_cache))
    x = "x"
    if is_lm(spec):
        x = b.emit(Op.EMBED, "x", ("input_ids",), T("B", "L", spec.d_model),
                   weight="embed_tokens.weight", scale=spec.embedding_scale)
        embedded = x  # (before any embedding norm: what per-layer inputs project)
    elif getattr(spec, "patches", None) is not None:  # a vision stack: the image's patches
        x = patches(b, spec.patches, spec.d_model)
        if reads_streams(spec):  # axial RoPE's rows and columns, from the image's grid
            b.emit(Op.GRID, "position_ids", ("pixel_values",), T(2, 1, "L", dtype="int64"),
                   size=spec.patches.size, before=spec.patches.prefix)
    # the tokens' positions: 0 .. L-1 in one pass, unless multimodal RoPE reads its streams
    pos = ("position_ids",) if decode or reads_streams(spec) else ()
    h = absolute(b, attn, x, "", pos)
    if isinstance(spec, Transformer) and spec.embedding_norm is not None:  # BLOOM's, BART's
        h = emit_norm(b, "x_normed", h, T("B", "L", spec.d_model), spec.embedding_norm,
                      "embedding_norm")
    if isinstance(spec, Transformer):
        shared: dict | None = {} if spec.kv_shared_layers else None  # keys a later layer reads
        ple = per_layer_inputs(b, spec, embedded) if spec.per_layer_inputs else None
        carry: dict[int, str] = {}  # a pair's shortcut output, from block 2p to 2p + 1
        first = h  # the stack's input as block 0 receives it (a side block reads it)
        for i in range(spec.layers):
            h = _block(b, spec, i, h, pos, decode, bounded, own_cache, shared, carry, first)
            if ple is not None:  # Gemma 4: the block's own inputs, gated by its output
                h = per_layer_output(b, spec, i, h, ple)
            if spec.layer_scalar:  # Gemma 4: the block's output times its learned scalar
                h = b.emit(Op.SCALE, f"layers.{i}.scaled", (h,), T("B", "L", spec.d_model),
                           factor=1.0, weight=f"layers.{i}.layer_scalar")
        if spec.placement != "post" and spec.final_norm:
            h = emit_norm(b, "out", h, T("B", "L", spec.d_model), spec.norm, "norm")
        if is_lm(spec) and spec.head:  # (an encoder's: its hidden states)
            h = _lm_head(b, spec, h)
        names = ", ".join(a.name for a in spec.attentions)
        depth = ", depth-scaled" if spec.residual_scale == "depth" else ""
        placed = ", ".join(spec.placements) if spec.placements else spec.placement
        summary = (f"{spec.layers} x {spec.norm.kind}({placed}) {spec.residual}{depth} "
                   f"blocks of attention {names} and {_ffn_summary(spec)}")
        if spec.parallel is not None:  # (Falcon-H1's)
            summary += f", each beside attention {spec.parallel.name}"
        if spec.attention_only:  # (Nemotron-H's mixer layers alone)
            summary += f", attention only in blocks {_listed(spec.attention_only)}"
        if spec.shortcut is not None:  # (LongCat-Flash's, in pairs)
            summary += f", a shortcut {_ffn_summary(spec, shortcut=True)} per pair"
        if spec.side is not None:  # (Zamba2's shared transformer block)
            summary += (f", a side block of attention {spec.side.attention.name} beside "
                        f"blocks {_listed(spec.side.layers)}")
        if spec.cross is not None:  # a decoder's blocks
            summary += f", each then cross attention {spec.cross.name} over the memory"
        kind = "transformer"
    else:
        h = attention(b, spec, "", h, "memory" if spec.kind == "cross" else h,
                       cache=0 if decode else None, pos=pos, bounded=bounded,
                       compact=own_cache)
        summary, kind = _summary(spec), "attention"
    own = tuple(w for w in weight_table(spec) if not w.name.startswith("encoder."))  # (a
    # model's encoder's tensors are its encoder's graph's: `seq2seq.encoder_weights`)
    return verify(Graph(spec.name, kind, summary, tuple(b.nodes), h, own,
                        output_name(spec), cache_names(spec, own_cache) if decode else ()),
                  "build")


def cache_names(spec: Layer, own_cache: bool = True) -> tuple[str, ...]:
    """present.{i}.key, present.{i}.value per layer i; a layer whose projection form has its
    own cache (`Projection.cache`, with `own_cache`) its entries, a layer whose kernel
    carries states those (`Kernel.states`); none for a layer that reuses an earlier layer's
    keys and values (`Transformer.kv_owner`); then each layer's own states (`_own_states`:
    its mechanisms', the stack's feed-forward convolution's)."""
    attns = [spec.layer_attention(i) for i in range(spec.layers)] \
        if isinstance(spec, Transformer) else [spec]
    reused = {i for i in range(len(attns)) if isinstance(spec, Transformer)
              and spec.kv_owner(i) is not None}  # (an earlier layer's cache serves them)
    names = []
    for i, a in enumerate(attns):
        if i not in reused:
            names += [f"present.{i}.{kv}" for kv in (_states(a) or (own_cache and _cached(a))
                                                     or ("key", "value"))]
        names += [f"present.{i}.{name}" for name in own_states(spec, i, i in reused)]
    return tuple(names)


def own_states(spec: Layer, i: int, reused: bool = False) -> dict[str, TensorType]:
    """Layer i's decoding states beside its keys and values (or its kernel's), by name: its
    attention's mechanisms' (`Mechanism.states`), the `parallel` attention's kernel's, the
    stack's feed-forward convolution's last ffn_conv - 1 inputs (`ffn_conv`), then a side
    block's attention's keys and values (`side`), then a decoder's cross attention's keys
    and values over the memory rows (`cross`)."""
    from ..mechanisms import states_of  # (the mechanisms build on the IR's ops)

    a = spec.layer_attention(i) if isinstance(spec, Transformer) else spec
    out = dict(states_of(a, reused))
    if isinstance(spec, Transformer) and spec.parallel is not None:  # its kernel's states
        out |= {name: _kernel(spec.parallel).state_type(spec.parallel, name)
                for name in _states(spec.parallel)}
    if isinstance(spec, Transformer) and spec.ffn_conv is not None:
        out["ffn_conv"] = T("B", spec.ffn_conv - 1, spec.d_model, dtype="float")
    if isinstance(spec, Transformer) and spec.side is not None and i in spec.side.layers:
        s = spec.side.attention  # its keys and values beside the block's own states
        out |= {"side_key": T("B", s.kv_heads, "P", s.head_dim, dtype="float"),
                "side_value": T("B", s.kv_heads, "P", s.value_dim, dtype="float")}
    if isinstance(spec, Transformer) and spec.cross is not None:  # the memory rows' (M)
        c = spec.cross
        out |= {"cross_key": T("B", c.kv_heads, "M", c.head_dim, dtype="float"),
                "cross_value": T("B", c.kv_heads, "M", c.value_dim, dtype="float")}
    return out


def _states(a: Attention) -> tuple[str, ...]:
    """The states a decoding call carries for attention `a` in place of its key and value
    caches (its kernel's), or ()."""
    from ..mechanisms import kernel_fact  # (the kernel modules build on the IR's ops)

    return kernel_fact(a.kernel, "states")


def _cached(a: Attention) -> tuple[str, ...]:
    """The entries a decoding call caches for attention `a` by its projection form's layout
    (`Projection.cache`), or () (its keys and values)."""
    from ..mechanisms import projection_of  # (the projection forms build on the IR's ops)

    return getattr(projection_of(a.projection), "cache", ())


def _kernel(a: Attention):
    """The kernel module of `a`'s kernel, or None (`mechanisms.kernel_of`)."""
    from ..mechanisms import kernel_of  # (the kernel modules build on the IR's ops)

    return kernel_of(a.kernel)


def decode_inputs(spec: Layer, own_cache: bool = True) -> tuple[str, ...]:
    """A decoding graph's inputs: input_ids (or x), attention_mask, position_ids, then
    past_key_values.{i}.key, .value per layer (onnxruntime-genai's names). Cross attention
    takes memory after x (the rows its cache appends: all of them once, then none) and
    key_lengths last when its mask reads them; a decoder stack takes memory likewise, and
    memory_lengths last when its cross attention's mask reads them."""
    first = "input_ids" if is_lm(spec) else "x"
    past = tuple(n.replace("present", "past_key_values")
                 for n in cache_names(spec, own_cache))
    if isinstance(spec, Attention) and spec.kind == "cross":  # memory rows, and their padding
        return (first, "memory", "attention_mask", "position_ids", *past,
                *spec.runtime_inputs)
    if memory_reader(spec) is not None:  # a decoder stack: memory_lengths its cross padding
        return (first, "memory", "attention_mask", "position_ids", *past,
                *(n for n in spec.runtime_inputs if n == "memory_lengths"))
    return (first, "attention_mask", "position_ids", *past)


def _listed(blocks: tuple[int, ...]) -> str:
    return ", ".join(map(str, blocks))


def _ffn_summary(t: Transformer, shortcut: bool = False) -> str:
    ffn = t.shortcut if shortcut else t.ffn
    if ffn is None:
        return "no feed-forward"
    mlp = f"{ffn.kind}({ffn.hidden})"
    form = t.shortcut_form if shortcut else t.feed_forward
    if form is None:
        return mlp
    from ..mechanisms import ffn_of

    return ffn_of(form).summary(form, mlp)


def _summary(s: Attention) -> str:
    return (f"{s.kind}, d_model={s.d_model}, heads={s.heads}, kv_heads={s.kv_heads}, "
            f"head_dim={s.head_dim}, value_dim={s.value_dim}")


def _type_of(name: str, s: Attention, spec: Layer, own_cache: bool) -> TensorType:
    if name.startswith("past_key_values."):
        i = int(name.split(".")[1])
        a = spec.layer_attention(i) if isinstance(spec, Transformer) else spec
        width = a.head_dim if name.endswith(".key") else a.value_dim
        rows = "M" if a.kind == "cross" else "P"  # memory rows, or earlier tokens
        own = own_states(spec, i).get(name.split(".")[2])
        if own is not None:  # a mechanism's or the stack's own state: its (fixed) size
            return own
        if _states(a):  # a kernel's states: their own (fixed) sizes
            return _kernel(a).state_type(a, name.split(".")[2])
        if own_cache and _cached(a):  # the projection form's own cache entries
            from ..mechanisms import projection_of

            return projection_of(a.projection).cache_type(a, a.projection,
                                                          name.split(".")[2], rows)
        return T("B", a.kv_heads, rows, width, dtype="float")
    return {"x": T("B", "L", s.d_model, dtype="float"),
            "memory": T("B", "S", getattr(memory_reader(spec), "memory_dim", 0), dtype="float"),
            "key_lengths": T("B", dtype="int64"), "memory_lengths": T("B", dtype="int64"),
            "segment_ids": T("B", "L", dtype="int64"),
            "memory_segment_ids": T("B", "S", dtype="int64"),
            "input_ids": T("B", "L", dtype="int64"),
            "pixel_values": T("B", getattr(getattr(spec, "patches", None), "channels", 0), "H",
                              "W", dtype="float"),
            "attention_mask": T("B", "P + L", dtype="int64"),
            "position_ids": T(reads_streams(spec), "B", "L", dtype="int64") if reads_streams(spec)
            else T("B", "L", dtype="int64")}[name]


def _lm_head(b: GraphBuilder, t: Transformer, h: str) -> str:
    """logits = h @ W^T (+ lm_head.bias) with W lm_head, or embed_tokens when tied, h through
    the head transform first where there is one; times
    logit_scale; then each of the head's mechanisms (`Mechanism.head`), the last value named
    `logits`."""
    from ..mechanisms import MECHANISMS

    ht = t.head_transform  # BERT's and ModernBERT's prediction head: dense, act, norm
    if ht is not None:
        d = T("B", "L", t.d_model)
        h = b.emit(Op.LINEAR, "head_dense", (h,), d, weight="head_transform.dense.weight",
                   bias="head_transform.dense.bias" if ht.bias else None)
        h = b.emit(Op.ACTIVATION, "head_act", (h,), d, kind=ht.activation)
        h = emit_norm(b, "head_normed", h, d, ht.norm, "head_transform.norm")
    shape = T("B", "L", t.vocab)
    weight = "embed_tokens.weight" if t.tied else "lm_head.weight"
    scaled, mechanisms = t.logit_scale != 1.0, t.logit_mechanisms
    out = b.emit(Op.LINEAR, "lm_logits" if scaled or mechanisms else "logits", (h,), shape,
                 weight=weight, bias="lm_head.bias" if t.head_bias else None)
    if scaled:
        out = b.emit(Op.SCALE, "scaled_logits" if mechanisms else "logits", (out,), shape,
                     factor=t.logit_scale)
    for i, (key, value) in enumerate(mechanisms, 1):
        name = "logits" if i == len(mechanisms) else f"{key}_logits"
        out = MECHANISMS[key].head(b, value, out, name, shape)
    return out


def _block(b: GraphBuilder, t: Transformer, i: int, h: str, pos: tuple[str, ...],
           decode: bool, bounded: bool = False, compact: bool = True,
           shared: dict | None = None, carry: dict | None = None, first: str = "") -> str:
    p = f"layers.{i}."
    d = T("B", "L", t.d_model)
    drop = t.dropout or None  # residual dropout on the sublayer's output, training only

    def norm(out: str, arg: str, which: str) -> str:
        return emit_norm(b, f"{p}{out}", arg, d, t.norm, f"{p}{which}")

    def attn(arg: str) -> str:
        table = "relative_attention_bias.weight" if t.shared_relative_bias else None
        o = attention(b, t.layer_attention(i), f"{p}self_attn.", arg, arg, table,
                      cache=i if decode else None, pos=pos, bounded=bounded, layer=i,
                      compact=compact, shared=shared, reuse=t.kv_owner(i) is not None)
        if t.parallel is None:
            return o
        beside = attention(b, t.parallel, f"{p}parallel_attn.", arg, arg,
                           cache=i if decode else None, pos=pos, layer=i)
        return b.emit(Op.ADD, f"{p}parallel_sum", (o, beside), d)

    def cross(arg: str) -> str:  # a decoder's: over the memory rows, their own padding;
        # decoding, its keys and values cached beside the block's own (cross_key, cross_value)
        return attention(b, t.cross, f"{p}cross_attn.", arg, "memory", layer=i, pos=pos,
                         cache=i if decode else None, entries=("cross_key", "cross_value"),
                         inputs=CROSS_INPUTS)

    def add(out: str, x: str, branch: str) -> str:
        if t.residual_scale == "depth":  # Beam: the stack's n-th sublayer, n = 2i + 2, 2i + 3
            n = 2 * i + (2 if out == "resid1" else 3)
            branch = b.emit(Op.SCALE, f"{p}{out}_branch", (branch,), d, factor=1 / math.sqrt(n))
            x = b.emit(Op.SCALE, f"{p}{out}_kept", (x,), d, factor=math.sqrt((n - 1) / n))
        elif t.residual_scale != 1.0:  # Granite: the sublayer's output times the multiplier
            branch = b.emit(Op.SCALE, f"{p}{out}_branch", (branch,), d, factor=t.residual_scale)
        if t.layer_scale:  # DINOv2: times the sublayer's own vector
            which = "attn_scale" if out == "resid1" else "ffn_scale"
            branch = b.emit(Op.SCALE, f"{p}{which}d", (branch,), d, factor=1.0,
                            weight=f"{p}{which}")
        return b.emit(Op.ADD, f"{p}{out}", (x, branch), d, dropout=drop)

    def ffn(arg: str) -> str:  # the block's feed-forward, then Inkling's convolution of it
        f = feed_forward(b, t, i, arg)
        if t.ffn_conv is None:
            return f
        from ..mechanisms.residual_conv import conv_nodes  # (the mechanisms build on the IR)

        return conv_nodes(b, f"{p}mlp_sconv", f, t.d_model, t.ffn_conv,
                          f"{p}mlp_sconv.conv1d.weight", t.layer_attention(i),
                          f"{i}.ffn_conv" if decode else None)

    if t.residual == "parallel":  # x + attn(norm1(x)) + ffn(norm2(x)), norm2 = norm1 if shared
        n1 = norm("attn_in", h, "attn_norm")
        a = attn(n1)
        f = ffn(n1 if t.shared_norm else norm("ffn_in", h, "ffn_norm"))
        return add("resid2", add("resid1", h, a), f)
    if t.residual == "normed":  # MiniMax: h = a norm1(x) + attn(norm1(x)), y likewise
        n1 = norm("attn_in", h, "attn_norm")
        kept = b.emit(Op.SCALE, f"{p}attn_in_kept", (n1,), d, factor=t.residual_alpha)
        h = add("resid1", kept, attn(n1))
        n2 = norm("ffn_in", h, "ffn_norm")
        kept = b.emit(Op.SCALE, f"{p}ffn_in_kept", (n2,), d, factor=t.residual_alpha)
        return add("resid2", kept, ffn(n2))
    placement = t.layer_placement(i)  # (the stack's, or its block's: `placements`)
    if placement == "sandwich":  # h = x + norm2(attn(norm1(x))); y = h + norm4(ffn(norm3(h)))
        a = norm("attn_out", attn(norm("attn_in", h, "attn_norm")), "post_attn_norm")
        h = add("resid1", h, a)
        f = norm("ffn_out", ffn(norm("ffn_in", h, "ffn_norm")), "post_ffn_norm")
        return add("resid2", h, f)
    if placement == "output":  # OLMo 2: h = x + norm1(attn(x)); y = h + norm2(ffn(h))
        h = add("resid1", h, norm("attn_out", attn(h), "post_attn_norm"))
        return add("resid2", h, norm("ffn_out", ffn(h), "post_ffn_norm"))
    if placement == "pre":  # (ModernBERT: layer 0's attention input unnormed)
        x = h
        if t.side is not None and i in t.side.layers:  # Zamba2: h = x + attn(norm(x + s))
            s = side_block(b, t, i, h, first, i if decode else None, pos, bounded)
            x = b.emit(Op.ADD, f"{p}side_sum", (h, s), d)
        h = add("resid1", h, attn(norm("attn_in", x, "attn_norm") if i or t.first_attn_norm
                                  else x))
        if t.cross is not None:  # h' = h + cross(norm(h), memory)
            h = add("resid_cross", h, cross(norm("cross_in", h, "cross_attn_norm")))
        if not t.has_ffn(i):  # (`ffn = none`, `attention_only`: the attention alone)
            return h
        u = norm("ffn_in", h, "ffn_norm")
        if t.shortcut is not None and i % 2 == 0:  # LongCat-Flash: read by block i + 1's end
            carry[i + 1] = shortcut(b, t, i, u)
        y = add("resid2", h, ffn(u))
        return add("resid3", y, carry.pop(i)) if t.shortcut is not None and i % 2 else y
    h = norm("h", add("resid1", h, attn(h)), "attn_norm")
    if t.cross is not None:  # h' = norm(h + cross(h, memory))
        h = norm("h_cross", add("resid_cross", h, cross(h)), "cross_attn_norm")
    if not t.has_ffn(i):
        return h
    return norm("y", add("resid2", h, ffn(h)), "ffn_norm")
