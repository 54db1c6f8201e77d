"""The IR of one attention: projections, heads, positions, caches and the core: one unplanned
`attention` node (scale, bias, score modifiers, mask, softmax as its attributes;
`ir.decompose` gives its primitive ops), or a kernel module's own node."""

from __future__ import annotations

from .. import masks, mechanisms
from ..patches import Patches
from ..position_spec import Relative2D
from ..shapes import T, TensorType
from ..spec import (
    Alibi,
    Attention,
    Learned,
    Norm,
    RelativeBias,
    RelativeLogits,
    Rope,
    ScoreBias,
    Sinusoidal,
)
from .graph import GraphBuilder, Op
from .ops import BIAS_OPERANDS, core_attributes

__all__ = ["absolute", "attention", "norm", "patches"]


def absolute(b: GraphBuilder, s: Attention, x: str, prefix: str, pos: tuple[str, ...]) -> str:
    """x plus the sinusoidal or learned table at each token's position (0 .. L-1, or
    position_ids when decoding)."""
    if isinstance(s.position, Sinusoidal):  # its variant's attributes where not the default
        variant = {k: v for k, v in (("layout", s.position.layout),
                                     ("offset", s.position.offset),
                                     ("frequencies", s.position.frequencies))
                   if v != getattr(Sinusoidal(), k)}
        return b.emit(Op.ADD_POSITION, "x_pos", (x, *pos), T("B", "L", s.d_model),
                      kind="sinusoidal", **variant)
    if isinstance(s.position, Learned):
        return b.emit(Op.ADD_POSITION, "x_pos", (x, *pos), T("B", "L", s.d_model),
                      kind="learned", weight=f"{prefix}position_embeddings.weight",
                      max_len=s.position.max_len)
    return x


def patches(b: GraphBuilder, p: Patches, d_model: int) -> str:
    """A vision stack's token rows from pixel_values: its patches projected, the learned 2-D
    positions (interpolated to the image's grid) added, the class and distillation tokens and
    the registers before them."""
    attrs = {"bias": "patch_embed.bias" if p.bias else None,
             "class_token": "class_token" if p.class_token else None,
             "distillation_token": "distillation_token" if p.distillation_token else None,
             "registers": "register_tokens" if p.registers else None,
             "positions": "position_embeddings.weight" if p.grid else None, "grid": p.grid,
             "antialias": p.antialias}
    return b.emit(Op.PATCHES, "x", ("pixel_values",), T("B", "L", d_model), size=p.size,
                  weight="patch_embed.weight", **{k: v for k, v in attrs.items() if v})


