"""Transformer definitions: the stack's keys (attention, layers, ffn, norm, dropout)."""

from __future__ import annotations

from dataclasses import replace

from .. import ast
from ..mechanisms import HEADS, PROJECTIONS, SELECTORS, kernel_of
from ..spec import (
    Attention,
    HeadTransform,
    Norm,
    PerLayerInputs,
    RelativeBias,
    Softmax,
    Transformer,
)
from ..weight_table import parameter_count
from .values import FLOAT32_MAX, FLOAT32_TINY, Entries, Invalid, Param, describe
from .vision import Visions

__all__ = ["Stacks"]

# (the LM head's mechanisms' keys, `mechanisms.HEADS`, among the keys of a language model)
_KEYS = ("attention", "layers", "ffn", "norm", "residual", "relative_bias", "dropout", "vocab",
         "tie_embeddings", "embedding_scale", *HEADS, "residual_scale", "logit_scale",
         "head_bias", "embedding_norm", "first_attn_norm", "kv_shared_layers", "layer_scalar",
         "per_layer_inputs", "head_transform", "shortcut", "ffn_conv", "attention_only",
         "placements", "parallel", "side", "cross", "encoder", "decoder_start",
         "encoder_input", "patches", "layer_scale", "final_norm", "lm_head")
MAX_VOCAB = 1 << 24
_CONVS = {"none": (), "conv": (Param("width"),)}
# a head transform's activations (the ACTIVATION op's kinds)
_HEAD_ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
_EXAMPLES = {"embedding_scale": "Gemma's is `sqrt(d_model)`; Granite's its "
                                "embedding_multiplier",
             "residual_scale": "Granite's residual_multiplier, such as 0.22",
             "logit_scale": "Cohere's logit_scale, such as 0.0625; Granite's 1 / logits_scaling",
             "alpha": "MiniMax-Text-01's alpha factors, 3.5566"}


# (the deepest published stacks have about 130 blocks: past this, a typo, not a model)
MAX_LAYERS = 4096


