"""GraniteMoE SWA (Granite Swash's mixtures of experts): GraniteMoeShared's decoder (Granite's
four multipliers, a top k mixture of SwiGLU experts and a shared expert when
shared_intermediate_size > 0, none by default) with Granite SWA's attention: a learned sink per
head, sliding or full layers per `layer_types` and a RoPE base per layer (0: NoPE). Its experts
are stored as transformers 5.23 holds them (no renaming back for this type on save):
`experts.gate_up_proj` [experts, 2 n, d] and `experts.down_proj` [experts, d, n]."""

from __future__ import annotations

from .base import Family
from .granite_swa import read_swa
from .granitemoe import DEFAULTS, half, one_expert, read_moe
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded
from .names import Names
from .text import SpecText

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    read_swa(s, padding, read_moe)


_M = "block_sparse_moe."
_NAMES = Names(LLAMA.layer, {
    **{k: v for k, v in LLAMA.names.items() if not k.startswith("mlp.")},
    "self_attn.sinks": "self_attn.sinks",
    "mlp.router.weight": f"{_M}router.weight",
    "mlp.experts.{e}.gate_proj.weight": (f"{_M}experts.gate_up_proj", half(False, True)),
    "mlp.experts.{e}.up_proj.weight": (f"{_M}experts.gate_up_proj", half(True, True)),
    "mlp.experts.{e}.down_proj.weight": (f"{_M}experts.down_proj", one_expert),
    "mlp.shared.gate_proj.weight": ("shared_mlp.input_linear.weight", half(False, False)),
    "mlp.shared.up_proj.weight": ("shared_mlp.input_linear.weight", half(True, False)),
    "mlp.shared.down_proj.weight": "shared_mlp.output_linear.weight"},
    LLAMA.top, LLAMA.bases)

# transformers' defaults (GraniteMoeSWAConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("granitemoe_swa", _read, _NAMES, {
        **DEFAULTS, "shared_intermediate_size": 0, "sliding_window": 128},
        inert=ROUTER_INERT, lm=True, weights_for=expanded(_NAMES)),
]