def attention(b: GraphBuilder, s: Attention, prefix: str, x: str, kv: str,
               table: str | None = None, cache: int | None = None,
               pos: tuple[str, ...] = (), bounded: bool = False, layer: int = 0,
               compact: bool = True, shared: dict | None = None,
               reuse: bool = False, entries: tuple[str, str] = ("key", "value"),
               inputs: dict[str, str] | None = None) -> str:
    """One attention; `table` names a relative-bias table shared with other layers; `cache`:
    the layer's index when decoding (keys and values appended to past_key_values.{i}), with
    `pos` the position_ids input its RoPE reads; `layer`: its index in the stack
    (a mechanism's constants that depend on the depth); `compact`: a projection form caches
    its own entries (`Projection.cache`; else every head's expanded keys and values).
    `shared` (a stack with kv_shared_layers): its keys and values as the core reads them
    (rotated, normed, cached) are kept there under its name; with `reuse`, it reads those of
    the last earlier layer of its attention instead of projecting (and caching) its own.
    `entries`: the names of its key and value caches (a side block's are `side_key`,
    `side_value`, beside its layer's own). `inputs`: the graph inputs its mask reads by their
    mask names where they differ (a decoder stack's cross attention: `memory_lengths` for
    `key_lengths`, `spec.CROSS_INPUTS`)."""
    p = prefix
    n = "S" if s.kind == "cross" else "L"
    if reuse:  # an earlier layer's keys and values (cached, when decoding)
        k, v, n = shared[s.name]

    def linear(out: str, arg: str, proj: str, width: int, length: str) -> str:
        return b.emit(Op.LINEAR, f"{p}{out}", (arg,), T("B", length, width),
                      weight=f"{prefix}{proj}.weight",
                      bias=f"{prefix}{proj}.bias" if proj[0] in s.bias else None)

    own = mechanisms.kernel_of(s.kernel)
    if own is not None and own.own_layer:  # its own projections and nodes, o_proj aside
        o = own.layer(mechanisms.Site(b, s, p, prefix, pos, n, layer), s.kernel, x, cache)
        return linear("out", o, "o_proj", s.width, "L") if s.out_proj else o
    form = mechanisms.projection_of(s.projection)
    # the score bias's operand: Inkling's relative states (relative_logits), or the keys a
    # `keys` hook mechanism selected (`indexed`)
    rel = None
    absorbed = None  # decoding a projection form: the core over its own cache
    if form is not None and form.cache and cache is not None and compact:
        q, k, v, absorbed, *selected = form.decoding(
            mechanisms.Site(b, s, p, prefix, pos, n, layer), s.projection, x, cache,
            _kept(s) if bounded else None)
        rel, n = (selected or [None])[0], "P + L"
    elif form is not None:  # its own q, k and v heads (and a `keys` hook's selection)
        q, k, v, *selected = form.heads(mechanisms.Site(b, s, p, prefix, pos, n, layer),
                                        s.projection, x)
        rel = (selected or [None])[0]
    elif reuse:  # its queries alone, over the earlier layer's keys and values
        site = mechanisms.Site(b, s, p, prefix, pos, n, layer, cache)
        q = mechanisms.projected(site, linear("q", x, "q_proj",
                                              s.heads * mechanisms.query_rows(s), "L"))
        q = mechanisms.expand(site, "projected", q, "q")
        q = b.emit(Op.SPLIT_HEADS, f"{p}q_heads", (q,), T("B", s.heads, "L", s.head_dim),
                   heads=s.heads, dim=s.head_dim)
        q = mechanisms.expand(site, "heads", q, "q")
        if isinstance(s.position, Rope):
            q = b.emit(Op.ROPE, f"{p}q_rope", (q, *pos), T("B", s.heads, "L", s.head_dim),
                       **s.position.attrs())
        q = mechanisms.expand(site, "rotated", q, "q")
        q = mechanisms.expand(site, "query", q, "q")
        rel = _relative_states(b, site, x, linear)
    else:
        site = mechanisms.Site(b, s, p, prefix, pos, n, layer, cache)
        q = mechanisms.projected(site, linear("q", x, "q_proj",
                                              s.heads * mechanisms.query_rows(s), "L"))
        q = mechanisms.expand(site, "projected", q, "q")
        keys = s.mechanism("values") == "keys"  # Gemma 4's: the values are the keys' rows
        k_rows = linear("k", kv, "k_proj", s.kv_heads * s.head_dim, n) if keys else None
        v = mechanisms.expand(site, "projected", k_rows or linear(
            "v", kv, "v_proj", s.kv_heads * s.value_dim, n), "v")
        q = b.emit(Op.SPLIT_HEADS, f"{p}q_heads", (q,), T("B", s.heads, "L", s.head_dim),
                   heads=s.heads, dim=s.head_dim)
        v = b.emit(Op.SPLIT_HEADS, f"{p}v_heads", (v,), T("B", s.kv_heads, n, s.value_dim),
                   heads=s.kv_heads, dim=s.value_dim)
        v = mechanisms.expand(site, "heads", v, "v")
        kernel = mechanisms.kernel_of(s.kernel)
        if kernel is not None and kernel.shares_keys:  # keys are the queries: no k, no RoPE
            o = b.emit(Op.MERGE_HEADS, f"{p}merged", (kernel.expand(site, s.kernel, q, None, v),),
                       T("B", "L", s.heads * s.value_dim))
            o = mechanisms.expand(site, "merged", o, "merged")
            return linear("out", o, "o_proj", s.width, "L") if s.out_proj else o
        k = mechanisms.expand(site, "projected", k_rows or linear(
            "k", kv, "k_proj", s.kv_heads * s.head_dim, n), "k")
        k = b.emit(Op.SPLIT_HEADS, f"{p}k_heads", (k,), T("B", s.kv_heads, n, s.head_dim),
                   heads=s.kv_heads, dim=s.head_dim)
        q = mechanisms.expand(site, "heads", q, "q")
        k = mechanisms.expand(site, "heads", k, "k")
        if isinstance(s.position, Rope):
            q = b.emit(Op.ROPE, f"{p}q_rope", (q, *pos), T("B", s.heads, "L", s.head_dim),
                       **s.position.attrs())
            k = b.emit(Op.ROPE, f"{p}k_rope", (k, *pos), T("B", s.kv_heads, n, s.head_dim),
                       **s.position.attrs())
        q = mechanisms.expand(site, "rotated", q, "q")
        k = mechanisms.expand(site, "rotated", k, "k")
        q = mechanisms.expand(site, "query", q, "q")
        rel = _relative_states(b, site, x, linear)
    if cache is not None and absorbed is None and not reuse:  # keys cached rotated
        n = "M + S" if s.kind == "cross" else "P + L"  # M: memory rows cached so far
        keep = _kept(s) if bounded else None
        cached = []
        for name, t, width in ((entries[0], k, s.head_dim), (entries[1], v, s.value_dim)):
            shape = T("B", s.kv_heads, n, width)
            present = f"present.{cache}.{name}"
            past = f"past_key_values.{cache}.{name}"
            if keep is None:
                cached.append(b.emit(Op.CACHE, present, (past, t), shape))
                continue
            full = b.emit(Op.CACHE, f"{p}{name}_cache", (past, t), shape)
            b.emit(Op.TAIL, present, (full,), T("B", s.kv_heads, f"<= {sum(keep)}", width),
                   keep=keep[1], first=keep[0])
            cached.append(full)
        k, v = cached
    if shared is not None and not reuse:  # what a later layer of this attention may reuse
        shared[s.name] = (k, v, n)
    if isinstance(s.position, Relative2D):  # BEiT's bias reads the rows and the columns
        rel = pos[0]
    site = mechanisms.Site(b, s, p, prefix, pos, n, layer, cache)
    core, v = mechanisms.core(site, absorbed or s, v)
    selector = mechanisms.selector_of(core.variants)
    if selector is not None:  # the core chosen among variants: a switch, projections shared

        def branch(variant: Attention, vp: str) -> tuple[tuple, str]:
            sub = GraphBuilder(names=b.names)
            out = _core(sub, variant, vp, prefix, q, k, v, n, table, cache, rel, inputs)
            return tuple(sub.nodes), out

        o = selector.switch(b, core, p, (q, k, v), T("B", "L", s.heads * core.value_dim),
                            branch)
    else:
        o = _core(b, core, p, prefix, q, k, v, n, table, cache, rel, inputs)
    if absorbed is not None:
        o = form.merged(site, s.projection, o)
    o = mechanisms.expand(site, "merged", o, "merged")
    if form is not None and form.output:  # its own output projection (a mixture of heads)
        return form.out(site, s.projection, o, x)
    if s.out_proj:
        o = linear("out", o, "o_proj", s.width, "L")
    return mechanisms.expand(site, "output", o, "out")


