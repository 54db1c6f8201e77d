"""A decoder stack's cross attention (`cross = a`: every block attends over the memory rows,
an encoder's output, after its self attention), and an encoder-decoder model's encoder
(`encoder = e`, `decoder_start = n`): their values and located checks."""

from __future__ import annotations

from typing import Any

from .. import ast
from .. import masks as m
from ..spec import Attention, Softmax, Transformer, attentions_of, reads_streams
from .sides import Sides
from .values import Invalid, describe

__all__ = ["Crosses"]


class Crosses(Sides):
    def check_cross(self, e: dict[str, ast.Entry], cross: Attention,
                    attns: tuple[Attention, ...], placement: str, residual: str,
                    others: dict[str, Any]) -> None:
        """A softmax cross attention of its own projections, the stack's width, no positions
        (the memory's are the encoder's; the stack adds its own at its input), in pre- or
        post-norm blocks with a sequential residual, and none of the stack features whose
        block has no place for it (`others`: key -> value, set where truthy)."""
        where = e["cross"].value
        d_model = attns[0].d_model
        if cross.d_model != d_model or cross.width != d_model:
            raise self.error(f"`{cross.name}` reads and writes the stack's width ({d_model}); "
                             f"found d_model {cross.d_model}, out_dim {cross.width}",
                             where.span, hint=f"set `d_model = {d_model}` in attention "
                                              f"{cross.name}, and no `out_dim`")
        if not isinstance(cross.kernel, Softmax) or cross.projection is not None \
                or cross.variants:
            raise self.error(f"`{cross.name}`: a decoder block's cross attention is a softmax "
                             "attention with its own q, k and v projections", where.span)
        if cross.position is not None:
            raise self.error(f"`{cross.name}` reads the memory rows, whose positions the "
                             "encoder gave them: a decoder's cross attention takes no "
                             "`position`", cross.span("position") or where.span,
                             hint="remove it: the stack's absolute positions come from "
                                  "`attention`")
        if "segment_ids" in cross.runtime_inputs:
            raise self.error(f"`{cross.name}`: a decoder stack's cross attention reads no "
                             "`document` ids yet (its memory rows' and its tokens' would be "
                             "one input beside the self attention's)", cross.span("mask")
                             or where.span, hint="mask it with `full`, `padding` or "
                                                 "`prefix(n)`")
        if placement not in ("pre", "post") or residual != "sequential":
            raise self.error("`cross` needs `norm = ...(pre, ...)` or `(post, ...)` and a "
                             "sequential residual", where.span,
                             hint="pre: h' = h + cross(norm(h), memory); post: h' = "
                                  "norm(h + cross(h, memory))")
        other = next((key for key, value in others.items() if value), None)
        if other is not None:
            raise self.error(f"`cross` and `{other}` do not combine", e[other].key_span,
                             hint=f"remove `{other}` or `cross`")

    def encoder_value(self, e: ast.Expr) -> Transformer | None:
        """`none`, or the name of a transformer defined above this one."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        if not isinstance(e, ast.Name):
            raise self.error(f"expected the name of a transformer, found {describe(e)}", e.span)
        if e.id not in self.stacks:
            raise self.error(f"no transformer named `{e.id}` above this one", e.span,
                             hint="define the encoder's stack before the decoder that reads it")
        if self.stacks[e.id] is None:  # (its own problems are reported)
            raise Invalid()
        return self.stacks[e.id]

    def check_encoder(self, e: dict[str, ast.Entry], encoder: Transformer | None,
                      cross: Attention | None, vocab: int, start: int, source: str) -> None:
        """An encoder-decoder: a decoder (`cross`) whose encoder is a stack of hidden states
        (no vocabulary, no cross attention, no position streams), as wide as the memory its
        cross attention reads and, reading tokens, as the decoder (their embedding is one);
        the start token within the vocabulary."""
        if encoder is None:
            key = "decoder_start" if "decoder_start" in e else "encoder_input"
            raise self.error(f"`{key}` is an encoder-decoder model's: it needs `encoder`",
                             e[key].key_span,
                             hint="add `encoder = <the encoder's stack>`, or remove it")
        where = e["encoder"].value.span
        if cross is None:
            raise self.error("an encoder-decoder's decoder attends over the encoder's output: "
                             "it needs `cross`", where,
                             hint="add `cross = <a cross attention>` to this stack")
        own = encoder.vocab is not None  # (its own token embedding: Marian's unshared)
        head = encoder.tied or encoder.head_bias or encoder.logit_scale != 1.0 or \
            encoder.logit_mechanisms or encoder.head_transform is not None
        if encoder.cross is not None or reads_streams(encoder) or head or (
                own and source == "states"):
            raise self.error(f"`{encoder.name}` is an encoder: a stack of hidden states (its "
                             "own `vocab` where it embeds the source itself) without `cross`, "
                             "multimodal RoPE or an LM head's keys", where,
                             hint=f"remove them from transformer {encoder.name}")
        if source == "tokens" and not own and encoder.d_model != cross.d_model:
            raise self.error(f"`{encoder.name}` embeds the source with this stack's embed_tokens "
                             f"({cross.d_model} wide): its d_model must be {cross.d_model}, "
                             f"found {encoder.d_model}", where,
                             hint="source and target share one token embedding")
        for a in (*attentions_of(encoder), cross):  # (generation right-pads the sources)
            mask = getattr(a, "mask", None)
            if "segment_ids" in a.runtime_inputs or any(
                    isinstance(p, m.Padding) and p.side == "left"
                    for c in a.cores for p in m.primitives(c.mask)):
                raise self.error(f"`{a.name}`: an encoder-decoder's sources are padded on the "
                                 f"right, and hidden by `padding` alone (found `{m.render(mask)}`"
                                 ")", a.span("mask") or where,
                                 hint="write `padding` (the right side) or no padding")
        if encoder.d_model != cross.memory_dim:
            raise self.error(f"`{encoder.name}`'s output is the memory `{cross.name}` reads: its "
                             f"d_model ({encoder.d_model}) must be memory_dim "
                             f"({cross.memory_dim})", where,
                             hint=f"set `memory_dim = {encoder.d_model}` in attention "
                                  f"{cross.name}")
        if start >= vocab:
            raise self.error(f"decoder_start must be a token id below vocab ({vocab}), found "
                             f"{start}", e["decoder_start"].value.span)
