"""The language's words, read from the checker's own tables (so an editor's completion never
drifts from what `check` accepts): the keys of each definition kind and, per key, the calls its
value may be with their parameters (required ones first)."""

from __future__ import annotations

from ..mechanisms import FFNS, MECHANISMS, PROJECTIONS
from .ffns import MLPS
from .kernels import _KERNELS
from .layers import _ATTENTION_KEYS, _SPARSITY
from .masks import _MASK_PARAMS
from .norms import _NORMS, PLACEMENTS
from .positions import _POSITIONS, _SCALINGS
from .sides import SIDE
from .stacks import _KEYS
from .vision import PATCHES

__all__ = ["DEFINITIONS", "KEYS", "VALUES", "WORDS", "calls"]

DEFINITIONS = ("let", "mask", "attention", "transformer")
KEYS = {"attention": _ATTENTION_KEYS, "transformer": _KEYS}


def _params(table: dict) -> dict[str, tuple[tuple[str, bool], ...]]:
    return {name: tuple((p.name, p.required) for p in params) for name, params in table.items()}


_FFN = {name: (("hidden", True), ("bias", False)) for name in MLPS}
# key -> {call or word: ((parameter, required), ...)}; `mask` values also combine with & | !
VALUES: dict[str, dict[str, tuple[tuple[str, bool], ...]]] = {
    "mask": _params(_MASK_PARAMS),
    "position": _params(_POSITIONS),
    "kernel": _params(_KERNELS),
    "norm": {name: (("placement", True), *params) for name, params in _params(_NORMS).items()},
    "embedding_norm": {"none": (), **_params(_NORMS)},
    "sparsity": _params(_SPARSITY),
    **{key: {"none": (), form.name: form.params} for key, form in PROJECTIONS.items()},
    "ffn": {"none": (), **_FFN, **{name: form.params for name, form in FFNS.items()}},
    "scaling": _params(_SCALINGS),  # rope(scaling = ...)
    "side": {"none": (), **_params({"side": SIDE})},
    "patches": {"none": (), **_params({"patches": PATCHES})},
    **{key: {"none": (), **m.forms} for key, m in MECHANISMS.items() if m.forms},
}
# plain words some keys take
WORDS = {"kind": ("self", "cross"), "bias": ("true", "false"), "out_proj": ("true", "false"),
         "scale": ("auto",),
         "tie_embeddings": ("true", "false"), "first_attn_norm": ("true", "false"),
         "layer_scale": ("true", "false"), "final_norm": ("true", "false"),
         "lm_head": ("true", "false"),
         "placement": PLACEMENTS,
         **{key: ("none", *m.words) for key, m in MECHANISMS.items() if not m.forms}}


def calls() -> dict[str, tuple[tuple[str, bool], ...]]:
    """Every call name the language knows, with its parameters (the first table naming it)."""
    found: dict[str, tuple[tuple[str, bool], ...]] = {}
    for table in VALUES.values():
        for name, params in table.items():
            found.setdefault(name, params)
    return found