def _relative_states(b: GraphBuilder, site: mechanisms.Site, x: str, linear) -> str | None:
    """Inkling's relative states of each query token, r = x W_r^T split into heads (B, heads,
    L, d_rel), after the `query` hook's mechanisms (which scale them as they scale
    the queries); None without `relative_logits` positions."""
    s = site.spec
    if not isinstance(s.position, RelativeLogits):
        return None
    d = s.position.d_rel
    r = linear("rel", x, "r_proj", s.heads * d, "L")
    r = b.emit(Op.SPLIT_HEADS, f"{site.p}rel_heads", (r,), T("B", s.heads, "L", d),
               heads=s.heads, dim=d)
    return mechanisms.expand(site, "query", r, "r")


def _core(b: GraphBuilder, s: Attention, p: str, prefix: str, q: str, k: str, v: str, n: str,
          table: str | None, cache: int | None, rel: str | None = None,
          inputs: dict[str, str] | None = None) -> str:
    """The attention core from q, k, v heads to merged heads (B, L, heads * value_dim): one
    unplanned `attention` node (`ops.core_attributes`; the planner fuses it or lowers it to
    the primitive ops, `ir.decompose`), or a kernel module's own nodes. `p` prefixes its value
    names, `prefix` its weights'; `rel`: the relative states a `relative_logits` bias reads
    (the core's fourth operand); `inputs`: the graph inputs its mask reads by their mask
    names where they differ (`attention`'s)."""
    kernel = mechanisms.kernel_of(s.kernel)
    rows = kernel is not None and kernel.softmax_core
    if rows:  # the softmax over the kernel's rows of the keys and values
        k, v, n = kernel.rows(mechanisms.Site(b, s, p, prefix, (), n), s.kernel, k, v)
    merged = T("B", "L", s.heads * s.value_dim)
    if kernel is not None and not rows:  # its one `kernel` node on the repeated q, k, v heads
        if s.groups > 1:
            k = b.emit(Op.REPEAT_KV, f"{p}k_rep", (k,), T("B", s.heads, n, s.head_dim),
                       groups=s.groups)
            v = b.emit(Op.REPEAT_KV, f"{p}v_rep", (v,), T("B", s.heads, n, s.value_dim),
                       groups=s.groups)
        o = kernel.expand(mechanisms.Site(b, s, p, prefix, (), n), s.kernel, q, k, v)
        return b.emit(Op.MERGE_HEADS, f"{p}merged", (o,), merged)
    bias: dict = {"bias": None}
    if isinstance(s.position, Alibi):
        a = s.position  # slopes x factor: `scaled` multiplies them by the score scale
        bias = dict(bias="alibi", slopes=a.slopes, max_bias=a.max_bias,
                    factor=s.scale if a.scaled else 1.0, rounding=a.rounding)
    elif isinstance(s.position, RelativeBias):
        r = s.position
        bias = dict(bias="relative_bias", buckets=r.buckets, max_distance=r.max_distance,
                    bidirectional=r.bidirectional,
                    weight=table or f"{prefix}relative_attention_bias.weight")
    elif isinstance(s.position, Relative2D):
        bias = dict(bias="relative_2d", window=s.position.window,
                    class_token=s.position.class_token,
                    weight=f"{prefix}relative_position_bias.weight")
    elif isinstance(s.position, RelativeLogits):
        bias = dict(bias="relative_logits", d_rel=s.position.d_rel, extent=s.position.extent,
                    weight=f"{prefix}rel_logits_proj.proj")
    elif rel is not None:  # the keys a `keys` hook mechanism selected (its top_k)
        selector, value = mechanisms.at(s, "keys")[0]
        bias = dict(bias="indexed", top_k=value.top_k, selector=selector.key)
    # decoding: the mask reads the keys' count too (a bounded cache holds the last ones);
    # cross attention's keys are the cached memory rows, read by index alone; a kernel's
    # rows: no mask (the rows dropped the hidden keys)
    runtime, expr, memory = tuple((inputs or {}).get(n, n) for n in s.runtime_inputs), \
        s.mask, None
    if rows:
        runtime, expr = (), None
    elif cache is not None and s.kind == "cross":
        runtime, memory = (k, *runtime), True
    elif cache is not None:
        runtime, expr = ("attention_mask", k), masks.real_keys(s.mask)
    site = mechanisms.Site(b, s, p, prefix, (), n)
    values = {key: None for key in mechanisms.SCORED} | {
        m.key: value for m, value in mechanisms.at(s, "scores")} | dict(
        strategy="", heads=s.heads, kv_heads=s.kv_heads, scale=s.scale, **bias,
        **mechanisms.softmax_attrs(site), expr=expr, sparsity=s.sparsity, memory=memory,
        dropout=s.dropout, kind=s.kind)
    operands = (rel,) if bias["bias"] in BIAS_OPERANDS else ()
    return b.emit(Op.ATTENTION, f"{p}merged", (q, k, v, *operands, *runtime), merged,
                  **{key: values[key] for key in core_attributes(bias["bias"])})


def _kept(s: Attention) -> tuple[int, int] | None:
    """(first, recent): the keys a bounded cache keeps (`masks.kept_keys`: those of the first
    positions and the recent ones), or None where it grows: cross attention (its keys are
    memory rows), an unbounded mask, or first positions kept with a score bias (which
    read a key's distance from the cache's slot order)."""
    keep = None if s.kind == "cross" else masks.kept_keys(masks.real_keys(s.mask))
    if keep and keep[0] and isinstance(s.position, ScoreBias):
        return None
    return keep


def norm(b: GraphBuilder, out: str, arg: str, shape: TensorType, norm: Norm, module: str,
          bias: bool | None = None) -> str:
    """A norm node; a LayerNorm's bias as `norm` says, unless `bias` says otherwise; a
    norm without weight or bias (`affine = false`) carries `affine=False`."""
    extra = {} if norm.affine else {"affine": False}
    return b.emit(Op.NORM, out, (arg,), shape, kind=norm.kind, eps=norm.eps,
                  unit_offset=norm.unit_offset, module=module,
                  bias=norm.bias if bias is None else bias, **extra)
