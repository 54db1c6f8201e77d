"""`Family`: everything attndsl knows of one Hugging Face model type, in one record."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .names import Names
from .text import SpecText

__all__ = ["WHOLE", "Family", "Refusal"]

# the key `checkpoints.gather` adds to the config it picks a name table by, true where the
# spec read is a whole encoder-decoder (T5's table is then the whole model's, else its
# encoder's)
WHOLE = "attndsl_encoder_decoder"

# (when the field's value is refused, why): a field attndsl has no form for at that value
Refusal = tuple[Callable[[Any], bool], str]


@dataclass(frozen=True)
class Family:
    """One model type, as `attndsl import` and `compile --weights` read it.

    read(spec, padding) writes the spec of a config (`spec.cfg`, transformers' defaults
    filled in); padding is None, "left" or "right". `weights` names the checkpoint's tensors
    (`weights_for` may pick another table from the config). `defaults` are the config class's
    defaults for every field the import reads (held to transformers' classes by the tests);
    `inert` the fields that do not change what this family computes, and why; `refused` the
    field values it has no form for. `encoder`: padding defaults to right; `lm`: attndsl
    expresses its token embedding and LM head (a function of the config: where `--head auto`
    makes a language model of it, BERT's is_decoder; `--head lm` always may); `kinds` the layer
    kinds of its own its layer_types may name."""

    model_type: str
    read: Callable[[SpecText, str | None], None]
    weights: Names
    defaults: Mapping[str, Any] = field(default_factory=dict)
    inert: Mapping[str, str] = field(default_factory=dict)
    refused: Mapping[str, Refusal] = field(default_factory=dict)
    encoder: bool = False
    lm: bool | Callable[[Mapping[str, Any]], bool] = False
    weights_for: Callable[[dict], Names] | None = None
    # layer kinds of its own that `layer_types` may name (Inkling's hybrid, hybrid_sliding),
    # beyond those every family may (hf_fields' own check refuses the rest by name)
    kinds: tuple[str, ...] = ()
    # the config class's rope_parameters where config.json gives none of rope_parameters,
    # rope_theta and rope_scaling (its default_theta: Mixtral's 1e6), if not RoPE's default
    # base 10000 (held to transformers' classes by the tests)
    rope: Mapping[str, Any] | None = None
    # the declared types of config fields of its own the import reads (hf_fields.TYPES's
    # kinds and bounds), beside those every family shares there
    types: Mapping[str, tuple[str, float | None]] = field(default_factory=dict)

    def language_model(self, cfg: Mapping[str, Any]) -> bool:
        """Whether `--head auto` makes a language model of this config (`lm`)."""
        return bool(self.lm(cfg) if callable(self.lm) else self.lm)

    def names(self, cfg: dict) -> Names:
        """The name table of the checkpoint whose config is `cfg`."""
        return self.weights if self.weights_for is None else self.weights_for(cfg)
