"""A language model's head keys: those that need `vocab` (token embeddings and logits), and
`lm_head = false`, token ids in and hidden states out (CLIP's and SigLIP's text towers): its
located checks."""

from __future__ import annotations

from .. import ast
from .crosses import Crosses

__all__ = ["LM_KEYS", "Heads"]

# the keys of a language model's embedding and head (with the head mechanisms' keys, which
# the stack checker adds): they need `vocab`
LM_KEYS = ("tie_embeddings", "embedding_scale", "logit_scale", "head_bias", "head_transform",
           "encoder", "decoder_start", "encoder_input", "lm_head")
# what only a model with logits has: `lm_head = false` refuses them
_HEAD_ONLY = ("tie_embeddings", "logit_scale", "head_bias", "head_transform", "encoder",
              "decoder_start", "encoder_input")


class Heads(Crosses):
    def check_head(self, e: dict[str, ast.Entry], vocab: int | None, head: bool,
                   head_keys: tuple[str, ...]) -> None:
        """The keys of `LM_KEYS` and `head_keys` (the head mechanisms') need `vocab`; a
        stack without an LM head (`lm_head = false`) has none of the head's keys."""
        for key in (*LM_KEYS, *head_keys):
            if key in e and vocab is None:
                raise self.error(f"`{key}` needs `vocab`: only a language model has token "
                                 "embeddings and logits", e[key].key_span,
                                 hint="add `vocab = N` (the number of tokens), or remove "
                                      f"`{key}`")
        if head:
            return
        for key in (*_HEAD_ONLY, *head_keys):
            if key in e:
                raise self.error(f"`{key}` is the LM head's, and `lm_head = false` leaves "
                                 "the head out: the stack returns its hidden states",
                                 e[key].key_span,
                                 hint=f"remove `{key}`, or remove `lm_head = false` (logits "
                                      "need the head)")
