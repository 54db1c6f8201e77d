"""The weight table of a layer: every tensor its graph reads (state-dict name as in
docs/LANGUAGE.md, Weights; shape; how a seed draws it), in the order a seeded module draws
them, and the parameter count computed from it without expanding a stack."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .position_spec import Relative2D
from .spec import (
    Attention,
    Ffn,
    Learned,
    Norm,
    RelativeBias,
    RelativeLogits,
    Transformer,
)

__all__ = ["Weight", "linear_weights", "mlp_weights", "parameter_count", "seeded_weights",
           "weight_table"]



@dataclass(frozen=True)
class Weight:
    """A tensor of the layer: its state-dict name, shape, and how a seeded module draws it."""

    name: str
    shape: tuple[int, ...]
    # linear | linear_bias (nn.Linear's), embedding (N(0, 1)), norm_weight (around 1),
    # norm_bias and norm_offset (a unit-offset norm's weight: around 0), sequence (a kernel's
    # projections along the sequence: uniform in +-1/sqrt(k)), normal (a mechanism's weight
    # drawn N(0, 1)), selection (a bias that chooses without weighing: 0.1 N(0, 1)), decay
    # (a recurrent kernel's A_log: 0.1 N(0, 1))
    init: str
    fan_in: int = 0  # of a linear weight or bias


def parameter_count(spec: Attention | Transformer) -> int:
    """How many numbers the layer's weights hold, counted without expanding a stack: block i
    holds what block i % P holds (P the pattern's length), a feed-forward form's dense layers
    what a dense block of that attention holds, so the weight tables of P blocks give every
    block's count."""
    if not isinstance(spec, Transformer) or spec.layers <= len(spec.attentions) \
            or spec.kv_shared_layers or spec.per_layer_inputs or spec.shortcut \
            or spec.attention_only or spec.placements or spec.side:  # (blocks reusing keys
        # differ from their pattern's; per-layer inputs' tables grow with the layers; a
        # shortcut is in even blocks only; blocks without a feed-forward, placed by their own
        # period, or with a side block, are not their pattern's)
        return sum(math.prod(w.shape) for w in weight_table(spec))
    period = len(spec.attentions)
    form = spec.feed_forward

    def blocks(stack: Transformer) -> tuple[list[int], int]:
        block, top = [0] * period, 0
        for w in weight_table(replace(stack, layers=period, first_attn_norm=True)):
            if w.name.startswith("layers."):
                block[int(w.name.split(".")[1])] += math.prod(w.shape)
            else:
                top += math.prod(w.shape)
        return block, top

    block, top = blocks(spec if form is None else replace(
        spec, feed_forward=replace(form, dense_layers=())))
    dense = (blocks(replace(spec, feed_forward=None, ffn=form.dense))[0]
             if form is not None and form.dense else block)
    layers = set(form.dense_layers) if form is not None else set()
    # layer 0 without its attention's norm (`first_attn_norm = false`): that norm's tensors less
    first = 0 if spec.first_attn_norm or not spec.norm.affine else spec.d_model * (
        2 if spec.norm.bias else 1)
    return top - first + sum((dense if i in layers else block)[i % period]
                             for i in range(spec.layers))


def weight_table(spec: Attention | Transformer) -> tuple[Weight, ...]:
    """The layer's tensors, in the order its torch module has always drawn them from a seed:
    per attention q, k, v, o projections (weight, then bias), each mechanism's, the T5 table;
    a stack draws its learned positions and shared T5 table first, then per block the attention, its
    norms (`_block_norms`) and the MLP, then the final norm. Names are the nodes' weight
    names."""
    from .mechanisms import (  # (below: Weight)
        MECHANISMS,
        kernel_fact,
        kernel_of,
        projection_of,
        query_rows,
    )

    out: list[Weight] = []

    def linear(name: str, rows: int, cols: int, bias: bool) -> None:
        out.extend(linear_weights(name, rows, cols, bias))

    def norm(name: str, width: int, kind: Norm, bias: bool) -> None:
        init = "norm_offset" if kind.unit_offset else "norm_weight"
        if not kind.affine:  # a norm without weight or bias
            return
        out.append(Weight(f"{name}.weight", (width,), init))
        if bias:
            out.append(Weight(f"{name}.bias", (width,), "norm_bias"))

    def attention(s: Attention, p: str, absolute: bool, table: bool = True,
                  reuse: bool = False) -> None:
        if reuse:  # an earlier layer's keys and values: no tensors of its keys or values
            start = len(out)
            attention(s, p, absolute, table)
            out[start:] = [w for w in out[start:] if not w.name.startswith(
                tuple(f"{p}{part}_{what}." for part in "kv" for what in ("proj", "norm")))]
            return
        if s.projection is not None:  # a projection form's, in place of q, k and v
            out.extend(projection_of(s.projection).weights(s, s.projection, p))
        elif kernel_fact(s.kernel, "own_layer"):  # its own projections
            out.extend(kernel_of(s.kernel).own_weights(s, p))
        else:
            linear(f"{p}q_proj", s.heads * query_rows(s), s.d_model, "q" in s.bias)
            if not kernel_fact(s.kernel, "shares_keys"):  # keys: the queries
                linear(f"{p}k_proj", s.kv_heads * s.head_dim, s.memory_dim, "k" in s.bias)
            if s.mechanism("values") != "keys":  # (Gemma 4's values: the keys' rows)
                linear(f"{p}v_proj", s.kv_heads * s.value_dim, s.memory_dim, "v" in s.bias)
        if s.out_proj and not getattr(projection_of(s.projection), "output", False):
            linear(f"{p}o_proj", s.width, s.heads * s.value_dim, "o" in s.bias)

        for key, value in s.mechanisms:  # in hook order (`mechanisms.base.HOOKS`)
            out.extend(MECHANISMS[key].weights(value, s, p))
        if isinstance(s.position, RelativeBias) and table:
            out.append(Weight(f"{p}relative_attention_bias.weight",
                              (s.position.buckets, s.heads), "embedding"))
        if isinstance(s.position, Relative2D):  # BEiT's table of offsets, per head
            out.append(Weight(f"{p}relative_position_bias.weight",
                              (s.position.table_rows, s.heads), "embedding"))
        if isinstance(s.position, RelativeLogits):  # r_proj, then the bank of profiles
            linear(f"{p}r_proj", s.heads * s.position.d_rel, s.d_model, False)
            out.append(Weight(f"{p}rel_logits_proj.proj",
                              (s.position.d_rel, s.position.extent), "normal"))
        if absolute and isinstance(s.position, Learned):
            out.append(Weight(f"{p}position_embeddings.weight", (s.position.max_len, s.d_model),
                              "embedding"))
        for c in s.cores:  # a core selector's variants: each kernel's own
            module = kernel_of(c.kernel)
            if module is not None:
                out.extend(module.weights(c, p, not isinstance(spec, Attention)))

    if isinstance(spec, Attention):
        attention(spec, "", True)
        return tuple(out)
    a, d = spec.attention, spec.d_model
    if spec.vocab is not None:
        out.append(Weight("embed_tokens.weight", (spec.vocab, d), "embedding"))
    if spec.patches is not None:  # a vision stack's: its patches' projection, class, table
        pt = spec.patches
        fan = pt.channels * pt.size * pt.size
        out.append(Weight("patch_embed.weight", (d, pt.channels, pt.size, pt.size), "linear",
                          fan))
        if pt.bias:
            out.append(Weight("patch_embed.bias", (d,), "linear_bias", fan))
        if pt.class_token:
            out.append(Weight("class_token", (d,), "embedding"))
        if pt.distillation_token:
            out.append(Weight("distillation_token", (d,), "embedding"))
        if pt.registers:
            out.append(Weight("register_tokens", (pt.registers, d), "embedding"))
        if pt.grid is not None:
            out.append(Weight("position_embeddings.weight", (pt.table_rows, d), "embedding"))
    if spec.embedding_norm is not None:  # (of the token embeddings, or the stack's input)
        norm("embedding_norm", d, spec.embedding_norm, spec.embedding_norm.bias)
    ple = spec.per_layer_inputs
    if ple is not None:  # Gemma 4's per-layer inputs: their tables, then each block's
        out.append(Weight("embed_tokens_per_layer.weight", (ple.vocab, spec.layers * ple.width),
                          "embedding"))
        linear("per_layer_model_projection", spec.layers * ple.width, d, False)
        norm("per_layer_projection_norm", ple.width, spec.norm, False)
    if isinstance(a.position, Learned):
        out.append(Weight("position_embeddings.weight", (a.position.max_len, d), "embedding"))
    if spec.shared_relative_bias:
        out.append(Weight("relative_attention_bias.weight", (a.position.buckets, a.heads),
                          "embedding"))
    for c in a.cores:  # the first core whose kernel's tensors are the stack's
        shared = kernel_of(c.kernel).stack_weights(c) if kernel_of(c.kernel) else []
        if shared:
            out.extend(shared)
            break
    layernorm = spec.norm.bias
    for i in range(spec.layers):
        p = f"layers.{i}."
        attention(spec.layer_attention(i), f"{p}self_attn.", False,
                  table=not spec.shared_relative_bias, reuse=spec.kv_owner(i) is not None)
        if spec.parallel is not None:  # (Falcon-H1's mixer beside the attention)
            attention(spec.parallel, f"{p}parallel_attn.", False)
        if spec.cross is not None:  # a decoder's, over the memory
            attention(spec.cross, f"{p}cross_attn.", False)
        if spec.side is not None and i in spec.side.layers:  # (Zamba2's shared block)
            norm(f"{p}side_norm", 2 * d, spec.norm, layernorm)
            attention(spec.side.attention, f"{p}side_attn.", False)
            norm(f"{p}side_ffn_norm", d, spec.norm, layernorm)
            out.extend(mlp_weights(f"{p}side_mlp.", spec.side.ffn, d))
            linear(f"{p}side_proj", d, d, False)
        for which in _block_norms(spec, i):
            norm(f"{p}{which}", d, spec.norm, layernorm)
        form, ffn = spec.layer_feed_forward(i), spec.layer_ffn(i)
        if spec.has_ffn(i):  # (else the attention alone)
            from .mechanisms import ffn_of  # (here: a form's weights are Weights)

            out.extend(mlp_weights(f"{p}mlp.", ffn, d) if form is None
                       else ffn_of(form).weights(form, ffn, d, p))
        if spec.shortcut is not None and i % 2 == 0:  # the pair's shortcut (LongCat-Flash)
            out.extend(_shortcut_weights(spec, p, d))
        if spec.ffn_conv is not None:  # Inkling's convolution of the feed-forward output
            out.append(Weight(f"{p}mlp_sconv.conv1d.weight", (d, 1, spec.ffn_conv), "linear",
                              spec.ffn_conv))
        if ple is not None:
            linear(f"{p}per_layer_input_gate", ple.width, d, False)
            linear(f"{p}per_layer_projection", d, ple.width, False)
            norm(f"{p}post_per_layer_input_norm", d, spec.norm, False)
        if spec.layer_scalar:
            out.append(Weight(f"{p}layer_scalar", (1,), "norm_weight"))
        if spec.layer_scale:  # DINOv2's, per sublayer
            out += [Weight(f"{p}{k}_scale", (d,), "norm_weight") for k in ("attn", "ffn")
                    if k == "attn" or spec.has_ffn(i)]
    if spec.placement != "post" and spec.final_norm:
        norm("norm", d, spec.norm, layernorm)
    if spec.head_transform is not None:  # the prediction head's dense, then its norm
        linear("head_transform.dense", d, d, spec.head_transform.bias)
        norm("head_transform.norm", d, spec.head_transform.norm, spec.head_transform.norm.bias)
    if spec.vocab is not None and not spec.tied and spec.head:
        linear("lm_head", spec.vocab, d, spec.head_bias)
    elif spec.head_bias:  # a tied head with its own bias
        out.append(Weight("lm_head.bias", (spec.vocab,), "linear_bias", d))
    if spec.encoder is not None:  # an encoder-decoder's encoder (its embedding the model's)
        out.extend(replace(w, name=f"encoder.{w.name}")  # (its own embedding, no head)
                   for w in weight_table(replace(spec.encoder, head=False)))
    return tuple(out)


def linear_weights(name: str, rows: int, cols: int, bias: bool) -> list[Weight]:
    """An nn.Linear's weight [rows, cols] and, with `bias`, its bias."""
    out = [Weight(f"{name}.weight", (rows, cols), "linear", cols)]
    if bias:
        out.append(Weight(f"{name}.bias", (rows,), "linear_bias", cols))
    return out


def mlp_weights(p: str, ffn: Ffn, d_model: int) -> list[Weight]:
    """An MLP's gate, up and down projections (swiglu, geglu), or fc1 and fc2."""
    names = ("gate_proj", "up_proj", "down_proj") if ffn.gated else ("fc1", "fc2")
    return [*(w for name in names[:-1] for w in linear_weights(f"{p}{name}", ffn.hidden,
                                                                d_model, ffn.bias)),
            *linear_weights(f"{p}{names[-1]}", d_model, ffn.hidden, ffn.bias)]


def _shortcut_weights(t: Transformer, p: str, d: int) -> list[Weight]:
    """Block p's shortcut (`Transformer.shortcut`): `{p}shortcut_mlp.*`."""
    if t.shortcut_form is None:
        return mlp_weights(f"{p}shortcut_mlp.", t.shortcut, d)
    from .mechanisms import ffn_of

    return ffn_of(t.shortcut_form).weights(t.shortcut_form, t.shortcut, d, f"{p}shortcut_")


def _block_norms(t: Transformer, i: int) -> tuple[str, ...]:
    """Block i's norms, in weight-table order."""
    if i == 0 and not t.first_attn_norm:  # ModernBERT: none before layer 0's attention
        return ("ffn_norm",) if t.has_ffn(0) else ()
    if t.layer_placement(i) == "sandwich":
        return ("attn_norm", "post_attn_norm", "ffn_norm", "post_ffn_norm")
    if t.layer_placement(i) == "output":
        return ("post_attn_norm", "post_ffn_norm")
    if t.cross is not None:  # a decoder's block: a norm for each of its three sublayers
        return ("attn_norm", "cross_attn_norm", *(("ffn_norm",) if t.has_ffn(i) else ()))
    return ("attn_norm",) if t.shared_norm or not t.has_ffn(i) else ("attn_norm", "ffn_norm")


def seeded_weights(table: tuple[Weight, ...], seed: int) -> dict[str, np.ndarray]:
    """Float32 weights drawn from `seed` alone (NumPy's PCG64), in the table's order
    (docs/LANGUAGE.md, Weights): a linear weight or bias, and a kernel's sequence projections,
    uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] (as nn.Linear draws them); an embedding and a
    `normal` weight N(0, 1); a norm weight (and a kernel's dt_bias) 1 + 0.1 N(0, 1); a norm
    bias, a unit-offset norm weight, a mechanism's lambda vectors, a selection bias
    and a kernel's A_log 0.1 N(0, 1)."""
    rng = np.random.default_rng(seed)
    return {w.name: draw(rng, w) for w in table}


def draw(rng: np.random.Generator, w: Weight) -> np.ndarray:
    """One weight of `seeded_weights`, drawn from `rng` where the table's order puts it."""
    if w.init in ("linear", "linear_bias", "sequence"):
        bound = 1.0 / math.sqrt(w.fan_in)
        value = rng.uniform(-bound, bound, w.shape)
    elif w.init in ("embedding", "normal"):
        value = rng.standard_normal(w.shape)
    elif w.init == "norm_weight":
        value = 1.0 + 0.1 * rng.standard_normal(w.shape)
    else:  # norm_bias, norm_offset, lambda, selection
        value = 0.1 * rng.standard_normal(w.shape)
    return value.astype(np.float32)