class Stacks(Visions):
    def layers_value(self, e: ast.Expr) -> int:
        n = self.positive(e, "layers")
        if n > MAX_LAYERS:
            raise self.error(f"layers must be at most {MAX_LAYERS}, found {n:,}", e.span,
                             hint="a stack of more blocks would build a graph of millions of "
                                  "nodes; the deepest published models have about 130")
        return n

    def transformer(self, d: ast.TransformerDef) -> Transformer | None:
        e = self.entries(d, _KEYS)
        get = Entries(self, e, "transformer", d)
        get.require("attention", "layers", "ffn", "norm")
        attns = get("attention", self.layer_pattern)
        layers = get("layers", self.layers_value)
        ffn, form = get("ffn", self.ffn_form) or (None, None)
        norm, placement = get("norm", lambda x: self.norm_value(x, placement=True)) or (None,
                                                                                     None)
        residual, shared_norm, alpha = get("residual", self.residual_value,
                                           ("sequential", False, 1.0)) or (None, None, 1.0)
        shared_table = get("relative_bias", lambda x: self.word(
            x, ("per_layer", "shared"), "relative_bias") == "shared", False)
        dropout = get("dropout", lambda x: self.probability(x, "dropout"), 0.0)
        vocab = get("vocab", lambda x: self.positive(x, "vocab"))
        tied = get("tie_embeddings", lambda x: self.boolean(x, "tie_embeddings"), False)
        scale = get("embedding_scale", lambda x: self.multiplier(x, "embedding_scale"), 1.0)
        residual_scale = get("residual_scale", self.residual_scale_value,
                             1.0)
        logit_scale = get("logit_scale", lambda x: self.multiplier(x, "logit_scale"), 1.0)
        head_bias = get("head_bias", lambda x: self.boolean(x, "head_bias"), False)
        logit_mechanisms = tuple(
            (m.key, value) for key, m in HEADS.items()
            if (value := get(key, lambda x, m=m: m.read_head(self, x))) is not None)
        embedding_norm = get("embedding_norm", self.embedding_norm_value)
        first_norm = get("first_attn_norm", lambda x: self.boolean(x, "first_attn_norm"), True)
        shared_kv = get("kv_shared_layers", lambda x: self.integer(x), 0)
        layer_scalar = get("layer_scalar", lambda x: self.boolean(x, "layer_scalar"), False)
        ple = get("per_layer_inputs", self.per_layer_inputs_value)
        head_transform = get("head_transform", self.head_transform_value)
        shortcut, shortcut_form = get("shortcut", self.shortcut_value) or (None, None)
        ffn_conv = get("ffn_conv", self.ffn_conv_value)
        alone = get("attention_only", lambda x: self.attention_only_value(x, layers), ())
        placements = get("placements", self.placements_value, ())
        parallel = get("parallel", lambda x: None if isinstance(x, ast.Name) and x.id == "none"
                       else self.transformer_attention(x))
        side = get("side", lambda x: self.side_value(x, layers))
        cross = get("cross", lambda x: None if isinstance(x, ast.Name) and x.id == "none"
                    else self.transformer_attention(x, "cross"))
        encoder = get("encoder", self.encoder_value)
        start = get("decoder_start", lambda x: self.non_negative(x, "decoder_start"), 0)
        source = get("encoder_input", lambda x: self.word(x, ("tokens", "states"),
                                                          "encoder_input"), "tokens")
        patches = get("patches", self.patches_value)
        layer_scale = get("layer_scale", lambda x: self.boolean(x, "layer_scale"), False)
        final_norm = get("final_norm", lambda x: self.boolean(x, "final_norm"), True)
        head = get("lm_head", lambda x: self.boolean(x, "lm_head"), True)
        if get.failed or attns is None:
            return None
        self.check_vision(e, patches, layer_scale, attns, placement, residual, {"vocab": vocab,
            "cross": cross, "encoder": encoder}, final_norm, not placements and parallel is None)
        if cross is not None:  # (a feature whose block has no place for it: refused)
            self.check_cross(e, cross, attns, placement, residual, {
                "side": side, "parallel": parallel, "shortcut": shortcut,
                "attention_only": alone, "placements": placements,
                "kv_shared_layers": shared_kv, "per_layer_inputs": ple, "ffn_conv": ffn_conv,
                "first_attn_norm": not first_norm, "residual_scale": residual_scale == "depth"})
        self.check_widths(e, attns, attns[0].d_model)
        if side is not None:
            self.check_side(e, side, attns[0].d_model, placement, residual)
            self.check_positions(side.attention, attns, e["side"].value.span)
            others = [k for k, v in (("parallel", parallel), ("placements", placements),
                                     ("kv_shared_layers", shared_kv)) if v]
            if others:
                raise self.error(f"`side` and `{others[0]}` do not combine",
                                 e[others[0]].key_span, hint=f"remove `{others[0]}` or `side`")
        self.check_ffn_layers(form, layers, e["ffn"].value)
        if ffn is None or alone:
            self.check_attention_alone(e, placement, residual, ffn_conv, shortcut,
                                       residual_scale == "depth")
        if parallel is not None:
            self.check_parallel(e, parallel, attns, placement, residual)
        if placements:
            self.check_placements(e, placement, residual, tuple(
                k for k in ("shortcut", "first_attn_norm", "attention_only", "parallel")
                if k in e)
                + (("ffn",) if ffn is None else ()))
        for attn in attns:  # a kernel that knows the stack's depth (lightning's rates)
            module = kernel_of(attn.kernel)
            problem = module.stack_problem(attn.kernel, layers) if module else None
            if problem is not None:
                raise self.error(f"`{attn.name}`: {problem[0]}", e["layers"].value.span,
                                 hint=problem[1])
        if vocab is not None and vocab > MAX_VOCAB:
            raise self.error(f"vocab must be at most 2**24 = {MAX_VOCAB}, found {vocab}",
                             e["vocab"].value.span)
        self.check_head(e, vocab, head, tuple(HEADS))
        if residual in ("parallel", "normed") and placement != "pre":
            raise self.error(f"a {residual} residual needs `norm = {norm.kind}(pre, ...)`; "
                             f"found `{placement}`", e["norm"].value.span,
                             hint="parallel blocks normalise the input once, before both "
                                  "branches" if residual == "parallel" else "normed blocks "
                                  "keep each sublayer's normed input as its residual")
        if not first_norm and (placement != "pre" or residual != "sequential"):
            raise self.error("`first_attn_norm = false` needs `norm = ...(pre, ...)` and a "
                             "sequential residual", e["first_attn_norm"].value.span,
                             hint="it leaves out layer 0's norm before its attention, which "
                                  "only pre norms with a sequential residual have alone")
        if residual_scale == "depth" and (residual != "sequential" or shortcut is not None):
            raise self.error("`residual_scale = depth` numbers the sublayers of sequential "
                             "blocks: it takes neither a parallel residual nor a shortcut",
                             e["residual_scale"].value.span,
                             hint="Beam's blocks are sequential: remove `residual = parallel` "
                                  "or `shortcut`, or give residual_scale a number")
        if encoder is not None or start or "encoder_input" in e:
            self.check_encoder(e, encoder, cross, vocab, start, source)
        if shortcut is not None:
            self.check_shortcut(shortcut_form, layers, placement, residual, e)
        if shared_table:
            self.check_shared_table(attns, e["relative_bias"].value)
        if shared_kv:
            self.check_kv_sharing(attns, layers, shared_kv, e["kv_shared_layers"].value)
        if ple is not None and vocab is None:
            raise self.error("`per_layer_inputs` needs `vocab`: its embedding reads token ids",
                             e["per_layer_inputs"].key_span, hint="add `vocab = N`")
        if ple is not None and ple.vocab == 0:  # (the stack's vocabulary by default)
            ple = replace(ple, vocab=vocab)
        elif ple is not None and ple.vocab < vocab:
            raise self.error(f"the per-layer inputs' vocabulary ({ple.vocab}) must hold every "
                             f"token id of the stack's ({vocab})", e["per_layer_inputs"].value.span,
                             hint="give `ple(vocab = ...)` at least `vocab`, or leave it out")
        tr = Transformer(name=d.name, attentions=attns, layers=layers, ffn=ffn, norm=norm,
                         placement=placement, residual=residual, shared_norm=shared_norm,
                         shared_relative_bias=shared_table, dropout=dropout, vocab=vocab,
                         tied=tied, embedding_scale=scale,
                         logit_mechanisms=logit_mechanisms,
                         residual_scale=residual_scale, residual_alpha=alpha,
                         logit_scale=logit_scale,
                         head_bias=head_bias, feed_forward=form,
                         embedding_norm=embedding_norm, first_attn_norm=first_norm,
                         kv_shared_layers=shared_kv, layer_scalar=layer_scalar,
                         per_layer_inputs=ple, head_transform=head_transform,
                         shortcut=shortcut, shortcut_form=shortcut_form, ffn_conv=ffn_conv,
                         attention_only=alone, placements=placements, parallel=parallel,
                         side=side, cross=cross, encoder=encoder, decoder_start=start,
                         encoder_input=source, patches=patches, layer_scale=layer_scale,
                         final_norm=final_norm, head=head)
        self.check_size(parameter_count(tr), d.name, d.name_span)
        return tr

    def ffn_conv_value(self, e: ast.Expr) -> int | None:
        """`ffn_conv = conv(width = w)` (Inkling's mlp_sconv; w = 4 by default) or `none`."""
        from ..mechanisms.residual_conv import read_width

        name, _ = self.callee(e, _CONVS, "feed-forward convolution")
        return None if name == "none" else read_width(self, self.bind(e, name, _CONVS[name]))

    def shortcut_value(self, e: ast.Expr) -> tuple | None:
        """`none`, or a feed-forward as `ffn` takes it: (MLP, form or None)."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        return self.ffn_form(e)

    def check_shortcut(self, form: object, layers: int, placement: str, residual: str,
                       e: dict[str, ast.Entry]) -> None:
        """`shortcut = ...`: blocks in pairs (an even count), pre norms, a sequential
        residual; a feed-forward form without dense layers of its own."""
        if placement != "pre" or residual != "sequential":
            where = e["norm"].value if placement != "pre" else e["residual"].value
            raise self.error("`shortcut` needs `norm = ...(pre, ...)` and a sequential residual",
                             where.span, hint="the shortcut reads block 2p's normed "
                                              "feed-forward input, which only pre norms with a "
                                              "sequential residual have")
        if layers % 2:
            raise self.error(f"`shortcut` pairs the blocks: layers must be even, found {layers}",
                             e["layers"].value.span,
                             hint="block 2p's shortcut joins block 2p + 1's output "
                                  "(LongCat-Flash: layers = 2 x num_layers)")
        for key in ("layer_scalar", "per_layer_inputs"):  # (what block 2p + 1's output is then)
            if key in e:
                raise self.error(f"`shortcut` and `{key}` do not combine: a shortcut joins block "
                                 f"2p + 1's sublayers' sum, which `{key}` changes",
                                 e[key].key_span, hint=f"remove `{key}` or `shortcut`")
        if getattr(form, "dense_layers", ()):
            raise self.error("a shortcut runs in every pair: its feed-forward form takes no "
                             "`dense_layers`", e["shortcut"].value.span,
                             hint="remove `dense` and `dense_layers` from the shortcut")

    def head_transform_value(self, e: ast.Expr) -> HeadTransform | None:
        """`none`, or `dense(norm = layernorm(eps = 1e-12), activation = gelu, bias = true)`:
        the norm as the stack's without its placement."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        self.callee(e, {"dense": None}, "a head transform")
        args = self.bind(e, "dense", (Param("norm", True), Param("activation"), Param("bias")))
        act = self.word(args["activation"], _HEAD_ACTIVATIONS, "activation") \
            if "activation" in args else "gelu"
        norm = self.norm_value(args["norm"], placement=False)[0]
        bias = self.boolean(args["bias"], "bias") if "bias" in args else True
        return HeadTransform(act, norm, bias)

    def per_layer_inputs_value(self, e: ast.Expr) -> PerLayerInputs | None:
        """`none`, or `ple(width = P, vocab = V, activation = gelu_tanh)`; V defaults to the
        stack's vocabulary (0 here, filled in by the caller)."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        self.callee(e, {"ple": None}, "per-layer inputs")
        args = self.bind(e, "ple", (Param("width", True), Param("vocab"), Param("activation")))
        width = self.positive(args["width"], "width")
        vocab = self.positive(args["vocab"], "vocab") if "vocab" in args else 0
        act = self.word(args["activation"], ("relu", "gelu", "gelu_tanh", "silu"),
                        "activation") if "activation" in args else "gelu_tanh"
        return PerLayerInputs(width, vocab, act)

    def check_kv_sharing(self, attns: tuple[Attention, ...], layers: int, n: int,
                         e: ast.Expr) -> None:
        """`kv_shared_layers = n`: the last n blocks reuse the keys and values of the last
        earlier block of their attention, which must exist, of a plain self attention."""
        if not 0 <= n < layers:
            raise self.error(f"kv_shared_layers must be in [0, {layers - 1}] (fewer than the "
                             f"{layers} layers), found {n}", e.span,
                             hint="the first layers compute the keys the others reuse")
        first = layers - n
        for i in range(first, layers):
            a = attns[i % len(attns)]
            if a.kind != "self" or a.projection is not None \
                    or not isinstance(a.kernel, Softmax) or a.variants:
                raise self.error(f"layer {i} (`{a.name}`) would reuse an earlier layer's keys "
                                 "and values: that needs a softmax self attention with its "
                                 "own q, k and v projections (no kernel, "
                                 f"{_keys(PROJECTIONS)} or {_keys(SELECTORS)})", e.span)
            if not any(attns[j % len(attns)].name == a.name for j in range(first)):
                raise self.error(f"layer {i} (`{a.name}`) has no earlier layer of its attention "
                                 f"before the {n} sharing ones, whose keys and values it would "
                                 "reuse", e.span,
                                 hint="a layer reuses the last earlier layer of its attention "
                                      "(Gemma 4's num_kv_shared_layers)")

    def embedding_norm_value(self, e: ast.Expr) -> Norm | None:
        """`none`, or a norm of the token embeddings: `layernorm(...)` or `rmsnorm(...)`, as
        the stack's norm without its placement (BLOOM's word_embeddings_layernorm)."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        return self.norm_value(e, placement=False)[0]

    def residual_scale_value(self, e: ast.Expr) -> float | str:
        """A number > 0 (Granite's multiplier), or `depth` (Beam's depth-scaled residual)."""
        if isinstance(e, ast.Name) and e.id == "depth":
            return "depth"
        return self.multiplier(e, "residual_scale")

    def multiplier(self, e: ast.Expr, key: str) -> float:
        """embedding_scale, residual_scale, logit_scale: a number > 0 that float32 holds."""
        value = self._float_value(e, key, "a number")
        if not FLOAT32_TINY <= value <= FLOAT32_MAX:
            raise self.error(f"{key} must be a number > 0 that float32 can hold, found "
                             f"{value:g}", e.span, hint=_EXAMPLES[key])
        return value

    def layer_pattern(self, e: ast.Expr) -> tuple[Attention, ...]:
        """`a` (every layer) or `[a, b, ...]` (layer i uses item i % n): attentions of one
        width and of the same absolute position encoding (added once, at the stack's input)."""
        items = e.items if isinstance(e, ast.List) else [e]
        if not items:
            raise self.error("the layer pattern is empty", e.span,
                             hint="name at least one attention: `[local, global]`")
        attns = []
        for item in items:
            attn = self.transformer_attention(item)
            if attns and attn.d_model != attns[0].d_model:
                raise self.error(f"every attention of a stack has one d_model: `{attn.name}` has "
                                 f"{attn.d_model}, `{attns[0].name}` {attns[0].d_model}",
                                 item.span)
            if attns:
                self.check_positions(attn, tuple(attns), item.span)
            mine, first = _stack_shared(attn), _stack_shared(attns[0]) if attns else None
            if attns and mine[1] != first[1]:
                what, hint = (mine[0] or first[0]).stack_shares
                raise self.error(f"`{attn.name}` and `{attns[0].name}` differ in their "
                                 f"{what}; a stack shares one", item.span, hint=hint)
            attns.append(attn)
        return tuple(attns)

    def residual_value(self, e: ast.Expr) -> tuple[str, bool, float]:
        """(form, shared norm, alpha): `sequential`, `parallel` (two norms),
        `parallel(shared_norm = true)` (one) or `normed(alpha = 1)` (MiniMax's)."""
        name, _ = self.callee(e, dict.fromkeys(("sequential", "parallel", "normed")),
                              "residual")
        if name == "sequential":
            self.bind(e, name, ())
            return name, False, 1.0
        if name == "normed":
            args = self.bind(e, name, (Param("alpha"),))
            return name, False, self.multiplier(args["alpha"], "alpha") if "alpha" in args \
                else 1.0
        args = self.bind(e, name, (Param("shared_norm"),))
        shared = self.boolean(args["shared_norm"], "shared_norm") if "shared_norm" in args \
            else False
        return name, shared, 1.0

    def check_shared_table(self, attns: tuple[Attention, ...], at: ast.Expr) -> None:
        first = attns[0].position
        for attn in attns:
            if not isinstance(attn.position, RelativeBias):
                raise self.error(f"`relative_bias = shared` needs relative_bias positions; "
                                 f"`{attn.name}` has none", at.span)
            if attn.position != first or attn.heads != attns[0].heads:
                raise self.error("a shared relative-bias table needs one bucket scheme and one "
                                 f"head count; `{attn.name}` differs from `{attns[0].name}`",
                                 at.span)

    def transformer_attention(self, e: ast.Expr, kind: str = "self") -> Attention | None:
        if not isinstance(e, ast.Name):
            raise self.error(f"expected the name of an attention, found {describe(e)}", e.span)
        if e.id not in self.attentions:
            raise self.error(f"no attention named `{e.id}` in this file", e.span,
                             hint=self._suggest(e.id, self.attentions, "define it with "
                                                f"`attention {e.id} {{ ... }}`"))
        attn = self.attention(self.attentions[e.id])
        if attn is None:
            raise Invalid()
        if attn.kind != kind and kind == "self":
            raise self.error(f"a stack's blocks run self attention; `{e.id}` is cross "
                             "attention", e.span,
                             hint=f"a decoder's blocks attend over the memory with `cross = "
                                  f"{e.id}` beside `attention`")
        if attn.kind != kind:
            raise self.error(f"`cross` is a decoder block's attention over the memory; `{e.id}` "
                             "is self attention", e.span,
                             hint="give it `kind = cross` and `memory_dim`")
        return attn


def _stack_shared(attn: Attention) -> tuple[object, object]:
    """(its kernel module, what every layer of a stack shares of that kernel:
    `Kernel.stack_shared`) for the first of the attention's cores (itself, or each variant's
    of its core selector) that shares one, else (None, None)."""
    for core in attn.cores:
        module = kernel_of(core.kernel)
        shared = module.stack_shared(core.kernel) if module else None
        if shared is not None:
            return module, shared
    return None, None


def _keys(modules: dict) -> str:
    """The keys of `modules` (the projection forms, the core selectors), each in backticks,
    joined by commas."""
    return ", ".join(f"`{key}`" for key in modules)
