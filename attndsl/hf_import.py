"""`attndsl import`: a Hugging Face config.json -> a formatted, commented .attn spec of the
model's transformer stack (its layers and final norm; embeddings and heads stay outside), which
`compile --weights CHECKPOINT_DIR` fills with the checkpoint's tensors. Plain JSON reading: no
network and no transformers needed. A field the language cannot express is an error naming
it; each family's fields are in docs/CHECKPOINTS.md."""

from __future__ import annotations

from pathlib import Path

from .errors import Diagnostic, SpecError
from .families import FAMILIES
from .families.rope import num
from .families.text import SpecText
from .hf_fields import Recorded, read_config, refusals
from .mechanisms import HEADS

__all__ = ["import_config"]


def _lm_head(s: SpecText) -> None:
    """vocab, tied embeddings, Gemma's embedding scale sqrt(hidden_size) and the head's
    mechanisms the config sets (`Mechanism.head_field`): the keys that make the stack a
    language model."""
    cfg = s.cfg
    if s.decoder:  # (T5: the stack read is the whole model's encoder, its sources padded on
        s.encoder, s.encoder_pattern = s.stack, s.pattern  # the right as generation pads them)
        for name in s.encoder_pattern:
            entries = s.attentions[name]
            entries["mask"] = entries["mask"].replace("padding(side = left)", "padding")
        s.attentions |= s.decoder
        s.pattern, s.stack = [next(iter(s.decoder))], {}
    s.stack["vocab"] = str(s.need("vocab_size"))
    gemma = cfg["model_type"].startswith("gemma")
    if cfg.get("tie_word_embeddings", gemma):
        s.stack["tie_embeddings"] = "true"
    if gemma:
        s.stack["embedding_scale"] = f"sqrt({s.need('hidden_size')})"
    for key, mechanism in HEADS.items():
        if cfg.get(mechanism.head_field):
            s.stack[key] = num(cfg[mechanism.head_field])
    s.stack.update(s.head)
    for entries in s.attentions.values():
        mask = entries.pop("mask", None)  # the mask stays last
        entries.update(s.head_attention)
        if mask is not None:
            entries["mask"] = mask


_ROPE_FIELDS = ("rope_parameters", "rope_theta", "rope_scaling")


def import_config(path: Path, padding: str = "auto", head: str = "auto",
                  notes: list[str] | None = None) -> str:
    """The spec text for a config.json (or the folder holding one). `padding`: `auto` (right
    padding for encoders, none for decoders, BERT with is_decoder among them), `none`, `left`
    or `right`. `head`: `lm` (token embedding and LM head: a language model), `none` (the
    stack of hidden states) or `auto` (lm for the families whose embedding and head attndsl
    expresses, `Family.language_model`, when the config gives vocab_size)."""
    cfg, file = read_config(path)  # of a model type attndsl imports
    model_type = cfg["model_type"]
    family = FAMILIES[model_type]
    cfg = Recorded({**family.defaults, **cfg})  # as transformers reads it
    if family.rope is not None and all(cfg.get(k) is None for k in _ROPE_FIELDS):
        cfg["rope_parameters"] = dict(family.rope)  # (its config class's default)
    if padding == "auto":  # (BERT with is_decoder is a decoder)
        padding = "right" if family.encoder and not cfg.get("is_decoder") else "none"
    # the stack's name: a variant's trailing `_text` dropped, a hyphen (GPT-1's `openai-gpt`) as `_`
    s = SpecText(cfg, model_type.removesuffix("_text").replace("-", "_"))
    s.problems += refusals(cfg, family)
    family.read(s, None if padding == "none" else padding)
    lms = sorted(t for t, f in FAMILIES.items() if f.lm)
    if head == "lm" and not family.lm:
        raise SpecError([Diagnostic(
            f"{file}: attndsl imports the embedding and LM head of {', '.join(lms)}, not of "
            f"`{model_type}`", hint="import the stack alone with --head none")])
    if head == "lm" or (head == "auto" and family.language_model(cfg)
                        and cfg.get("vocab_size") is not None):
        _lm_head(s)
    if s.problems:
        raise SpecError([Diagnostic(f"{file}: {p}", hint="attndsl cannot express this field; "
                                    "see docs/CHECKPOINTS.md") for p in s.problems])
    unread = cfg.unread(family)
    if unread and notes is not None:
        notes.append(f"{file}: not read: {', '.join(unread)} (attndsl does not know these "
                     "fields: check that they do not change what the model computes)")
    return s.text(file.name, unread)
